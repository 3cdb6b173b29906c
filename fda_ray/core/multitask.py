"""Labels, losses and metrics of a learning task, including Healthcare FDA's auxiliary labels (pure functions).

A task kind (`Setting.task`): "classification" (cross-entropy over C logits), "binary" (one logit,
BCE-with-logits, as Healthcare FDA's diagnosis head; accuracy at sigmoid > 0.5, and AUC) or "regression" (MSE).

Auxiliary labels (Healthcare FDA, section 3): a dataset with K auxiliary tasks `aux` = ((name_1, C_1), ...,
(name_K, C_K)) stores its labels y as (n, 1 + K) int64: column 0 the main label, column k the label of
auxiliary task k (-1 where a sample has none: ignored by the loss). Its models output (n, main + sum C_k):
the main head's logits first, then each auxiliary head's (fda_ray.train.models.MultiHead). The local loss is

    L = L_main + alpha * L_aux                                   (Healthcare FDA Eq. 3)
    L_main = mean_j l(h(x_j), y_j)                               (Eq. 1, the batch mean)
    L_aux  = sum_k mean_j CE(g_k(h^{l-1}(x_j)), b_kj)            (Eq. 2; every head reads the same image)

alpha = 0 is plain training: the auxiliary heads get no gradient and the main loss is the plain one.

binary_loss (a binary task's l): "logit" (BCE-with-logits on the main head's output: the paper's Eq. 1) or
"sigmoid" (the authors' code: `BCEWithLogitsLoss()(torch.sigmoid(outputs), labels)`, a second sigmoid inside the
loss, -[y log s(s(z)) + (1 - y) log(1 - s(s(z)))]: it stays between log(1 + e^-1) = 0.313 and log(1 + e) = 1.313,
even for a perfect prediction, and its gradient in z, (s(s(z)) - y) s'(z), is below 0.16 in size; the plain one's
below 1). Evaluation reads the output as before: sigmoid(s(z)) > 0.5 iff z > 0, and AUC only ranks. An auxiliary
head's cross-entropy is on whatever the head outputs (the authors' code: leaky_relu of the logits, MultiHead's
head_activation in fda_ray.train.models; their log_softmax + CrossEntropyLoss is the same number, log_softmax
being idempotent).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch.nn import functional as F

TASK_KINDS = ("classification", "binary", "regression")
BINARY_LOSSES = ("logit", "sigmoid")  # a binary task's loss: on the logit, or the authors' code's double sigmoid
AuxTasks = tuple[tuple[str, int], ...]  # ((name, classes), ...) in label-column order 1..K
MISSING = -1  # an auxiliary label a sample does not have


def main_outputs(kind: str, classes: int) -> int:
    """The main head's width: one logit for a binary task, else one per class (or regression output)."""
    return 1 if kind == "binary" else classes


def main_labels(y: torch.Tensor, aux: AuxTasks) -> torch.Tensor:
    """The main label of each sample: (n,) (or (n, k) regression targets) from y."""
    return y[:, 0] if aux else y


def split_outputs(out: torch.Tensor, aux: AuxTasks) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(main logits (n, m), [auxiliary logits (n, C_k) for each task]) of a model's output (n, m + sum C_k)."""
    if not aux:
        return out, []
    widths = [c for _, c in aux]
    m = out.shape[1] - sum(widths)
    if m < 1:
        raise ValueError(f"model output of width {out.shape[1]} cannot hold the main head and auxiliary heads "
                         f"{dict(aux)}")
    parts = torch.split(out, [m, *widths], dim=1)
    return parts[0], list(parts[1:])


def main_loss(kind: str, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean",
              binary_loss: str = "logit") -> torch.Tensor:
    """Eq. 1's l: cross-entropy, BCE-with-logits on the single logit (binary_loss "sigmoid": on its sigmoid, the
    authors' code's double sigmoid), or MSE."""
    if kind == "classification":
        return F.cross_entropy(out, y, reduction=reduction)
    if kind == "binary":
        z = out[:, 0]
        if binary_loss == "sigmoid":
            z = torch.sigmoid(z)
        elif binary_loss != "logit":
            raise ValueError(f"binary_loss={binary_loss!r} is invalid: one of {', '.join(BINARY_LOSSES)}")
        return F.binary_cross_entropy_with_logits(z, y.to(out.dtype), reduction=reduction)
    return F.mse_loss(out, y, reduction=reduction)


def aux_loss(outs: Sequence[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    """Eq. 2: the sum over auxiliary tasks of each head's mean cross-entropy over its labelled samples;
    y (n, 1 + K). A task with no label in the batch contributes 0 (not NaN). The mean is a sum over a clamped
    count, so no step waits on the device to ask whether a batch has labels."""
    total = outs[0].new_zeros(()) if outs else y.new_zeros((), dtype=torch.float32)
    for k, o in enumerate(outs, start=1):
        yk = y[:, k]
        count = (yk != MISSING).sum().clamp_min(1)
        total = total + F.cross_entropy(o, yk, ignore_index=MISSING, reduction="sum") / count
    return total


def loss(kind: str, out: torch.Tensor, y: torch.Tensor, aux: AuxTasks = (), alpha: float = 0.0,
         binary_loss: str = "logit") -> torch.Tensor:
    """Eq. 3: L_main + alpha * L_aux on a batch (alpha = 0: the main loss only, the same arithmetic as a
    dataset without auxiliary labels); binary_loss: main_loss's."""
    if not aux:
        return main_loss(kind, out, y, binary_loss=binary_loss)
    main, heads = split_outputs(out, aux)
    value = main_loss(kind, main, y[:, 0], binary_loss=binary_loss)
    if alpha:
        value = value + alpha * aux_loss(heads, y)
    return value


def correct(kind: str, out: torch.Tensor, y: torch.Tensor) -> int:
    """Correct predictions of the main head: argmax, or logit > 0 (sigmoid > 0.5) for a binary task."""
    if kind == "binary":
        return int(((out[:, 0] > 0).long() == y).sum())
    return int((out.argmax(1) == y).sum())


def binary_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve of scores (n,) for binary labels (n,): the Mann-Whitney statistic, the
    probability that a random positive scores above a random negative, ties counted half (sklearn's
    roc_auc_score). NaN when a class is absent."""
    s = scores.detach().double().cpu().reshape(-1)
    y = labels.detach().cpu().reshape(-1).bool()
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = torch.argsort(s)
    sorted_s = s[order]
    ranks = torch.empty_like(s)
    # average ranks (1-based) over runs of equal scores
    _, counts = torch.unique_consecutive(sorted_s, return_counts=True)
    ends = counts.cumsum(0).double()
    avg = ends - (counts.double() - 1) / 2  # (runs,) the mean 1-based rank of each run
    ranks[order] = torch.repeat_interleave(avg, counts)
    u = float(ranks[y].sum()) - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)
