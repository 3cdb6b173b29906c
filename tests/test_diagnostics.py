"""FDA diagnostics: the closed forms of Auto-weighted FDA (d^2, sigma^2, tau^2 d^2, the Delta errors of each rule) against
Monte Carlo on synthetic Gaussian gradients, the estimators' unbiasedness, path averaging, and per-sample
gradients against one backward pass per sample."""
from __future__ import annotations

import pytest
import torch

from fda_ray.algorithms.fda import diagnostics as dg

M, P, N_T = 400, 20000, 20


def _setting(seed: int = 0, shift: float = 1.0, noise: float = 0.3, sources: int = 1):
    """Target domain: P per-sample gradients g_T + isotropic noise; sources: g_T stretched by (1 + shift)
    plus a smaller random part (shift / 10): most of d^2 lies along g_S, where FedGP's projection removes it."""
    gen = torch.Generator().manual_seed(seed)
    g_t = torch.randn(M, generator=gen, dtype=torch.float64)
    domain = g_t + noise * torch.randn(P, M, generator=gen, dtype=torch.float64)
    src = (1 + shift) * g_t + 0.1 * shift * torch.randn(sources, M, generator=gen, dtype=torch.float64)
    return domain, src, gen


def test_closed_forms_match_monte_carlo_for_one_source():
    domain, src, gen = _setting()
    q = dg.true_quantities(domain, src, N_T)
    closed = dg.delta_errors(q, beta=0.5)
    mc = dg.monte_carlo_deltas(domain, src, N_T, beta=0.5, draws=400, generator=gen)
    assert mc["source_only"] == pytest.approx(float(q.d2[0]), rel=1e-9)  # no randomness: exact
    assert mc["target_only"] == pytest.approx(q.sigma2, rel=0.03)  # eq (7)
    assert mc["fedda"] == pytest.approx(float(closed["fedda"][0]), rel=0.03)  # eq (9): exact for one source
    assert mc["fedgp"] == pytest.approx(float(closed["fedgp"][0]), rel=0.05)  # eq (11): isotropic noise, delta-bar ~ 1
    # The rules are told apart: with this shift FedGP's projection removes most of d^2.
    assert float(q.tau2[0]) < 0.05 and mc["fedgp"] < min(mc["fedda"], mc["target_only"], mc["source_only"])
    # Auto-weighted rules, with beta_i estimated from each subsample, come close to the best static beta.
    for rule in ("fedda", "fedgp"):
        best_static = min(float(dg.delta_errors(q, beta=b)[rule][0]) for b in torch.linspace(0, 1, 101).tolist())
        assert mc[f"{rule}_auto"] == pytest.approx(best_static, rel=0.15)
        assert float(closed[f"{rule}_auto"][0]) <= best_static * (1 + 1e-3)


@pytest.mark.parametrize("d2,expected", [(0.2, "source_only"), (0.5, "fedda"), (2.0, "fedgp"), (6.0, "target_only")])
def test_best_rule_regions_of_001_figure_2(d2, expected):
    """FedGP Sec. 4.3's setting (beta 0.5, tau^2 0.5, M 10): as d^2/sigma^2 grows the best rule goes source only
    (< 1/3) -> FedDA (< 0.6) -> FedGP (< 5.4) -> target only."""
    q = dg.Quantities(sigma2=1.0, d2=torch.tensor([d2], dtype=torch.float64),
                      tau2d2=torch.tensor([0.5 * d2], dtype=torch.float64), m=10, n=100)
    per = dg.delta_errors(q, beta=0.5)
    assert dg.best_rule({r: float(v[0]) for r, v in per.items()}) == expected


def test_estimators_are_unbiased_for_the_true_quantities():
    domain, src, gen = _setting(sources=2)
    q = dg.true_quantities(domain, src, N_T, without_replacement=False)  # the estimators assume i.i.d. draws
    est = [dg.estimated_quantities(domain[torch.randint(0, P, (N_T,), generator=gen)], src) for _ in range(400)]
    mean = dg.Quantities.mean(est)
    assert mean.sigma2 == pytest.approx(q.sigma2, rel=0.03)
    torch.testing.assert_close(mean.d2, q.d2, rtol=0.05, atol=0.0)
    torch.testing.assert_close(mean.tau2d2, q.tau2d2, rtol=0.05, atol=0.0)


def test_a_subsample_of_the_domain_estimates_its_sigma_when_told_the_domains_size():
    """diagnose --pool-samples measures the target domain on P of its samples: taken as the whole domain, the
    finite-population factor (P - n)/(P - 1) shrank sigma^2 towards 0 as P approached n. Told the domain's size,
    the subsample's sigma^2 is unbiased for the domain's; given the whole domain, it is the domain's exactly."""
    domain, src, gen = _setting()
    n, sub = 100, 120
    q = dg.true_quantities(domain, src, n)
    assert dg.true_quantities(domain, src, n, population=P).sigma2 == q.sigma2  # the same code path, all of it
    told, untold = [], []
    for _ in range(300):
        pick = domain[torch.randperm(P, generator=gen)[:sub]]
        told.append(dg.true_quantities(pick, src, n, population=P).sigma2)
        untold.append(dg.true_quantities(pick, src, n).sigma2)
    assert sum(told) / len(told) == pytest.approx(q.sigma2, rel=0.03)
    assert sum(untold) / len(untold) < 0.2 * q.sigma2  # (what the old reading gave: (120 - 100) / 119 of it)
    with pytest.raises(ValueError, match=r"^population=50 is invalid: at least the 120 samples given$"):
        dg.true_quantities(domain[:sub], src, n, population=50)


def test_several_sources_bound_and_fedavg():
    domain, src, gen = _setting(sources=3)
    q = dg.true_quantities(domain, src, N_T)
    w = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    bound = dg.combined(dg.delta_errors(q), w)
    mc = dg.monte_carlo_deltas(domain, src, N_T, weights=w, draws=300, generator=gen)
    for rule in ("fedda", "fedgp"):  # Auto-weighted FDA eq (9): sum_i alpha_i Delta_i bounds the combined rule's error
        assert mc[rule] <= bound[rule] * 1.03
    g_t = domain.mean(0)
    fedavg_err = float(((g_t - w @ src) ** 2).sum())
    assert mc["source_only"] == pytest.approx(fedavg_err, rel=1e-9) and fedavg_err <= bound["source_only"]


@pytest.mark.parametrize("n_sources", [1, 3])
def test_exact_deltas_equal_the_expectation_over_every_subsample(n_sources):
    """exact_deltas against the definition, Delta^2 = E ||g_T - Aggr||^2, taken over every one of the C(8, 3) = 56
    target subsamples (no sampling error) with the rules themselves: equal to float64 rounding. With several
    sources and unequal weights the exact value is below eq (9)'s bound (Jensen); with one source it is the bound."""
    import itertools

    torch.manual_seed(5)
    domain = torch.randn(8, 6, dtype=torch.float64)  # (P, M) per-sample target gradients
    sources = torch.randn(n_sources, 6, dtype=torch.float64) + 0.3  # (N, M)
    w = torch.softmax(torch.randn(n_sources, dtype=torch.float64), 0)
    g_t = domain.mean(0)
    q = dg.true_quantities(domain, sources, 3)  # without replacement, as the subsets below
    b_auto = dg.auto_betas(q)["fedda_auto"]
    exact = dg.exact_deltas(g_t, q.sigma2, sources, w, 0.4, b_auto)
    subsets = list(itertools.combinations(range(8), 3))
    for rule, beta in (("target_only", 0.0), ("source_only", 1.0), ("fedda", 0.4), ("fedda_auto", b_auto)):
        mean = sum(float(((g_t - dg.aggregate(rule, domain[list(c)].mean(0), sources, w, beta)) ** 2).sum())
                   for c in subsets) / len(subsets)
        assert exact[rule] == pytest.approx(mean, rel=1e-10)
    bound = dg.combined(dg.delta_errors(q, beta=0.4), w)
    for rule in ("source_only", "fedda"):
        if n_sources == 1:
            assert exact[rule] == pytest.approx(bound[rule], rel=1e-10)
        else:
            assert exact[rule] < bound[rule]


def test_path_average_and_sigma_scaling():
    domain, src, _ = _setting()
    a, b = dg.true_quantities(domain, src, 10), dg.true_quantities(domain * 2, src * 2, 10)
    mean = dg.Quantities.mean([a, b])
    assert mean.sigma2 == pytest.approx((a.sigma2 + b.sigma2) / 2) and b.sigma2 == pytest.approx(4 * a.sigma2)
    torch.testing.assert_close(mean.d2, (a.d2 + b.d2) / 2)
    # sigma^2 falls as 1/n (times the finite-population factor).
    q40 = dg.true_quantities(domain, src, 40)
    assert q40.sigma2 == pytest.approx(a.sigma2 * 10 / 40 * (P - 40) / (P - 10))


def test_bad_inputs_give_clear_errors():
    domain, src, _ = _setting()
    with pytest.raises(ValueError, match=r"n=0 is invalid: between 1 and the target domain's 20000 samples"):
        dg.true_quantities(domain, src, 0)
    with pytest.raises(ValueError, match=r"source gradients \(N, M\) with M = 5 are needed"):
        dg.true_quantities(domain[:, :5], src, 5)
    with pytest.raises(ValueError, match="n=1 target samples is invalid"):
        dg.estimated_quantities(domain[:1], src)
    with pytest.raises(ValueError, match=r"beta=1.5 is invalid"):
        dg.delta_errors(dg.true_quantities(domain, src, 5), beta=1.5)
    with pytest.raises(ValueError, match="points=\\[\\] is invalid"):
        dg.Quantities.mean([])


def test_per_sample_gradients_equal_one_backward_per_sample():
    from fda_ray.train.models import SigmoidMLP

    torch.manual_seed(0)
    model = SigmoidMLP(7, 3, hidden=5)
    x, y = torch.randn(9, 7), torch.randn(9, 3)
    loss = torch.nn.functional.mse_loss
    got = dg.per_sample_gradients(model, loss, x, y, chunk=4)
    want = torch.stack([dg.full_gradient(model, loss, x[i:i + 1], y[i:i + 1]) for i in range(9)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.mean(0), dg.full_gradient(model, loss, x, y), rtol=1e-5, atol=1e-6)


def test_part_gradients_equal_one_backward_per_part_and_moments_stream():
    from fda_ray.train.models import SigmoidMLP

    torch.manual_seed(1)
    model = SigmoidMLP(6, 2, hidden=4)
    x, y = torch.randn(23, 6), torch.randn(23, 2)
    loss = torch.nn.functional.mse_loss
    got = dg.part_gradients(model, loss, x, y, parts=5)  # 4 samples a part, the last 3 left out
    want = torch.stack([dg.full_gradient(model, loss, x[4 * b:4 * b + 4], y[4 * b:4 * b + 4]) for b in range(5)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    mom = dg.gradient_moments(model, loss, x, y, chunk=7)  # chunks of 7, 7, 7, 2
    ref = dg.Moments.of(dg.per_sample_gradients(model, loss, x, y))
    assert mom.count == 23 and mom.mean_sq == pytest.approx(ref.mean_sq, rel=1e-6)
    torch.testing.assert_close(mom.mean, ref.mean, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(dg.full_gradient(model, loss, x, y, chunk=5).double(), ref.mean, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="parts=24 is invalid: between 1 and the 23 samples"):
        dg.part_gradients(model, loss, x, y, parts=24)


def test_estimated_quantities_equal_the_engine_estimators():
    """The O(n M) form equals fda_ray.estimators.estimate (Gram matrix, per parameter) times M."""
    from fda_ray.algorithms.fda import estimators

    domain, src, gen = _setting(sources=3, shift=0.5)
    src[2] = -src[2]  # one source pointing away: its tau^2 d^2 is large, the clamp is not hit
    sample = domain[torch.randint(0, P, (N_T,), generator=gen)]
    q, e = dg.estimated_quantities(sample, src), estimators.estimate(sample, src)
    assert q.sigma2 == pytest.approx(float(e["sigma2"]) * M, rel=1e-9)
    torch.testing.assert_close(q.d2, e["d2"].double() * M, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(q.tau2d2, e["tau2d2"].double() * M, rtol=1e-9, atol=1e-9)


def test_round_estimates_rank_the_rules_by_their_delta():
    stats = {"sigma2": 1.0, "d2": torch.tensor([0.1, 0.1]), "tau2d2": torch.tensor([0.05, 0.05]),
             "delta": torch.tensor([1.0, 1.0]), "gbar2": 2.0}
    row = dg.round_estimates(stats, torch.tensor([0.5, 0.5], dtype=torch.float64), m=10**6, parts=8, beta=0.5)
    # d^2 = 0.1 << sigma^2 = 1: the sources are nearly the target: source only has the smallest error
    assert row["predicted_rule"] == "source_only" and row["delta2_source_only"] == pytest.approx(0.1)
    assert row["delta2_fedda"] == pytest.approx(0.25 * 1.0 + 0.25 * 0.1)
    stats["d2"], stats["tau2d2"] = torch.tensor([9.0, 9.0]), torch.tensor([8.0, 8.0])
    assert dg.round_estimates(stats, torch.tensor([0.5, 0.5], dtype=torch.float64), 10**6, 8, 0.5)[
        "predicted_rule"] == "target_only"
