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
import time
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


def run_tasks(clients: Mapping[int, Client], tasks: Sequence[ClientTask],
              inputs: Callable[[ClientTask], Mapping[str, torch.Tensor]], vectorise: bool,
              overlap: bool | None = None) -> list[ClientResult]:
    """Run every task on its client (all hosted in this process); results in task order.

    vectorise: tasks that share a cohort key (and are two or more) train as one cohort; each result's
    seconds are the cohort's wall time divided among its members (their sum is the time spent).
    overlap (default overlap_enabled()): the other tasks of GPU clients that may overlap (may_overlap) train side
    by side, each in its own thread and CUDA stream (run_concurrently), not one after the other."""
    results: dict[int, ClientResult] = {}
    groups: dict[tuple, list[ClientTask]] = {}
    alone: list[ClientTask] = []
    for t in tasks:
        key = cohort_key(clients[t.client], t) if vectorise else None
        (groups.setdefault(key, []) if key is not None else alone).append(t)
    for key, members in list(groups.items()):
        if len(members) == 1:
            alone += members
            del groups[key]
    for members in groups.values():
        t0 = time.perf_counter()
        out = train_cohort([(clients[t.client], t, inputs(t)["global"]) for t in members])
        share = (time.perf_counter() - t0) / len(members)
        for t, res in zip(members, out):
            res.seconds = share
            results[t.client] = res
    if overlap_enabled() if overlap is None else overlap:
        side = [t for t in alone if may_overlap(clients[t.client], t)]
        if len(side) > 1:
            results.update(run_concurrently(clients, side, inputs))
            alone = [t for t in alone if t.client not in results]
    for t in alone:
        results[t.client] = run_task(clients[t.client], t, inputs(t))
    return [results[t.client] for t in tasks]


def _loss_rows(task: str, out: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Each client's mean loss over its real samples: out (K, B, C), y (K, B[, D]), weight (K, B) holding
    1 / b_k on its b_k real samples and 0 on the padding -> (K,)."""
    k, b = out.shape[:2]
    if task == "classification":
        per = F.cross_entropy(out.reshape(k * b, -1), y.reshape(k * b), reduction="none").view(k, b)  # (K, B)
    else:
        per = F.mse_loss(out, y, reduction="none").flatten(2).mean(2)  # (K, B)
    return (per * weight).sum(1)


def stacked_forward(model: nn.Module) -> Callable[[dict, torch.Tensor], torch.Tensor]:
    """(params {name: (K, ...)}, x (K, B, ...)) -> (K, B, outputs): the model's own `forward_stacked`, or
    vmap over functional_call (the model's code, one client per vmapped row)."""
    own = getattr(type(model), "forward_stacked", None)
    if own is not None:
        return own
    one = lambda p, x: functional_call(model, p, (x,))  # noqa: E731
    return vmap(one)


def train_cohort(members: Sequence[tuple[Client, ClientTask, torch.Tensor]]) -> list[ClientResult]:
    """The "epoch" recipe for K clients at once: members are (client, task, start weights (M,)).

    Equal to running fda_ray.train.client.epoch_recipe on each within float tolerance (see the module docstring)."""
    clients = [c for c, _, _ in members]
    tasks = [t for _, t, _ in members]
    c0 = clients[0]
    layout, device, k = c0.layout, c0.device, len(members)
    batch = int(tasks[0].hparams["batch"])
    start = torch.stack([s.to(device) for _, _, s in members])  # (K, M)
    # The cohort's weights: one leaf (K, M); each layer is a view of it, so the gradients land in one (K, M).
    flat = start.clone().requires_grad_(True)
    bounds = [(name, int(layout.offsets[l]), int(layout.offsets[l + 1]), shape)
              for l, (name, shape) in enumerate(zip(layout.names, layout.shapes))]
    forward = stacked_forward(c0.model)
    c0.model.train()
    lr = torch.tensor([float(t.hparams["lr"]) for t in tasks], device=device, dtype=flat.dtype)  # (K,)
    same_lr = bool((lr == lr[0]).all())
    exp_avg = torch.zeros_like(flat)  # (K, M)
    exp_avg_sq = torch.zeros_like(flat)  # (K, M)

    steps = torch.tensor([c.steps_per_epoch(batch, t.data) for c, t in zip(clients, tasks)])  # (K,)
    iters = [c.batches(batch, t.round, t.purpose, t.data) for c, t in zip(clients, tasks)]
    record = [bool(t.hparams.get("record_steps", False)) for t in tasks]
    rows: list[list[torch.Tensor]] = [[] for _ in range(k)]
    loss_sum = torch.zeros(k, dtype=torch.float64, device=device)  # (K,)
    x_shape = c0.view(tasks[0].data)[0].shape[1:]
    xb = torch.zeros(k, batch, *x_shape, device=device)  # (K, B, ...) reused every step
    y0 = c0.view(tasks[0].data)[1]
    yb = torch.zeros(k, batch, *y0.shape[1:], dtype=y0.dtype, device=device)  # (K, B[, D])
    weight = torch.zeros(k, batch, device=device)  # (K, B): 1 / b_k on real samples, 0 on padding
    n_steps = int(steps.max()) if k else 0
    for s in range(n_steps):
        active = steps > s  # (K,) the clients still in their epoch
        ragged = False
        for i in range(k):
            if not active[i]:
                if s == int(steps[i]):  # it just finished: its rows are padding from now on
                    weight[i].zero_()
                    xb[i].zero_()
                ragged = True
                continue
            xi, yi = next(iters[i])
            b = int(xi.shape[0])
            xb[i, :b].copy_(xi)
            yb[i, :b].copy_(yi)
            if b < batch:
                xb[i, b:].zero_()
                yb[i, b:].zero_()
                ragged = True
            weight[i, :b] = 1.0 / b
            weight[i, b:] = 0.0
        # Each layer a (K, ...) view of the rows, made afresh after every in-place update.
        params = {name: flat[:, lo:hi].view(k, *shape) for name, lo, hi, shape in bounds}
        out = forward(params, xb)  # (K, B, outputs)
        loss_k = _loss_rows(c0.task, out, yb, weight)  # (K,)
        # Gradients with respect to the layer views (not the leaf: that would zero-fill a (K, M) tensor per
        # layer), laid out as the rows: row k is client k's gradient.
        grads = torch.autograd.grad(loss_k.sum(), list(params.values()))
        grad = torch.cat([g.reshape(k, -1) for g in grads], 1)  # (K, M)
        loss_sum += loss_k.detach().double() * active.to(device)
        with torch.no_grad():
            prev = flat.detach().clone() if any(record) else None
            _adam_step(flat, grad, exp_avg, exp_avg_sq, s + 1, lr, same_lr,
                       active.to(device) if ragged and not bool(active.all()) else None)
            for i in range(k):
                if record[i] and active[i]:
                    rows[i].append(flat[i].detach() - prev[i])  # (M,)
    new = flat.detach()  # (K, M)
    results = []
    for i, (c, t) in enumerate(zip(clients, tasks)):
        h = t.hparams
        layout.load_into(c.model, new[i])  # the client's model ends where the loop would leave it
        tensors = {"weights": new[i].cpu()} if h.get("send", "delta") == "weights" else {"delta": (new[i] - start[i]).cpu()}
        if record[i] and rows[i]:
            tensors["step_deltas"] = torch.stack(rows[i]).cpu()  # (B, M)
        c.state.pop("optimizer", None)
        n = int(steps[i])
        results.append(c.finish(t, tensors, n, float(loss_sum[i]) / max(n, 1)))
    return results


def _adam_step(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int, lr: torch.Tensor,
               same_lr: bool, active: torch.Tensor | None) -> None:
    """One Adam step on the rows of p (K, M), in place; torch.optim.Adam's single-tensor arithmetic.
    active (K,) bool or None (all rows step): a row that finished its epoch keeps its weights and moments."""
    if active is not None:
        keep_m, keep_v, keep_p = m.clone(), v.clone(), p.detach().clone()
    m.lerp_(g, 1 - BETA1)
    v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
    bias_correction1 = 1 - BETA1 ** t
    bias_correction2_sqrt = (1 - BETA2 ** t) ** 0.5
    denom = (v.sqrt() / bias_correction2_sqrt).add_(EPS)
    if same_lr:
        p.addcdiv_(m, denom, value=-float(lr[0]) / bias_correction1)
    else:
        p.sub_(m / denom * (lr / bias_correction1).unsqueeze(1))
    if active is not None:
        rows = ~active
        m[rows] = keep_m[rows]
        v[rows] = keep_v[rows]
        p[rows] = keep_p[rows]
