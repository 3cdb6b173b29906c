"""A CUDA device warmed before the first round: its context created, cuDNN's and cuBLAS's kernels loaded.

A process's first convolution on a GPU loads cuDNN (and its first matrix product cuBLAS): seconds, paid inside the
first round's first batch unless done earlier. `warm(device)` does it with one tiny convolution and matrix
product, forward and backward, so that the driver (fda_ray.runtime.startup: its device_init phase) and a GPU client
actor (fda_ray.runtime.ray_executor: in its constructor, while the driver loads the data) pay it when nothing waits.
"""
from __future__ import annotations

import torch


def warm(device: str | torch.device) -> None:
    """Create `device`'s CUDA context and load cuDNN and cuBLAS (nothing on the CPU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return
    x = torch.ones(2, 1, 8, 8, device=device, requires_grad=True)  # (B, C, H, W)
    w = torch.ones(4, 1, 3, 3, device=device, requires_grad=True)  # (out, in, kh, kw)
    y = torch.nn.functional.conv2d(x, w).flatten(1) @ torch.ones(144, 2, device=device)  # (2, 4*6*6) @ (144, 2)
    y.sum().backward()
    torch.cuda.synchronize(device)
