"""Validation of the flat-layout inputs shared by the aggregation rules, the reference and the kernels.

Every message names the argument, what it got and what is allowed, so a bad call fails in one clear line
whichever implementation would have run it.
"""
from __future__ import annotations

import torch


def check_flat(target: torch.Tensor, sources: torch.Tensor) -> tuple[int, int]:
    """target (M,) and sources (N, M), floating point, N >= 1: returns (N, M)."""
    if not isinstance(target, torch.Tensor) or target.dim() != 1:
        raise ValueError(f"target must be a 1-D tensor (M,), got shape {tuple(getattr(target, 'shape', ()))}")
    if not isinstance(sources, torch.Tensor) or sources.dim() != 2:
        raise ValueError(f"sources must be a 2-D tensor (N, M), got shape {tuple(getattr(sources, 'shape', ()))}")
    n, m = sources.shape
    if m != target.shape[0]:
        raise ValueError(f"sources has M={m} parameters per row but target has M={target.shape[0]}")
    if n < 1:
        raise ValueError("sources must hold at least one source (N >= 1), got N=0")
    if not (target.is_floating_point() and sources.is_floating_point()):
        raise ValueError(f"target and sources must be floating point, got {target.dtype} and {sources.dtype}")
    if target.device != sources.device:
        raise ValueError(f"target and sources must be on one device, got {target.device} and {sources.device}")
    return n, m


def check_offsets(offsets: torch.Tensor, m: int) -> torch.Tensor:
    """offsets (L + 1,) int64, non-decreasing, from 0 to M."""
    if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int64 or offsets.dim() != 1:
        raise ValueError(f"offsets must be a 1-D int64 tensor (L + 1,), got "
                         f"{getattr(offsets, 'dtype', type(offsets))} of shape {tuple(getattr(offsets, 'shape', ()))}")
    if offsets.numel() < 2:
        raise ValueError(f"offsets must hold at least 2 entries (one layer), got {offsets.numel()}")
    o = offsets.cpu()
    if int(o[0]) != 0 or int(o[-1]) != m:
        raise ValueError(f"offsets must start at 0 and end at M={m}, got first {int(o[0])} and last {int(o[-1])}")
    if (o[1:] < o[:-1]).any():
        bad = int(torch.nonzero(o[1:] < o[:-1])[0]) + 1
        raise ValueError(f"offsets must be non-decreasing, got {int(o[bad - 1])} then {int(o[bad])} at index {bad}")
    return offsets


def check_kernel_tensor(name: str, t: torch.Tensor) -> None:
    """The kernels take float32 contiguous tensors (they never copy an input behind the caller's back)."""
    if t.dtype != torch.float32:
        raise ValueError(f"{name} must be float32 for the kernel, got {t.dtype} (use .float(), or the reference)")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous for the kernel, got strides {t.stride()} (use .contiguous())")


def check_gram(target_steps: torch.Tensor, sources: torch.Tensor) -> tuple[int, int, int]:
    """target_steps (B, M) and sources (N, M), B, N >= 1: returns (B, N, M)."""
    for name, t in (("target_steps", target_steps), ("sources", sources)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got shape {tuple(getattr(t, 'shape', ()))}")
    (b, m), (n, m2) = target_steps.shape, sources.shape
    if m2 != m:
        raise ValueError(f"sources has M={m2} parameters per row but target_steps has M={m}")
    if b < 1 or n < 1:
        raise ValueError(f"need B >= 1 target steps and N >= 1 sources, got B={b}, N={n}")
    if target_steps.device != sources.device:
        raise ValueError(f"target_steps and sources must be on one device, got {target_steps.device} and {sources.device}")
    return b, n, m
