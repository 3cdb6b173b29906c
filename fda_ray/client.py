"""One client: its data shard as tensors on its device, a model built once, and one local epoch per round.

Local training follows the authors' code: start from the round's global weights, a fresh Adam optimizer
every round (built once, its state cleared each round: the same arithmetic), one epoch over shuffled batches,
cross-entropy (MSE for regression). The sources' loaders drop their last partial batch, the target's keeps
it (REFERENCE.md: 100 labelled samples at batch 16 are 7 steps, the last of 4 samples). The client returns its delta (new minus start weights) as one flat float32 vector, and
the target also its per-step deltas (B, M) when the auto-weighting estimators need them.
Target noise is drawn afresh for every batch read, from a generator seeded by (seed, round, client).

A client is stateful: `state` survives across rounds (the serial executor keeps the object; the Ray executor
keeps it inside the client's actor, and restores it from the last snapshot when it replaces a dead actor).
"""
from __future__ import annotations

from dataclasses import dataclass

import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from fda_ray.layout import ParamLayout
from fda_ray.seeding import generator
from fda_ray.shifts import add_noise

EVAL_CHUNK = 2048


@dataclass
class ClientUpdate:
    client: int
    delta: torch.Tensor  # (M,) new weights - start weights
    num_samples: int
    num_steps: int
    loss: float  # mean training loss of the epoch
    step_deltas: torch.Tensor | None = None  # (B, M) per-step deltas (target, auto methods)
    seconds: float = 0.0  # wall time of the local training, measured where the client runs
    state: dict[str, Any] | None = None  # the client's state after this round (a snapshot)


def loss_fn(task: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y) if task == "classification" else F.mse_loss(out, y)


class Client:
    """A source or the target. `index` is its position (sources 0..N-1, target N) in seed derivation."""

    def __init__(self, index: int, x: torch.Tensor, y: torch.Tensor, model: nn.Module, layout: ParamLayout, *,
                 seed: int, noise: float = 0.0, task: str = "classification", device: str = "cpu",
                 drop_last: bool = True) -> None:
        self.index = index
        self.drop_last = drop_last  # sources: True; the target keeps its last partial batch
        self.device = torch.device(device)
        self.x = x.to(self.device)
        self.y = y.to(self.device)
        self.model = model.to(self.device)
        self.layout = layout
        self.seed = seed
        self.noise = noise
        self.task = task
        # Built once; `_fresh_optimizer` clears its state, which equals constructing a new Adam.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        # State kept across rounds; small and picklable so it can be snapshotted and restored.
        self.state: dict[str, Any] = {"rounds_trained": 0, "steps_total": 0, "last_round": -1, "last_loss": None}

    def to(self, device: str | torch.device) -> "Client":
        """Move data, model and optimizer to `device` (an actor moves its client onto its own GPU)."""
        self.device = torch.device(device)
        self.x, self.y = self.x.to(self.device), self.y.to(self.device)
        self.model = self.model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        return self

    def snapshot(self) -> dict[str, Any]:
        return dict(self.state)

    def restore(self, state: dict[str, Any]) -> None:
        self.state = dict(state)

    def _fresh_optimizer(self, lr: float) -> torch.optim.Optimizer:
        self.optimizer.state.clear()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return self.optimizer

    @property
    def num_samples(self) -> int:
        return int(self.x.shape[0])

    def steps_per_epoch(self, batch: int) -> int:
        """Optimizer steps in one local epoch: full batches, plus the partial one unless it is dropped."""
        return self.num_samples // batch if self.drop_last else -(-self.num_samples // batch)

    def _epoch(self, opt: torch.optim.Optimizer, batch: int, round_idx: int, purpose: str,
               record_steps: bool) -> tuple[int, float, list[torch.Tensor]]:
        shuffle = generator(self.seed, round_idx, self.index, purpose + "/shuffle")
        noise_gen = generator(self.seed, round_idx, self.index, purpose + "/noise", device=self.device)
        perm = torch.randperm(self.num_samples, generator=shuffle).to(self.device)
        steps = self.steps_per_epoch(batch)
        total, rows = 0.0, []
        prev = self.layout.flatten_model(self.model) if record_steps else None
        self.model.train()
        for b in range(steps):
            idx = perm[b * batch : (b + 1) * batch]
            xb = add_noise(self.x[idx], self.noise, noise_gen)
            loss = loss_fn(self.task, self.model(xb), self.y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach())
            if record_steps:
                cur = self.layout.flatten_model(self.model)
                rows.append(cur - prev)
                prev = cur
        return steps, total / max(steps, 1), rows

    def train(self, global_flat: torch.Tensor, round_idx: int, *, lr: float, batch: int,
              record_steps: bool = False) -> ClientUpdate:
        """One local epoch from `global_flat` (M,) with a fresh Adam; returns the delta."""
        t0 = time.perf_counter()
        start = global_flat.to(self.device)
        self.layout.load_into(self.model, start)
        opt = self._fresh_optimizer(lr)
        steps, loss, rows = self._epoch(opt, batch, round_idx, "train", record_steps)
        delta = self.layout.flatten_model(self.model) - start
        step_deltas = torch.stack(rows) if record_steps and rows else None
        self.state.update(rounds_trained=self.state["rounds_trained"] + 1, steps_total=self.state["steps_total"] + steps,
                          last_round=round_idx, last_loss=loss)
        out = ClientUpdate(self.index, delta.cpu(), self.num_samples, steps, loss,
                           None if step_deltas is None else step_deltas.cpu(), state=self.snapshot())
        out.seconds = time.perf_counter() - t0  # after the copies to CPU, which a GPU client also pays
        return out

    def finetune(self, start_flat: torch.Tensor, epochs: int, *, lr: float, batch: int, first_round: int,
                 fresh_optimizer_each_epoch: bool = True):
        """Offline fine-tuning: `epochs` epochs, a fresh Adam every epoch (the authors' script) or one Adam
        across them; yields (epoch, flat weights, loss) per epoch."""
        self.layout.load_into(self.model, start_flat.to(self.device))
        opt = self._fresh_optimizer(lr)
        for e in range(epochs):
            if fresh_optimizer_each_epoch and e > 0:
                opt = self._fresh_optimizer(lr)
            _, loss, _ = self._epoch(opt, batch, first_round + e, "finetune", False)
            yield e, self.layout.flatten_model(self.model).cpu(), loss


@torch.no_grad()
def evaluate(model: nn.Module, layout: ParamLayout, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *,
             noise: float, gen: torch.Generator | None, task: str = "classification") -> tuple[float, float]:
    """(accuracy, mean loss) of the weights `flat` on (x, y) with fresh noise; accuracy is NaN for regression."""
    device = next(model.parameters()).device
    layout.load_into(model, flat.to(device))
    model.eval()
    correct, loss_sum, n = 0, 0.0, int(x.shape[0])
    for lo in range(0, n, EVAL_CHUNK):
        xb = add_noise(x[lo : lo + EVAL_CHUNK].to(device), noise, gen)
        yb = y[lo : lo + EVAL_CHUNK].to(device)
        out = model(xb)
        if task == "classification":
            loss_sum += float(F.cross_entropy(out, yb, reduction="sum"))
            correct += int((out.argmax(1) == yb).sum())
        else:
            loss_sum += float(F.mse_loss(out, yb, reduction="sum")) / yb.shape[1]
    acc = correct / n if task == "classification" else float("nan")
    return acc, loss_sum / n
