"""The round loop of Algorithm 1 (seed 004, App. C.1), written once and run by an executor.

    warm-up rounds: FedAvg over the sources
    each round: sources and target train one local epoch from the global weights (in parallel under Ray),
                beta_i = static beta or auto-weighted from the estimators, the method's rule makes the
                update, global += update, the global (= target) model is evaluated on the target test set
    finetune_offline: after the rounds, fine-tuning epochs on the target's labelled data

The executor decides where clients live and train (`SerialExecutor` here: plain objects in this process);
everything else, including the seeds of every draw, is the same for every executor, so a serial and a
parallel run of one config give the same numbers.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import torch

from fda_ray import preflight
from fda_ray.aggregation import layer_cosines, layer_stats
from fda_ray.client import Client, ClientUpdate, evaluate
from fda_ray.config import RunConfig
from fda_ray.data import load as load_dataset
from fda_ray.diagnostics import round_estimates
from fda_ray.estimators import auto_beta, estimate
from fda_ray.history import History
from fda_ray.layout import ParamLayout
from fda_ray.methods import METHODS, Method, combine
from fda_ray.models import build_model
from fda_ray.seeding import derive_seed, generator
from fda_ray.shifts import Setting, build_setting


@dataclass(frozen=True)
class TrainRequest:
    client: int
    lr: float
    batch: int
    record_steps: bool = False


class Executor(Protocol):
    """Where clients live and train. `submit` starts a round's local training (it may return at once);
    `collect` waits for it and returns the updates in request order. The loop submits round r+1 before it
    evaluates round r, so a parallel executor trains while the driver evaluates."""

    def submit(self, global_flat: torch.Tensor, round_idx: int, requests: Sequence[TrainRequest]) -> Any: ...
    def collect(self, pending: Any) -> list[ClientUpdate]: ...
    def finetune(self, client: int, start_flat: torch.Tensor, epochs: int, *, lr: float, batch: int,
                 first_round: int, fresh_optimizer_each_epoch: bool) -> Iterable[tuple[int, torch.Tensor, float]]: ...
    def client_states(self) -> list[dict]: ...
    def restore_states(self, states: Sequence[dict]) -> None: ...
    def shutdown(self) -> None: ...


class ClientFailure(RuntimeError):
    """A client failed a round more often than the executor retries it."""

    def __init__(self, client: int, round_idx: int, attempts: int, cause: str) -> None:
        super().__init__(f"client {client} failed round {round_idx} {attempts} times; last error: {cause}")
        self.client, self.round_idx, self.attempts = client, round_idx, attempts


class RunFailed(RuntimeError):
    """A run stopped early; `history` holds the rounds that finished (and the weights after the last one)."""

    def __init__(self, message: str, history: History) -> None:
        super().__init__(message)
        self.history = history

    def __reduce__(self) -> tuple:  # picklable (a process pool or Ray sends it back to the sweep)
        return type(self), (str(self), self.history)


class RunInterrupted(RunFailed):
    """The run was interrupted (Ctrl-C); `history` holds the rounds that finished."""


class SerialExecutor:
    """Clients as plain objects, trained one after the other in this process: the reference executor."""

    def __init__(self, clients: Sequence[Client]) -> None:
        self.clients = list(clients)

    def submit(self, global_flat: torch.Tensor, round_idx: int, requests: Sequence[TrainRequest]) -> Any:
        return global_flat, round_idx, list(requests)  # trains on collect: same numbers, no overlap

    def collect(self, pending: Any) -> list[ClientUpdate]:
        global_flat, round_idx, requests = pending
        return [self.clients[r.client].train(global_flat, round_idx, lr=r.lr, batch=r.batch, record_steps=r.record_steps)
                for r in requests]

    def finetune(self, client: int, start_flat: torch.Tensor, epochs: int, *, lr: float, batch: int,
                 first_round: int, fresh_optimizer_each_epoch: bool) -> Iterator[tuple[int, torch.Tensor, float]]:
        return self.clients[client].finetune(start_flat, epochs, lr=lr, batch=batch, first_round=first_round,
                                             fresh_optimizer_each_epoch=fresh_optimizer_each_epoch)

    def client_states(self) -> list[dict]:
        return [c.snapshot() for c in self.clients]

    def restore_states(self, states: Sequence[dict]) -> None:
        for c, st in zip(self.clients, states):
            c.restore(st)

    def shutdown(self) -> None:
        pass


@dataclass
class Experiment:
    """Everything a run needs that is built from the config: data setting, model, layout, clients."""

    cfg: RunConfig
    method: Method
    setting: Setting
    model: torch.nn.Module
    layout: ParamLayout
    clients: list[Client]  # sources 0..N-1, then the target at index N

    @property
    def target_index(self) -> int:
        return self.cfg.num_sources


def check_model_fits(model: torch.nn.Module, name: str, setting: Setting, dataset: str) -> None:
    """One forward pass on two training samples: a model that cannot take the data's inputs, or gives the
    wrong number of outputs, is an error before any round (not a traceback in the middle of one)."""
    x = setting.target_train[0][:2]
    try:
        with torch.no_grad():
            out = model(x.to(next(model.parameters()).device))
    except (RuntimeError, ValueError, IndexError) as e:
        raise ValueError(f"model={name!r} is invalid for dataset {dataset!r}: it cannot take its inputs of shape "
                         f"{tuple(setting.input_shape)} ({str(e).splitlines()[0][:160]})") from None
    if tuple(out.shape) != (len(x), setting.num_outputs):
        raise ValueError(f"model={name!r} is invalid for dataset {dataset!r}: it gives outputs of shape "
                         f"{tuple(out.shape)[1:]}, the data needs ({setting.num_outputs},)")


def build_experiment(cfg: RunConfig) -> Experiment:
    cfg = cfg.resolved()
    preflight.run(cfg)  # device, weights file, cluster address: before the data is loaded
    # The driver aggregates and evaluates with the clients' thread count (the serial executor trains here too).
    torch.set_num_threads(cfg.threads)
    method = METHODS.get(cfg.method)
    split = load_dataset(cfg.dataset, cfg.data_dir, cfg.download)
    setting = build_setting(split, cfg)
    torch.manual_seed(derive_seed(cfg.seed, purpose="init"))  # the initial global model
    options = {"weights_path": cfg.model_weights} if cfg.model_weights else {}
    try:
        model = build_model(cfg.model, setting.input_shape, setting.num_outputs, **options).to(cfg.device)
    except (RuntimeError, ValueError, TypeError) as e:  # e.g. an image model on (n, d) vectors, a wrong state dict
        raise ValueError(f"model={cfg.model!r} is invalid for dataset {cfg.dataset!r} (inputs "
                         f"{tuple(setting.input_shape)}): {str(e).splitlines()[0][:200]}") from None
    check_model_fits(model, cfg.model, setting, cfg.dataset)
    tx, ty = setting.target_pool if method.oracle else setting.target_train
    for note in preflight.run_notes(cfg, len(tx)):
        warnings.warn(note, preflight.RunWarning, stacklevel=2)
    layout = ParamLayout.from_model(model)
    clients = [Client(i, x, y, copy.deepcopy(model), layout, seed=cfg.seed, task=setting.task, device=cfg.device)
               for i, (x, y) in enumerate(setting.sources)]
    clients.append(Client(cfg.num_sources, tx, ty, copy.deepcopy(model), layout, seed=cfg.seed,
                          noise=setting.noise, task=setting.task, device=cfg.device, drop_last=False))
    return Experiment(cfg, method, setting, model, layout, clients)


def source_weights(clients: Sequence[Client], n: int) -> torch.Tensor:
    """alpha_i = n_i / sum n over the sources (FedAvg weights), float64 (aggregation's coefficient math)."""
    counts = torch.tensor([c.num_samples for c in clients[:n]], dtype=torch.float64)
    return counts / counts.sum()


def source_steps(exp: Experiment) -> torch.Tensor:
    """(N,) full source batches per local epoch (loaders drop the last partial batch)."""
    return torch.tensor([c.steps_per_epoch(exp.cfg.batch_source) for c in exp.clients[: exp.cfg.num_sources]],
                        dtype=torch.float32)


def alignment(exp: Experiment) -> torch.Tensor:
    """(N,) magnitude alignment of each source delta to the target's (REFERENCE.md):
    (lr_T / lr_S) * (target steps per round, n_target / batch_T as a float) / (source full batches per round)."""
    cfg = exp.cfg
    n_t = exp.clients[exp.target_index].num_samples
    target_steps = n_t / cfg.batch_target
    return (cfg.lr_target / cfg.lr_source) * target_steps / source_steps(exp)


def _evaluate_row(exp: Experiment, flat: torch.Tensor, round_idx: int, eval_model: torch.nn.Module) -> dict:
    s = exp.setting
    x, y = s.target_test
    gen = generator(exp.cfg.seed, round_idx, exp.target_index, "eval", device=exp.cfg.device)
    acc, loss = evaluate(eval_model, exp.layout, flat, x, y, noise=s.noise, gen=gen, task=s.task)
    row = {"accuracy": acc, "loss": loss}
    if exp.cfg.eval_noise:
        extra = []
        for std in exp.cfg.eval_noise:
            # The same stream as the main evaluation: a run with noise=std would draw exactly this noise.
            g = generator(exp.cfg.seed, round_idx, exp.target_index, "eval", device=exp.cfg.device)
            extra.append(evaluate(eval_model, exp.layout, flat, x, y, noise=float(std), gen=g, task=s.task)[0])
        row["eval_noise_accuracy"] = extra
    return row


def _requests(exp: Experiment, r: int) -> list[TrainRequest]:
    """Who trains in round r, with which learning rate and batch."""
    cfg, method = exp.cfg, exp.method
    n, t_idx = cfg.num_sources, exp.target_index
    warm = r < cfg.warmup_rounds
    scale = cfg.auto_lr_factor if (method.auto_rule and not warm) else 1.0
    lr_s, lr_t = cfg.lr_source * scale, cfg.lr_target * scale
    reqs = []
    # log_estimates: the side a method does not use trains too, for the estimates only
    if warm or method.train_sources or cfg.log_estimates:
        reqs += [TrainRequest(i, lr_s, cfg.batch_source) for i in range(n)]
    if not warm and (method.train_target or cfg.log_estimates):
        reqs.append(TrainRequest(t_idx, lr_t, cfg.batch_target,
                                 record_steps=method.auto_rule is not None or bool(cfg.log_estimates)))
    return reqs


def run_rounds(exp: Experiment, executor: Executor, progress: Callable[[dict], None] | None = None,
               start_flat: torch.Tensor | None = None, skip_rounds: bool = False,
               resume: dict | None = None, checkpoint: Callable[[dict], None] | None = None) -> History:
    """The warm-up and main rounds (and fine-tuning for finetune_offline) of one run.

    checkpoint(state) is called after every warm-up and main round with what `resume` needs to go on from
    there: {"next_round", "flat", "rows", "client_states"} (client states as returned with the updates, so
    taking it never waits for the round already submitted). Every draw is seeded by (seed, round, client,
    purpose), so a resumed run gives the numbers of an uninterrupted one. Fine-tuning (finetune_offline) is
    redone whole on resume. If a client fails for good (ClientFailure), raises RunFailed carrying the
    finished rounds' History; Ctrl-C (KeyboardInterrupt) raises RunInterrupted, carrying them too.
    """
    hist = History(config=exp.cfg.to_dict())
    t0 = time.perf_counter()
    try:
        return _rounds(exp, executor, hist, progress, start_flat, skip_rounds, resume, checkpoint)
    except KeyboardInterrupt:
        hist.seconds = time.perf_counter() - t0
        raise RunInterrupted(f"stopped by Ctrl-C (SIGINT) after {len(hist.rows)} finished rounds", hist) from None


def _rounds(exp: Experiment, executor: Executor, hist: History, progress: Callable[[dict], None] | None,
            start_flat: torch.Tensor | None, skip_rounds: bool, resume: dict | None,
            checkpoint: Callable[[dict], None] | None) -> History:
    """run_rounds' loop; it fills `hist` as rounds finish."""
    cfg, method, layout = exp.cfg, exp.method, exp.layout
    n, t_idx = cfg.num_sources, exp.target_index
    weights = source_weights(exp.clients, n)  # (N,)
    align = alignment(exp)  # (N,)
    lr_ratio = cfg.lr_target / cfg.lr_source
    src_steps = source_steps(exp)  # (N,)
    eval_model = copy.deepcopy(exp.model)
    flat = layout.flatten_model(exp.model) if start_flat is None else start_flat.clone()
    hist.final_weights = flat
    t0 = time.perf_counter()
    total = cfg.warmup_rounds + cfg.rounds
    trained = 0 if skip_rounds else total  # rounds run here (fine-tuning epochs are numbered after `total`)
    start = 0
    states = executor.client_states() if checkpoint else []
    if resume is not None:
        start = int(resume["next_round"])
        flat = resume["flat"].clone()
        hist.rows = [dict(row) for row in resume["rows"] if row["round"] < start]
        hist.final_weights = flat
        states = [dict(st) for st in resume["client_states"]]
        executor.restore_states(states)
    pending = executor.submit(flat, start, _requests(exp, start)) if start < trained else None
    tr = time.perf_counter()

    def finish(row: dict, weights: torch.Tensor) -> float:
        """Time the row since the previous one, record it with the weights it evaluated; returns now."""
        now = time.perf_counter()
        row["seconds"] = now - tr
        hist.rows.append(row)
        hist.final_weights = weights
        if progress:
            progress(row)
        return now

    for r in range(start, trained):
        warm = r < cfg.warmup_rounds
        try:
            updates = {u.client: u for u in executor.collect(pending)}
        except ClientFailure as e:
            hist.seconds = time.perf_counter() - t0
            raise RunFailed(f"run stopped in round {r}: {e}; {len(hist.rows)} finished rounds kept", hist) from e
        t_collected = time.perf_counter()
        src = torch.stack([updates[i].delta for i in range(n)]) if 0 in updates else None  # (N, M)
        tgt = updates[t_idx].delta if t_idx in updates else None  # (M,)
        row: dict = {"round": r, "phase": "warmup" if warm else "main"}
        beta: float | torch.Tensor = cfg.beta
        try:  # the rules and estimators refuse non-finite deltas or estimates (a diverged client)
            if warm:
                update = combine(METHODS.get("source_only"), None, src, layout.offsets, weights=weights, beta=1.0, align=None,
                                 impl=cfg.aggregation_impl)
            else:
                steps = updates[t_idx].step_deltas if t_idx in updates else None  # (B, M)
                if method.auto_rule is not None or (cfg.log_estimates and src is not None and steps is not None
                                                    and steps.shape[0] >= 2):
                    # Per-step deltas of both sides, both scaled by lr_T / lr_S as in the authors' code
                    # (REFERENCE.md): the factor cancels in beta; the logged estimates carry it.
                    aligned = src / src_steps.unsqueeze(1) * lr_ratio  # (N, M)
                    stats = estimate(steps * lr_ratio, aligned, impl=cfg.aggregation_impl)
                    row.update(round_estimates(stats, weights, layout.size, steps.shape[0], cfg.beta))
                    if method.auto_rule is not None:
                        rule = cfg.auto_beta_rule if method.auto_rule == "fedgp" else "fedda"
                        beta = auto_beta(stats, rule)  # (N,) float64
                # One pass for the layer statistics: FedGP's projections and the logged cosines share it.
                lstats = layer_stats(tgt, src, layout.offsets, impl=cfg.aggregation_impl) \
                    if src is not None and tgt is not None else None
                update = combine(method, tgt, src, layout.offsets, weights=weights, beta=beta, align=align,
                                 filter=cfg.filter, projection=cfg.projection, impl=cfg.aggregation_impl, stats=lstats)
                if lstats is not None:
                    cos = layer_cosines(*lstats)  # (N, L)
                    row["cosine_mean_i"] = cos.mean(1).tolist()
                    row["filtered_share_i"] = (cos <= 0).double().mean(1).tolist()
                if method.uses_beta:
                    row["beta_i"] = (beta.tolist() if isinstance(beta, torch.Tensor) else [float(beta)] * n)
        except ValueError as e:
            hist.seconds = time.perf_counter() - t0
            raise RunFailed(f"run stopped in round {r}: {e}; {len(hist.rows)} finished rounds kept", hist) from e
        flat = flat + update
        if r + 1 < trained:  # the clients start the next round while this one is evaluated
            pending = executor.submit(flat, r + 1, _requests(exp, r + 1))
        row.update(_evaluate_row(exp, flat, r, eval_model))
        if not math.isfinite(row["loss"]):
            hist.seconds = time.perf_counter() - t0
            raise RunFailed(f"run stopped in round {r}: the global model's test loss is {row['loss']} (non-finite "
                            f"weights or outputs); try a lower learning rate; {len(hist.rows)} finished rounds kept", hist)
        row["train_loss_target"] = updates[t_idx].loss if t_idx in updates else None
        row["client_seconds_max"] = max(u.seconds for u in updates.values())  # the slowest client's training
        row["client_seconds_sum"] = sum(u.seconds for u in updates.values())
        row["client_seconds_i"] = [updates[i].seconds if i in updates else 0.0 for i in range(len(exp.clients))]
        # The driver's own work: aggregation, submission and evaluation.
        row["driver_seconds"] = time.perf_counter() - t_collected
        tr = finish(row, flat)
        if checkpoint:
            for i, u in updates.items():
                states[i] = u.state
            checkpoint({"next_round": r + 1, "flat": flat.clone(), "rows": [dict(x) for x in hist.rows],
                        "client_states": [dict(st) for st in states]})
    if method.finetune:
        for e, w, loss in executor.finetune(t_idx, flat, cfg.finetune_epochs, lr=cfg.lr_target,
                                            batch=cfg.batch_target, first_round=total,
                                            fresh_optimizer_each_epoch=cfg.baseline_protocol == "authors"):
            flat = w
            row = {"round": total + e, "phase": "finetune", "train_loss_target": loss}
            row.update(_evaluate_row(exp, flat, total + e, eval_model))
            tr = finish(row, flat)
    hist.seconds = time.perf_counter() - t0
    return hist


def finetune_from(cfg: RunConfig, start_flat: torch.Tensor, progress: Callable[[dict], None] | None = None) -> History:
    """Only the fine-tuning phase of finetune_offline, from given FedAvg weights (M,).

    The FedAvg phase of finetune_offline never reads the target, so its weights equal those of a
    source_only run of the same seed; starting from them here gives the same result as a full run.
    """
    cfg = cfg.resolved()
    if not METHODS.get(cfg.method).finetune:
        raise ValueError(f"method={cfg.method!r} is invalid for finetune_from: only finetune_offline fine-tunes")
    exp = build_experiment(cfg)
    return run_rounds(exp, SerialExecutor(exp.clients), progress, start_flat=start_flat, skip_rounds=True)


def executor_for(exp: Experiment) -> Executor:
    """The executor the experiment's config names, its clients loaded: serial (this process), or Ray client
    actors (Ray must be running; Ray is imported only then). The caller shuts it down."""
    cfg = exp.cfg
    if cfg.executor != "ray":
        return SerialExecutor(exp.clients)
    from fda_ray.ray_executor import RayExecutor

    return RayExecutor(exp.clients, cpus_per_client=cfg.cpus_per_client or 1.0, gpus_per_client=cfg.gpus_per_client,
                       clients_per_actor=cfg.clients_per_actor, retries=cfg.client_retries, threads=cfg.threads)


def run(cfg: RunConfig, progress: Callable[[dict], None] | None = None) -> History:
    """One federated run of `cfg` with the executor it names (`cfg.executor`: "serial" or "ray")."""
    if cfg.executor == "ray":
        from fda_ray.driver import run_ray  # Ray is imported only when it is used

        return run_ray(cfg, progress)
    exp = build_experiment(cfg)
    return run_rounds(exp, SerialExecutor(exp.clients), progress)
