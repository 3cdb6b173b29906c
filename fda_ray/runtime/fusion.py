"""Trial groups: several trials fused into one computation on one device (HFTA's horizontal fusion, across a sweep).

A sweep's trials are many copies of one small network. A group runs T of them in lockstep in one process: each
trial keeps its own round loop (fda_ray.runtime.loop.run_rounds, in a thread of its own), its algorithm state,
aggregation (the kernel), evaluation and record; only the clients' local training is shared. Each round, every
member hands its tasks to its `GroupMember` executor; once every live member has handed its round in, the group
runs all of them with fda_ray.train.cohort.run_jobs, where the clients of every trial that run the same recipe on
one architecture and batch size train as one cohort (T trials x K clients as rows of one (T*K, M) computation, each
row with its own data order, noise draws, learning rate and step count). The rest run one after the other, as in
a trial of their own.

    group = TrialGroup(["a", "b"])                      the members it waits for
    ex = group.executor("a", clients)                   a member's executor (fda_ray.runtime.executors' interface)
    ... each member's run_rounds(exp, ex, ...) in a thread of its own ...
    ex.shutdown()                                       it leaves: finished, failed or stopped; the others go on
    group.add("c")                                      a member that joins later (a retried trial resuming)
    group.stop()                                        Ctrl-C: every waiting member raises KeyboardInterrupt, the
                                                        batch in training ends at its next step (so does an exit)

Numbers: a fused trial trains its clients as its own vectorised cohort would (cfg.vectorise "on"), in a cohort with
more rows. Rows never mix (every operation is per row: grouped or per-model convolutions, batched matmuls, a
per-row loss and Adam with a per-row step size), and the group's thread runs with the members' torch thread
count, so a member's numbers equal the trial run alone: to the last bit on the CPUs it was checked on, and within
float tolerance wherever batched operations sum in another order for another number of rows (another machine, a
GPU's grouped convolution; tests/test_fusion.py). Fusing is therefore not part of a trial's numbers (not in its
key); only trials that train vectorised are fused (`fusion_key`).

Which trials can share a group (`fusion_key`): same dataset, model, device, thread count and batch sizes, a method
whose family declares that its local training is the vectorisable "epoch" recipe (Algorithm.fuses), vectorise on,
not a fine-tuning trial (those start from another trial's weights and run alone).
"""
from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from fda_ray.runtime.executors import SerialExecutor

FUSE_CHOICES = ("off", "auto")  # or a whole number >= 1: the most trials a group holds
# CPUs: 8 trials a group measured faster than one after another (benchmarks/fused_ops.py, 2 cores); a GPU: 32, not yet
# measured (tools/gpu-sweep-check.sh measures it; docs/ray-and-clusters.md, "Fused trials").
AUTO_GROUP = {"cpu": 8, "cuda": 32}
# The models `--fuse auto` fuses on CPUs: those with a per-row `forward_stacked` (fda_ray.train.models), measured faster
# fused there and equal to the trial alone bit for bit. The others go through torch.func.vmap, whose batched
# convolution sums a weight's gradient in another order as the rows change (DomainBed's MNIST CNN: float tolerance
# only, which training amplifies to a 1e-2 relative weight gap in 2 rounds) and measured 1.4-1.6x slower fused on 2
# cores: on CPUs they run alone unless --fuse names a group size.
AUTO_CPU_MODELS = ("simple_cnn",)

# A fusion server's batching window (fda_ray.runtime.fusion_server): how long a waiting round waits for the trials
# still out; a round's driver work (aggregation, evaluation) is shorter.
WINDOW_ENV = "FDA_RAY_FUSION_WINDOW_S"
WINDOW_S = 0.5


def window_seconds() -> float:
    """$FDA_RAY_FUSION_WINDOW_S, else WINDOW_S; one-line error naming the variable."""
    from fda_ray.core.parsing import env_seconds

    # (at most a minute: a served trial whose process ended without leaving holds its server's rounds that long)
    return env_seconds(WINDOW_ENV, WINDOW_S, most=60.0)


# One member builds its experiment at a time: building seeds torch's global generator per trial (the initial model),
# which threads would share.
BUILD_LOCK = threading.Lock()


def parse_fuse(value: str | int | None) -> int | str:
    """--fuse's value: "off", "auto", or a group size (a whole number >= 1; 1 is off). One-line error otherwise."""
    if value is None:
        return "off"
    text = str(value).strip().lower()
    if text in FUSE_CHOICES:
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1 or str(n) != text:
        raise ValueError(f"fuse={value!r} is invalid: off, auto, or a whole number of trials a group holds (>= 1)")
    return "off" if n == 1 else n


# Served trials (fda_ray.runtime.fusion_server: a search under ASHA or Optuna) with --fuse auto: on CPUs none, since
# they measured slower there (python -m benchmarks.served, 2 cores: 0.61x; docs/ray-and-clusters.md); on a GPU 32,
# not yet measured (tools/gpu-sweep-check.sh's `served` step measures it).
AUTO_SERVED = {"cpu": 1, "cuda": 32}


class AutoGroup(int):
    """The group size `--fuse auto` gives (an int: the most trials a group holds on the first trial's device), which
    plan_groups reads per trial: each kind of trial (fusion_key) gets its own device's AUTO_GROUP size, and on CPUs
    a model outside AUTO_CPU_MODELS runs alone. (A sweep may mix models: the rule is each trial's, not the first's.)"""


def auto_group(key: tuple) -> int:
    """The group size --fuse auto gives trials of fusion key `key` (their model and device): 1 where they run alone."""
    model, device = key[1], str(key[2])
    if device.startswith("cuda"):
        return AUTO_GROUP["cuda"]
    return AUTO_GROUP["cpu"] if model in AUTO_CPU_MODELS else 1


def group_size(fuse: int | str, device: str, served: bool = False) -> int:
    """The most trials a group holds for --fuse `fuse` on `device` (1: no fusing); `served`: the trials that share
    a fusion server's share of a device (fda_ray.runtime.fusion_server). For "auto" (not served) an AutoGroup: the
    groups then follow each trial's model and device (plan_groups)."""
    if fuse == "off":
        return 1
    if fuse == "auto":
        kind = "cuda" if str(device).startswith("cuda") else "cpu"
        return AUTO_SERVED[kind] if served else AutoGroup(AUTO_GROUP[kind])
    return int(fuse)


def fusion_key(trial: Any) -> tuple | None:
    """Trials with equal keys may share a group; None: the trial runs alone (module docstring).
    `trial`: an fda_ray.experiments.records.Trial."""
    from fda_ray.algorithms import ALGORITHMS

    if getattr(trial, "kind", "run") == "finetune" or getattr(trial, "weights_from", None):
        return None
    cfg = trial.config().resolved()
    if not config_fuses(cfg):
        return None
    return (cfg.dataset, cfg.model, cfg.device, cfg.threads, cfg.batch_source, cfg.batch_target, cfg.executor)


def config_fuses(cfg: Any) -> bool:
    """Whether a run of the resolved `cfg` may train fused: vectorised, a method of the epoch recipe."""
    from fda_ray.algorithms import ALGORITHMS

    return cfg.vectorise == "on" and bool(getattr(ALGORITHMS.get(cfg.method), "fuses", False))


def why_not_fused(trial: Any, size: int = 2) -> str:
    """Why the trial runs alone under group size `size` (plan_groups), in a few words (--dry-run); "fusible" if
    it may fuse."""
    from fda_ray.algorithms import ALGORITHMS

    if getattr(trial, "kind", "run") == "finetune" or getattr(trial, "weights_from", None):
        return "fine-tunes another trial's weights"
    cfg = trial.config().resolved()
    if cfg.vectorise != "on":
        return "vectorise is off (fused trials train vectorised: --vectorise on)"
    if not getattr(ALGORITHMS.get(cfg.method), "fuses", False):
        return f"method {cfg.method}'s local training is not the vectorised epoch recipe"
    if isinstance(size, AutoGroup) and auto_group(fusion_key(trial)) <= 1:
        return (f"model {cfg.model} on {cfg.device}: --fuse auto fuses it on GPUs only (slower fused on CPUs, and "
                "equal to its run alone to float tolerance only); --fuse N fuses it")
    return "fusible"


def _trains_sources(trial: Any) -> bool:
    from fda_ray.algorithms import ALGORITHMS

    return bool(getattr(ALGORITHMS.get(trial.params.get("method", "")), "train_sources", True))


def plan_groups(trials: Sequence[Any], size: int) -> list[list[Any]]:
    """The trials in groups of at most `size` members with equal fusion keys; an unfusible trial is a group of its
    own. A group runs in lockstep until its last member ends, so trials of like cost share one (those that train
    sources apart from those that do not), and a key's n trials are split into ceil(n / size) groups of nearly
    equal size (8, 8, 2 would leave a small group as slow as a full one). Groups start in the order of their
    first member (the plan's order: seeds first)."""
    if size <= 1:
        return [[t] for t in trials]
    buckets: dict[tuple, list[tuple[int, Any]]] = {}
    alone: list[tuple[int, list[Any]]] = []
    for i, t in enumerate(trials):
        key = fusion_key(t)
        if key is None or (isinstance(size, AutoGroup) and auto_group(key) <= 1):
            alone.append((i, [t]))
        else:
            buckets.setdefault((key, _trains_sources(t)), []).append((i, t))
    placed = list(alone)
    for (key, _), members in buckets.items():
        n = len(members)
        count = -(-n // (auto_group(key) if isinstance(size, AutoGroup) else size))
        bounds = [round(j * n / count) for j in range(count + 1)]
        for j in range(count):
            chunk = members[bounds[j]:bounds[j + 1]]
            placed.append((chunk[0][0], [t for _, t in chunk]))
    return [g for _, g in sorted(placed, key=lambda x: x[0])]


@dataclass
class _Request:
    """A member's round: its jobs, then their results (a ClientResult or the exception that hit it, each)."""
    jobs: list
    results: list | None = None
    done: bool = False


@dataclass
class GroupStats:
    """What the group ran: batches (one per round of the lockstep), members per batch, jobs per batch; per member,
    [its batches, the most members of one of them]."""
    batches: int = 0
    members: list[int] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    seconds: float = 0.0
    per_member: dict[str, list[int]] = field(default_factory=dict)
    share: dict[str, float] = field(default_factory=dict)  # per member, its jobs' share of the batches' seconds


class TrialGroup:
    """The shared half: members hand in their rounds; when all live members have, one thread runs them as one."""

    def __init__(self, members: Sequence[str], vectorise: bool = True, overlap: bool | None = None,
                 threads: int = 1, window_s: float | None = None) -> None:
        self.members = list(members)  # as formed (a member that joins later is added to it)
        # window_s (a fusion server's dynamic batching, fda_ray.runtime.fusion_server): a batch also runs once its
        # oldest round has waited this long, without the members still out; those are then not waited for until
        # they hand in a round again (a member whose process was ended without leaving costs one window, once).
        # None: lockstep, every live member's round in every batch (a group in one process, whose members leave).
        self.window_s = window_s
        self._late: set[str] = set()
        self._first = 0.0  # when the oldest waiting round came
        self.threads = threads  # the members' torch thread count (equal in a group: fusion_key), part of the numbers
        self._cond = threading.Condition()
        self._live: set[str] = set(members)  # expected or running; a member that ends leaves
        self._waiting: dict[str, _Request] = {}
        self._stopped = False
        self._stop_event = threading.Event()  # the same, read by the cohort's steps (cohort.stop_on)
        self._closed = False
        self.vectorise = vectorise
        self.overlap = overlap
        self.stats = GroupStats()
        self._thread = threading.Thread(target=self._serve, name="fda-fusion", daemon=True)
        self._thread.start()
        # A process that exits while the thread trains (a Tune trial's process told to end, Ctrl-C in another thread
        # than run_group's) would free torch under it: the process aborted with a C++ stack trace. At exit the
        # group stops first, and its thread leaves the batch at the cohort's next step.
        atexit.register(self._at_exit)

    # ------------------------------------------------------------------ membership

    def add(self, key: str) -> None:
        """A member joins (a trial retried into a running group); the next batch waits for it."""
        with self._cond:
            self._live.add(key)
            if key not in self.members:
                self.members.append(key)

    def leave(self, key: str) -> None:
        """A member is done (finished, failed, stopped, or never started): the others no longer wait for it."""
        with self._cond:
            self._live.discard(key)
            self._late.discard(key)
            req = self._waiting.pop(key, None)
            if req is not None:  # a round it handed in and no longer waits for (its process ended): answered, so
                # the call that waits for it on a fusion server ends (fda_ray.runtime.fusion_server)
                req.results, req.done = [RuntimeError(f"trial {key} left the group")] * len(req.jobs), True
            self._cond.notify_all()

    def executor(self, key: str, clients: Sequence[Any]) -> "GroupMember":
        """Member `key`'s executor over its clients (hosted in this process)."""
        self.add(key)
        return GroupMember(self, key, clients)

    def live(self) -> set[str]:
        with self._cond:
            return set(self._live)

    def stop(self) -> None:
        """Ctrl-C: members waiting for a batch (now or later) raise KeyboardInterrupt; their loops keep what finished."""
        with self._cond:
            self._stopped = True
            self._stop_event.set()  # the batch in training ends at its next step
            self._cond.notify_all()

    def close(self) -> None:
        """End the group's thread (every member has left)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        self.stop()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ the lockstep

    def submit(self, key: str, jobs: list) -> _Request:
        req = _Request(list(jobs))
        with self._cond:
            if key not in self._live:
                raise RuntimeError(f"trial {key} is not a member of this group (it left)")
            if key in self._waiting:
                raise RuntimeError(f"trial {key} handed in a round before collecting its last one")
            if not self._waiting:
                self._first = time.monotonic()
            self._late.discard(key)
            self._waiting[key] = req
            self._cond.notify_all()
        return req

    def wait(self, req: _Request) -> list:
        with self._cond:
            while not req.done:
                if self._stopped:
                    raise KeyboardInterrupt
                self._cond.wait()
            return req.results  # type: ignore[return-value]

    def record(self, key: str) -> dict[str, int]:
        """What a member's record says of its fusing: the trials of its group and the group's batches it trained in
        (in this process: a resumed member's attempt from its first round here, fda_ray.experiments.trials)."""
        return {"members": len(self.members), "batches": self.stats.per_member.get(key, [0, 0])[0]}

    def own_seconds(self, key: str, wall: float, waited: float) -> float:
        """A member's own run time (own_seconds), its share: its jobs' part of each batch's seconds."""
        return own_seconds(wall, waited, self.stats.share.get(key, 0.0))

    def _ready(self) -> bool:
        if not self._waiting:
            return False
        if all(k in self._waiting for k in self._live - self._late):
            return True
        return self.window_s is not None and time.monotonic() - self._first >= self.window_s

    def _timeout(self) -> float | None:
        """How long the group's thread may sleep before a batch may be due without a new event."""
        if self.window_s is None or not self._waiting:
            return None
        return max(0.0, self.window_s - (time.monotonic() - self._first))

    def _serve(self) -> None:
        import torch

        from fda_ray.train.cohort import run_jobs, stop_on

        stop_on(self._stop_event)
        # A new thread starts with OpenMP's default thread count (the cores), not the one torch.set_num_threads set in
        # the thread that called it: the members' count, set here, keeps the convolutions' sums those of the trial
        # run alone (each member's own thread sets it when it builds its experiment).
        torch.set_num_threads(self.threads)

        while True:
            with self._cond:
                while not (self._closed or self._stopped or self._ready()):
                    self._cond.wait(self._timeout())
                if self._closed or self._stopped:
                    return
                batch, self._waiting = self._waiting, {}
                if self.window_s is not None:  # those still out are not waited for until they hand in again
                    self._late = self._live - set(batch)
            requests = list(batch.values())
            jobs = [j for r in requests for j in r.jobs]
            t0 = time.perf_counter()
            try:
                out = run_jobs(jobs, self.vectorise, self.overlap, isolate=True)
            except BaseException as e:  # (run_jobs isolates the jobs' own errors: this is the group's)
                out = [e] * len(jobs)
            self.stats.batches += 1
            self.stats.members.append(len(requests))
            for key in batch:
                mine = self.stats.per_member.setdefault(key, [0, 0])
                mine[0], mine[1] = mine[0] + 1, max(mine[1], len(requests))
            self.stats.jobs.append(len(jobs))
            took = time.perf_counter() - t0
            self.stats.seconds += took
            for key, r in batch.items():  # (a member's part of the batch: its jobs' part of all the batch's jobs)
                self.stats.share[key] = self.stats.share.get(key, 0.0) + took * len(r.jobs) / max(1, len(jobs))
            with self._cond:
                i = 0
                for r in requests:
                    r.results, i = out[i:i + len(r.jobs)], i + len(r.jobs)
                    r.done = True
                self._cond.notify_all()


def own_seconds(wall: float, waited: float, share: float) -> float:
    """A fused or served trial's own run time: its `wall` time less the seconds it `waited` for the batches (its own
    training, the other trials' and their lockstep), plus its `share` of those batches (its jobs' part of each batch's
    seconds). Charged its wall time, each trial fused with T-1 others was charged about T trials' training (a held-out
    probe: a fused sweep's trials "added up to" 5x the unfused sweep's)."""
    return max(0.0, wall - waited) + share


class GroupMember(SerialExecutor):
    """One member trial's executor (fda_ray.runtime.executors.Executor): its clients live in this process, as the
    serial executor's do (their states are read and restored as there); its rounds run in the group's batches."""

    def __init__(self, group: TrialGroup, key: str, clients: Sequence[Any]) -> None:
        super().__init__(clients, group.vectorise)
        self.group, self.key = group, key
        self.waited = 0.0  # seconds its rounds waited for the group's batches (TrialGroup.own_seconds)

    def submit(self, state: Any, tasks: Sequence[Any]) -> _Request:
        from fda_ray.core.contract import input_names
        from fda_ray.train.cohort import Job

        input_names(state, tasks)
        state = dict(state)
        jobs = [Job(self.by_index[t.client], t, (lambda t=t: {n: state[n] for n in t.inputs})) for t in tasks]
        return self.group.submit(self.key, jobs)

    def collect(self, pending: _Request) -> list:
        t0 = time.perf_counter()
        try:
            results = self.group.wait(pending)
        finally:
            self.waited += time.perf_counter() - t0
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    def shutdown(self, keep: bool = False) -> None:
        self.group.leave(self.key)
