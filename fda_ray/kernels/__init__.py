"""Fused layerwise projection kernels (C++ and CUDA through torch.utils.cpp_extension) and their reference.

    layer_stats(target, sources, offsets)                     per-layer <g_T, g_i>, |g_i|^2, |g_T|^2 (float64)
    layer_combine(target, sources, offsets, scale, coef)      sum_i scale_il g_i + coef g_T, in one pass
    gram(target_steps, sources)                               the inner products of the auto-beta estimators

Each function validates its inputs (one clear line naming the argument), then runs the registered torch
operator `torch.ops.fda_ray.*` for the tensors' device (C++ on CPU, CUDA on GPU), or the PyTorch reference
(fda_ray/kernels/reference.py, the specification) when `impl="reference"`, when $FDA_RAY_KERNELS=reference,
or when the kernel for that device cannot be built (one logged warning). The kernels take float32
contiguous tensors and say so otherwise.

    python -m fda_ray.kernels --build      compile (or load from the cache) the kernels for this machine
    python -m fda_ray.kernels --check      which implementation each device uses, and why

The same C++ library holds the simple CNN's ReLU + 2x2 max-pooling for CPUs: fda_ray.kernels.pool.
"""
from __future__ import annotations

import os

import threading

import torch

from fda_ray.kernels import reference
from fda_ray.kernels.checks import check_flat, check_gram, check_kernel_tensor, check_offsets
from fda_ray.kernels.loader import ensure, status

IMPLS = ("kernel", "reference")
_default: list[str] = []  # set_default_impl's choice; empty = $FDA_RAY_KERNELS or "kernel"
# The implementations calls ran since forget_ran() (a trial's record names them), per thread: the trials of a fused
# group (fda_ray.runtime.fusion) aggregate in threads of one process, each naming its own.
_local = threading.local()


def _ran() -> set[str]:
    if not hasattr(_local, "ran"):
        _local.ran = set()
    return _local.ran


def ran() -> str | None:
    """The implementations that ran in this thread since forget_ran(), joined by "+" ("cpp", "cuda", "reference",
    "cpp+reference"), or None when nothing went through the kernels."""
    return "+".join(sorted(_ran())) or None


def forget_ran() -> None:
    _ran().clear()


# $FDA_RAY_KERNELS's values: "reference" (or an off switch) runs the reference, "kernel" (or on, or unset) the kernel.
KERNELS_ENV = {**dict.fromkeys(("reference", "0", "off", "false", "no"), "reference"),
               **dict.fromkeys(("kernel", "", "1", "on", "true", "yes"), "kernel")}


def env_impl() -> str:
    """$FDA_RAY_KERNELS read: "kernel" or "reference"; another value (a typo: `refrence`) is a one-line ValueError
    naming the variable (it was taken as "kernel" in silence: a comparison against the reference that compared
    nothing)."""
    env = os.environ.get("FDA_RAY_KERNELS", "kernel").strip().lower()
    if env not in KERNELS_ENV:
        raise ValueError(f"FDA_RAY_KERNELS={os.environ['FDA_RAY_KERNELS']!r} is invalid: kernel or reference (or "
                         "unset: kernel)")
    return KERNELS_ENV[env]


def default_impl() -> str:
    if _default:
        return _default[0]
    return env_impl()


def set_default_impl(impl: str | None) -> None:
    """Choose "kernel" or "reference" for every call that does not say (None: back to $FDA_RAY_KERNELS)."""
    if impl is not None and impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is invalid: one of {', '.join(IMPLS)}")
    _default.clear()
    if impl is not None:
        _default.append(impl)


def implementation(device: torch.device | str, impl: str | None = None) -> str:
    """"cpp", "cuda" or "reference": what a call on tensors of `device` runs."""
    impl = impl or default_impl()
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is invalid: one of {', '.join(IMPLS)}")
    if impl == "reference":
        return "reference"
    kind = torch.device(device).type
    if kind == "cpu":
        return "cpp" if ensure("cpu") else "reference"
    if kind == "cuda":
        return "cuda" if ensure("cuda") else "reference"
    return "reference"


def _running(device: torch.device | str, impl: str | None) -> str:
    """implementation(), noted as run."""
    chosen = implementation(device, impl)
    _ran().add(chosen)
    return chosen


def layer_stats(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor, *, impl: str | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dots (N, L), s_sq (N, L), t_sq (L,) in float64 on the inputs' device."""
    _, m = check_flat(target, sources)
    check_offsets(offsets, m)
    if _running(target.device, impl) == "reference":
        return reference.layer_stats(target, sources, offsets)
    check_kernel_tensor("target", target)
    check_kernel_tensor("sources", sources)
    return tuple(torch.ops.fda_ray.layer_stats(target, sources, offsets))  # type: ignore[return-value]


def layer_combine(target: torch.Tensor, sources: torch.Tensor, offsets: torch.Tensor, scale: torch.Tensor,
                  target_coef: float, *, impl: str | None = None) -> torch.Tensor:
    """out (M,) = sum_i scale[i, layer] * sources_i + target_coef * target."""
    n, m = check_flat(target, sources)
    check_offsets(offsets, m)
    shape = (n, offsets.numel() - 1)
    if not isinstance(scale, torch.Tensor) or tuple(scale.shape) != shape or not scale.is_floating_point():
        raise ValueError(f"scale must be a floating (N, L) = {shape} tensor, got "
                         f"{getattr(scale, 'dtype', type(scale))} of shape {tuple(getattr(scale, 'shape', ()))}")
    if _running(target.device, impl) == "reference":
        return reference.layer_combine(target, sources, offsets, scale, float(target_coef))
    check_kernel_tensor("target", target)
    check_kernel_tensor("sources", sources)
    return torch.ops.fda_ray.layer_combine(target, sources, offsets, scale, float(target_coef))


def gram(target_steps: torch.Tensor, sources: torch.Tensor, *, impl: str | None = None
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K_GG (B, B), K_GS (B, N), s_sq (N,) in float64."""
    check_gram(target_steps, sources)
    if _running(target_steps.device, impl) == "reference":
        return reference.gram(target_steps, sources)
    check_kernel_tensor("target_steps", target_steps)
    check_kernel_tensor("sources", sources)
    return tuple(torch.ops.fda_ray.gram(target_steps, sources))  # type: ignore[return-value]


__all__ = ["IMPLS", "default_impl", "forget_ran", "gram", "implementation", "layer_combine", "layer_stats", "ran",
           "reference", "set_default_impl", "status"]
