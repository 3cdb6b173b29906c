"""The min-norm point of the convex hull of gradients (MGDA; Sener & Koltun 2018), pure functions.

FSSDA sets its imitation parameter lambda by the two-task min-norm problem (Eq. 3-4):

    min_{lambda in [0, 1]} |lambda a + (1 - lambda) b|^2,   lambda = <b, b - a> / |a - b|^2 clipped to [0, 1]   (Eq. 4)

with a the gradient of the hard-label loss and b that of the soft-label loss; with S source domains (Eq. 5) the
weights of S + 1 gradients lie on the simplex and are found by Frank-Wolfe, as the reference MinNormSolver
(isl-org/MultiObjectiveOptimization): start from the best pair's closed form, then repeatedly move towards the
vertex e_t with the smallest (M lambda)_t by the exact line search between the current point and e_t, until the
step changes lambda by less than 1e-5 (L1). Everything is computed from the Gram matrix M = G G^T in float64.

Two departures from the reference, both on purpose:
- The reference declares MAX_ITER = 250 but never increments its counter, so it runs to the stopping criterion;
  so does this (an earlier fda-ray stopped at 250 iterations: weights up to 0.03 away). `max_iter` keeps that
  cap reachable; without it a guard of GUARD_ITER iterations stands where the reference has none.
- Where the reference clips its line search to 0.001 / 0.999, this uses the exact 0 / 1. At an optimum the
  reference's 0.999 step moves the point by 0.1 % towards a vertex and the next step moves it back, so the
  reference can cycle for ever on inputs whose best pair is already optimal (python -m benchmarks.fidelity
  counts them; tests/test_fssda_core.py shows the step off the optimum); the exact step stops there. Elsewhere the two agree to the stopping criterion.
Like the reference, the point returned is the one whose next step was below the criterion.
"""
from __future__ import annotations

import numpy as np
import torch

STOP_CRIT = 1e-5  # the reference MinNormSolver's stopping criterion (L1 change of lambda)
REFERENCE_MAX_ITER = 250  # the reference's declared cap, which it never counts towards (the old fda-ray default)
GUARD_ITER = 100_000  # a bound the reference lacks, so that no input can hang a run


def line_search(v1v1: float, v1v2: float, v2v2: float) -> float:
    """gamma in [0, 1] minimising |gamma v1 + (1 - gamma) v2|^2 from the three inner products; 0.5 when v1 = v2
    (every gamma is optimal)."""
    denom = v1v1 + v2v2 - 2.0 * v1v2  # |v1 - v2|^2
    if denom <= 0.0:
        return 0.5
    return min(max((v2v2 - v1v2) / denom, 0.0), 1.0)


def two_task(a: torch.Tensor, b: torch.Tensor) -> float:
    """Eq. 4: lambda, the weight of a, minimising |lambda a + (1 - lambda) b|^2 over [0, 1] (a, b: any shape)."""
    a64, b64 = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
    return line_search(float(a64 @ a64), float(a64 @ b64), float(b64 @ b64))


def gram(grads: torch.Tensor) -> torch.Tensor:
    """(S, S) float64 inner products of the gradients (S, M)."""
    g = grads.detach().double().reshape(grads.shape[0], -1)
    return g @ g.T


def min_norm_weights(grads: torch.Tensor, max_iter: int | None = None, stop: float = STOP_CRIT) -> torch.Tensor:
    """(S,) float64 weights on the simplex minimising |sum_u w_u g_u|^2, for gradients (S, M) (Frank-Wolfe until
    a step changes the weights by less than `stop` in L1; at most `max_iter` steps when given)."""
    s = grads.shape[0]
    if s < 1:
        raise ValueError("min_norm_weights needs at least one gradient")
    if s == 1:
        return torch.ones(1, dtype=torch.float64)
    m = gram(grads).cpu().numpy()  # (S, S): S is small, so the loop runs on Python floats, not device tensors
    # the best pair's two-point solution
    best, w = None, None
    for u in range(s):
        for v in range(u + 1, s):
            gamma = line_search(float(m[u, u]), float(m[u, v]), float(m[v, v]))
            cost = gamma * gamma * m[u, u] + 2 * gamma * (1 - gamma) * m[u, v] + (1 - gamma) ** 2 * m[v, v]
            if best is None or float(cost) < best:
                best = float(cost)
                w = np.zeros(s)
                w[u], w[v] = gamma, 1 - gamma
    assert w is not None
    for _ in range(GUARD_ITER if max_iter is None else max_iter):
        mw = m @ w  # (S,)
        t = int(np.argmin(mw))
        gamma = line_search(float(w @ mw), float(mw[t]), float(m[t, t]))  # between the point and vertex e_t
        new = gamma * w
        new[t] += 1 - gamma
        if float(np.abs(new - w).sum()) < stop:
            break
        w = new
    return torch.from_numpy(w)
