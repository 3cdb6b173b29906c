"""Projection: the wall time of the full paper reproduction (every grid's `paper` profile, and the searches) on G
GPUs, from the committed records' measured per-trial times, and the G beyond which it stops falling.

    python -m benchmarks.projection [--gpus 1,8,32] [--trials-per-gpu K] [--cluster-json PATH]
                                       [--measured-noise-column-s S] [--markdown]

What it reads: docs/results/*/trials/*/{trial.json,rows.json}, every committed trial record (its key, its
resolved config, and per round: seconds, client_seconds_sum, driver_seconds). A trial's time is the sum of its
rounds' seconds (a resumed trial's `seconds` covers only its last attempt; setup, i.e. loading the data and
building the clients, is in neither: --cluster-json's per-trial overhead stands for it).

The per-trial time model, one GPU slot (a GPU shared by K trials at once; the records ran K = 8), each trial
taking the first of these that exists:

    gpu        the median of the GPU records of the same work (equal COST_FIELDS: the row at another seed, beta,
               noise ...), this very trial's record (its key with device cuda) among them; gpu~: without it
    cpu/F      the same from the CPU records, divided by F; cpu~/F: without the trial's own record
    gpu-scaled a GPU record of the same model and method on a DomainBed construction of Fashion-MNIST
               (colored-/rotated-fmnist), its per-round client time scaled by the samples trained per round, the
               rest of the round by the test samples, and by the rounds
    cpu-scaled/F  the same from a CPU record, divided by F
    otherwise  not projected, with the reason (no record of the model, or client sizes not known here)

F, the CPU -> GPU factor: for every GPU record with a CPU record of the same row, value and seed at another size
(the domainbed-colored grid's paper profile on one H100 against its quick profile on the 2-core machine), the CPU
record scaled to the GPU record's sizes (as gpu-scaled) over the GPU record's time; F is the median over those
pairs. The CPU records ran one thread a trial on a 2-core machine (the results pages' commands: 2 trials at a time;
the records do not say); the GPU records 8 at a time on one H100 (docs/results/domainbed-colored.md).
With K trials per GPU, a slot's time is the K = 8 time x K / 8 (the GPU was 100 % busy at 8: throughput-bound;
optimistic below 8).

The schedule: G x K slots; greedy list scheduling, longest remaining chain first (longest trial first among
independent ones); a trial that starts from another's weights (a finetune trial; a search's reruns after its
study's search) only once that one has finished. The makespan for G GPUs is the best schedule on at most G
(never more for more GPUs). It stops scaling at the smallest G whose makespan equals that with a slot per trial:
the longest chain of trials (the critical path).
"""
from __future__ import annotations

import argparse
import gzip
import heapq
import math
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from fda_ray.core.user_files import is_number

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
# The GPU records (docs/results/domainbed-colored-paper) ran `--workers 8` on one H100: 8 trials at a time.
MEASURED_TRIALS_PER_GPU = 8
# The RunConfig fields that set how much a trial computes (not what it computes): records equal in these (and in
# the trial's kind and WORK_PARAMS) cost the same. Left out: seed, the grid variables that only change values (beta,
# noise, eta, aux_alpha, learning rates), the validation shares (a search trains on 80-90 % of a grid trial's data).
COST_FIELDS = ("dataset", "model", "model_weights", "method", "rounds", "warmup_rounds", "finetune_epochs",
               "samples_per_client", "num_sources", "clients_per_domain", "test_samples", "target_labelled",
               "target_fraction", "partition", "source_classes", "source_envs", "test_env", "batch_source",
               "batch_target", "vectorise", "threads", "baseline_protocol", "data_augmentation")
WORK_PARAMS = ("local_epochs", "source_epochs", "serial_source_rounds", "layout")  # families' knobs that set work
CONSTRUCTIONS = ("colored-fmnist", "rotated-fmnist")  # DomainBed's recipes on Fashion-MNIST's pool (sizes computable)
# A grid on real MNIST with a Fashion-MNIST twin ("<grid>-fmnist": the same trials on Fashion-MNIST, 60 000 + 10 000
# images of 28 x 28 as MNIST's) is projected from its twin's trials, which are the same work and have the records.
TWIN_SUFFIX = "-fmnist"
TARGET_POOL_METHODS = ("oracle",)  # train on the target's whole (capped) in-split; other non-source methods on its labels


# ---------------------------------------------------------------- records

@dataclass(frozen=True)
class Record:
    """One committed trial record: its time on its device, split into client training and the rest of a round."""

    key: str
    source: str  # its directory under docs/results
    gpu: bool
    config: Mapping[str, Any]  # the resolved RunConfig
    kind: str
    row: str
    value: float | None
    seed: int
    seconds: float  # the sum of its rounds' seconds
    client_seconds: float  # the sum of its rounds' client_seconds_sum (clients train one after the other)
    rounds: int  # rows recorded (warm-up, main and fine-tuning rounds)


# The resolved config's fields the time model reads of every record (TimeModel, construction_work, scaled_seconds)
RECORD_FIELDS = {"dataset": str, "model": str, "method": str, "rounds": int, "warmup_rounds": int}


def _seconds(v: Any) -> bool:
    """A row's timing field as a record writes it: a number, or null (not measured)."""
    return v is None or (is_number(v) and math.isfinite(v))


def timing_damage(data: Mapping[str, Any]) -> str | None:
    """Why a finished record's rows.json (its rows already checked by records.finished) cannot be timed here, or
    None: its resolved config, and the rows' seconds. A record edited by hand or written by another tool otherwise
    ended in a TypeError or a KeyError naming neither the record nor what it lacks."""
    cfg = data.get("config")
    if not isinstance(cfg, dict):
        return f"its 'config' is {'missing' if cfg is None else 'not a mapping'} (the trial's resolved RunConfig)"
    for name, kind in RECORD_FIELDS.items():
        if not isinstance(cfg.get(name), kind) or isinstance(cfg.get(name), bool):
            return f"its config has no {name!r} ({'a text' if kind is str else 'an integer'})"
    params = cfg.get("params")
    if params is not None and not (isinstance(params, dict) and all(isinstance(v, dict) for v in params.values())):
        return "its config's 'params' is not a mapping of method families to their parameters"
    for i, r in enumerate(data["rows"]):
        for name in ("seconds", "client_seconds_sum"):
            if not _seconds(r.get(name)):
                return f"its row {i} has a {name!r} that is not a number of seconds ({r.get(name)!r})"
    return None


def load_records(root: Path = RESULTS) -> list[Record]:
    """Every finished record under root/*/trials/ (a config written before a field existed gets that field's
    value of then: fda_ray.experiments.records.ADDED_LATER), read through fda_ray.experiments.records.finished.
    A record whose config or seconds cannot be read is a DamagedFileError naming its rows.json: left out, it
    would change the projection without a word."""
    from fda_ray.core.user_files import DamagedFileError
    from fda_ray.experiments.records import ADDED_LATER, ROWS_FILE, finished

    out = []
    for trials in sorted(root.glob("*/trials")):
        for rec in finished(trials):
            data, trial = rec.data, rec.trial
            why = timing_damage(data)
            if why is not None:
                raise DamagedFileError(ROWS_FILE, rec.path / ROWS_FILE, why)
            rows = data.get("rows") or []
            secs = sum(float(r.get("seconds") or 0.0) for r in rows)
            if not rows or secs <= 0:
                continue
            cfg = {**ADDED_LATER, **data["config"]}
            out.append(Record(key=rec.path.name, source=trials.parent.name,
                              gpu=str(cfg.get("device", "cpu")).startswith("cuda"), config=cfg, kind=trial.kind,
                              row=trial.row, value=trial.value, seed=int(trial.seed), seconds=secs,
                              client_seconds=sum(float(r.get("client_seconds_sum") or 0.0) for r in rows),
                              rounds=len(rows)))
    return out


def signature(cfg: Mapping[str, Any], kind: str) -> tuple:
    """What sets a trial's amount of work (COST_FIELDS, WORK_PARAMS of any family, the kind)."""
    def norm(v: Any) -> Any:  # hashable, nested too (a record's JSON may hold lists of lists or mappings)
        if isinstance(v, list):
            return tuple(norm(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((str(k), norm(x)) for k, x in v.items()))
        return v

    work = tuple(sorted((fam, k, norm(v)) for fam, ps in (cfg.get("params") or {}).items() for k, v in ps.items()
                        if k in WORK_PARAMS))
    return (kind, *(norm(cfg.get(f)) for f in COST_FIELDS), work)


# ---------------------------------------------------------------- sizes of the DomainBed constructions

def fmnist_pool_size() -> tuple[int, str] | None:
    """The number of Fashion-MNIST images (train + test) and where they were found, from the label files' IDX
    headers; None when no copy is found."""
    from fda_ray.data.base import _candidate_dirs
    from fda_ray.data.standard import FMNIST_FILES, FMNIST_SYSTEM_DIR, _find_idx_dir, _idx_path

    found = _find_idx_dir(_candidate_dirs(None, ["", "fashion-mnist", "FashionMNIST/raw"], [FMNIST_SYSTEM_DIR]))
    if found is None:
        return None
    n = 0
    for name in (FMNIST_FILES[1], FMNIST_FILES[3]):
        path = _idx_path(found, name)
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            n += int.from_bytes(f.read(8)[4:8], "big")
    return n, str(found)


def construction_work(cfg: Mapping[str, Any], pool: int) -> tuple[float, float]:
    """(samples trained per round, test samples) of a colored-/rotated-fmnist trial: DomainBed's environments
    pool[e::E], each split 80/20 (HOLDOUT_FRACTION) into in- and out-split, in-splits capped at samples_per_client,
    the test set the held-out environment's out-split capped at test_samples."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.data.domainbed import COLORED_ENVS, ROTATED_ANGLES
    from fda_ray.runtime.partitions import HOLDOUT_FRACTION

    n_envs = len(COLORED_ENVS) if cfg["dataset"].startswith("colored") else len(ROTATED_ANGLES)
    t = int(cfg.get("test_env") or 0)
    cap = cfg.get("samples_per_client")

    def size(e: int) -> int:
        return len(range(e, pool, n_envs))

    def in_split(e: int) -> int:
        return size(e) - int(size(e) * HOLDOUT_FRACTION)

    def capped(n: int, c: Any) -> int:
        return n if c is None else min(n, int(c))

    srcs = [e for e in range(n_envs) if e != t]
    if cfg.get("source_envs"):
        srcs = [int(e) for e in cfg["source_envs"]]
    if getattr(ALGORITHMS.get(cfg["method"]), "train_sources", True):
        trained = float(sum(capped(in_split(e), cap) for e in srcs))
    elif cfg["method"] in TARGET_POOL_METHODS:
        trained = float(capped(in_split(t), cap))
    else:
        trained = float(cfg.get("target_labelled") or max(1, int(in_split(t) * float(cfg.get("target_fraction") or 0))))
    test = float(capped(int(size(t) * HOLDOUT_FRACTION), cfg.get("test_samples")))
    return trained, test


def scaled_seconds(rec: Record, cfg: Mapping[str, Any], pool: int) -> float:
    """`rec`'s time at `cfg`'s sizes: per round, client training x the ratio of samples trained, the rest (the
    driver: aggregation, evaluation; fine-tuning rounds) x the ratio of test samples; x the ratio of rounds."""
    trained_r, test_r = construction_work(rec.config, pool)
    trained_c, test_c = construction_work(cfg, pool)
    rounds = rec.rounds * (cfg["rounds"] + cfg["warmup_rounds"]) / (rec.config["rounds"] + rec.config["warmup_rounds"])
    client, rest = rec.client_seconds / rec.rounds, (rec.seconds - rec.client_seconds) / rec.rounds
    return rounds * (client * trained_c / trained_r + rest * test_c / test_r)


# ---------------------------------------------------------------- the per-trial time model

class NoEstimate(Exception):
    """A trial no record says anything about: the one-line reason."""


@dataclass(frozen=True)
class GpuFactor:
    value: float  # median CPU / GPU time over the pairs
    low: float
    high: float
    pairs: int
    models: tuple[str, ...]
    sources: tuple[str, ...]  # the record directories the pairs come from


@dataclass(frozen=True)
class Estimate:
    seconds: float  # on one GPU slot at MEASURED_TRIALS_PER_GPU trials per GPU
    basis: str  # gpu, gpu~, cpu/F, cpu~/F, gpu-scaled, cpu-scaled/F
    sources: tuple[str, ...]  # the record directories it rests on
    model: str


def gpu_factor(records: Sequence[Record], pool: int | None) -> GpuFactor | None:
    """F from GPU records with a CPU record of the same trial (row, value, seed, model, method) at other sizes."""
    if pool is None:
        return None
    cpu = defaultdict(list)
    for r in records:
        if not r.gpu and r.config["dataset"] in CONSTRUCTIONS:
            cpu[(r.config["dataset"], r.config["model"], r.config["method"], r.kind, r.row, r.value, r.seed)].append(r)
    ratios, models, sources = [], set(), set()
    for g in records:
        if not g.gpu or g.config["dataset"] not in CONSTRUCTIONS:
            continue
        for c in cpu.get((g.config["dataset"], g.config["model"], g.config["method"], g.kind, g.row, g.value, g.seed),
                         []):
            ratios.append(scaled_seconds(c, g.config, pool) / g.seconds)
            models.add(g.config["model"])
            sources |= {g.source, c.source}
    if not ratios:
        return None
    return GpuFactor(statistics.median(ratios), min(ratios), max(ratios), len(ratios), tuple(sorted(models)),
                     tuple(sorted(sources)))


class TimeModel:
    """A planned trial's time on one GPU slot (module docstring: the tiers)."""

    def __init__(self, records: Sequence[Record], pool: int | None) -> None:
        self.records, self.pool = list(records), pool
        self.by_key = {(r.key, r.gpu): r for r in records}
        self.by_sig: dict[tuple, list[Record]] = defaultdict(list)
        self.by_method: dict[tuple, list[Record]] = defaultdict(list)
        for r in records:
            self.by_sig[(signature(r.config, r.kind), r.gpu)].append(r)
            if r.config["dataset"] in CONSTRUCTIONS:
                self.by_method[(r.config["model"], r.config["method"], r.kind, r.gpu)].append(r)
        self.models = {r.config["model"] for r in records}
        self.gpu_work = {(r.config["dataset"], r.config["model"]) for r in records if r.gpu}
        self.factor = gpu_factor(records, pool)

    def estimate(self, cfg: Mapping[str, Any], kind: str, key: str, gpu_key: str) -> Estimate:
        model = str(cfg["model"])
        sig = signature(cfg, kind)
        f = self.factor
        for gpu, own_key in ((True, gpu_key), (False, key)):
            if not gpu and f is None:
                break
            rs = self.by_sig.get((sig, gpu), [])
            own = (own_key, gpu) in self.by_key
            if own and self.by_key[(own_key, gpu)] not in rs:  # (its own record, whatever its signature says)
                rs = [*rs, self.by_key[(own_key, gpu)]]
            if rs:
                secs = statistics.median(r.seconds for r in rs) / (1.0 if gpu else f.value)
                basis = ("gpu" if gpu else "cpu") + ("" if own else "~") + ("" if gpu else "/F")
                return Estimate(secs, basis, _sources(rs), model)
        if model not in self.models:
            raise NoEstimate(f"no record of model {model} (dataset {cfg['dataset']}) on any device")
        if cfg["dataset"] not in CONSTRUCTIONS:
            raise NoEstimate(f"no record of this work on {cfg['dataset']}, whose client sizes are not known here")
        if self.pool is None:
            raise NoEstimate("Fashion-MNIST not found: the sizes of its DomainBed constructions are unknown")
        for gpu in (True, False):
            rs = self.by_method.get((model, cfg["method"], kind, gpu), [])
            same = [r for r in rs if r.config["dataset"] == cfg["dataset"]] or rs
            if same and (gpu or f is not None):
                secs = statistics.median(scaled_seconds(r, cfg, self.pool) for r in same)
                return (Estimate(secs, "gpu-scaled", _sources(same), model) if gpu
                        else Estimate(secs / f.value, "cpu-scaled/F", _sources(same), model))
        if f is None:
            raise NoEstimate("no GPU record of this work, and no CPU->GPU factor")
        raise NoEstimate(f"no record of method {cfg['method']} with model {model}")


def _sources(rs: Iterable[Record]) -> tuple[str, ...]:
    return tuple(sorted({r.source for r in rs}))


def slot_seconds(seconds: float, trials_per_gpu: int, measured: int = MEASURED_TRIALS_PER_GPU) -> float:
    """A trial's time on a GPU shared by `trials_per_gpu` trials, from its time at `measured` trials at once
    (throughput-bound: the GPU was fully busy at `measured`)."""
    if trials_per_gpu < 1:
        raise ValueError(f"trials_per_gpu={trials_per_gpu} is invalid: an integer >= 1")
    return seconds * trials_per_gpu / measured


# ---------------------------------------------------------------- scheduling (pure)

@dataclass(frozen=True)
class Schedule:
    makespan: float
    start: tuple[float, ...]
    finish: tuple[float, ...]


def _chains(durations: Sequence[float], deps: Sequence[Sequence[int]]) -> tuple[list[float], list[list[int]]]:
    """Per trial, the longest chain from its start to the end of the last trial depending on it (itself
    included), and the trials that depend on each."""
    n = len(durations)
    after: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, ds in enumerate(deps):
        for d in ds:
            if not 0 <= d < n or d == i:
                raise ValueError(f"trial {i} depends on {d}: not another trial of the list")
            after[d].append(i)
            indeg[i] += 1
    order, stack = [], [i for i in range(n) if indeg[i] == 0]
    rem = list(indeg)
    while stack:
        i = stack.pop()
        order.append(i)
        for j in after[i]:
            rem[j] -= 1
            if rem[j] == 0:
                stack.append(j)
    if len(order) != n:
        raise ValueError("the trials' dependencies form a circle")
    tail = [0.0] * n
    for i in reversed(order):
        tail[i] = durations[i] + max((tail[j] for j in after[i]), default=0.0)
    return tail, after


def critical_path(durations: Sequence[float], deps: Sequence[Sequence[int]], overhead: float = 0.0) -> float:
    """The longest chain of trials (each + overhead): no number of slots finishes sooner."""
    if not durations:
        return 0.0
    tail, _ = _chains([d + overhead for d in durations], deps)
    return max(tail)


def list_schedule(durations: Sequence[float], deps: Sequence[Sequence[int]], slots: int,
                  overhead: float = 0.0) -> Schedule:
    """Greedy list scheduling on `slots` identical slots: whenever a slot is free, the ready trial with the longest
    remaining chain (then the longest, then the first) starts on it; a trial is ready once every trial it
    depends on (deps[i]: indices) has finished. Each trial takes its duration + overhead."""
    if slots < 1:
        raise ValueError(f"slots={slots} is invalid: an integer >= 1")
    n = len(durations)
    dur = [float(d) + overhead for d in durations]
    tail, after = _chains(dur, deps)
    waiting = [len(ds) for ds in deps]
    ready = [(-tail[i], -dur[i], i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    start, finish = [0.0] * n, [0.0] * n
    t, free, done = 0.0, slots, 0
    while done < n:
        while free and ready:
            _, _, i = heapq.heappop(ready)
            start[i], finish[i] = t, t + dur[i]
            heapq.heappush(running, (finish[i], i))
            free -= 1
        t, i = heapq.heappop(running)
        ended = [i]
        while running and running[0][0] <= t:
            ended.append(heapq.heappop(running)[1])
        for i in ended:
            free += 1
            done += 1
            for j in after[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, (-tail[j], -dur[j], j))
    return Schedule(max(finish, default=0.0), tuple(start), tuple(finish))


def makespan_curve(durations: Sequence[float], deps: Sequence[Sequence[int]], trials_per_gpu: int, max_gpus: int,
                   overhead: float = 0.0) -> list[float]:
    """curve[g - 1]: the makespan on g GPUs (g x trials_per_gpu slots), g = 1 .. max_gpus: the best list schedule
    on at most g GPUs (idle GPUs cost nothing, so more GPUs never take longer)."""
    out: list[float] = []
    for g in range(1, max_gpus + 1):
        m = list_schedule(durations, deps, g * trials_per_gpu, overhead).makespan
        out.append(min(m, out[-1]) if out else m)
    return out


@dataclass(frozen=True)
class StopScaling:
    gpus: int  # the smallest G with the plateau's makespan: more GPUs do not shorten it
    makespan: float
    critical_path: float
    slots: int
    trials: int
    reason: str


def stop_scaling(durations: Sequence[float], deps: Sequence[Sequence[int]], trials_per_gpu: int,
                 overhead: float = 0.0) -> StopScaling:
    """Where the makespan stops falling: the smallest G whose list schedule takes no longer than the longest chain
    (no G does better; below work / (G x K) < chain no G can reach it, so the search starts there)."""
    n = len(durations)
    cp = critical_path(durations, deps, overhead)
    work = sum(durations) + overhead * n
    g = max(1, math.ceil(work / (cp * trials_per_gpu) * (1 - 1e-9))) if cp > 0 else 1
    while list_schedule(durations, deps, g * trials_per_gpu, overhead).makespan > cp * (1 + 1e-9) + 1e-9:
        g += 1  # ends by g = ceil(n / K): a slot per trial starts each trial once its chain allows
    slots = g * trials_per_gpu
    if slots >= n:
        reason = "every trial has its own slot: the longest chain is all that is left"
    else:
        reason = f"the longest chain of trials sets the makespan with {n - slots} trials still sharing slots"
    return StopScaling(g, cp, cp, slots, n, reason)


def project(durations: Sequence[float], deps: Sequence[Sequence[int]], gpus: Sequence[int], trials_per_gpu: int,
            overhead: float = 0.0) -> tuple[dict[int, float], StopScaling]:
    """The makespan for each G of `gpus`, and where it stops scaling."""
    stop = stop_scaling(durations, deps, trials_per_gpu, overhead)
    below = [g for g in gpus if g < stop.gpus]
    curve = makespan_curve(durations, deps, trials_per_gpu, max(below), overhead) if below else []
    return {g: curve[g - 1] if g < stop.gpus else stop.makespan for g in gpus}, stop


# ---------------------------------------------------------------- the reproduction's trials

@dataclass
class Job:
    key: str
    seconds: float  # on one slot at MEASURED_TRIALS_PER_GPU
    deps: tuple[str, ...]
    basis: str
    sources: tuple[str, ...]
    model: str
    label: str  # row / study, for the longest chain


@dataclass
class Group:
    name: str
    kind: str  # grid, search
    trials: int
    jobs: list[Job] = field(default_factory=list)
    reason: str | None = None  # not projected: why


def _estimate(model: TimeModel, trial: Any, variable: str) -> Estimate:
    from fda_ray.experiments.records import trial_key
    from fda_ray.core.config import RunConfig

    cfg = RunConfig(**trial.params).resolved().to_dict()
    gpu_key = ""  # its key run on a GPU: computed only where a GPU record could be it (a key costs a resolve)
    if (cfg["dataset"], cfg["model"]) in model.gpu_work:
        gpu_key = trial_key(trial.row, variable, trial.value, trial.seed, {**trial.params, "device": "cuda"},
                            trial.kind, trial.weights_from)
    return model.estimate(cfg, trial.kind, trial.key, gpu_key)


def _jobs(model: TimeModel, name: str, kind: str, trials: Sequence[tuple[Any, str, tuple[str, ...]]]) -> Group:
    """A group of (trial, variable, deps) estimated; not projected if any trial is not."""
    group = Group(name, kind, len(trials))
    missing: Counter[str] = Counter()
    for trial, variable, deps in trials:
        try:
            e = _estimate(model, trial, variable)
        except NoEstimate as err:
            missing[str(err)] += 1
            continue
        group.jobs.append(Job(trial.key, e.seconds, deps, e.basis, e.sources, e.model, f"{name}: {trial.row}"))
    if missing:
        why, n = missing.most_common(1)[0]
        group.reason = f"{sum(missing.values())} of {len(trials)} trials: {why}"
        group.jobs = []
    return group


def grid_groups(model: TimeModel) -> list[Group]:
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    out = []
    for name, grid in GRIDS.items():
        if name.endswith(TWIN_SUFFIX) and name.removesuffix(TWIN_SUFFIX) in GRIDS:
            continue  # projected as its MNIST grid
        try:
            trials = plan(GRIDS.get(name + TWIN_SUFFIX, grid), "paper")  # (TWIN_SUFFIX)
        except Exception as e:  # a grid that cannot be planned: reported, not projected
            out.append(Group(name, "grid", 0, reason=f"plan() failed: {str(e).splitlines()[0]}"))
            continue
        out.append(_jobs(model, name, "grid", [(t, grid.variable, (t.weights_from,) if t.weights_from else ())
                                               for t in trials]))
    return out


def search_groups(model: TimeModel) -> list[Group]:
    """Each search's paper profile: every study's num_samples trials run to the end (scheduler none; ASHA would stop
    some early: an upper bound), then per study one rerun per selection rule (at most: rules may agree) x
    rerun_seeds after the study's search, at the study's median trial time; the reference rows any time."""
    from fda_ray.experiments.search import reference_trials, search_trials, studies
    from fda_ray.papers.searches import SEARCHES

    out = []
    for name, s in SEARCHES.items():
        items, per_study = [], []
        for st in studies(s):
            ts = search_trials(s, "paper", st, s.num_samples["paper"])
            items += [(t, s.variable, ()) for t in ts]
            per_study.append((st, [t.key for t in ts]))
        for v in s.values:
            items += [(t, s.variable, ()) for t in reference_trials(s, "paper", v, s.rerun_seeds)]
        n_reruns = len(s.rules) * s.rerun_seeds * len(per_study)
        group = _jobs(model, name, "search", items)
        group.trials += n_reruns
        if group.reason is None:
            est = {j.key: j for j in group.jobs}
            for st, keys in per_study:
                secs = statistics.median(est[k].seconds for k in keys)
                first = est[keys[0]]
                for i in range(len(s.rules) * s.rerun_seeds):
                    group.jobs.append(Job(f"{name}/{st.method}@{st.value:g}/rerun{i}", secs, tuple(keys), first.basis,
                                          first.sources, first.model, f"{name}: {st.method}-selected"))
        out.append(group)
    return out


def merged(name: str, groups: Sequence[Group]) -> Group:
    """The groups' trials as one run: a trial shared between grids (the same key) runs once."""
    seen: dict[str, Job] = {}
    for g in groups:
        for j in g.jobs:
            seen.setdefault(j.key, j)
    return Group(name, "total", len(seen), list(seen.values()))


def arrays(group: Group, trials_per_gpu: int) -> tuple[list[float], list[list[int]]]:
    index = {j.key: i for i, j in enumerate(group.jobs)}
    return ([slot_seconds(j.seconds, trials_per_gpu) for j in group.jobs],
            [[index[d] for d in j.deps] for j in group.jobs])


def chain_jobs(group: Group, trials_per_gpu: int, overhead: float) -> list[Job]:
    """The longest chain of the group's trials (each + overhead), first to last; none for a group with no trial
    projected (records of none of the reproduction's work: every total is empty)."""
    if not group.jobs:
        return []
    durations, deps = arrays(group, trials_per_gpu)
    tail, after = _chains([d + overhead for d in durations], deps)
    i = max(range(len(tail)), key=lambda k: tail[k])
    jobs = [group.jobs[i]]
    while after[i]:
        i = max(after[i], key=lambda k: tail[k])
        jobs.append(group.jobs[i])
    return jobs


def longest_chain(group: Group, trials_per_gpu: int, overhead: float) -> str:
    return " -> ".join(j.label for j in chain_jobs(group, trials_per_gpu, overhead))


# ---------------------------------------------------------------- output

def fmt_s(s: float) -> str:
    if s < 300:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], markdown: bool) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(cells[0]) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells[1:]])
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in cells)


def spread(records: Sequence[Record]) -> tuple[int, float, float] | None:
    """How far records of the same work (signature, device) differ: (the sets of 2 or more, the median and the
    largest slowest / fastest over the sets); None when no work was recorded twice."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        groups[(signature(r.config, r.kind), r.gpu)].append(r.seconds)
    ratios = [max(v) / min(v) for v in groups.values() if len(v) > 1]
    if not ratios:
        return None
    return len(ratios), statistics.median(ratios), max(ratios)


def spread_line(records: Sequence[Record]) -> str:
    """spread() in words."""
    s = spread(records)
    if s is None:
        return "Records of the same work: none repeated."
    return (f"Records of the same work ({s[0]} sets of 2 or more): slowest / fastest {s[1]:.2f}"
            f" (median over the sets), at most {s[2]:.2f}.")


# What overhead_from reads of each row of `python -m benchmarks.cluster --save`'s {"rows": [...]}
CLUSTER_FIELDS = ("nodes", "trials", "overhead_s_per_trial")


def cluster_damage(data: Mapping[str, Any]) -> str | None:
    """Why a --cluster-json file's JSON object cannot give the overhead (None when it can)."""
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        return ("it has no 'rows' list (python -m benchmarks.cluster --save writes one, a row per node count)"
                if not isinstance(rows, list) else "its 'rows' list is empty")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            return f"its row {i} is not a mapping"
        for name in CLUSTER_FIELDS:
            v = r.get(name)
            if not (is_number(v) and math.isfinite(v)):
                return f"its row {i} has no {name!r} number (each row needs {', '.join(CLUSTER_FIELDS)})"
    return None


def overhead_from(path: str | None) -> tuple[float, str]:
    """The per-trial scheduling overhead of the cluster benchmark's row with the most nodes; a file that is not
    such a benchmark's output is a DamagedFileError (one line naming --cluster-json and what is wrong)."""
    from fda_ray.core.user_files import DamagedFileError, read_json

    if not path:
        return 0.0, "none given (--cluster-json): 0 s per trial"
    data = read_json(path, "--cluster-json", dict)
    why = cluster_damage(data)
    if why is not None:
        raise DamagedFileError("--cluster-json", path, why)
    row = max(data["rows"], key=lambda r: r["nodes"])
    return float(row["overhead_s_per_trial"]), (f"{row['overhead_s_per_trial']:.1f} s per trial, from {path} "
                                                f"(its row of {row['nodes']} nodes, {row['trials']} trials)")


@dataclass(frozen=True)
class Projected:
    """One group (a grid, a search, a set of them run at once) on the projected GPU counts."""

    group: Group
    durations: tuple[float, ...]  # its trials' slot times (K trials per GPU), without the overhead
    spans: dict[int, float]  # the makespan per GPU count
    stop: StopScaling
    work: float  # the slot time summed, the overhead included

    @property
    def basis(self) -> Counter[str]:
        return Counter(j.basis for j in self.group.jobs)

    @property
    def sources(self) -> list[str]:
        return sorted({s for j in self.group.jobs for s in j.sources})


@dataclass(frozen=True)
class Check:
    """The noise grid's 0.4 column (seed 0) on 1 GPU, projected, against a measured time when one is given."""

    trials: int
    models: tuple[str, ...]
    projected: float  # its makespan on 1 GPU at K trials per GPU
    measured: float | None
    totals: tuple[Projected, ...] = ()  # the totals with every trial of another model than F's resting on F x ratio

    @property
    def ratio(self) -> float | None:
        return self.measured / self.projected if self.measured else None


@dataclass(frozen=True)
class Projection:
    """Everything main() prints, as numbers (compute(); report() writes it)."""

    records: tuple[Record, ...]
    records_dir: str  # as shown: relative to the repository where it is inside it
    pool: tuple[int, str] | None  # Fashion-MNIST's images and where
    factor: GpuFactor | None
    trials_per_gpu: int
    gpus: tuple[int, ...]
    overhead: float
    overhead_note: str
    grids: tuple[Group, ...]  # every grid, projected or not (reason)
    searches: tuple[Group, ...]
    grid_rows: tuple[Projected, ...]  # the projected grids
    search_rows: tuple[Projected, ...]
    totals: tuple[Projected, ...]  # all projected grids, all projected searches, grids and searches
    chains: tuple[tuple[Job, ...], ...]  # the totals' longest chains (chain_jobs)
    check: Check | None  # None when the noise grid is not projected

    @property
    def missing(self) -> list[Group]:
        return [g for g in self.grids + self.searches if g.reason is not None]

    @property
    def planned(self) -> int:
        return sum(g.trials for g in self.grids + self.searches)

    @property
    def not_projected(self) -> int:
        return sum(g.trials for g in self.missing)


def projected(g: Group, gpus: Sequence[int], k: int, overhead: float) -> Projected:
    durations, deps = arrays(g, k)
    spans, stop = project(durations, deps, gpus, k, overhead)
    return Projected(g, tuple(durations), spans, stop, sum(durations) + overhead * len(durations))


def checked_records_dir(records_dir: str | Path) -> Path:
    """--records as a folder: one line where it is missing or a file (load_records would read nothing from it)."""
    p = Path(records_dir)
    if not p.is_dir():
        why = "a file, not a folder" if p.exists() else "no such folder"
        raise ValueError(f"--records={str(records_dir)!r} is invalid: {why} (it takes a folder of sweep "
                         "directories, as docs/results)")
    return p


def compute(gpus: Sequence[int] = (1, 8, 32), trials_per_gpu: int = MEASURED_TRIALS_PER_GPU,
            cluster_json: str | None = None, measured_noise_column_s: float | None = None,
            records_dir: str | Path = RESULTS) -> Projection:
    """The projection main() prints (its arguments; a relative --cluster-json from the current directory)."""
    gpus, k = tuple(sorted(set(gpus))), trials_per_gpu
    overhead, overhead_note = overhead_from(cluster_json)
    records = load_records(checked_records_dir(records_dir))
    if not records:  # nothing to time any trial by: every total would be empty (max() of nothing)
        raise ValueError(f"--records={str(records_dir)!r} is invalid: no finished trial record with timed rounds "
                         "under it (it takes a folder of sweep directories, each with trials/*/rows.json, "
                         "as docs/results)")
    pool = fmnist_pool_size()
    model = TimeModel(records, pool[0] if pool else None)
    grids, searches = grid_groups(model), search_groups(model)
    f = model.factor
    where = Path(records_dir).resolve()
    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where

    def rows_of(groups: Sequence[Group]) -> tuple[Projected, ...]:
        return tuple(projected(g, gpus, k, overhead) for g in groups if g.reason is None and g.jobs)

    done_grids = [g for g in grids if g.reason is None]
    done_searches = [g for g in searches if g.reason is None]
    totals = [merged("all projected grids", done_grids), merged("all projected searches", done_searches),
              merged("grids and searches", done_grids + done_searches)]
    check = None
    noise = next((g for g in grids if g.name == "noise" and g.reason is None), None)
    if noise is not None:
        from fda_ray.experiments.trials import plan
        from fda_ray.papers.grids import GRIDS

        column = plan(GRIDS["noise"], "paper", values=[0.4], seeds=1)
        sub = _jobs(model, "noise 0.4 column", "grid", [(t, "noise", (t.weights_from,) if t.weights_from else ())
                                                        for t in column])
        durations, deps = arrays(sub, k)
        one = list_schedule(durations, deps, k, overhead).makespan
        scaled_totals: tuple[Projected, ...] = ()
        if measured_noise_column_s:
            ratio = measured_noise_column_s / one
            scaled_totals = tuple(projected(Group(g.name, g.kind, g.trials, [
                Job(j.key, j.seconds * (ratio if (f and j.model not in f.models and "F" in j.basis) else 1.0),
                    j.deps, j.basis, j.sources, j.model, j.label) for j in g.jobs]), gpus, k, overhead)
                for g in totals)
        check = Check(len(sub.jobs), tuple(sorted({j.model for j in sub.jobs})), one,
                      measured_noise_column_s or None, scaled_totals)
    return Projection(tuple(records), str(shown), pool, f, k, gpus, overhead, overhead_note, tuple(grids),
                      tuple(searches), rows_of(grids), rows_of(searches),
                      tuple(projected(g, gpus, k, overhead) for g in totals),
                      tuple(tuple(chain_jobs(g, k, overhead)) for g in totals), check)


def report(p: Projection, markdown: bool = False) -> str:
    """The projection in words and tables (main()'s output)."""
    records, f, k, gpus, md, pool = p.records, p.factor, p.trials_per_gpu, p.gpus, markdown, p.pool
    out = [f"Records: {len(records)} trial records under {p.records_dir} ({sum(r.gpu for r in records)} from a GPU, "
           f"in {', '.join(sorted({r.source for r in records if r.gpu})) or 'none'}).",
           (f"CPU->GPU factor F = {f.value:.1f} (median of {f.pairs} pairs, {f.low:.1f} to {f.high:.1f}; model "
            f"{', '.join(f.models)}; records {', '.join(f.sources)})." if f
            else "CPU->GPU factor: no pair of records."),
           f"Trials per GPU K = {k} (the GPU records ran {MEASURED_TRIALS_PER_GPU}; a slot's time x K / "
           f"{MEASURED_TRIALS_PER_GPU}). Overhead: {p.overhead_note}.",
           spread_line(records),
           (f"Fashion-MNIST pool for the DomainBed constructions' sizes: {pool[0]} images ({pool[1]})." if pool else
            "Fashion-MNIST not found: DomainBed-construction trials without a record of their own are not projected."),
           ""]
    if md:
        out = [f"- {line}" if line else line for line in out]

    def rows_of(rows: Sequence[Projected]) -> list[list[Any]]:
        return [[r.group.name, r.group.trials, ", ".join(f"{n} {b}" for b, n in r.basis.most_common()),
                 ", ".join(r.sources), fmt_s(r.work), *(fmt_s(r.spans[x]) for x in gpus), r.stop.gpus,
                 fmt_s(r.stop.critical_path)] for r in rows]

    header = ["grid", "trials", "time from", "records", "work (slot time, summed)", *(f"{x} GPU" for x in gpus),
              "stops scaling at G", "longest chain"]
    out += ["Grids (paper profile):", "", table(header, rows_of(p.grid_rows), md), ""]
    out += ["Searches (paper profile; every trial to the end, one rerun per rule x seed: upper bounds):", "",
            table(["search", *header[1:]], rows_of(p.search_rows), md), ""]

    trows = [[t.group.name, t.group.trials, *(fmt_s(t.spans[x]) for x in gpus), t.stop.gpus, fmt_s(t.stop.makespan),
              f"{t.stop.reason} ({t.stop.slots} slots, {t.stop.trials} trials); the longest chain: "
              f"{' -> '.join(j.label for j in chain)}"]
             for t, chain in zip(p.totals, p.chains)]
    out += ["The whole reproduction, each set run at once (a trial shared by two grids runs once):", "",
            table(["set", "trials", *(f"{x} GPU" for x in gpus), "stops scaling at G", "makespan there", "why"],
                  trows, md), ""]

    missing = p.missing
    out += [f"Planned: {p.planned} trials ({sum(g.trials for g in p.grids)} of the grids, "
            f"{sum(g.trials for g in p.searches)} of the searches); projected: {p.planned - p.not_projected}"
            f" ({p.totals[-1].group.trials} once each); not projected: {p.not_projected}.", ""]
    out += [f"Not projected ({p.not_projected} trials):", "",
            table(["grid or search", "trials", "why"], [[g.name, g.trials, g.reason] for g in missing], md), ""]

    c = p.check
    if c is not None:
        line = (f"Check: the noise grid's 0.4 column (seed 0, {c.trials} trials, model {', '.join(c.models)}), "
                f"on 1 GPU at K = {k}: projected {fmt_s(c.projected)}")
        if c.ratio is not None:
            line += (f"; measured {fmt_s(c.measured)}: {c.ratio:.1f}x the projection. With every "
                     f"trial of a model other than {', '.join(f.models) if f else '-'} that rests on F taking "
                     f"{c.ratio:.1f}x as long:")
            out.append(line)
            crows = [[t.group.name, t.group.trials, *(fmt_s(t.spans[x]) for x in gpus), t.stop.gpus,
                      fmt_s(t.stop.makespan)] for t in c.totals]
            out += ["", table(["set", "trials", *(f"{x} GPU" for x in gpus), "stops scaling at G", "makespan there"],
                              crows, md)]
        else:
            out.append(line + ".")
    return "\n".join(out)


def parser() -> argparse.ArgumentParser:
    """A bad value or an unknown flag is one line, exit 2 (fda_ray.core.parsing, as the other benchmarks)."""
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.projection", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", default="1,8,32", help="GPU counts to project (comma-separated)")
    p.add_argument("--trials-per-gpu", type=typed("trials_per_gpu", int, "an integer"),
                   default=MEASURED_TRIALS_PER_GPU,
                   help=f"trials at once on one GPU (default {MEASURED_TRIALS_PER_GPU}: the GPU records' setting)")
    p.add_argument("--cluster-json", default=None, help="python -m benchmarks.cluster --json's output")
    p.add_argument("--measured-noise-column-s", type=typed("measured_noise_column_s", float, "a number of seconds"),
                   default=None,
                   help="a measured wall time of the noise grid's 0.4 column (9 trials, seed 0) on one GPU at "
                        "--trials-per-gpu: prints its ratio to the projection")
    p.add_argument("--records", default=str(RESULTS), help="the records' directory (default docs/results)")
    p.add_argument("--markdown", action="store_true")
    return p


def arguments(argv: Sequence[str] | None = None) -> tuple[dict[str, Any], bool]:
    """A command line as compute()'s keyword arguments, and whether it asks for --markdown (a bad one: its one
    error line and SystemExit(2), as argparse's)."""
    p = parser()
    a = p.parse_args(argv)
    try:
        gpus = sorted({int(g) for g in a.gpus.split(",") if g.strip()})
    except ValueError:
        p.error(f"--gpus={a.gpus!r} is invalid: comma-separated integers >= 1")
    if not gpus or gpus[0] < 1:
        p.error(f"--gpus={a.gpus!r} is invalid: comma-separated integers >= 1")
    if a.trials_per_gpu < 1:
        p.error(f"--trials-per-gpu={a.trials_per_gpu} is invalid: an integer >= 1")
    return dict(gpus=gpus, trials_per_gpu=a.trials_per_gpu, cluster_json=a.cluster_json,
                measured_noise_column_s=a.measured_noise_column_s, records_dir=a.records), a.markdown


def main(argv: Sequence[str] | None = None) -> int:
    try:
        kwargs, markdown = arguments(argv)
    except SystemExit as e:  # its line is printed; the exit code returned, as the other benchmarks' main
        return int(e.code or 0)
    try:
        projection = compute(**kwargs)
    except ValueError as e:  # a damaged --cluster-json, --records or record: one line, as the other benchmarks
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report(projection, markdown))
    return 0

if __name__ == "__main__":
    sys.exit(main())
