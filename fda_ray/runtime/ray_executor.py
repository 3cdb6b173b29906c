"""The Ray executor: client actors, each pinned to a (fractional) GPU or a share of the CPUs.

A client actor receives its `Client`s (data views, model, layout) once, moves them to its own device and keeps
them there for the whole run, with their models, optimizers and states built once. An actor hosts k =
`clients_per_actor` clients (client i lives on actor i mod n_actors, for the whole run; fda_ray.runtime.resources
sizes k and each actor's request): on a machine with fewer cores than clients this saves the start-up of a process per
client (each imports torch, ~3 CPU-s) and the contention of many 1-thread processes on few cores. Each round
an actor gets one call with all of its clients' tasks and runs them with fda_ray.train.cohort.run_tasks (one after
the other, or, with vectorise, as one batched cohort). The driver puts every server-state entry the tasks
name in the object store once (`submit`), every actor reads them from there, and the driver gathers the
results as the calls finish (`collect`, `ray.wait`).

Client state (a personal model, counters): each task returns two objects, its result and the client's state
after it. The driver fetches the results; the states stay in the object store (owned by the driver, so they
outlive the actor), fetched only for a checkpoint or an evaluation that needs one.

Faults: when a client's task fails (its process was killed, or it raised), the actor is replaced by a new
one built from the same client objects and each client's state after its last finished task, and the
actor's call is redone (all of its tasks, as the same cohort); tasks draw all randomness from (seed, round,
client, purpose), so the redone call gives the same results. After `retries` failed attempts in one round, `collect` raises ClientFailure naming the client and
the round. `faults` injects failures on purpose, to test exactly this.
"""
from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import ray
import torch

import fda_ray.algorithms  # noqa: F401  (registers every family's recipes in the actor processes, which import this module alone)
from fda_ray.core import plugins
from fda_ray.core.contract import ClientResult, ClientTask, ServerState
from fda_ray.train.client import Client
from fda_ray.train.cohort import run_tasks
from fda_ray.train.device import warm
from fda_ray.core.contract import input_names
from fda_ray.core.interrupts import error_line
from fda_ray.runtime.failures import ClientFailure, ClientsStranded
from fda_ray.runtime import resources
from fda_ray.runtime.resources import TrialPlan

FAULTS = ("kill", "raise")  # kill: SIGKILL the actor's process; raise: an exception inside local training
PLACEMENT_TIMEOUT_S = 300.0
WATCH_EVERY_S = 1.0  # how often the live nodes are read while a replaced actor has not answered


class ActorTaskError(Exception):
    """A call failed inside the actor; `clients` are those it is blamed on (an injected fault: its client; an
    error inside training: every client of the call, since a cohort's error belongs to no one client)."""

    def __init__(self, clients: Sequence[int], why: str) -> None:
        super().__init__(why)
        self.clients = list(clients)

    def __reduce__(self):  # (it crosses processes)
        return (ActorTaskError, (self.clients, self.args[0]))


class ClientActor:
    """Hosts one client (or a fixed group of clients) for the whole run (wrapped with `ray.remote` below)."""

    def __init__(self, threads: int, vectorise: bool = False, imports: Sequence[tuple[str, str | None]] = ()) -> None:
        # The process starts (and imports torch) while the driver still loads the data; `load` follows.
        # The driver's plug-ins (a recipe of theirs runs here), also when a user's own ray.init made this worker.
        # One this process cannot import is kept and raised by every call (the driver's first, wait_started's
        # `node`, tells it in one line: fda_ray.core.plugins.WorkerImportError), not as Ray's creation-task traceback.
        self.broken: plugins.WorkerImportError | None = None
        try:
            plugins.load_in_worker("Ray client actor", imports)
        except plugins.WorkerImportError as e:
            self.broken = e
            return
        torch.set_num_threads(threads)
        self.vectorise = vectorise
        self.clients: dict[int, Client] = {}
        if not vectorise:  # the first Adam of a process imports torch._dynamo (~2 s): now, not in round 0
            torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        if ray.get_gpu_ids() and torch.cuda.is_available():  # a GPU actor: its CUDA context and cuDNN now, while
            warm("cuda")                                      # the driver loads the data, not in round 0

    def load(self, client_refs: Sequence[ray.ObjectRef], use_gpu: bool, state_refs: Sequence[ray.ObjectRef]) -> None:
        if self.broken is not None:
            raise self.broken
        # refs inside a list are not resolved by Ray
        clients: list[Client] = ray.get(list(client_refs))
        states: list[dict] = ray.get(list(state_refs))
        # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU, so "cuda" is the GPU it was given.
        device = "cuda" if use_gpu else "cpu"
        if use_gpu and not torch.cuda.is_available():  # Ray gave it a GPU that torch cannot see (a node that declares
            # GPUs it lacks, --num-gpus on `ray start`, or a broken driver): one line, not torch's "no NVIDIA driver"
            from fda_ray.runtime.preflight import PreflightError

            raise PreflightError(f"gpus_per_client > 0 is invalid on node {ray.get_runtime_context().get_node_id()[:8]}"
                                 f": Ray gave this client actor GPU {ray.get_gpu_ids()} but torch sees no CUDA GPU "
                                 "there (torch.cuda.is_available() is False): a node that declares GPUs it lacks, or "
                                 "a broken driver; use --gpus-per-client 0 for CPU clients")
        self.clients = {}  # an actor kept from a sweep's previous trial (KEPT) forgets that trial's clients
        if use_gpu and torch.cuda.is_available():  # gpu_memory's peaks are this trial's, not a kept actor's earlier ones
            torch.cuda.reset_peak_memory_stats()
        for client, state in zip(clients, states):
            client = client.to(device)
            client.restore(state)
            self.clients[client.index] = client

    def run(self, tasks: Sequence[ClientTask], faults: Sequence[str | None], names: Sequence[str],
            *arrays: np.ndarray) -> tuple:
        """Run `tasks` (this actor's clients' of one round); `arrays` are the server-state entries `names`,
        in order. Returns the results, then each client's state after its task: 2 * len(tasks) objects."""
        if self.broken is not None:
            raise self.broken
        for task, fault in zip(tasks, faults):
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "raise":
                raise ActorTaskError([task.client], f"RuntimeError: injected fault in client {task.client}, "
                                                    f"round {task.round}")
        with warnings.catch_warnings():  # the object store's arrays are read-only; they are only read (copied in)
            warnings.simplefilter("ignore", UserWarning)
            state = {name: torch.from_numpy(a) for name, a in zip(names, arrays)}  # (M,) each
        try:
            results = run_tasks(self.clients, tasks, lambda t: {n: state[n] for n in t.inputs}, self.vectorise)
        except plugins.WorkerImportError:  # (a name only the driver's __main__ has: as it is, so that none retries)
            raise
        except Exception as e:
            raise ActorTaskError([t.client for t in tasks], error_line(e)) from e
        return (*results, *[self.clients[t.client].snapshot() for t in tasks])

    def restore(self, client: int, state: dict) -> None:
        self.clients[client].restore(state)

    def node(self) -> str:
        """The Ray node this actor runs on (a trial's record names where its clients ran)."""
        if self.broken is not None:
            raise self.broken
        return ray.get_runtime_context().get_node_id()

    def gpu_memory(self) -> dict[str, int]:
        """This actor's GPU memory since its clients were loaded, in bytes, as PyTorch's allocator counts it (the
        CUDA context aside): the most its tensors held, the most it reserved, what it reserves now (0 on a CPU
        actor)."""
        if not torch.cuda.is_available() or next(iter(self.clients.values())).device.type != "cuda":
            return {"peak_allocated": 0, "peak_reserved": 0, "reserved": 0}
        return {"peak_allocated": int(torch.cuda.max_memory_allocated()),
                "peak_reserved": int(torch.cuda.max_memory_reserved()), "reserved": int(torch.cuda.memory_reserved())}


RemoteClientActor = ray.remote(ClientActor)

# Client actors kept between a sweep's trials. Tune's reuse_actors runs the next trial in the same trainable process
# and placement group; a trial of the same shape (the same actors and requests) then loads its clients into the
# actors the previous one left here, instead of starting new processes (torch imported, a GPU's CUDA context and
# cuDNN warmed). Keyed by (placement group, actors, request, threads, vectorise); actors of another shape are
# killed, so that the new ones can take their bundles. The group's removal ends them all.
KEPT: dict[tuple, list[Any]] = {}


def _kill(actors: Sequence[Any]) -> None:
    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # already dead
            pass


@dataclass
class _Call:
    """One actor's share of a round: its tasks and the actor they went to."""

    slot: int
    tasks: list[ClientTask]
    actor: Any


@dataclass
class _Pending:
    tasks: list[ClientTask]
    input_refs: dict[str, ray.ObjectRef]  # the round's server-state entries, put once
    # result ref -> (its task, its call, the ref of the client's state after it)
    calls: dict[ray.ObjectRef, tuple[ClientTask, _Call, ray.ObjectRef]]


def _short(e: BaseException) -> str:
    cause = getattr(e, "cause", None)  # RayTaskError: the client's own exception
    if isinstance(cause, ActorTaskError):
        return str(cause)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    if isinstance(e, ray.exceptions.RayActorError):
        return f"{type(e).__name__}: the client's actor process died"
    return f"{type(e).__name__}: {e}".splitlines()[0]


def _consume(ref: Any, timeout: float = 5.0) -> None:
    """Read a result that is not used (an error, mostly): an error object that is dropped unread is printed by Ray
    with its whole traceback (worker.py's "Unhandled error"), once per result of the call. The results of a call
    that failed arrive one by one (a multi-return call), so each is waited for, briefly."""
    try:
        ray.get(ref, timeout=timeout)
    except Exception:  # the error the call raised (already reported once), or not done in time
        pass


class RayExecutor:
    """Clients as Ray actors; the same `submit`/`collect` interface as the serial executor."""

    def __init__(self, clients: Sequence[Client] | None = None, *, plan: TrialPlan, retries: int = 3,
                 threads: int | None = None, faults: dict[tuple[int, int], list[str]] | None = None,
                 vectorise: bool = False, placement_group: Any = None) -> None:
        """Start the actors of `plan` (fda_ray.runtime.resources: how many, the clients of each, what each asks);
        with `clients` also load them, else call `load` later (the actors' processes then start while the caller
        builds the clients). `placement_group`: a Tune trial's, each actor in its own bundle of it."""
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor needs a running Ray: call fda_ray.runtime.driver.ensure_ray() first")
        if plan.actor is None or plan.num_actors < 1:
            raise ValueError("RayExecutor needs a plan with client actors (executor 'ray')")
        if clients is not None and len(clients) != plan.num_clients:
            raise ValueError(f"got {len(clients)} clients for a plan of {plan.num_clients}")
        self.plan = plan
        self.num_clients = plan.num_clients
        self.num_actors = plan.num_actors
        # Client i lives on actor i mod num_actors (TrialPlan.groups: round-robin keeps the sizes within one).
        self.slot_of = [i % self.num_actors for i in range(self.num_clients)]
        self.groups = plan.groups
        self.cpus, self.gpus = plan.actor.cpu, plan.actor.gpu
        self.placement_group = placement_group
        # The run's thread count (RunConfig.threads), whatever the CPU share: it is part of the numbers.
        self.threads = threads or 1
        self.vectorise = vectorise
        self.retries = retries
        self.faults = {key: list(v) for key, v in (faults or {}).items()}
        for (client, _), kinds in self.faults.items():
            bad = [kind for kind in kinds if kind not in FAULTS]
            if bad or not 0 <= client < self.num_clients:
                raise ValueError(f"faults={faults!r} is invalid: clients 0..{self.num_clients - 1}, kinds {FAULTS}")
        self.restarts: list[tuple[int, int, str]] = []  # (client, round, why) of every replaced actor
        self._abandoned: list[ray.ObjectRef] = []  # calls still running when a client failed for good
        self._client_refs: list[ray.ObjectRef] = []
        self._state_refs: list[ray.ObjectRef] = []  # each client's state after its last finished task
        self._key = None if placement_group is None else (
            placement_group.id.hex(), self.num_actors, plan.actor, self.threads, vectorise)
        kept = None
        for key in [k for k in KEPT if self._key is not None and k[0] == self._key[0]]:
            actors = KEPT.pop(key)
            if key == self._key:
                kept = actors
            else:
                _kill(actors)
        self.reused = kept is not None  # (a trial record says so: fda_ray.experiments.trials)
        self.actors = kept if kept is not None else [self._spawn(slot) for slot in range(self.num_actors)]
        if clients is not None:
            self.load(clients)

    def load(self, clients: Sequence[Client]) -> None:
        """Ship each client (shard, model, layout) to its actor, once per run, and wait until all are ready."""
        if len(clients) != self.num_clients:
            raise ValueError(f"got {len(clients)} clients for {self.num_clients} client slots")
        # The client objects stay in the object store so that a dead actor can be rebuilt from them.
        self._client_refs = [ray.put(c) for c in clients]
        self._state_refs = [ray.put(c.snapshot()) for c in clients]
        self._wait_ready([self._load(slot, actor) for slot, actor in enumerate(self.actors)])

    def wait_started(self) -> None:
        """Wait until every actor's process is up (torch imported, its constructor run)."""
        self._wait_ready([a.node.remote() for a in self.actors])

    def _spawn(self, slot: int) -> Any:
        options: dict[str, Any] = {}
        if self.placement_group is not None:  # its own bundle of the trial's group (TrialPlan.actor_bundle)
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=self.plan.actor_bundle(slot))
        return RemoteClientActor.options(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0, **options).remote(
            self.threads, self.vectorise, plugins.specs())

    def _load(self, slot: int, actor: Any) -> ray.ObjectRef:
        group = self.groups[slot]
        return actor.load.remote([self._client_refs[i] for i in group], self.gpus > 0,
                                 [self._state_refs[i] for i in group])

    def _start(self, slot: int) -> Any:
        actor = self._spawn(slot)
        self._load(slot, actor)  # actor calls run in order: it is loaded before any train call
        return actor

    def _wait_ready(self, refs: list[ray.ObjectRef]) -> None:
        started = time.monotonic()
        # A Tune trial's actors have their bundles reserved: nothing to note, they only load (import torch, take
        # their shards) and get the whole start time (a loaded node can take longer than $FDA_RAY_NODE_WAIT_S).
        reserved = self.placement_group is not None
        wait_s = PLACEMENT_TIMEOUT_S if reserved else min(resources.wait_seconds(), PLACEMENT_TIMEOUT_S)
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        if pending and not reserved:
            self._note_waiting(len(pending), len(refs), time.monotonic() - started)
            done, pending = ray.wait(refs, num_returns=len(refs),
                                     timeout=max(0.0, PLACEMENT_TIMEOUT_S - (time.monotonic() - started)))
        if pending:
            raise RuntimeError(
                f"{len(pending)} of {len(refs)} client actors could not start within {PLACEMENT_TIMEOUT_S:.0f} s "
                f"(each asks {resources.fmt(self._asks())}; free now {resources.free_line()}): lower "
                "cpus_per_client / gpus_per_client, or end what holds the rest")
        try:
            ray.get(done)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            if (w := plugins.worker_import_error(e)) is not None:  # an actor without the plug-ins: one line
                for ref in done:  # (each other actor's error read, else Ray prints it as an "unhandled error")
                    _consume(ref, timeout=0)
                raise w from None
            raise

    def _asks(self) -> dict[str, float]:
        return {"CPU": self.cpus, **({"GPU": self.gpus} if self.gpus else {})}

    def _note_waiting(self, pending: int, of: int, waited: float) -> None:
        """Client actors not started after $FDA_RAY_NODE_WAIT_S: when the cluster has not what one asks free and
        another job holds resources (a cluster `ray start` left that others use), one note of what they ask, what is
        free and what holds the rest, instead of a silent wait. A slow start of this command's own actors (room to
        spare, or the resources held by them while they load): nothing said."""
        free = ray.available_resources()
        if all(free.get(k, 0.0) >= v for k, v in self._asks().items()) or not resources.others_hold():
            return
        print(f"note: {pending} of {of} client actors have waited {waited:.0f} s for resources: each asks "
              f"{resources.fmt(self._asks())}; free now {resources.free_line()}; held by {resources.holders()}; "
              f"they start once it is free (at most {PLACEMENT_TIMEOUT_S:.0f} s)", file=sys.stderr, flush=True)

    def _stranded(self, replaced: set[int], since: float | None) -> float | None:
        """While replaced actors have not answered: once what they ask (the trial's placement group, or the
        actors alone) has been unplaceable on the live nodes, and on the node types an autoscaler can add, for
        $FDA_RAY_NODE_WAIT_S seconds (a restarted node may come back meanwhile), ClientsStranded: the one line
        the sweep reports, instead of a wait with no end. Returns the time the bundles were first seen
        unplaceable (None: they fit)."""

        # the trial's placement group (the plan was read back from it), or the replaced actors alone
        bundles = self.plan.bundles if self.placement_group is not None else [self.plan.actor.bundle()] * len(replaced)
        cluster = resources.from_ray()
        if not cluster.known or resources.placeable(bundles, cluster):
            return None
        now = time.monotonic()
        if since is None:
            return now
        if now - since < resources.wait_seconds():
            return since
        asks = " + ".join(resources.fmt(b) for b in bundles)
        alive = resources.fmt(cluster.largest()) if cluster.nodes else "none"
        raise ClientsStranded(f"{resources.STRANDED} this trial's client actors again (it asks {asks}; largest "
                              f"live node {alive}), {now - since:.0f} s after the cluster lost the node they ran on")

    def _replace(self, slot: int, dead: Any) -> bool:
        """Replace the actor of `slot` unless that was done already (the calls it still had failed with it)."""
        if self.actors[slot] is not dead:
            return False
        try:
            ray.kill(dead, no_restart=True)
        except Exception:  # already dead
            pass
        self.actors[slot] = self._start(slot)
        return True

    def _call(self, slot: int, tasks: list[ClientTask], input_refs: dict[str, ray.ObjectRef]
              ) -> dict[ray.ObjectRef, tuple[ClientTask, _Call, ray.ObjectRef]]:
        """One call to the actor of `slot` running `tasks`; its result refs, each with (task, call, state ref)."""
        faults = []
        for t in tasks:
            kinds = self.faults.get((t.client, t.round))
            faults.append(kinds.pop(0) if kinds else None)
        actor = self.actors[slot]
        call = _Call(slot, tasks, actor)
        names = list(dict.fromkeys(n for t in tasks for n in t.inputs))
        # Refs passed as arguments are resolved in the actor: it reads the arrays zero-copy.
        refs = actor.run.options(num_returns=2 * len(tasks)).remote(tasks, faults, names,
                                                                    *[input_refs[n] for n in names])
        return {refs[i]: (t, call, refs[len(tasks) + i]) for i, t in enumerate(tasks)}

    def submit(self, state: ServerState, tasks: Sequence[ClientTask]) -> _Pending:
        # Each entry once per round, however many clients read it.
        input_refs = {n: ray.put(state[n].detach().cpu().numpy()) for n in input_names(state, tasks)}
        by_slot: dict[int, list[ClientTask]] = defaultdict(list)
        for t in tasks:
            by_slot[self.slot_of[t.client]].append(t)
        calls: dict = {}
        for slot, mine in by_slot.items():
            calls.update(self._call(slot, mine, input_refs))
        return _Pending(list(tasks), input_refs, calls)

    def collect(self, pending: _Pending) -> list[ClientResult]:
        results: dict[int, ClientResult] = {}
        failures: dict[int, int] = defaultdict(int)
        waiting = dict(pending.calls)
        replaced: set[int] = set()  # slots whose actor was replaced in this round and has not answered yet
        since: float | None = None  # when their bundles were first seen unplaceable on the live nodes
        while waiting:
            done, _ = ray.wait(list(waiting), num_returns=1, timeout=WATCH_EVERY_S if replaced else None)
            if not done:  # a replaced actor that no live node may ever hold again (its node lost): judged
                since = self._stranded(replaced, since)
                continue
            for ref in done:
                task, call, state_ref = waiting.pop(ref)
                try:
                    result = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError, ray.exceptions.ObjectLostError) as e:
                    # (ObjectLostError: the result was made, on a node lost before it was read: the call again)
                    # The call's other results failed with it: handled here, once (read, so that Ray does not
                    # print each one's traceback as an "unhandled error" when it is dropped).
                    _consume(state_ref)
                    for other in [r for r, (_, c, _) in waiting.items() if c is call]:
                        _consume(other)
                        _consume(waiting.pop(other)[2])
                    if (w := plugins.worker_import_error(e)) is not None:
                        # an actor without the plug-ins (a replaced one, on a node that lacks one): no retry mends it
                        self._abandoned += [r for other, (_, _, st) in waiting.items() for r in (other, st)]
                        raise w from None
                    why = _short(e)
                    cause = getattr(e, "cause", None)
                    # A killed process: the driver cannot tell whose task did it, so every client of the
                    # call counts the failure (each starts again from its last finished task).
                    blamed = cause.clients if isinstance(cause, ActorTaskError) else [t.client for t in call.tasks]
                    for c in blamed:
                        failures[c] += 1
                        if failures[c] > self.retries:
                            # the round's other calls: read at shutdown, once they have ended (else Ray prints
                            # each one that fails, its actor killed, with its traceback)
                            self._abandoned += [r for other, (_, _, st) in waiting.items() for r in (other, st)]
                            raise ClientFailure(c, task.round, failures[c], why) from e
                    # An actor that raised is replaced too: its clients may be half-way through a task.
                    if self._replace(call.slot, call.actor):
                        self.restarts.append((blamed[0], task.round, why))
                        replaced.add(call.slot)
                    waiting.update(self._call(call.slot, call.tasks, pending.input_refs))  # the same cohort again
                    continue
                self._state_refs[task.client] = state_ref
                results[task.client] = result
                if call.actor is self.actors[call.slot]:
                    replaced.discard(call.slot)
                    since = None
                if call.actor is not self.actors[call.slot]:  # finished on an actor replaced since: tell its successor
                    self.actors[call.slot].restore.remote(task.client, state_ref)
        return [results[t.client] for t in pending.tasks]

    def client_states(self) -> list[dict]:
        """Every client's state after its last task (a checkpoint's). Read here, they are put back from here: the
        copies are then this process's, in its node's object store, and a replacement actor is loaded from them
        even when the node of the actor that made them is lost (its copies went with it)."""
        states = ray.get(list(self._state_refs))
        self._state_refs = [ray.put(st) for st in states]
        return states

    def client_state(self, client: int) -> dict:
        return ray.get(self._state_refs[client])

    def restore_states(self, states: Sequence[dict]) -> None:
        """Set every client's state (a resumed run): in the actors, and for rebuilding a dead one."""
        self._state_refs = [ray.put(dict(st)) for st in states]
        ray.get([self.actors[self.slot_of[i]].restore.remote(i, ref) for i, ref in enumerate(self._state_refs)])

    def nodes(self) -> list[str]:
        """The Ray node of each client actor, in slot order."""
        return ray.get([a.node.remote() for a in self.actors])

    def gpu_memory(self) -> list[dict[str, int]]:
        """Per actor (one entry per client when each actor hosts one)."""
        return ray.get([a.gpu_memory.remote() for a in self.actors])

    def shutdown(self, keep: bool = False) -> None:
        """End the actors; with `keep`, inside a Tune trial's placement group, leave them for the sweep's next trial
        of the same shape (KEPT)."""
        if keep and self._key is not None and self.actors:
            KEPT[self._key] = list(self.actors)
        else:
            _kill(self.actors)
        if self._abandoned:  # ended by now (their actors killed), or soon (kept actors finish their cohort)
            ray.wait(self._abandoned, num_returns=len(self._abandoned), timeout=30)
            for ref in self._abandoned:
                _consume(ref, timeout=0)
            self._abandoned = []
        self.actors = []
        self._client_refs = []
