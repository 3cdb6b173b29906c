"""Vectorised cohorts: clients that run the "epoch" recipe on one architecture train as one batched computation.

Why: a small CNN at batch 64 leaves a GPU (and, with several threads, a CPU) mostly idle, and a loop over
clients pays the per-operation overhead once per client and step. Here the K clients of a cohort keep their
weights as the rows of one (K, M) tensor; each step runs every client's forward and backward pass at once and
one Adam update over the (K, M) rows.

    run_tasks(clients, tasks, inputs, vectorise)   every task of a round on the clients hosted here: the
                                                   cohorts vectorised (train_cohort), the rest by their recipe,
                                                   GPU clients' side by side (run_concurrently: a thread and
                                                   a CUDA stream each)
    cohort_key(client, task)                       which tasks can share one computation (None: none)
    train_cohort(members)                          the "epoch" recipe (fda_ray.train.client) for K clients at once

Each client keeps what makes its numbers its own: its data order and noise draws (its own `Client.batches`,
seeded by (seed, round, client, purpose)), its learning rate, its step count. A client whose epoch has fewer
steps (a smaller shard) stops updating after its last one; the target's last partial batch is padded, and
the padding carries zero weight in its loss, so its gradient is that of the partial batch. The result equals
per-client training within float tolerance (tests/test_cohort.py, for every model with a stacked forward and
for the generic path), not bit for bit: the batched operations sum in other orders.

The forward pass: a model class may define `forward_stacked(params, x)` (stacked parameters (K, ...) and
inputs (K, B, ...) -> outputs (K, B, ...)), written for speed (fda_ray.train.models.SimpleCNN); any other model goes
through torch.func.vmap over torch.func.functional_call. A model whose layers couple the samples of a batch
(BatchNorm in training mode) or draw randomness (dropout), or with tensors that are not trained parameters,
is not vectorised: its clients train one after the other.

Adam on the rows follows torch.optim.Adam's single-tensor arithmetic (defaults betas (0.9, 0.999), eps 1e-8,
no weight decay): with the step t shared by the clients still training, the bias corrections are scalars and
the learning rate is one per row.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from fda_ray.core.contract import ClientResult, ClientTask
from fda_ray.train.client import Client, run_task

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, which the clients' optimizer uses
_COUPLING = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd, nn.AlphaDropout)


def not_vectorisable(model: nn.Module, names: Sequence[str]) -> str | None:
    """Why `model` cannot train in a cohort (None: it can). `names`: the layout's tensors (ParamLayout)."""
    params = {n for n, p in model.named_parameters() if p.requires_grad}
    if set(names) != params:
        return "its layout holds tensors that are not trained parameters (buffers or frozen layers)"
    for m in model.modules():
        if isinstance(m, _COUPLING):
            return f"it has a {type(m).__name__} layer (couples a batch's samples or draws randomness)"
    return None


def cohort_key(client: Client, task: ClientTask) -> tuple | None:
    """Tasks with equal keys train as one cohort; None: the task runs by its recipe, alone.

    Vectorised: the "epoch" recipe with a fresh optimizer that keeps nothing (the FDA family's local
    training); clients on one device with one architecture, task type and batch size."""
    h = task.hparams
    if task.recipe != "epoch" or not h.get("fresh_optimizer", True) or h.get("keep_optimizer", False):
        return None
    if client.aux_tasks or client.task not in ("classification", "regression"):  # Healthcare FDA's tasks: the loop
        return None
    if not hasattr(client, "_cohort_ok"):  # checked once per client (the model does not change)
        client._cohort_ok = not_vectorisable(client.model, client.layout.names) is None
    if not client._cohort_ok:
        return None
    layout = client.layout
    return (type(client.model), layout.names, layout.shapes, str(client.device), client.task, int(h["batch"]))


# Recipes that draw from torch's global generator (FedWCA seeds it before its dropout): threads would share it.
GLOBAL_RNG_RECIPES = frozenset({"fedwca"})
_RANDOM_LAYERS = (nn.modules.dropout._DropoutNd, nn.AlphaDropout)


def overlap_enabled() -> bool:
    """GPU clients of one process train side by side unless $FDA_RAY_CONCURRENT_CLIENTS is 0 (for measuring)."""
    return os.environ.get("FDA_RAY_CONCURRENT_CLIENTS", "1") != "0"


def may_overlap(client: Client, task: ClientTask) -> bool:
    """Whether `task` may train beside other clients' tasks, in threads of this process: a GPU client whose recipe
    and model draw nothing from torch's global generator. On the CPU clients run one after the other: their
    arithmetic uses the process's `threads` already, and serial == Ray stays exact."""
    if client.device.type != "cuda" or task.recipe in GLOBAL_RNG_RECIPES:
        return False
    if not hasattr(client, "_overlap_ok"):  # checked once per client (the model does not change)
        client._overlap_ok = not any(isinstance(m, _RANDOM_LAYERS) for m in client.model.modules())
    return client._overlap_ok


# Each GPU client's own CUDA stream in this process, by (device index, client index), kept from round to round.
# PyTorch's caching allocator reuses a freed block only for allocations on the stream it was made on; a new
# torch.cuda.Stream() each round hands out torch's pooled streams in turn (32 a device), so a client's cached blocks
# would spread over up to 32 streams and a trial hold up to 32 working sets instead of one per client.
_STOP = threading.local()  # .event: a fused group's stop event, in its thread (fda_ray.runtime.fusion)


def stop_on(event: threading.Event | None) -> None:
    """The cohorts this thread trains end at their next step once `event` is set (KeyboardInterrupt): a fused
    group's thread that its Ctrl-C stops leaves torch within a step, instead of training on while its process
    exits under it (which aborted the process with a C++ stack trace)."""
    _STOP.event = event


def _stop_point() -> None:
    event = getattr(_STOP, "event", None)
    if event is not None and event.is_set():
        raise KeyboardInterrupt


_STREAMS: dict[tuple[int, int], "torch.cuda.Stream"] = {}


def client_stream(index: int, device: torch.device) -> "torch.cuda.Stream":
    """The CUDA stream client `index` trains on, on `device`: the same one every round, in this process."""
    key = (device.index if device.index is not None else torch.cuda.current_device(), index)
    stream = _STREAMS.get(key)
    if stream is None:
        stream = _STREAMS[key] = torch.cuda.Stream(device=device)
    return stream


def run_concurrently(clients: Mapping[int, Client], tasks: Sequence[ClientTask],
                     inputs: Callable[[ClientTask], Mapping[str, torch.Tensor]]) -> dict[int, ClientResult]:
    """Each task in a thread of its own; a GPU client's on its own CUDA stream (client_stream), so the clients'
    kernels overlap on the device (torch releases the GIL inside its operators) instead of queueing on the default
    stream. Each client runs the same operations in the same order as alone: the same arithmetic. A task's
    seconds are its own wall time (they overlap)."""
    from concurrent.futures import ThreadPoolExecutor

    streams = {t.client: client_stream(t.client, clients[t.client].device) for t in tasks
               if clients[t.client].device.type == "cuda"}  # made here, not in the threads

    def one(t: ClientTask) -> ClientResult:
        c = clients[t.client]
        if c.device.type != "cuda":
            return run_task(c, t, inputs(t))
        stream = streams[t.client]
        stream.wait_stream(torch.cuda.current_stream(c.device))  # the shards and models put there before
        with torch.cuda.stream(stream):
            res = run_task(c, t, inputs(t))
        stream.synchronize()
        return res

    with ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="fda-client") as pool:
        return dict(zip([t.client for t in tasks], pool.map(one, tasks)))


@dataclass
class Job:
    """One task on one client, with its inputs: a trial's task, or (fda_ray.runtime.fusion) one of a group's."""
    client: Client
    task: ClientTask
    inputs: Callable[[], Mapping[str, torch.Tensor]]


def run_tasks(clients: Mapping[int, Client], tasks: Sequence[ClientTask],
              inputs: Callable[[ClientTask], Mapping[str, torch.Tensor]], vectorise: bool,
              overlap: bool | None = None) -> list[ClientResult]:
    """Run every task on its client (all hosted in this process); results in task order.

    vectorise: tasks that share a cohort key train as one cohort (a task alone with its key: a cohort of one);
    each result's seconds are the cohort's wall time divided among its members (their sum is the time spent).
    overlap (default overlap_enabled()): the other tasks of GPU clients that may overlap (may_overlap) train side
    by side, each in its own thread and CUDA stream (run_concurrently), not one after the other."""
    jobs = [Job(clients[t.client], t, (lambda t=t: inputs(t))) for t in tasks]
    out = run_jobs(jobs, vectorise, overlap)
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return out  # type: ignore[return-value]


def run_jobs(jobs: Sequence[Job], vectorise: bool, overlap: bool | None = None, isolate: bool = False
             ) -> list[ClientResult | BaseException]:
    """run_tasks over jobs that may belong to several trials (a fused group: fda_ray.runtime.fusion); results in
    job order. isolate: an exception is the result of the jobs it hit (a cohort's: all of its members), not
    raised, so one trial's failure leaves the others' results whole."""
    results: dict[int, ClientResult | BaseException] = {}
    groups: dict[tuple, list[int]] = {}
    alone: list[int] = []
    for j, job in enumerate(jobs):
        key = cohort_key(job.client, job.task) if vectorise else None
        (groups.setdefault(key, []) if key is not None else alone).append(j)
    # A task with a cohort key trains through the cohort's arithmetic even when it is its key's only task (a cohort
    # of one): a trial's numbers then do not depend on how many other rows share its cohort, in its own round or in
    # a fused group's (fda_ray.runtime.fusion), only on its own rows.
    alone.sort()
    for members in groups.values():
        t0 = time.perf_counter()
        try:
            out = train_cohort([(jobs[j].client, jobs[j].task, jobs[j].inputs()["global"]) for j in members])
        except Exception as e:
            if not isolate:
                raise
            results.update({j: e for j in members})
            continue
        share = (time.perf_counter() - t0) / len(members)
        for j, res in zip(members, out):
            res.seconds = share
            results[j] = res
    if overlap_enabled() if overlap is None else overlap:
        side = [j for j in alone if may_overlap(jobs[j].client, jobs[j].task)]
        # run_concurrently keys its clients by index: one trial's clients at a time
        if len(side) > 1 and len({id(jobs[j].client) for j in side}) == len(side) \
                and len({jobs[j].client.index for j in side}) == len(side):
            by_index = {jobs[j].client.index: jobs[j].client for j in side}
            inputs = {jobs[j].client.index: jobs[j].inputs for j in side}
            try:
                done = run_concurrently(by_index, [jobs[j].task for j in side], lambda t: inputs[t.client]())
            except Exception as e:
                if not isolate:
                    raise
                done = {jobs[j].client.index: e for j in side}
            results.update({j: done[jobs[j].client.index] for j in side})
            alone = [j for j in alone if j not in results]
    for j in alone:
        try:
            results[j] = run_task(jobs[j].client, jobs[j].task, jobs[j].inputs())
        except Exception as e:
            if not isolate:
                raise
            results[j] = e
    return [results[j] for j in range(len(jobs))]


def _loss_rows(task: str, out: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Each client's mean loss over its real samples: out (K, B, C), y (K, B[, D]), weight (K, B) holding
    1 / b_k on its b_k real samples and 0 on the padding -> (K,)."""
    k, b = out.shape[:2]
    if task == "classification":
        per = F.cross_entropy(out.reshape(k * b, -1), y.reshape(k * b), reduction="none").view(k, b)  # (K, B)
    else:
        per = F.mse_loss(out, y, reduction="none").flatten(2).mean(2)  # (K, B)
    return (per * weight).sum(1)


def stacked_forward(model: nn.Module, device: torch.device | None = None
                    ) -> Callable[[dict, torch.Tensor], torch.Tensor]:
    """(params {name: (K, ...)}, x (K, B, ...)) -> (K, B, outputs): the model's own `forward_stacked` (given the
    device, which picks its layout: fda_ray.train.models.conv_layout), or vmap over functional_call (the model's
    code, one client per vmapped row)."""
    own = getattr(type(model), "forward_stacked", None)
    if own is not None:
        if device is None:
            return own
        from fda_ray.train.models import conv_layout

        layout = conv_layout(device)
        return lambda p, x: own(p, x, layout=layout)
    one = lambda p, x: functional_call(model, p, (x,))  # noqa: E731
    return vmap(one)


class _Pool:
    """The data a cohort reads, resident once: its rows' views concatenated, x (N, ...) and y (N, ...), each row's
    view a slice of them (so the clients hold no second copy). Kept while a client refers to it."""
    __slots__ = ("x", "y", "__weakref__")

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y


# Pools by their rows' views (address and length): a group's cohorts read the same pools round after round.
_POOLS: "weakref.WeakValueDictionary[tuple, _Pool]" = weakref.WeakValueDictionary()


def _pool_key(views: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple:
    return tuple((x.data_ptr(), tuple(x.shape), y.data_ptr(), tuple(y.shape)) for x, y in views)


def pooled(clients: Sequence[Client], tasks: Sequence[ClientTask]) -> tuple[_Pool, list[int]] | None:
    """The cohort's data pool and each row's offset in it; None where a row's view is not a plain tensor (image
    files decoded per batch: those rows are read by the loop). The first call concatenates the views and makes
    each client's view a slice of the pool; later calls with the same rows find it again."""
    views = [c.view(t.data) for c, t in zip(clients, tasks)]
    if any(getattr(x, "read", None) is not None or not isinstance(x, torch.Tensor) for x, _ in views):
        return None
    pool = _POOLS.get(_pool_key(views))
    if pool is None:
        pool = _Pool(torch.cat([x for x, _ in views]), torch.cat([y for _, y in views]))
        off = 0
        for c, t, (x, _) in zip(clients, tasks, views):
            n = int(x.shape[0])
            c.views[t.data] = (pool.x[off:off + n], pool.y[off:off + n])
            c.__dict__.setdefault("_pools", {})[t.data] = pool  # keeps the pool alive while the client is
            off += n
        _POOLS[_pool_key([c.view(t.data) for c, t in zip(clients, tasks)])] = pool
    offsets, off = [], 0
    for x, _ in views:
        offsets.append(off)
        off += int(x.shape[0])
    return pool, offsets


class _Feed:
    """A cohort's batches, step by step: x (K, B, ...) and y (K, B[, D]), each row its client's next batch, zeros
    past a row's real samples.

    Pooled (plain tensor views): every row's epoch order (Client.epoch_order: the per-client shuffle) becomes one
    (S, K, B) index into the pool at the start, so a step gathers all rows at once; a row whose client adds noise
    draws it from its own generator, in the per-client order. Otherwise each row reads its client's batches
    (Client.batches), one after the other."""

    def __init__(self, clients: Sequence[Client], tasks: Sequence[ClientTask], batch: int, steps: Sequence[int],
                 device: torch.device) -> None:
        self.k, self.batch, self.device = len(clients), batch, device
        c0, t0 = clients[0], tasks[0]
        x0, y0 = c0.view(t0.data)
        self.pool = pooled(clients, tasks)
        if self.pool is None:
            self.iters = [c.batches(batch, t.round, t.purpose, t.data) for c, t in zip(clients, tasks)]
            self.xb = torch.zeros(self.k, batch, *x0.shape[1:], device=device)  # (K, B, ...) reused every step
            self.yb = torch.zeros(self.k, batch, *y0.shape[1:], dtype=y0.dtype, device=device)  # (K, B[, D])
            self.steps = list(steps)
            return
        pool, offsets = self.pool
        n_steps = max(steps) if steps else 0
        # (S, K, B) into the pool; padding (past a row's real samples, and after its epoch) reads the row's first
        # sample: any real sample will do, its loss weight is 0
        index = torch.tensor(offsets, dtype=torch.long).view(1, self.k, 1).repeat(n_steps, 1, batch)
        self.sizes: list[list[int]] = []  # per row, its batches' sizes (the noise draws' shapes)
        for i, (c, t, off) in enumerate(zip(clients, tasks, offsets)):
            order, sizes = c.epoch_order(batch, t.round, t.purpose, t.data)  # (n,), [b per step]
            self.sizes.append(sizes)
            full = sum(1 for b in sizes if b == batch)  # full batches first, then at most one partial
            if full:
                index[:full, i].copy_(order[:full * batch].view(full, batch) + off)
            if len(sizes) > full:
                b = sizes[full]
                index[full, i, :b] = order[full * batch:full * batch + b] + off
        self.index = index.to(device)
        # the clients that add noise: (row, its std, its generator, seeded as Client.reader seeds it)
        self.noisy = [(i, float(c.noise), c.noise_generator(t.round, t.purpose))
                      for i, (c, t) in enumerate(zip(clients, tasks)) if float(c.noise) != 0.0]

    def weights(self, steps: Sequence[int], n_steps: int) -> torch.Tensor:
        """(S, K, B): 1 / b on a row's b real samples of a step, 0 on its padding and after its epoch."""
        w = torch.zeros(n_steps, self.k, self.batch)
        for i, sizes in enumerate(self.sizes):
            full = sum(1 for b in sizes if b == self.batch)
            if full:
                w[:full, i] = 1.0 / self.batch
            if len(sizes) > full:
                w[full, i, :sizes[full]] = 1.0 / sizes[full]
        return w.to(self.device)

    def step(self, s: int, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Step s's batches. The loop path also fills w[s] (the sizes are known only once read)."""
        if self.pool is None:
            return self._read(s, w)
        pool, _ = self.pool
        idx = self.index[s].reshape(-1)  # (K * B,)
        xb = pool.x.index_select(0, idx).view(self.k, self.batch, *pool.x.shape[1:])  # (K, B, ...)
        yb = pool.y.index_select(0, idx).view(self.k, self.batch, *pool.y.shape[1:])  # (K, B[, D])
        for i, std, gen in self.noisy:
            if s < len(self.sizes[i]):
                b = self.sizes[i][s]
                # x + std * N(0, 1) of the batch's shape, as fda_ray.data.base.add_noise computes it
                noise = torch.randn((b, *pool.x.shape[1:]), generator=gen, device=pool.x.device, dtype=pool.x.dtype)
                xb[i, :b].add_(noise.mul_(std))
        return xb, yb

    def _read(self, s: int, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for i in range(self.k):
            if s >= self.steps[i]:
                if s == self.steps[i]:  # it just finished: its rows are padding from now on
                    self.xb[i].zero_()
                continue
            xi, yi = next(self.iters[i])
            b = int(xi.shape[0])
            self.xb[i, :b].copy_(xi)
            self.yb[i, :b].copy_(yi)
            if b < self.batch:
                self.xb[i, b:].zero_()
                self.yb[i, b:].zero_()
            w[s, i, :b] = 1.0 / b
            w[s, i, b:] = 0.0
        return self.xb, self.yb


def train_cohort(members: Sequence[tuple[Client, ClientTask, torch.Tensor]]) -> list[ClientResult]:
    """The "epoch" recipe for K clients at once: members are (client, task, start weights (M,)).

    Equal to running fda_ray.train.client.epoch_recipe on each within float tolerance (see the module docstring).
    Inside the steps nothing waits on the device: the batches are gathered by index, the step masks and loss
    weights are made before the first step, and the losses are read once, after the last."""
    clients = [c for c, _, _ in members]
    tasks = [t for _, t, _ in members]
    c0 = clients[0]
    layout, device, k = c0.layout, c0.device, len(members)
    batch = int(tasks[0].hparams["batch"])
    start = torch.stack([s.to(device) for _, _, s in members])  # (K, M)
    # The cohort's weights: one leaf (K, M); each layer is a view of it, so the gradients land in one (K, M).
    flat = start.clone().requires_grad_(True)
    bounds = [(name, layout.bounds[l], layout.bounds[l + 1], shape)
              for l, (name, shape) in enumerate(zip(layout.names, layout.shapes))]
    forward = stacked_forward(c0.model, device)
    c0.model.train()
    # Each row's learning rate rounded to the weights' dtype (float32), as the cohort has always stepped with it
    lrs = [float(v) for v in torch.tensor([float(t.hparams["lr"]) for t in tasks], dtype=flat.dtype).tolist()]
    exp_avg = torch.zeros_like(flat)  # (K, M)
    exp_avg_sq = torch.zeros_like(flat)  # (K, M)

    steps = [c.steps_per_epoch(batch, t.data) for c, t in zip(clients, tasks)]  # per row
    n_steps = max(steps) if k else 0
    # (S, K) each row's Adam step size at each step, -lr / (1 - beta1^t), made on the host in float64 and rounded once
    # to float32: what torch's addcdiv_ does with a scalar value, so a row steps alike whatever rows it shares a
    # cohort with (its own trial's or a fused group's) and nothing is read from the device
    step_size = torch.tensor([[-lr / (1 - BETA1 ** (s + 1)) for lr in lrs] for s in range(n_steps)],
                             dtype=flat.dtype).view(n_steps, k).to(device)
    feed = _Feed(clients, tasks, batch, steps, device)
    # (S, K) which rows are still in their epoch at each step, made once (no per-step copies to the device)
    active_cpu = torch.tensor([[s < n for n in steps] for s in range(n_steps)], dtype=torch.bool).view(n_steps, k)
    active = active_cpu.to(device)  # (S, K)
    all_active = active_cpu.all(1).tolist()  # per step: no row to hold back
    weight = feed.weights(steps, n_steps) if feed.pool is not None else torch.zeros(n_steps, k, batch, device=device)
    record = [bool(t.hparams.get("record_steps", False)) for t in tasks]
    recorded = [i for i in range(k) if record[i]]
    rec_idx = torch.tensor(recorded, dtype=torch.long, device=device)
    deltas: list[torch.Tensor] = []  # per step, the recording rows' (R, M)
    loss_steps: list[torch.Tensor] = []  # per step, (K,) the rows' losses (0 once a row's epoch is over)
    for s in range(n_steps):
        _stop_point()  # (a host-side flag: no wait on the device)
        xb, yb = feed.step(s, weight)
        # Each layer a (K, ...) view of the rows, made afresh after every in-place update.
        params = {name: flat[:, lo:hi].view(k, *shape) for name, lo, hi, shape in bounds}
        out = forward(params, xb)  # (K, B, outputs)
        loss_k = _loss_rows(c0.task, out, yb, weight[s])  # (K,)
        # Gradients with respect to the layer views (not the leaf: that would zero-fill a (K, M) tensor per
        # layer), laid out as the rows: row k is client k's gradient.
        grads = torch.autograd.grad(loss_k.sum(), list(params.values()))
        grad = torch.cat([g.reshape(k, -1) for g in grads], 1)  # (K, M)
        loss_steps.append(loss_k.detach())
        with torch.no_grad():
            prev = flat.detach().index_select(0, rec_idx) if recorded else None  # (R, M)
            _adam_step(flat, grad, exp_avg, exp_avg_sq, s + 1, step_size[s], None if all_active[s] else active[s])
            if recorded:
                deltas.append(flat.detach().index_select(0, rec_idx) - prev)  # (R, M)
    new = flat.detach()  # (K, M)
    # each row's summed loss over its own steps, in float64 (as the loop's Python float sum)
    loss_sum = ((torch.stack(loss_steps).double() * active.double()).sum(0).cpu().tolist() if n_steps
                else [0.0] * k)
    step_rows = torch.stack(deltas).cpu() if deltas else None  # (S, R, M)
    results = []
    for i, (c, t) in enumerate(zip(clients, tasks)):
        h = t.hparams
        layout.load_into(c.model, new[i])  # the client's model ends where the loop would leave it
        tensors = {"weights": new[i].cpu()} if h.get("send", "delta") == "weights" else {"delta": (new[i] - start[i]).cpu()}
        n = int(steps[i])
        if record[i] and step_rows is not None and n:
            tensors["step_deltas"] = step_rows[:n, recorded.index(i)].clone()  # (B, M)
        c.state.pop("optimizer", None)
        results.append(c.finish(t, tensors, n, float(loss_sum[i]) / max(n, 1)))
    return results


def _adam_step(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int, step_size: torch.Tensor,
               active: torch.Tensor | None) -> None:
    """One Adam step on the rows of p (K, M), in place; torch.optim.Adam's single-tensor arithmetic.
    step_size (K,): each row's -lr / bias_correction1 (float32). The update p + (step_size * m) / denom is
    addcdiv_'s arithmetic, element by element, with a value per row.
    active (K,) bool on p's device, or None (all rows step): a row that finished its epoch keeps its weights and
    moments (selected on the device: no wait for it)."""
    if active is not None:
        keep_m, keep_v, keep_p = m.clone(), v.clone(), p.detach().clone()
    m.lerp_(g, 1 - BETA1)
    v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
    bias_correction2_sqrt = (1 - BETA2 ** t) ** 0.5
    denom = (v.sqrt() / bias_correction2_sqrt).add_(EPS)
    p.add_(m.mul(step_size.unsqueeze(1)).div_(denom))
    if active is not None:
        a = active.unsqueeze(1)  # (K, 1)
        m.copy_(torch.where(a, m, keep_m))
        v.copy_(torch.where(a, v, keep_v))
        p.copy_(torch.where(a, p, keep_p))
