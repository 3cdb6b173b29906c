"""Estimators: the Gram-matrix implementation against the direct formulas, and unbiasedness against
Monte-Carlo truth on synthetic Gaussian per-step deltas."""
from __future__ import annotations

import math

import pytest
import torch

from fda_ray.algorithms.fda.estimators import INDIFFERENT_BETA, auto_beta, estimate


def direct(G: torch.Tensor, S: torch.Tensor) -> dict:
    """The estimators' formulas (docs/methods.md) written out on the full matrices (no Gram tricks)."""
    G, S = G.double(), S.double()
    B, M = G.shape
    gbar = G.mean(0)
    v = ((G - gbar) ** 2).sum() / (B - 1) / M
    out = {"sigma2": float(v / B), "d2": [], "tau2d2": [], "delta": [], "gbar2": float(gbar @ gbar / M)}
    for g_s in S:
        out["d2"].append(max(float(((G - g_s) ** 2).sum() / B / M - v), 0.0))
        u = g_s / g_s.norm()
        R = G - (G @ u).unsqueeze(1) * u
        val = float((R * R).sum(1).mean() / M - ((R - R.mean(0)) ** 2).sum() / (B - 1) / M)
        out["tau2d2"].append(max(val, 0.0))
        p = float(((G @ g_s) > 0).double().mean())
        out["delta"].append(1 - (1 - p) / B)
    return out


def test_gram_implementation_equals_direct_formulas():
    g = torch.Generator().manual_seed(1)
    G = torch.randn(7, 500, generator=g) * 0.3 + torch.randn(500, generator=g)
    S = torch.randn(4, 500, generator=g) + 0.5 * G.mean(0)
    est, ref = estimate(G, S), direct(G, S)
    assert est["sigma2"] == pytest.approx(ref["sigma2"], rel=1e-9)
    assert est["gbar2"] == pytest.approx(ref["gbar2"], rel=1e-9)
    for k in ("d2", "tau2d2", "delta"):
        torch.testing.assert_close(est[k], torch.tensor(ref[k], dtype=torch.float64), rtol=1e-7, atol=1e-12)
    assert est["d2"].shape == (4,)


def test_unbiased_against_monte_carlo_truth():
    """G_b = mu_T + N(0, s^2 I): sigma^2 = s^2 / B, d^2 = |g_S - mu_T|^2 / M and tau^2 d^2 = |mu_T - <mu_T, u> u|^2 / M
    (Auto-weighted FDA eqs. 86, 93, 96). The mean estimate over K trials must lie within 4 standard errors of the truth."""
    g = torch.Generator().manual_seed(0)
    M, B, K, s = 64, 6, 3000, 1.0
    mu = torch.randn(M, generator=g, dtype=torch.float64)
    g_s = mu + 0.8 * torch.randn(M, generator=g, dtype=torch.float64)
    u = g_s / g_s.norm()
    truth = {"sigma2": s**2 / B, "d2": float((g_s - mu) @ (g_s - mu)) / M,
             "tau2d2": float((mu - (mu @ u) * u) @ (mu - (mu @ u) * u)) / M}
    samples = {k: [] for k in truth}
    for _ in range(K):
        G = mu + s * torch.randn(B, M, generator=g, dtype=torch.float64)
        e = estimate(G, g_s.unsqueeze(0))
        samples["sigma2"].append(e["sigma2"])
        samples["d2"].append(float(e["d2"][0]))
        samples["tau2d2"].append(float(e["tau2d2"][0]))
    for k, true in truth.items():
        x = torch.tensor(samples[k], dtype=torch.float64)
        # The clamp at 0 must not have been active, else the test would check a biased quantity.
        assert (x > 0).all(), k
        se = float(x.std()) / math.sqrt(K)
        assert abs(float(x.mean()) - true) < 4 * se, (k, float(x.mean()), true, se)
    # A naive plug-in estimate of d^2 (no variance correction) is biased upwards by about s^2 = v:
    naive = torch.tensor(samples["d2"]) + s**2
    assert float(naive.mean()) - truth["d2"] > 10 * float(naive.std()) / math.sqrt(K)


def test_auto_beta_rules_hand_values():
    stats = {"sigma2": 1.0, "d2": torch.tensor([1.0, 3.0]), "tau2d2": torch.tensor([0.0, 1.0]),
             "delta": torch.tensor([1.0, 0.5]), "gbar2": 2.0}
    torch.testing.assert_close(auto_beta(stats, "fedda"), torch.tensor([0.5, 0.25], dtype=torch.float64))
    torch.testing.assert_close(auto_beta(stats, "fedgp"), torch.tensor([1.0, 0.5], dtype=torch.float64))
    # thresholded: sigma^2 / (sigma^2 + delta tau^2 d^2 + (1 - delta) |g_bar|^2 / M) = [1 / 1, 1 / (1 + 0.5 + 1)]
    torch.testing.assert_close(auto_beta(stats, "fedgp_thresh"), torch.tensor([1.0, 0.4], dtype=torch.float64))


def test_auto_beta_zero_over_zero_is_indifferent():
    stats = {"sigma2": 0.0, "d2": torch.tensor([0.0, 2.0]), "tau2d2": torch.tensor([0.0, 0.0]),
             "delta": torch.tensor([1.0, 1.0]), "gbar2": 0.0}
    torch.testing.assert_close(auto_beta(stats, "fedda"), torch.tensor([INDIFFERENT_BETA, 0.0], dtype=torch.float64))
    assert torch.isfinite(auto_beta(stats, "fedgp")).all()


def test_bad_estimator_input():
    with pytest.raises(ValueError, match="B >= 2"):
        estimate(torch.randn(1, 10), torch.randn(2, 10))
    with pytest.raises(ValueError, match="M=9"):
        estimate(torch.randn(3, 10), torch.randn(2, 9))
    with pytest.raises(ValueError, match="2-D"):
        estimate(torch.randn(10), torch.randn(2, 10))
    with pytest.raises(ValueError, match="auto-beta rule"):
        auto_beta({"sigma2": 1.0, "d2": torch.ones(1)}, "fedavg")
