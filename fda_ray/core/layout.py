"""Flat parameter layout: a model's state dict <-> one float32 vector with per-tensor offsets.

A "layer" in FedGP is one state-dict tensor (each weight, each bias, BatchNorm running stats too), as in
the authors' code. Zero-dimensional and non-floating tensors (e.g. BatchNorm's num_batches_tracked) are
not part of the flat vector: they are not projected, and the global model keeps its own value for them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of the flattened tensors of a state dict."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: torch.Tensor  # (L + 1,) int64: layer l is flat[offsets[l]:offsets[l + 1]]

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor]) -> "ParamLayout":
        names, shapes, sizes = [], [], [0]
        for name, t in state.items():
            if t.is_floating_point() and t.dim() > 0:
                names.append(name)
                shapes.append(tuple(t.shape))
                sizes.append(t.numel())
        offsets = torch.tensor(sizes, dtype=torch.int64).cumsum(0)
        return cls(tuple(names), tuple(shapes), offsets)

    @classmethod
    def from_model(cls, model: nn.Module) -> "ParamLayout":
        return cls.from_state_dict(model.state_dict())

    @property
    def num_layers(self) -> int:
        return len(self.names)

    @property
    def bounds(self) -> tuple[int, ...]:
        """The offsets as Python ints (read once: every later read costs no tensor operation)."""
        cached = self.__dict__.get("_bounds")
        if cached is None:
            cached = tuple(int(v) for v in self.offsets.tolist())
            object.__setattr__(self, "_bounds", cached)
        return cached

    @property
    def size(self) -> int:
        return self.bounds[-1]

    def flatten(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The flat float32 vector (M,) of the layout's tensors of `state`."""
        parts = [state[n].detach().reshape(-1).float() for n in self.names]
        return torch.cat(parts) if parts else torch.zeros(0)

    def flatten_model(self, model: nn.Module) -> torch.Tensor:
        return self.flatten(model.state_dict())

    def load_into(self, model: nn.Module, flat: torch.Tensor) -> None:
        """Copy the flat vector (M,) into the model's tensors in place (other tensors untouched)."""
        if flat.shape != (self.size,):
            raise ValueError(f"flat vector has shape {tuple(flat.shape)}, layout needs ({self.size},)")
        state = model.state_dict()
        with torch.no_grad():
            bounds = self.bounds
            for l, name in enumerate(self.names):
                lo, hi = bounds[l], bounds[l + 1]
                t = state[name]
                t.copy_(flat[lo:hi].view(t.shape).to(t.dtype))

    def layer_of(self, name: str) -> slice:
        l = self.names.index(name)
        return slice(self.bounds[l], self.bounds[l + 1])
