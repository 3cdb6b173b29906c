"""The client runtime (where a client lives: this process or its actor) and the local recipes it runs.

A `Client` holds its data views as tensors on its device, a model and an optimizer built once (on first
use), and `state`: what it keeps across rounds (counters; a family's personal tensors). A `ClientTask` names a registered
recipe (RECIPES); `run_task` runs it on the client and returns a `ClientResult`.

The "epoch" recipe is the authors' local training (docs/authors-code.md): start from the round's global weights, a
fresh Adam (built once, its state cleared: the same arithmetic as a new one) unless the task carries the
client's optimizer over, one epoch over shuffled batches, cross-entropy (MSE for regression). The sources'
loaders drop their last partial batch, the target's keeps it (100 labelled samples at batch 16 are 7 steps,
the last of 4 samples). It returns the delta (new minus start weights) as one flat float32 vector, or the
new weights, and the per-step deltas (B, M) when the auto-weighting estimators need them. Target noise is
drawn afresh for every batch read, from a generator seeded by (seed, round, client, purpose).
"""
from __future__ import annotations

import copy
import time
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from fda_ray.core import multitask
from fda_ray.core.contract import ClientResult, ClientTask
from fda_ray.core.layout import ParamLayout
from fda_ray.core.registry import Registry
from fda_ray.core.seeding import generator
from fda_ray.data.base import Pair, add_noise
from fda_ray.core.multitask import AuxTasks

Recipe = Callable[["Client", ClientTask, Mapping[str, torch.Tensor]], ClientResult]
RECIPES: Registry[Recipe] = Registry("recipe", pluggable=True)


def epoch_steps(n: int, batch: int, drop_last: bool) -> int:
    """Optimizer steps of one local epoch over n samples: full batches, plus the partial one unless dropped."""
    return n // batch if drop_last else -(-n // batch)


def loss_fn(task: str, out: torch.Tensor, y: torch.Tensor, aux: AuxTasks = (), alpha: float = 0.0,
            binary_loss: str = "logit") -> torch.Tensor:
    """A batch's training loss (fda_ray.core.multitask): cross-entropy, BCE-with-logits or MSE on the main head,
    plus alpha times the auxiliary heads' cross-entropies (Healthcare FDA Eq. 3) on a dataset with auxiliary labels;
    binary_loss "sigmoid": a binary task's BCE-with-logits on sigmoid(output) (Healthcare FDA's authors' code)."""
    return multitask.loss(task, out, y, aux, alpha, binary_loss)


def to_cpu(obj: Any) -> Any:
    """A deep copy of a state (dicts, lists, tensors) with every tensor on the CPU: a snapshot that pickles
    anywhere and that later training cannot change."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return copy.deepcopy(obj)


class Client:
    """A source or the target. `index` is its position (sources 0..N-1, target N) in seed derivation."""

    def __init__(self, index: int, views: Mapping[str, Pair], model: nn.Module, layout: ParamLayout, *,
                 seed: int, noise: float = 0.0, task: str = "classification", device: str = "cpu",
                 drop_last: bool = True, shuffle: bool = True, aux_tasks: AuxTasks = ()) -> None:
        self.index = index
        self.drop_last = drop_last  # sources: True; the target keeps its last partial batch
        self.shuffle = shuffle  # False: every epoch reads the view in its stored order (the DomainBed loaders)
        self.device = torch.device(device)
        self.views = {name: (x.to(self.device), y.to(self.device)) for name, (x, y) in views.items()}
        self.model = model.to(self.device)
        self.layout = layout
        self.seed = seed
        self.noise = noise
        self.task = task
        self.aux_tasks = tuple(aux_tasks)  # Healthcare FDA's auxiliary labels: y is (n, 1 + K), the model multi-head
        # Built on first use, then kept; `optimizer_for` clears its state, which equals constructing a new Adam.
        # (Not here: the first Adam of a process imports torch._dynamo, ~2 s, which a driver that never trains
        # and a vectorised client, fda_ray.train.cohort, never need.)
        self._optimizer: torch.optim.Optimizer | None = None
        # Kept across rounds, snapshotted after every task (it must pickle: plain data and tensors).
        self.state: dict[str, Any] = {"rounds_trained": 0, "steps_total": 0, "last_round": -1, "last_loss": None}

    def to(self, device: str | torch.device) -> "Client":
        """Move data, model and optimizer to `device` (an actor moves its client onto its own GPU)."""
        self.device = torch.device(device)
        self.views = {name: (x.to(self.device), y.to(self.device)) for name, (x, y) in self.views.items()}
        self.model = self.model.to(self.device)
        self._optimizer = None
        return self

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        if self._optimizer is None:
            self._optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        return self._optimizer

    def snapshot(self) -> dict[str, Any]:
        return to_cpu(self.state)

    def restore(self, state: dict[str, Any]) -> None:
        self.state = to_cpu(state)

    def view(self, name: str) -> Pair:
        try:
            return self.views[name]
        except KeyError:
            raise ValueError(f"client {self.index} has no data view {name!r}; it holds "
                             f"{', '.join(self.views)}") from None

    def num_samples(self, data: str = "train") -> int:
        return int(self.view(data)[0].shape[0])

    def steps_per_epoch(self, batch: int, data: str = "train") -> int:
        """Optimizer steps in one local epoch: full batches, plus the partial one unless it is dropped."""
        n = self.num_samples(data)
        return epoch_steps(n, batch, self.drop_last)

    def finish(self, task: ClientTask, tensors: dict[str, torch.Tensor], steps: int, loss: float) -> ClientResult:
        """Close a recipe's task: count it in the client's state and build its result (tensors on the CPU)."""
        st = self.state
        st.update(rounds_trained=st["rounds_trained"] + 1, steps_total=st["steps_total"] + steps,
                  last_round=task.round, last_loss=loss)
        return ClientResult(self.index, tensors, {"num_samples": self.num_samples(task.data), "num_steps": steps,
                                                  "loss": loss})

    def optimizer_for(self, lr: float, fresh: bool = True) -> torch.optim.Optimizer:
        """The client's Adam at `lr`: cleared (a new Adam's arithmetic), or with the moments its last task
        kept in `state["optimizer"]` (so a replaced actor or a resumed run carries them over too)."""
        if fresh:
            self.optimizer.state.clear()
        else:
            if "optimizer" not in self.state:
                raise RuntimeError(f"client {self.index}: a task carries its optimizer over, but no earlier task "
                                   "kept it")
            self.optimizer.load_state_dict(self.state["optimizer"])
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return self.optimizer

    def epoch_order(self, batch: int, round_idx: int, purpose: str, data: str = "train",
                    drop_last: bool | None = None) -> tuple[torch.Tensor, list[int]]:
        """One epoch's sample order of view `data` (n,) on the CPU, shuffled from a generator seeded by (seed, round,
        client, purpose) unless the client's loaders keep the stored order, and its batches' sizes (the epoch reads
        order[:sizes[0]], then the next sizes[1], ...). drop_last: the client's unless given."""
        n = self.num_samples(data)
        if self.shuffle:
            perm = torch.randperm(n, generator=generator(self.seed, round_idx, self.index, purpose + "/shuffle"))
        else:
            perm = torch.arange(n)
        steps = epoch_steps(n, batch, self.drop_last if drop_last is None else drop_last)
        return perm, [min(batch, n - b * batch) for b in range(steps)]

    def batch_indices(self, batch: int, round_idx: int, purpose: str, data: str = "train",
                      drop_last: bool | None = None) -> Iterator[torch.Tensor]:
        """One epoch's batches of view `data` as sample indices (b,) on the client's device (epoch_order)."""
        perm, sizes = self.epoch_order(batch, round_idx, purpose, data, drop_last)
        perm = perm.to(self.device)
        for b in range(len(sizes)):
            yield perm[b * batch : (b + 1) * batch]

    def noise_generator(self, round_idx: int, purpose: str) -> torch.Generator:
        """The generator the target noise of one epoch is drawn from, seeded by (seed, round, client, purpose)."""
        return generator(self.seed, round_idx, self.index, purpose + "/noise", device=self.device)

    def reader(self, round_idx: int, purpose: str, data: str = "train") -> Callable[[torch.Tensor], torch.Tensor]:
        """x[idx] of view `data` as training reads it: a view of image files (fda_ray.data.images.ImageFiles) is
        decoded here, augmented if it is a source environment's, from a generator seeded like the shuffle; the
        target's images with fresh noise on each read."""
        x, _ = self.view(data)
        noise_gen = self.noise_generator(round_idx, purpose)
        read = getattr(x, "read", None)  # files: decoded (and augmented) per batch
        aug_gen = generator(self.seed, round_idx, self.index, purpose + "/augment") if read else None
        return lambda idx: add_noise(read(idx, aug_gen) if read else x[idx], self.noise, noise_gen)

    def batches(self, batch: int, round_idx: int, purpose: str, data: str = "train"
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch's batches (x, y) of view `data` (batch_indices, read by `reader`)."""
        y = self.view(data)[1]
        read = self.reader(round_idx, purpose, data)
        for idx in self.batch_indices(batch, round_idx, purpose, data):
            yield read(idx), y[idx]

    def epoch(self, opt: torch.optim.Optimizer, batch: int, round_idx: int, purpose: str, record_steps: bool,
              data: str = "train", penalty: Callable[[], torch.Tensor] | None = None, alpha: float = 0.0,
              binary_loss: str = "logit") -> tuple[int, float, list[torch.Tensor]]:
        """One epoch over shuffled batches of view `data`: (steps, mean loss, per-step deltas if recorded).
        penalty(): a term added to every step's loss (Ditto's proximal term); the logged loss leaves it out.
        alpha: the auxiliary heads' loss weight (Healthcare FDA Eq. 3); the logged loss includes it. binary_loss:
        fda_ray.core.multitask's (a binary task's loss on the logit, or the authors' code's double sigmoid)."""
        steps, total, rows = 0, 0.0, []
        prev = self.layout.flatten_model(self.model) if record_steps else None
        self.model.train()
        for xb, yb in self.batches(batch, round_idx, purpose, data):
            loss = loss_fn(self.task, self.model(xb), yb, self.aux_tasks, alpha, binary_loss)
            opt.zero_grad(set_to_none=True)
            (loss + penalty() if penalty is not None else loss).backward()
            opt.step()
            total += float(loss.detach())
            steps += 1
            if record_steps:
                cur = self.layout.flatten_model(self.model)
                rows.append(cur - prev)  # (M,)
                prev = cur
        return steps, total / max(steps, 1), rows


def run_task(client: Client, task: ClientTask, inputs: Mapping[str, torch.Tensor]) -> ClientResult:
    """Run `task`'s recipe on `client` (where the client lives); the result's seconds include the copies
    back to the CPU, which a GPU client also pays."""
    t0 = time.perf_counter()
    result = RECIPES.get(task.recipe)(client, task, inputs)
    result.seconds = time.perf_counter() - t0
    return result


@RECIPES.register("epoch")
def epoch_recipe(client: Client, task: ClientTask, inputs: Mapping[str, torch.Tensor]) -> ClientResult:
    """One local epoch from inputs["global"] (M,).

    hparams: lr, batch; record_steps (per-step deltas, default False); send ("delta", default, or "weights");
    fresh_optimizer (default True) and keep_optimizer (store the Adam moments in the client's state for a
    later task that carries them over; default False); aux_alpha (Healthcare FDA Eq. 3's alpha on a dataset with
    auxiliary labels; default 0, the main task only); binary_loss (a binary task's loss, fda_ray.core.multitask:
    "logit", the default, or "sigmoid", Healthcare FDA's authors' code)."""
    h = task.hparams
    record = bool(h.get("record_steps", False))
    start = inputs["global"].to(client.device)  # (M,)
    client.layout.load_into(client.model, start)
    opt = client.optimizer_for(h["lr"], fresh=h.get("fresh_optimizer", True))
    steps, loss, rows = client.epoch(opt, h["batch"], task.round, task.purpose, record, task.data,
                                     alpha=float(h.get("aux_alpha", 0.0)), binary_loss=h.get("binary_loss", "logit"))
    new = client.layout.flatten_model(client.model)  # (M,)
    tensors = {"weights": new.cpu()} if h.get("send", "delta") == "weights" else {"delta": (new - start).cpu()}
    if record and rows:
        tensors["step_deltas"] = torch.stack(rows).cpu()  # (B, M)
    if h.get("keep_optimizer", False):
        client.state["optimizer"] = to_cpu(opt.state_dict())
    else:
        client.state.pop("optimizer", None)
    return client.finish(task, tensors, steps, loss)
