"""Seed 002's pure pieces: Eq. 4 and the Frank-Wolfe min-norm solver against brute force, the soft labels'
temperature, the fake labels under both losses (the paper's fake-label convention)."""
from __future__ import annotations

import itertools

import pytest
import torch

from fda_ray.algorithms.fssda.distillation import hard_labels, label_loss, mixed_loss, soft_labels
from fda_ray.algorithms.fssda.minnorm import line_search, min_norm_weights, two_task


def _norm2(grads: torch.Tensor, w: torch.Tensor) -> float:
    return float(((w.unsqueeze(1) * grads.double()).sum(0) ** 2).sum())


def test_eq4_is_the_minimiser_over_lambda():
    g = torch.Generator().manual_seed(0)
    cases = [torch.randn(2, 7, generator=g, dtype=torch.float64) for _ in range(20)]
    cases.append(torch.stack([torch.ones(7, dtype=torch.float64), 3 * torch.ones(7, dtype=torch.float64)]))  # clipped
    grid = torch.linspace(0, 1, 10001, dtype=torch.float64)
    for ab in cases:
        lam = two_task(ab[0], ab[1])
        assert 0.0 <= lam <= 1.0
        brute = min(_norm2(ab, torch.stack([x, 1 - x])) for x in grid)
        assert _norm2(ab, torch.tensor([lam, 1 - lam], dtype=torch.float64)) <= brute + 1e-12 * (1 + brute)
    # the closed form itself: lambda = <b, b - a> / |a - b|^2
    a, b = cases[0]
    expect = float(b @ (b - a) / ((a - b) @ (a - b)))
    assert two_task(a, b) == pytest.approx(min(max(expect, 0.0), 1.0), abs=1e-15)
    assert line_search(2.0, 2.0, 2.0) == 0.5  # a = b: every lambda is optimal


@pytest.mark.parametrize("s", [2, 3, 4])
def test_frank_wolfe_reaches_the_simplex_minimum(s):
    g = torch.Generator().manual_seed(s)
    step = 0.02 if s < 4 else 0.05
    ticks = [round(i * step, 10) for i in range(int(round(1 / step)) + 1)]
    for trial in range(8):
        grads = torch.randn(s, 9, generator=g, dtype=torch.float64)
        if trial % 2:
            grads[1:] += 2 * grads[0]  # a shared direction: the interior is not the answer
        w = min_norm_weights(grads)
        assert float(w.sum()) == pytest.approx(1.0, abs=1e-12) and float(w.min()) >= 0
        brute = min(_norm2(grads, torch.tensor([*p, 1 - sum(p)], dtype=torch.float64))
                    for p in itertools.product(ticks, repeat=s - 1) if sum(p) <= 1 + 1e-9)
        assert _norm2(grads, w) <= brute + 1e-9
    # two gradients: Frank-Wolfe is Eq. 4
    a, b = torch.randn(2, 9, generator=g, dtype=torch.float64)
    w = min_norm_weights(torch.stack([a, b]))
    assert float(w[0]) == pytest.approx(two_task(a, b), abs=1e-12)


def test_soft_labels_flatten_with_temperature():
    logits = torch.tensor([[4.0, 0.0, -2.0], [1.0, 1.0, 3.0]])
    assert torch.allclose(soft_labels(logits, 1.0), torch.softmax(logits, 1))
    assert torch.allclose(soft_labels(logits, 1e6), torch.full((2, 3), 1 / 3), atol=1e-5)  # T -> infinity: uniform
    sharp, flat = soft_labels(logits, 1.0), soft_labels(logits, 4.0)
    assert (flat.max(1).values < sharp.max(1).values).all()
    with pytest.raises(ValueError, match="temperature=0 is invalid"):
        soft_labels(logits, 0)


def test_fake_labels_move_the_target_under_mse_and_not_under_ce():
    """A batch without a labelled sample: under the default squared error the hard term has a gradient (the fake
    all-zero labels pull the probabilities down), so the min-norm lambda leaves a non-zero update; under
    cross-entropy the hard term is 0, Eq. 4 gives lambda = 1 and the update vanishes."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 4)
    x = torch.randn(6, 5)
    hard = hard_labels(torch.zeros(6, dtype=torch.long), torch.zeros(6, dtype=torch.bool), 4)
    assert torch.equal(hard, torch.zeros(6, 4))
    soft = soft_labels(torch.randn(6, 4), 2.0)

    def grad(loss: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])

    for loss, moves in (("mse", True), ("ce", False)):
        a = grad(label_loss(model(x), hard, loss))
        b = grad(label_loss(model(x), soft, loss))
        lam = two_task(a, b)
        step = grad(mixed_loss(model(x), hard, soft, lam, loss))
        assert (float(step.abs().max()) > 1e-4) == moves, (loss, lam)
        if not moves:
            assert lam == 1.0 and float(a.abs().max()) == 0.0


def test_hard_labels_and_losses_by_hand():
    y = torch.tensor([2, 0, 1])
    hard = hard_labels(y, torch.tensor([True, False, True]), 3)
    assert hard.tolist() == [[0, 0, 1], [0, 0, 0], [0, 1, 0]]
    logits = torch.zeros(3, 3)  # p = 1/3 everywhere
    # mse: sum_c (1/3 - y_c)^2 per sample: (4/9 + 1/9 + 1/9), (3/9), (6/9) -> mean 5/9
    assert float(label_loss(logits, hard, "mse")) == pytest.approx(5 / 9, abs=1e-7)
    assert float(label_loss(logits, hard, "ce")) == pytest.approx(2 / 3 * torch.log(torch.tensor(3.0)).item(), abs=1e-6)
    with pytest.raises(ValueError, match="loss='kl' is invalid: one of mse, ce"):
        label_loss(logits, hard, "kl")


# ---------------------------------------------------------------- the non-iid split and the domains

def test_dirichlet_split_assigns_every_sample_once_and_skews_with_small_concentration():
    import numpy as np

    from fda_ray.runtime.partitions import dirichlet_split

    labels = np.repeat(np.arange(10), 200)
    skew = {}
    for conc in (0.1, 100.0):
        parts = dirichlet_split(labels, 5, conc, np.random.default_rng(0))
        joined = np.sort(np.concatenate(parts))
        assert np.array_equal(joined, np.arange(len(labels))) and min(len(p) for p in parts) >= 10
        # the largest class share per client, averaged: ~0.1 when iid, large when skewed
        skew[conc] = np.mean([np.bincount(labels[p], minlength=10).max() / len(p) for p in parts])
        again = dirichlet_split(labels, 5, conc, np.random.default_rng(0))
        assert all(np.array_equal(a, b) for a, b in zip(parts, again))  # seeded
    assert skew[100.0] < 0.15 < 0.4 < skew[0.1]
    with pytest.raises(ValueError, match=r"dirichlet_concentration=0 is invalid: a number > 0"):
        dirichlet_split(labels, 5, 0, np.random.default_rng(0))


def test_corruption_domains_by_hand():
    from fda_ray.data.corruptions import apply_domain, parse_domain, to_rgb

    g = torch.Generator().manual_seed(0)
    x = torch.zeros(2, 1, 28, 28)
    x[:, :, 10:18, 12:16] = 1.0  # a bar
    assert torch.equal(apply_domain("clean", x, g), x)
    assert torch.equal(apply_domain("invert", x, g), 1 - x)
    assert torch.allclose(apply_domain("lowcontrast", x, g), 0.3 * x + 0.35)
    e = apply_domain("edges", x, g)
    assert float(e.max()) == 1.0 and float(e[0, 0, 14, 14]) == 0.0 and float(e[0, 0, 14, 12]) > 0  # edges only
    r = apply_domain("rotate-90", x, g)
    assert torch.allclose(r[0, 0], x[0, 0].rot90(1, (0, 1)), atol=1 / 255)  # PIL turns counter-clockwise
    n1 = apply_domain("noise-0.5", x, torch.Generator().manual_seed(1))
    n2 = apply_domain("noise-0.5", x, torch.Generator().manual_seed(1))
    assert torch.equal(n1, n2) and float((n1 - x).std()) == pytest.approx(0.5, rel=0.1)
    m = apply_domain("fmnist-m", x, g)
    assert m.shape == (2, 3, 28, 28) and float(m.min()) >= 0 and float(m.max()) <= 1
    assert to_rgb(x).shape == (2, 3, 28, 28) and parse_domain("rotate-30") == ("rotate", 30.0)
    with pytest.raises(ValueError, match=r"domain='blur' is invalid: one of clean, invert"):
        parse_domain("blur")
