"""Evaluation on the driver: a model's accuracy and loss on a test set, with the target's noise drawn fresh.

    evaluate(model, layout, flat, x, y, noise, gen)    (accuracy, mean loss) of flat weights (M,) on (x, y)
    Evaluator(exp).target(flat, r)                     a row's columns for the target's model in round r
    Evaluator(exp).validation(flat, r)                 its model-selection columns (val_accuracy, source_val_...)

The noise of round r's evaluation is drawn from a generator seeded by (seed, r, target, "eval"); the extra
levels of `eval_noise` reuse that stream, so a run with noise=std would draw exactly the noise evaluated here.
An algorithm whose evaluated model lives on a client (a personal model) reads it with `client_state`.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, Protocol

import torch
from torch import nn

from fda_ray.core import multitask
from fda_ray.core.layout import ParamLayout
from fda_ray.core.multitask import AuxTasks
from fda_ray.core.seeding import generator
from fda_ray.data.base import add_noise

if TYPE_CHECKING:
    from fda_ray.data.setting import Setting
    from fda_ray.core.config import RunConfig

EVAL_CHUNK = 2048
EVAL_ELEMENTS = 1 << 24  # at most this many input values per evaluated batch (64 MB of float32)


def eval_chunk(x) -> int:
    """Samples per evaluation batch: EVAL_CHUNK, fewer for large inputs (DomainBed's 3 x 224 x 224 images are
    read from their files a batch at a time: 110 of them, not 2048 = 4.9 GB)."""
    per = 1
    for d in tuple(x.shape[1:]):
        per *= int(d)
    return max(1, min(EVAL_CHUNK, EVAL_ELEMENTS // max(per, 1)))


@torch.no_grad()
def evaluate_metrics(model: nn.Module, layout: ParamLayout, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *,
                     noise: float, gen: torch.Generator | None, task: str = "classification",
                     aux: AuxTasks = ()) -> dict[str, float]:
    """{"accuracy", "loss"[, "auc"]} of the weights `flat` (M,) on (x, y) with fresh noise, the main head's
    (fda_ray.core.multitask): accuracy NaN for regression; AUC for a binary task (Healthcare FDA reports both)."""
    device = next(model.parameters()).device
    layout.load_into(model, flat.to(device))
    model.eval()
    hits, loss_sum, n = 0, 0.0, int(x.shape[0])
    scores: list[torch.Tensor] = []
    chunk = eval_chunk(x)
    for lo in range(0, n, chunk):
        xb = add_noise(x[lo : lo + chunk].to(device), noise, gen)
        yb = multitask.main_labels(y[lo : lo + chunk].to(device), aux)
        out, _ = multitask.split_outputs(model(xb), aux)
        batch_loss = float(multitask.main_loss(task, out, yb, reduction="sum"))
        loss_sum += batch_loss / yb.shape[1] if task == "regression" else batch_loss  # regression: per output
        if task != "regression":
            hits += multitask.correct(task, out, yb)
        if task == "binary":
            scores.append(out[:, 0].cpu())
    row = {"accuracy": hits / n if task != "regression" else float("nan"), "loss": loss_sum / n}
    if task == "binary":
        row["auc"] = multitask.binary_auc(torch.cat(scores), multitask.main_labels(y, aux))
    return row


def evaluate(model: nn.Module, layout: ParamLayout, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *,
             noise: float, gen: torch.Generator | None, task: str = "classification",
             aux: AuxTasks = ()) -> tuple[float, float]:
    """(accuracy, mean loss) of evaluate_metrics."""
    m = evaluate_metrics(model, layout, flat, x, y, noise=noise, gen=gen, task=task, aux=aux)
    return m["accuracy"], m["loss"]


class Built(Protocol):
    """What an Evaluator reads of a built experiment (fda_ray.runtime.experiment.Experiment is one): named here so
    that evaluation, a floor below the runtime, does not import it."""

    cfg: "RunConfig"
    setting: "Setting"
    layout: ParamLayout
    target_index: int
    model: nn.Module


class Evaluator:
    """The driver's evaluation of one experiment: a model built once, the target's test set."""

    def __init__(self, exp: Built, client_state: Callable[[int], dict[str, Any]] | None = None) -> None:
        self.cfg = exp.cfg
        self.setting = exp.setting
        self.layout = exp.layout
        self.target_index = exp.target_index
        self.model = copy.deepcopy(exp.model)
        self._client_state = client_state

    def client_state(self, client: int) -> dict[str, Any]:
        """A client's state after its last finished task (its personal tensors), its tensors on the device of the
        driver's model: clients keep their state on the CPU (it crosses processes), while a run on a GPU holds the
        server state there, and a method mixes the two (APFL's alpha v + (1 - alpha) w, FedRep's head into w)."""
        if self._client_state is None:
            raise RuntimeError("this evaluator reads no client states")
        device = next(self.model.parameters()).device
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self._client_state(client).items()}

    def target(self, flat: torch.Tensor, round_idx: int, validation: bool = True) -> dict[str, Any]:
        """{"accuracy", "loss"[, "auc"][, "eval_noise_accuracy", "eval_noise_loss"]} of the weights `flat` (M,) on the
        target's test set,
        and (validation=True, where the setting holds them out) the same model's validation metrics."""
        s, cfg = self.setting, self.cfg
        x, y = s.target_test
        gen = generator(cfg.seed, round_idx, self.target_index, "eval", device=cfg.device)
        row: dict[str, Any] = evaluate_metrics(self.model, self.layout, flat, x, y, noise=s.noise, gen=gen,
                                               task=s.task, aux=s.aux_tasks)
        if validation:
            row.update(self.validation(flat, round_idx))
        if cfg.eval_noise:
            extra = []
            for std in cfg.eval_noise:
                # The same stream as the main evaluation: a run with noise=std would draw exactly this noise.
                g = generator(cfg.seed, round_idx, self.target_index, "eval", device=cfg.device)
                extra.append(evaluate(self.model, self.layout, flat, x, y, noise=float(std), gen=g, task=s.task,
                                      aux=s.aux_tasks))
            row["eval_noise_accuracy"] = [acc for acc, _ in extra]
            row["eval_noise_loss"] = [loss for _, loss in extra]
        return row

    def validation(self, flat: torch.Tensor, round_idx: int) -> dict[str, Any]:
        """Model selection's metrics (fda_ray.papers.selection) of the weights `flat`, read without any target test label:
        val_accuracy / val_loss[/ val_auc] on the held-out labelled target samples (with the target's noise, drawn
        from its own stream), source_val_accuracy / source_val_loss on the sources' held-out samples (no noise:
        the sources' images carry none)."""
        s, cfg = self.setting, self.cfg
        row: dict[str, Any] = {}
        if s.target_val is not None:
            gen = generator(cfg.seed, round_idx, self.target_index, "eval/validation", device=cfg.device)
            m = evaluate_metrics(self.model, self.layout, flat, *s.target_val, noise=s.noise, gen=gen, task=s.task,
                                 aux=s.aux_tasks)
            row.update({f"val_{k}": v for k, v in m.items()})
        if s.source_val is not None:
            m = evaluate_metrics(self.model, self.layout, flat, *s.source_val, noise=0.0, gen=None, task=s.task,
                                 aux=s.aux_tasks)
            row.update({f"source_val_{k}": v for k, v in m.items()})
        return row

