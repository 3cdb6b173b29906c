"""Unbiased estimators of sigma^2, d_i^2 and tau^2 d_i^2 (Auto-weighted FDA App. A.2) and the auto-weighted beta_i.

Inputs: `target_steps` G (B, M), the target's per-step deltas of this round, and `sources` (N, M), each
source's delta divided by its number of steps, aligned to the target's scale by the caller (lr_T / lr_S,
docs/authors-code.md). All quantities are per parameter (divided by M) and the distances are clamped at 0, as in
the authors' code:

  v        = sum_b |G_b - g_bar|^2 / (B - 1) / M              sigma^2 = v / B
  d_i^2    = max(sum_b |G_b - g_i|^2 / B / M - v, 0)
  R_b      = G_b minus its projection on g_i
  tau2d2_i = max(mean_b |R_b|^2 / M - sum_b |R_b - R_bar|^2 / (B - 1) / M, 0)
  delta_i  = 1 - (1 - p_i) / B,  p_i = share of b with <G_b, g_i> > 0

Everything is an inner product, so the estimators run on the Gram matrix of [G; sources] (fda_ray.kernels.gram:
one pass over the inputs, float64 sums) and never hold more than the inputs.

Precision: the variances are differences of Gram entries, so they lose digits as the target's steps become nearly
equal: with float64 sums, relative error of about 1e-16 * sqrt(M) * |G_b|^2 / |G_b - g_bar|^2. Measured (M = 200 000,
B = 8) sigma^2 within 1e-7 of a computation from differences while the steps' spread is at least 1e-3 of their size
(minibatch noise), 3e-4 (kernel) and 7e-2 (reference) at 1e-6. Every auto-weighted round of the committed records
has sigma2 / gbar2 >= 0.006, a spread of the steps that is at least 7 % of their mean's size: far from that regime.
Centring the inputs first would need a copy of them (or a kernel that subtracts on the fly); not done while no
recipe comes near it.
"""
from __future__ import annotations

import torch

from fda_ray import kernels

AUTO_RULES = ("fedda", "fedgp", "fedgp_thresh")
# beta when the Delta error does not depend on beta (0 / 0): the static default of Algorithm 1.
INDIFFERENT_BETA = 0.5


def gram(target_steps: torch.Tensor, sources: torch.Tensor, *, impl: str | None = None
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K_GG (B, B), K_GS (B, N) and |g_i|^2 (N,) in float64 (the kernel for float32, else the reference)."""
    if target_steps.dtype != torch.float32 or sources.dtype != torch.float32:
        impl = "reference"
    return kernels.gram(target_steps.contiguous(), sources.contiguous(), impl=impl)


def estimate(target_steps: torch.Tensor, sources: torch.Tensor, *, impl: str | None = None
             ) -> dict[str, torch.Tensor | float]:
    """sigma2 (float), d2, tau2d2, delta (each (N,) float64) and gbar2 = |g_bar|^2 / M (float)."""
    if not isinstance(target_steps, torch.Tensor) or target_steps.dim() != 2:
        raise ValueError(f"target_steps must be a 2-D tensor (B, M), got shape {tuple(getattr(target_steps, 'shape', ()))}")
    if not isinstance(sources, torch.Tensor) or sources.dim() != 2:
        raise ValueError(f"sources must be a 2-D tensor (N, M), got shape {tuple(getattr(sources, 'shape', ()))}")
    b, m = target_steps.shape
    if sources.shape[1] != m:
        raise ValueError(f"sources has M={sources.shape[1]} parameters per row but target_steps has M={m}")
    if b < 2:
        raise ValueError(f"target_steps needs B >= 2 steps to estimate a variance, got B={b}")
    if sources.shape[0] < 1 or m < 1:
        raise ValueError(f"need N >= 1 sources and M >= 1 parameters, got N={sources.shape[0]}, M={m}")
    k_gg, k_gs, s_sq = gram(target_steps, sources, impl=impl)
    # |G_b|^2 and |g_i|^2 are finite iff every input is: a check that costs nothing more
    if not (torch.isfinite(k_gg.diagonal()).all() and torch.isfinite(s_sq).all()):
        where = "target_steps" if not torch.isfinite(k_gg.diagonal()).all() else "sources"
        raise ValueError(f"estimate: non-finite values (NaN or inf) in {where}; a diverged client "
                         "(try a lower learning rate)")
    diag = k_gg.diagonal()  # (B,) |G_b|^2
    gbar_sq = k_gg.sum() / b**2  # |g_bar|^2
    centred_sq = diag - 2 * k_gg.mean(1) + gbar_sq  # (B,) |G_b - g_bar|^2
    v = centred_sq.sum() / (b - 1) / m
    sigma2 = v / b
    dist_sq = diag.sum() - 2 * k_gs.sum(0) + b * s_sq  # (N,) sum_b |G_b - g_i|^2
    d2 = torch.clamp_min(dist_sq / b / m - v, 0.0)
    s_norm = torch.sqrt(s_sq)
    c = torch.where(s_norm > 0, k_gs / torch.where(s_norm > 0, s_norm, torch.ones_like(s_norm)), torch.zeros_like(k_gs))  # (B, N)
    r_sq = diag.unsqueeze(1) - c**2  # (B, N) |R_b|^2
    r_centred_sq = centred_sq.unsqueeze(1) - (c - c.mean(0, keepdim=True)) ** 2  # (B, N) |R_b - R_bar|^2
    tau2d2 = torch.clamp_min(r_sq.mean(0) / m - r_centred_sq.sum(0) / (b - 1) / m, 0.0)
    p = (k_gs > 0).double().mean(0)  # (N,)
    delta = 1 - (1 - p) / b
    return {"sigma2": float(sigma2), "d2": d2, "tau2d2": tau2d2, "delta": delta, "gbar2": float(gbar_sq / m)}


def auto_beta(stats: dict[str, torch.Tensor | float], rule: str) -> torch.Tensor:
    """beta_i (N,) float64 minimising the estimated Delta error of the rule (Auto-weighted FDA Sec. 4.2, docs/authors-code.md)."""
    if rule not in AUTO_RULES:
        raise ValueError(f"auto-beta rule must be one of {AUTO_RULES}, got {rule!r}")
    for key in ("sigma2", "d2", "tau2d2", "delta", "gbar2"):
        if key in stats and not torch.isfinite(torch.as_tensor(stats[key], dtype=torch.float64)).all():
            raise ValueError(f"auto_beta: {key}={stats[key]!r} is invalid: the estimates must be finite")
    sigma2 = torch.as_tensor(stats["sigma2"], dtype=torch.float64)
    if rule == "fedda":
        bias = torch.as_tensor(stats["d2"], dtype=torch.float64)
    elif rule == "fedgp":
        bias = torch.as_tensor(stats["tau2d2"], dtype=torch.float64)
    else:
        delta = torch.as_tensor(stats["delta"], dtype=torch.float64)
        bias = delta * torch.as_tensor(stats["tau2d2"], dtype=torch.float64) + (1 - delta) * float(stats["gbar2"])
    denom = sigma2 + bias
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.where(denom > 0, sigma2 / safe, torch.full_like(denom, INDIFFERENT_BETA))
