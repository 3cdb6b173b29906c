"""ReLU then 2x2 max-pooling, the simple CNN's pooling, through a C++ kernel on CPUs (fda_ray/kernels/csrc/pool.cpp).

    relu_max_pool2x2(x (N, C, H, W)) -> (N, C, H // 2, W // 2)      = F.max_pool2d(torch.relu(x), 2)
    max_pool2x2(x)                   -> (N, C, H // 2, W // 2)      = F.max_pool2d(x, 2)
    MaxPool2x2()                     nn.MaxPool2d(2) through max_pool2x2 (SHOT's LeNet: conv - pool - ReLU)

The specification is `reference` (and `reference_max_pool`): PyTorch's own ops. The kernel gives the same numbers, forward and backward,
bit for bit (tests/test_pool.py): a window's maximum is its first largest element in row-major order (its last NaN
if it holds one, as PyTorch's CPU max-pool takes), and the gradient goes to that element unless the output is <= 0
(ReLU's gradient, which passes NaN).
So a trial's numbers do not depend on which ran, and records made before the kernel stay valid.

Why a kernel: on CPUs PyTorch's max-pool over NCHW maps walks each window with a running index; at the simple
CNN's first pooling (batch 64, 6 x 24 x 24 maps) it took 0.87 ms on one AVX-512 core, more than the convolution
before it, and the two poolings were about a third of a training step (torch.profiler over a main-job round:
docs/ray-and-clusters.md). The kernel reads the map once and records where each window's gradient goes.

Which runs: the kernel for float32 maps on the CPU whenever the CPU library loads (fda_ray.kernels.implementation,
so $FDA_RAY_KERNELS=reference selects the reference here too); the reference on a GPU (one cuDNN/ATen kernel
each already), for other dtypes, and under torch.func transforms (vmap and grad need a batching rule that the
C++ op does not have; fda_ray.train.cohort vmaps models without a stacked forward) or torch.compile.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from fda_ray.kernels import implementation
from fda_ray.kernels.loader import ensure


def reference(x: torch.Tensor) -> torch.Tensor:
    """The specification: (N, C, H, W) -> (N, C, H // 2, W // 2)."""
    return F.max_pool2d(torch.relu(x), 2)


def reference_max_pool(x: torch.Tensor) -> torch.Tensor:
    """max_pool2x2's specification."""
    return F.max_pool2d(x, 2)


class _Pool2x2(torch.autograd.Function):
    """Either op (`relu`: with the ReLU first); both record where each window's gradient goes, and one backward
    routes it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, relu: bool) -> torch.Tensor:  # type: ignore[override]
        op = torch.ops.fda_ray.relu_max_pool2x2 if relu else torch.ops.fda_ray.max_pool2x2
        out, route = op(x.contiguous())  # (N, C, h, w) float32, uint8
        ctx.save_for_backward(route)
        ctx.size = tuple(x.shape[-2:])
        ctx.mark_non_differentiable(route)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        (route,) = ctx.saved_tensors
        return torch.ops.fda_ray.relu_max_pool2x2_backward(grad.contiguous(), route, *ctx.size), None


def _transformed() -> bool:
    """True inside torch.func transforms (vmap, grad), whose tensors the C++ op cannot take, and while
    torch.compile traces (the op has no shape function for it; compiled code runs the reference's ops)."""
    probe = getattr(torch._C, "_are_functorch_transforms_active", None)
    return True if probe is None else bool(probe()) or torch.compiler.is_compiling()


def uses_kernel(x: torch.Tensor, impl: str | None = None) -> bool:
    """Whether relu_max_pool2x2(x) and max_pool2x2(x) run the C++ kernel (else the reference). Called for every
    pooling: the cheap checks come first."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or x.dim() != 4 or min(x.shape[-2:]) < 2:
        return False
    if _transformed():
        return False
    return implementation("cpu", impl) == "cpp" and ensure("cpu")


def relu_max_pool2x2(x: torch.Tensor, *, impl: str | None = None) -> torch.Tensor:
    """F.max_pool2d(torch.relu(x), 2): (N, C, H, W) -> (N, C, H // 2, W // 2), the kernel where it applies."""
    if uses_kernel(x, impl):
        return _Pool2x2.apply(x, True)
    return reference(x)


def max_pool2x2(x: torch.Tensor, *, impl: str | None = None) -> torch.Tensor:
    """F.max_pool2d(x, 2): (N, C, H, W) -> (N, C, H // 2, W // 2), the kernel where it applies."""
    if uses_kernel(x, impl):
        return _Pool2x2.apply(x, False)
    return reference_max_pool(x)


class MaxPool2x2(torch.nn.MaxPool2d):
    """nn.MaxPool2d(2) whose forward is max_pool2x2 (the same numbers; still an nn.MaxPool2d to anything that looks)."""

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:  # nn.MaxPool2d also takes (C, H, W)
            return super().forward(x)
        return max_pool2x2(x)


__all__ = ["MaxPool2x2", "max_pool2x2", "reference", "reference_max_pool", "relu_max_pool2x2", "uses_kernel"]
