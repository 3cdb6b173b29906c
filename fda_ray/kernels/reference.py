"""The plain PyTorch reference of the fused kernels: the specification they are tested against.

    layer_stats(target (M,), sources (N, M), offsets (L+1,)) -> dots (N, L), s_sq (N, L), t_sq (L,)   float64
    layer_combine(target, sources, offsets, scale (N, L), target_coef) -> out (M,)
        out[k] = sum_i scale[i, layer(k)] * sources[i, k] + target_coef * target[k]
    gram(target_steps (B, M), sources (N, M)) -> K_GG (B, B), K_GS (B, N), s_sq (N,)                   float64

Vectorized (index_add over the layer of every position, one matrix product), accumulated in float64. These take
validated inputs (fda_ray.kernels.checks); fda_ray.algorithms.aggregation and fda_ray.algorithms.fda.estimators build
the FDA rules on them.
"""
from __future__ import annotations

import torch


def layer_ids(offsets: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """(M,) int64: the layer index of every flat position."""
    sizes = (offsets[1:] - offsets[:-1]).to(device or offsets.device)
    return torch.repeat_interleave(torch.arange(sizes.numel(), device=sizes.device), sizes)


def layer_stats(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, num_layers = sources.shape[0], offsets.numel() - 1
    ids = layer_ids(offsets, target.device)  # (M,)
    t = target.double()
    s = sources.double()
    dev = target.device
    dots = torch.zeros(n, num_layers, dtype=torch.float64, device=dev).index_add_(1, ids, s * t)
    s_sq = torch.zeros(n, num_layers, dtype=torch.float64, device=dev).index_add_(1, ids, s * s)
    t_sq = torch.zeros(num_layers, dtype=torch.float64, device=dev).index_add_(0, ids, t * t)
    return dots, s_sq, t_sq


def layer_combine(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor, scale: torch.Tensor,
                  target_coef: float) -> torch.Tensor:
    ids = layer_ids(offsets, target.device)
    per_position = scale.to(device=target.device, dtype=sources.dtype)[:, ids]  # (N, M)
    return (per_position * sources).sum(0) + target_coef * target


def gram(target_steps: torch.Tensor, sources: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = target_steps.double()
    s = sources.double()
    return g @ g.T, g @ s.T, (s * s).sum(1)
