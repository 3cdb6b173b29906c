"""FSSDA: soft labels, hard and "fake" labels, the mixed distillation loss (Eq. 1-2), pure functions.

    y*_i = softmax(W_s(x_i) / T)                                     Eq. 1: the source model's soft labels
    y_i  = one-hot(label_i) if x_i is labelled, else the all-zero vector ("fake label")
    L_t  = mean_i [ lambda l(y_i, w_t(x_i)) + (1 - lambda) l(y*_i, w_t(x_i)) ]      Eq. 2

l (docs/methods.md, FSSDA's open point 1; the paper does not name it): "mse", the default, the squared error between
softmax(w_t(x)) and the label vector summed over classes (GDSDA's choice, which the paper follows: the only common
loss under which the all-zero fake labels do anything: they pull every probability down), or "ce", cross-entropy
against the label vector (the fake labels then contribute nothing, and per-batch min-norm lambda degenerates to 1
with a zero update on every batch without a labelled sample: open point 2). lambda comes from fda_ray.algorithms.fssda.minnorm
(Eq. 4, on the gradients of the two terms) or is fixed.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

LOSSES = ("mse", "ce")


def soft_labels(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Eq. 1: softmax(logits / T) (n, C); T -> infinity gives the uniform distribution."""
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} is invalid: a number > 0")
    return torch.softmax(logits / temperature, dim=1)


def hard_labels(y: torch.Tensor, labelled: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(n, C): one-hot rows for the labelled samples, all-zero rows ("fake labels") for the others.
    y (n,) int64 (any value where unlabelled), labelled (n,) bool."""
    out = torch.zeros(len(y), num_classes, dtype=torch.float32, device=y.device)
    idx = labelled.nonzero().flatten()
    out[idx, y[idx]] = 1.0
    return out


def label_loss(logits: torch.Tensor, target: torch.Tensor, loss: str = "mse") -> torch.Tensor:
    """mean_i l(target_i, w_t(x_i)) for label vectors target (n, C) (one-hot, all-zero or soft)."""
    if loss == "mse":
        return ((torch.softmax(logits, dim=1) - target) ** 2).sum(1).mean()
    if loss == "ce":
        return -(target * F.log_softmax(logits, dim=1)).sum(1).mean()
    raise ValueError(f"loss={loss!r} is invalid: one of {', '.join(LOSSES)}")


def mixed_loss(logits: torch.Tensor, hard: torch.Tensor, soft: torch.Tensor, lam: float,
               loss: str = "mse") -> torch.Tensor:
    """Eq. 2: lambda l(hard) + (1 - lambda) l(soft), each the mean over the batch."""
    return lam * label_loss(logits, hard, loss) + (1 - lam) * label_loss(logits, soft, loss)
