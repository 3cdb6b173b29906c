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


def routed(grad_x: torch.Tensor, route: torch.Tensor) -> torch.Tensor:
    """The adjoint of the backward, in PyTorch's ops: each window's routed element of grad_x (N, C, H, W), 0 where the
    route is nowhere (4) -> (N, C, H // 2, W // 2). It is the double backward (the gradient of the backward with
    respect to its incoming gradient, as max-pool's and ReLU's own double backward give) and the forward-mode
    derivative (a tangent of x taken where the gradient would go)."""
    n, c, h, w = route.shape
    # (N, C, 2h, 2w) -> (N, C, h, w, 4), a window's corners in the route's order 2 * dy + dx
    win = grad_x[..., : 2 * h, : 2 * w].reshape(n, c, h, 2, w, 2).permute(0, 1, 2, 4, 3, 5).reshape(n, c, h, w, 4)
    q = route.long()
    picked = win.gather(-1, q.clamp_max(3).unsqueeze(-1)).squeeze(-1)  # (N, C, h, w)
    return torch.where(q < 4, picked, torch.zeros_like(picked))


class _Unroute(torch.autograd.Function):
    """The pooling's backward as a function of its incoming gradient (linear in it), for a backward that builds a
    graph (create_graph=True: a gradient penalty, MAML): its own backward is `routed`. The route is piecewise
    constant in x, so the second derivative with respect to x is 0, as PyTorch's."""

    @staticmethod
    def forward(ctx, grad: torch.Tensor, route: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(route)
        return torch.ops.fda_ray.relu_max_pool2x2_backward(grad.contiguous(), route, *size)

    @staticmethod
    def backward(ctx, grad_grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        (route,) = ctx.saved_tensors
        return routed(grad_grad, route), None, None


class _Pool2x2(torch.autograd.Function):
    """Either op (`relu`: with the ReLU first); both record where each window's gradient goes, and one backward
    routes it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, relu: bool) -> torch.Tensor:  # type: ignore[override]
        op = torch.ops.fda_ray.relu_max_pool2x2 if relu else torch.ops.fda_ray.max_pool2x2
        out, route = op(x.contiguous())  # (N, C, h, w) float32, uint8
        ctx.save_for_backward(route)
        ctx.save_for_forward(route)
        ctx.size = tuple(x.shape[-2:])
        ctx.mark_non_differentiable(route)
        if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
            out = out.contiguous(memory_format=torch.channels_last)  # the input's layout, as PyTorch's pooling keeps
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        (route,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: a backward that is itself differentiated
            return _Unroute.apply(grad, route, ctx.size), None
        return torch.ops.fda_ray.relu_max_pool2x2_backward(grad.contiguous(), route, *ctx.size), None

    @staticmethod
    def jvp(ctx, x_tangent: torch.Tensor, _relu: None) -> torch.Tensor:  # type: ignore[override]
        (route,) = ctx.saved_tensors
        return routed(x_tangent, route)


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


__all__ = ["MaxPool2x2", "max_pool2x2", "reference", "reference_max_pool", "relu_max_pool2x2", "routed", "uses_kernel"]
