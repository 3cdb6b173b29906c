"""A fusion server: trials that stay Tune trials of their own, with their clients' local training fused on one device.

A fused group (fda_ray.runtime.fusion) is one process and, through Tune, one Tune trial: a scheduler that stops
single trials (ASHA) or a searcher that chooses them one at a time (Optuna) cannot act on its members. Here every
trial keeps its own Tune trial, process, round loop, aggregation, evaluation and record; only its clients live
elsewhere, in a server actor on the trial's node (one per GPU there, or one for the node's CPUs), which fuses the
rounds of whatever trials are waiting, as inference servers batch requests (dynamic batching):

    trial process (Tune trial, driver)            fusion server (actor, on the device)
    ServedExecutor.submit(state, tasks)  ------>  run(key, tasks, ...): the round joins the waiting batch
                                                  the batch runs once every expected trial has handed in its
                                                  round, or its oldest has waited WINDOW_S: run_jobs trains the
                                                  clients of every trial as one cohort (T trials x K clients)
    ServedExecutor.collect(ref)          <------  each trial's results and its clients' states

A trial that ASHA stops, that fails or finishes leaves (`leave`); one whose process was ended without leaving is
waited for one window once (fda_ray.runtime.fusion.TrialGroup's window). The numbers are those of the trial run
alone, as in a group: the same cohort arithmetic row by row (run_jobs), the server's thread count that of the
trials (threads is in the fusion key); tests/test_fusion_server.py holds served == alone.

Costs against a group in one process: each round ships the server state's entries the tasks read to the server
and the clients' results and states back (the object store; a few MB for the simple CNN), and each trial process
loads its data too. What it buys: single trials for the scheduler, and trials that start and end at any time
(a new Optuna point joins the next batch).
"""
from __future__ import annotations

import time
import warnings
import zlib
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import ray
import torch

import fda_ray.algorithms  # noqa: F401  (registers every family's recipes in the server's process)
from fda_ray.core import plugins
from fda_ray.core.contract import ClientResult, ClientTask, ServerState, input_names
from fda_ray.core.interrupts import error_line
from fda_ray.runtime.fusion import TrialGroup, own_seconds, window_seconds
from fda_ray.runtime.ray_executor import ActorTaskError
from fda_ray.train.client import Client

NAMESPACE = "fda_ray"
SERVER_GPU = 0.5  # a GPU server's share: the rest is its trials' drivers' (evaluation, 0.01 each)


class FusionServer:
    """Hosts the clients of many trials and runs their rounds in fused batches (wrapped with `ray.remote` below)."""

    def __init__(self, threads: int, window_s: float, imports: Sequence[tuple[str, str | None]] = ()) -> None:
        from fda_ray.core.quiet import quiet_worker

        quiet_worker()  # torch's "No CUDA runtime is found" when the kernels load here: hidden, as in trial processes
        self.broken: plugins.WorkerImportError | None = None
        try:
            plugins.load_in_worker("fusion server", imports)
        except plugins.WorkerImportError as e:  # raised by every call, as a client actor does
            self.broken = e
            return
        torch.set_num_threads(threads)
        self.device = "cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"
        if self.device == "cuda":
            from fda_ray.train.device import warm

            warm("cuda")
        self.group = TrialGroup([], vectorise=True, threads=threads, window_s=window_s)
        self.clients: dict[str, dict[int, Client]] = {}

    def _check(self) -> None:
        if self.broken is not None:
            raise self.broken

    def node(self) -> str:
        self._check()
        return ray.get_runtime_context().get_node_id()

    def load(self, key: str, client_refs: Sequence[ray.ObjectRef], state_refs: Sequence[ray.ObjectRef]) -> None:
        """Trial `key`'s clients (with their states), moved to the server's device once; it joins the batches."""
        self._check()
        clients: list[Client] = ray.get(list(client_refs))  # (refs inside a list are not resolved by Ray)
        states: list[dict] = ray.get(list(state_refs))
        hosted = {}
        for client, state in zip(clients, states):
            client = client.to(self.device)
            client.restore(state)
            hosted[client.index] = client
        self.group.leave(key)  # a trial run again (Tune's retry): a round its ended process left waiting goes
        self.clients[key] = hosted
        self.group.add(key)

    def run(self, key: str, tasks: Sequence[ClientTask], names: Sequence[str], *arrays: np.ndarray
            ) -> tuple[list[ClientResult], list[dict]]:
        """Trial `key`'s round: `tasks` on its clients, `arrays` the server-state entries `names`; returns the
        results in task order and each task's client's state after it. Blocks until its batch has run."""
        from fda_ray.train.cohort import Job

        self._check()
        if key not in self.clients:
            raise RuntimeError(f"trial {key} has no clients on this fusion server (it restarted): the trial runs "
                               "again and loads them")
        with warnings.catch_warnings():  # the object store's arrays are read-only; they are only read (copied in)
            warnings.simplefilter("ignore", UserWarning)
            state = {name: torch.from_numpy(a) for name, a in zip(names, arrays)}  # (M,) each
        hosted = self.clients[key]
        jobs = [Job(hosted[t.client], t, (lambda t=t: {n: state[n] for n in t.inputs})) for t in tasks]
        results = self.group.wait(self.group.submit(key, jobs))
        for r in results:
            if isinstance(r, BaseException):
                raise ActorTaskError([t.client for t in tasks], error_line(r)) from r
        return list(results), [hosted[t.client].snapshot() for t in tasks]

    def restore(self, key: str, states: dict[int, dict]) -> None:
        self._check()
        for index, state in states.items():
            self.clients[key][index].restore(state)

    def leave(self, key: str) -> dict[str, int]:
        """Trial `key` is done (finished, stopped, failed): its clients go; what it was fused with."""
        self._check()
        self.group.leave(key)
        self.clients.pop(key, None)
        mine = self.group.stats.per_member.pop(key, [0, 0])
        share = self.group.stats.share.pop(key, 0.0)  # its jobs' part of its batches' seconds (ServedGroup.own_seconds)
        return {"members": mine[1], "batches": mine[0], "served": 1, "share": share}

    def stats(self) -> dict[str, Any]:
        """The batches run so far: how many, the trials and jobs of each, the seconds they took."""
        s = self.group.stats
        return {"batches": s.batches, "members": list(s.members), "jobs": list(s.jobs), "seconds": s.seconds,
                "hosting": sorted(self.clients)}


RemoteFusionServer = ray.remote(FusionServer)


# ---------------------------------------------------------------------------------------------- the trial's side

class ServedExecutor:
    """A trial's executor (fda_ray.runtime.executors' interface) whose clients live on a fusion server."""

    def __init__(self, server: Any, key: str, clients: Sequence[Client]) -> None:
        self.server, self.key = server, key
        self.indices = [c.index for c in clients]
        self.states = {c.index: c.snapshot() for c in clients}  # after each client's last finished task
        self.fused: dict[str, int] = {}
        self.share = 0.0  # its jobs' part of the seconds of the server's batches it trained in (told on leaving)
        self.waited = 0.0  # seconds its rounds waited for the server (shipping, the batch, the other trials' rounds)
        self.pending: list[Any] = []  # rounds submitted and not collected (a trial stopped in the middle of one)
        ray.get(server.load.remote(key, [ray.put(c) for c in clients],
                                   [ray.put(self.states[i]) for i in self.indices]))

    def submit(self, state: ServerState, tasks: Sequence[ClientTask]) -> Any:
        names = input_names(state, tasks)
        arrays = [state[n].detach().cpu().numpy() for n in names]
        ref = self.server.run.remote(self.key, list(tasks), list(names), *arrays)
        self.pending.append(ref)
        return ref

    def collect(self, pending: Any) -> list[ClientResult]:
        if pending in self.pending:
            self.pending.remove(pending)
        t0 = time.perf_counter()
        try:
            results, states = ray.get(pending)
        except ray.exceptions.RayTaskError as e:  # the server's error, not Ray's wrapper around it
            cause = e.as_instanceof_cause()
            raise (cause.cause if isinstance(getattr(cause, "cause", None), BaseException) else cause) from None
        finally:
            self.waited += time.perf_counter() - t0
        for result, st in zip(results, states):
            self.states[result.client] = st
        return results

    def client_states(self) -> list[dict]:
        return [self.states[i] for i in self.indices]

    def client_state(self, client: int) -> dict:
        return self.states[client]

    def restore_states(self, states: Sequence[dict]) -> None:
        self.states = dict(zip(self.indices, states))
        ray.get(self.server.restore.remote(self.key, self.states))

    def nodes(self) -> list[str]:
        return [ray.get(self.server.node.remote())]

    def shutdown(self, keep: bool = False) -> None:
        try:
            self.fused = ray.get(self.server.leave.remote(self.key), timeout=30)
        except Exception:  # the server is gone (its node lost): nothing of this trial is left on it
            self.fused = {"members": 0, "batches": 0, "served": 1}
        self.share = float(self.fused.pop("share", 0.0))  # (its seconds, not a field of the record's "fused")
        # a round in flight when the trial stopped (ASHA stops a trial mid-round) ends on the server with "left the
        # group": read here, or Ray prints that error's traceback as an unhandled one when the reference goes
        for ref in self.pending:
            try:
                ray.get(ref, timeout=30)
            except Exception:  # (its error is the leave's own doing)
                pass
        self.pending.clear()


class ServedGroup:
    """What a trial's run_trial needs of its group (fda_ray.experiments.trials.run_trial's `group`): its executor
    on the server, and what its record says of its fusing."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.executors: dict[str, ServedExecutor] = {}

    def executor(self, key: str, clients: Sequence[Client]) -> ServedExecutor:
        self.executors[key] = ServedExecutor(self.server, key, clients)
        return self.executors[key]

    def record(self, key: str) -> dict[str, int]:
        """The most trials one of its rounds was fused with (itself included), its rounds the server ran, served."""
        return dict(self.executors[key].fused)

    def own_seconds(self, key: str, wall: float, waited: float) -> float:
        """A served trial's own run time (fda_ray.runtime.fusion.own_seconds), its share the one the server told on
        its leaving. A server lost under it told none: its rounds there count as nothing of its own (the record's
        wall time stays)."""
        return own_seconds(wall, waited, self.executors[key].share)


# ---------------------------------------------------------------------------------------------- the launch's side

# The servers this process started, by name: a named actor lives while its creator holds a handle (not detached:
# it ends with the launch that started it, a killed one included).
_STARTED: dict[str, Any] = {}


def server_name(node_id: str, slot: int) -> str:
    return f"fda-fusion:{node_id}:{slot}"


def servers_on(have: Mapping[str, float], threads: int, cuda: bool) -> int:
    """How many fusion servers a node with resources `have` runs: one per GPU (device cuda), else one when it has
    `threads` CPUs."""
    return int(have.get("GPU", 0.0)) if cuda else int(have.get("CPU", 0.0) >= threads)


def beside_servers(cluster: Any, threads: int, cuda: bool) -> Any:
    """`cluster` (fda_ray.runtime.resources.Cluster) as a served trial sees it: each node's resources less what its
    fusion servers hold for the whole launch ({CPU threads} each, SERVER_GPU of a GPU each on cuda), a node without
    a server left out (a served trial trains on its node's server). What the stranded-trial watch places a served
    trial's bundles on: against the nodes' totals, a node lost mid-launch left the survivors' servers holding every
    CPU, no trial could be placed, and the watch waited for good instead of ending the launch."""
    import dataclasses

    def left(n: Mapping[str, float]) -> dict[str, float]:
        k = servers_on(n, threads, cuda)
        return {r: max(0.0, v - (k * threads if r == "CPU" else k * SERVER_GPU if r == "GPU" and cuda else 0.0))
                for r, v in n.items()}  # (a GPU node of fewer CPUs than its servers' threads: none left, not < 0)

    return dataclasses.replace(cluster, nodes=tuple(left(n) for n in cluster.nodes if servers_on(n, threads, cuda)),
                               types=tuple(left(t) for t in cluster.types if servers_on(t, threads, cuda)))


def served_watch(cfg: Any) -> dict[str, Any]:
    """fda_ray.experiments.stranded.StrandedWatch's keywords for served trials of the resolved `cfg`: the live nodes
    less what their servers hold (beside_servers), so a node loss that leaves no node a served trial fits beside its
    server ends the launch in one line."""
    from fda_ray.runtime import resources

    cuda = cfg.device.startswith("cuda")
    return {"cluster": lambda: beside_servers(resources.from_ray(), cfg.threads, cuda)}


@contextmanager
def serving(cfg: Any | None) -> Iterator[dict[str, list[str]]]:
    """The fusion servers for trials of the resolved `cfg` (its threads and device: start_servers) while a launch
    runs, stopped after it, whatever ends it; {} for cfg None (the trials then train as trials of their own)."""
    names = start_servers(cfg.threads, cfg.device) if cfg is not None else {}
    try:
        yield names
    finally:
        stop_servers(names)


def start_servers(threads: int, device: str, window_s: float | None = None) -> dict[str, list[str]]:
    """One fusion server per GPU of every live node that has GPUs (device cuda), else one per node with `threads`
    CPUs to spare; waits until they are up. Returns {node id: [server names]} for the trials (`served_group`)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    window = window_seconds() if window_s is None else window_s
    cuda = str(device).startswith("cuda")
    names: dict[str, list[str]] = {}
    handles = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for slot in range(servers_on(node.get("Resources", {}), threads, cuda)):
            name = server_name(node["NodeID"], slot)
            handles.append(_STARTED.setdefault(name, RemoteFusionServer.options(
                name=name, namespace=NAMESPACE, get_if_exists=True, num_cpus=threads,
                num_gpus=SERVER_GPU if cuda else 0, max_concurrency=1024, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(threads, window, plugins.specs())))
            names.setdefault(node["NodeID"], []).append(name)
    if not handles:
        raise ValueError(f"fuse: no live node can hold a fusion server ({'a GPU' if cuda else f'{threads} CPU(s)'})")
    try:
        ray.get([h.node.remote() for h in handles])
    except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
        if (w := plugins.worker_import_error(e)) is not None:
            raise w from None
        raise
    return names


def stop_servers(names: dict[str, list[str]]) -> None:
    for name in (n for ns in names.values() for n in ns):
        handle = _STARTED.pop(name, None)
        try:
            ray.kill(handle if handle is not None else ray.get_actor(name, namespace=NAMESPACE))
        except ValueError:  # gone already
            pass


def served_group(names: dict[str, list[str]], key: str) -> ServedGroup:
    """The group of trial `key` in this process: a server on its own node (chosen by the key, so that a node's
    servers share its trials evenly), else any."""
    here = ray.get_runtime_context().get_node_id()
    candidates = names.get(here) or [n for ns in names.values() for n in ns]
    name = candidates[zlib.crc32(key.encode()) % len(candidates)]
    return ServedGroup(ray.get_actor(name, namespace=NAMESPACE))


def served_bundle(cfg: Any, fuse: int, driver_extra: dict[str, float] | None = None) -> dict[str, float]:
    """A served trial's one bundle: its driver (round loop, aggregation, evaluation), a 1/fuse share of its
    threads' CPUs (its clients' training is the server's), and on a GPU the driver's share of the device."""
    share = 1.0 / max(1, fuse)
    bundle = {"CPU": max(0.01, round(float(cfg.threads) * share, 2))}  # (Ray's CPU requests are in hundredths)
    if str(cfg.device).startswith("cuda"):  # a node's GPU: the server's half, then its trials' drivers
        bundle["GPU"] = max(0.0001, round((1.0 - SERVER_GPU) * share, 4))
    return {**bundle, **(driver_extra or {})}
