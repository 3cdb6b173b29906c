"""The resource model: what a run or a Tune trial asks of Ray, and where it can go, computed in one place.

For a resolved RunConfig and the nodes it will run on (a `Cluster`: this machine, a running Ray cluster with its
autoscaler's node types, or a node shape the user names with --plan-for), `plan` returns a `TrialPlan`:

    driver        what the trial's driver asks (a Tune trial's first bundle, DRIVER_BUNDLE; a run driven from
                  this process, or from a DriverActor, asks nothing of Ray)
    actors        how many client actors, how many clients each hosts (client i lives on actor i mod actors),
                  and what each asks (CPU, GPU)
    bundles       a Tune trial's placement group: [driver, actor 0, actor 1, ...], packed on one node when they fit

and `placeable`, `check` and `concurrent` say whether such a group can ever be placed on the cluster's nodes (a
request no node set can hold is a one-line error, never a silent wait) and how many run at once. The executor
(fda_ray.runtime.executors, ray_executor), the pre-flight, Tune's reservation (fda_ray.experiments.tune), the
sweep's --dry-run and the benchmarks read their shares from here; nothing else computes one.

The rules, and why (docs/ray-and-clusters.md, "How a trial is sized"):

    GPU shares are asked per process. Ray does not divide a GPU's memory or compute: a share only decides how
        many processes it admits to the GPU. An actor trains the clients it hosts one computation at a time (in
        turn, or as one vectorised cohort), so it asks `gpus_per_client` once, whatever their number.
    CPU for GPU work is the launch loop's. An actor whose clients train on a GPU keeps about one core busy
        launching kernels (`threads` cores), however many clients it hosts: `cpus_per_client` x clients only
        when the user sets cpus_per_client.
    A trial's driver asks `threads` CPUs, and with --device cuda a GPU share: DRIVER_GPU_FRACTION of a
        client actor's (it aggregates and evaluates once a round), or, beside CPU clients or in a serial trial,
        the measured share of one trial (TRIAL_GPU_SHARE).
    Pooling: CPU clients, one actor per `threads` CPUs the cluster has beside the driver, at most one per
        client; GPU clients, in a Tune trial one actor (its clients train side by side in it, a thread and a CUDA
        stream each: fda_ray.train.cohort.run_concurrently), in a run one actor per whole GPU, at most one per
        client; cfg.clients_per_actor overrides.
    Default GPU shares come from measurement: on one H100/H200 eight trials of the paper noise grid at once
        kept the GPU 99 % busy (one alone: 11-16 %), so a trial of the simple CNN asks 1/8 of a GPU.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    from fda_ray.core.config import RunConfig

DRIVER_BUNDLE = 0  # a Tune trial's placement group: the driver's bundle first, then one per client actor
PLACEMENT_STRATEGY = "PACK"  # a trial's bundles on one node when they fit (its weights stay in one object store)
DRIVER_GPU_FRACTION = 0.1  # a driver's GPU share, as a fraction of one client actor's
# One trial's share of a GPU, by model, measured (module docstring): trials that ask it fill a GPU. A model not
# measured asks TRIAL_GPU_SHARE_UNMEASURED (4 at once), until a GPU run of python -m benchmarks.sweep measures
# it and its share is entered here. mnist_cnn (DomainBed's CNN): one paper-profile trial alone kept an H200 as
# little busy as one simple-CNN trial (docs/results/bench-sweep/h200-mnist-cnn-{1,8}.json). Memory is not
# modelled: a simple-CNN trial held several GiB of an H200 with its clients side by side (docs/ray-and-clusters.md).
TRIAL_GPU_SHARE = {"simple_cnn": 0.125, "mlp": 0.125, "mnist_cnn": 0.125}
TRIAL_GPU_SHARE_UNMEASURED = 0.25
MIN_CPU_SHARE = 0.01  # Ray's CPU requests are in hundredths


# ---------------------------------------------------------------- requests and plans

@dataclass(frozen=True)
class Request:
    """One process's (one bundle's) request."""

    cpu: float
    gpu: float = 0.0
    extra: tuple[tuple[str, float], ...] = ()  # custom resources (fda_driver)

    def bundle(self) -> dict[str, float]:
        out = {"CPU": float(self.cpu)}
        if self.gpu > 0:
            out["GPU"] = float(self.gpu)
        out.update({k: float(v) for k, v in self.extra})
        return out


@dataclass(frozen=True)
class TrialPlan:
    """What one run or trial asks (module docstring)."""

    executor: str  # "serial": the driver trains the clients; "ray": client actors
    num_clients: int
    clients_per_actor: int  # 0 with executor serial
    num_actors: int
    actor: Request | None
    driver: Request | None  # None: the driver asks nothing of Ray (a run driven from this process)
    pooling: str  # how the actors were sized, in words
    fields: tuple[str, ...] = ()  # the options that set the request, as field=value (for an error line)
    strategy: str = PLACEMENT_STRATEGY

    @property
    def bundles(self) -> list[dict[str, float]]:
        """The placement group's bundles: [driver (DRIVER_BUNDLE), actor 0, actor 1, ...]."""
        head = [self.driver.bundle()] if self.driver is not None else []
        return head + ([self.actor.bundle()] * self.num_actors if self.actor is not None else [])

    def actor_bundle(self, slot: int) -> int:
        """The bundle index of client actor `slot` in the trial's placement group."""
        return (DRIVER_BUNDLE + 1 if self.driver is not None else 0) + slot

    @property
    def groups(self) -> list[list[int]]:
        """The clients of each actor: client i on actor i mod num_actors (round-robin: sizes within one)."""
        return [[i for i in range(self.num_clients) if i % self.num_actors == s] for s in range(self.num_actors)]

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for b in self.bundles:
            for k, v in b.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def describe(self) -> str:
        """One line: the bundles, in order."""
        parts = []
        if self.driver is not None:
            parts.append(f"driver {fmt(self.driver.bundle())}")
        if self.actor is not None:
            parts.append(f"{self.num_actors} client actor(s) x {fmt(self.actor.bundle())}, "
                         f"{self.clients_per_actor} client(s) each at most ({self.pooling})")
        elif self.executor == "serial":
            parts.append(f"{self.num_clients} clients trained in the driver's process")
        return "; ".join(parts)


# ---------------------------------------------------------------- clusters

@dataclass(frozen=True)
class Cluster:
    """The nodes a plan is made for. `nodes`: each node's resources; `types`: node types an autoscaler can add
    (any number of each); `known`: whether these are all the nodes there can ever be."""

    nodes: tuple[Mapping[str, float], ...]
    types: tuple[Mapping[str, float], ...] = ()
    known: bool = True
    source: str = "this machine"

    @property
    def shapes(self) -> list[Mapping[str, float]]:
        return list(self.nodes) + list(self.types)

    def total(self, resource: str) -> float:
        """Of the nodes up now (what pooling sizes a trial to)."""
        return float(sum(n.get(resource, 0.0) for n in self.nodes))

    def largest(self, by: str | None = None) -> Mapping[str, float]:
        """The node with the most CPUs (GPUs first), for an error line; `by` a resource: the node with the most of
        it (a line about too few CPUs names the node with the most CPUs, not a 1-CPU node with a GPU)."""
        order = (by, "GPU", "CPU") if by else ("GPU", "CPU")
        return max(self.shapes, key=lambda s: tuple(s.get(r, 0.0) for r in order), default={})


def this_machine() -> Cluster:
    """This machine as one node: the CPUs this process may run on and the GPUs torch sees (nothing started)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    gpus = 0
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        pass
    node = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
    return Cluster((node,), source="this machine")


def from_ray(joined: bool | None = None) -> Cluster:
    """The running Ray cluster's alive nodes and the node types its autoscaler can add (Ray initialised).
    `joined`: whether this process joined an existing cluster (then nodes may come that are not listed, unless
    `ray up`'s node types are readable); default: whether RAY_ADDRESS names one."""
    import ray

    from fda_ray.runtime.preflight import autoscaler_node_types

    nodes = tuple({k: float(v) for k, v in n["Resources"].items()} for n in ray.nodes() if n.get("Alive"))
    types = tuple(autoscaler_node_types())
    if joined is None:
        joined = bool(os.environ.get("RAY_ADDRESS"))
    return Cluster(nodes, types, known=nodes_known(joined, types),
                   source="the Ray cluster" if joined else "this machine's Ray")


KUBERAY_ENV = ("RAY_CLUSTER_NAME", "KUBERAY_GEN_RAY_START_CMD")  # set by KubeRay in its Ray pods


def nodes_known(joined: bool, types: Sequence[Mapping[str, float]], kuberay: bool | None = None) -> bool:
    """Whether the nodes up now and the autoscaler's types are every node the sweep can know of: a Ray this
    process started, a cluster whose autoscaler's node types are readable (`ray up`'s file on the head), or a
    joined cluster's current nodes (SLURM, hand-started nodes: no node comes by itself). Only on KubeRay (its pods
    carry KUBERAY_ENV), whose autoscaler may add a worker group at zero replicas that no file here describes, are
    they not all known."""
    if kuberay is None:
        kuberay = any(os.environ.get(k) for k in KUBERAY_ENV)
    return not joined or bool(types) or not kuberay


_NODE = re.compile(r"^(?:(\d+)\s*[x*]\s*)?(.+)$")


def parse_nodes(text: str, field: str = "plan_for") -> Cluster:
    """--plan-for: 'CPU=16,GPU=1' (one node), several joined by '+', a count before 'x': '3xCPU=1' (three 1-CPU
    nodes), 'CPU=16,GPU=1+2xCPU=48,GPU=4'. Other resources by name (fda_driver=8)."""
    nodes: list[dict[str, float]] = []
    for part in [p.strip() for p in str(text).split("+")]:
        m = _NODE.match(part)
        if not part or not m:
            raise ValueError(f"{field}={text!r} is invalid: node shapes such as CPU=16,GPU=1 (several joined by "
                             "'+', a count as 3xCPU=1)")
        count = int(m.group(1) or 1)
        node: dict[str, float] = {}
        for kv in m.group(2).split(","):
            name, eq, value = kv.partition("=")
            try:
                v = float(value)
            except ValueError:
                v = -1.0
            if not eq or not name.strip() or v < 0 or not math.isfinite(v):
                raise ValueError(f"{field}={text!r} is invalid: {kv.strip()!r} is not RESOURCE=NUMBER (e.g. CPU=16,"
                                 "GPU=1)")
            node[name.strip()] = v
        if count < 1:
            raise ValueError(f"{field}={text!r} is invalid: a node count is at least 1")
        nodes += [dict(node) for _ in range(count)]
    return Cluster(tuple(nodes), source=f"--plan-for {text}")


# ---------------------------------------------------------------- the plan

def local_workers(cfg: RunConfig, cluster: Cluster | None = None) -> int:
    """The local backend's trials at once (a process pool of serial runs): one per `threads` CPUs and, on a GPU
    (--device cuda names one), no more than it holds at each trial's measured share (TRIAL_GPU_SHARE)."""
    cluster = cluster or this_machine()
    by_cpu = max(1, int(cluster.total("CPU") // max(1, cfg.threads)))
    if not _cuda(cfg):
        return by_cpu
    return max(1, min(by_cpu, int(1 / trial_gpu_share(cfg) + 1e-9)))


def trial_gpu_share(cfg: RunConfig) -> float:
    """One trial's measured share of a GPU (TRIAL_GPU_SHARE by model)."""
    return TRIAL_GPU_SHARE.get(cfg.model or "", TRIAL_GPU_SHARE_UNMEASURED)


def _cuda(cfg: RunConfig) -> bool:
    return cfg.device.startswith("cuda")


def driver_request(cfg: RunConfig, extra: Mapping[str, float] | None = None) -> Request:
    """A Tune trial's driver: `threads` CPUs; on --device cuda a GPU share (module docstring)."""
    if not _cuda(cfg):
        gpu = 0.0
    elif cfg.executor == "ray" and cfg.gpus_per_client > 0:
        gpu = min(1.0, cfg.gpus_per_client) * DRIVER_GPU_FRACTION
    else:  # the only GPU user of its trial: a serial trial, or the driver of CPU clients
        gpu = trial_gpu_share(cfg)
    return Request(float(cfg.threads), _hundredths(gpu) if gpu else 0.0, tuple(sorted((extra or {}).items())))


def _hundredths(x: float) -> float:
    """Ray admits GPU shares in 1/10000 units; keep a share a clean decimal (0.0125, not 0.012500000000000002)."""
    return max(1e-4, round(x, 4))


def num_clients(cfg: RunConfig) -> int:
    from fda_ray.algorithms import ALGORITHMS

    return int(ALGORITHMS.get(cfg.method).num_clients(cfg))


def request_fields(cfg: RunConfig) -> tuple[str, ...]:
    """The options that make a client actor's request, as field=value."""
    parts = [f"cpus_per_client={cfg.cpus_per_client!r}"] if cfg.cpus_per_client is not None else []
    if cfg.gpus_per_client > 0 or not parts:
        parts.append(f"gpus_per_client={cfg.gpus_per_client!r}")
    if cfg.clients_per_actor is not None:
        parts.append(f"clients_per_actor={cfg.clients_per_actor}")
    if cfg.threads != 1:
        parts.append(f"threads={cfg.threads}")
    return tuple(parts)


def plan(cfg: RunConfig, cluster: Cluster | None = None, *, in_tune: bool = False,
         driver_extra: Mapping[str, float] | None = None, clients: int | None = None) -> TrialPlan:
    """The plan of the resolved `cfg` on `cluster` (default this machine). `in_tune`: a Tune trial (its driver
    asks a bundle); `clients`: the number of clients when known (default: the method's)."""
    cluster = cluster or this_machine()
    n = clients if clients is not None else num_clients(cfg)
    driver = driver_request(cfg, driver_extra) if in_tune else None
    fields = request_fields(cfg) + ((f"device={cfg.device!r}",) if _cuda(cfg) else ())
    if cfg.executor != "ray":
        return TrialPlan("serial", n, 0, 0, None, driver, "serial", fields)
    g = float(cfg.gpus_per_client)
    cpc = cfg.cpus_per_client
    threads = float(cfg.threads)
    if cfg.clients_per_actor is not None:
        k = cfg.clients_per_actor
        pooling = "set by clients_per_actor"
    else:
        if g > 0 and driver is not None:  # a Tune trial: its clients side by side in one process; more trials
            actors = 1                        # fill more GPUs (a trial's actors would share one GPU anyway)
            pooling = "pooled: one actor per trial on a GPU"
        elif g > 0:
            actors = max(1, min(n, int(cluster.total("GPU"))))
            pooling = "pooled: one actor per whole GPU"
        else:
            free = cluster.total("CPU") - (driver.cpu if driver is not None else 0.0)
            actors = max(1, min(n, int(free // (cpc if cpc else threads)) if free > 0 else 1))
            pooling = f"pooled: one actor per {cpc if cpc else cfg.threads:g} CPU(s) beside the driver"
        if cpc:  # an actor asks cpc for each client it hosts: no more clients than the largest node holds
            fit = max(1, int(max(s.get("CPU", 0.0) for s in cluster.shapes) // cpc) if cluster.shapes else 1)
            if math.ceil(n / fit) > actors:
                actors = math.ceil(n / fit)
                pooling = f"pooled: {fit} client(s) an actor at most, as many as the largest node holds"
        k = math.ceil(n / actors)
    actors = math.ceil(n / k)
    k = math.ceil(n / actors)  # round-robin: the largest group (4 clients at 3 a actor: 2 actors of 2)
    if cpc is not None:
        cpu = cpc * k  # the user's per-client share, for each client the actor hosts
    elif driver is not None:
        cpu = threads  # a trial's actor process: its launch loop (GPU) or its threads (CPU)
    else:  # a run driven from this process: share the cores among the actors, so every one can be placed
        total = cluster.total("CPU") or threads
        cpu = max(MIN_CPU_SHARE, min(threads, math.floor(100 * total / actors) / 100))
    # a GPU share per process (module docstring); above 1, whole GPUs as asked
    return TrialPlan("ray", n, k, actors, Request(round(cpu, 4), g), driver, pooling, fields)


def plan_in_group(cfg: RunConfig, bundle_specs: Sequence[Mapping[str, float]], clients: int | None = None
                  ) -> TrialPlan:
    """The plan a Tune trial's placement group was reserved for, read back from its bundles inside the trial
    (the cluster's free resources have changed since: the group is the plan)."""
    n = clients if clients is not None else num_clients(cfg)
    specs = [dict(b) for b in bundle_specs]
    driver = Request(specs[DRIVER_BUNDLE].get("CPU", 0.0), specs[DRIVER_BUNDLE].get("GPU", 0.0),
                     tuple(sorted((k, v) for k, v in specs[DRIVER_BUNDLE].items() if k not in ("CPU", "GPU"))))
    actors = specs[DRIVER_BUNDLE + 1:]
    if cfg.executor != "ray" or not actors:
        return TrialPlan("serial", n, 0, 0, None, driver, "serial")
    k = math.ceil(n / len(actors))
    actor = Request(actors[0].get("CPU", 0.0), actors[0].get("GPU", 0.0))
    return TrialPlan("ray", n, k, math.ceil(n / k), actor, driver, "one actor per client bundle of the trial")


# ---------------------------------------------------------------- placement on a cluster

def _gpus_of(node: Mapping[str, float]) -> list[float]:
    """A node's GPUs as devices with their free share (a fractional request fits on one device)."""
    whole = int(node.get("GPU", 0.0) + 1e-9)
    rest = node.get("GPU", 0.0) - whole
    return [1.0] * whole + ([rest] if rest > 1e-9 else [])


class _Node:
    def __init__(self, shape: Mapping[str, float]) -> None:
        self.free = {k: float(v) for k, v in shape.items() if k != "GPU"}
        self.gpus = _gpus_of(shape)

    def take(self, bundle: Mapping[str, float]) -> bool:
        """Reserve `bundle` here if it fits (a GPU share from one device; whole GPUs from whole devices)."""
        for k, v in bundle.items():
            if k != "GPU" and v > 0 and self.free.get(k, 0.0) + 1e-9 < v:
                return False
        g = bundle.get("GPU", 0.0)
        pick: list[int] = []
        if g > 0:
            if g < 1:
                fits = [i for i, f in enumerate(self.gpus) if f + 1e-9 >= g]
                if not fits:
                    return False
                pick = [min(fits, key=lambda i: self.gpus[i])]  # the fullest device that holds it (Ray packs)
            else:
                pick = [i for i, f in enumerate(self.gpus) if f >= 1 - 1e-9][:int(round(g))]
                if len(pick) < int(round(g)):
                    return False
        for k, v in bundle.items():
            if k != "GPU" and v > 0:
                self.free[k] -= v
        for i in pick:
            self.gpus[i] -= g if g < 1 else 1.0
        return True

    def copy(self) -> "_Node":
        n = _Node({})
        n.free, n.gpus = dict(self.free), list(self.gpus)
        return n


def _place(bundles: Sequence[Mapping[str, float]], nodes: list[_Node]) -> list[_Node] | None:
    """Ray's PACK, approximately: all bundles on one node when one holds them (the fullest such node), else each
    bundle on the first node with room. Returns the nodes after placing, or None."""
    for i in sorted(range(len(nodes)), key=lambda i: sum(nodes[i].free.values()) + sum(nodes[i].gpus)):
        trial = nodes[i].copy()
        if all(trial.take(b) for b in bundles):
            return nodes[:i] + [trial] + nodes[i + 1:]
    after = [n.copy() for n in nodes]
    for b in sorted(bundles, key=lambda b: (-b.get("GPU", 0.0), -b.get("CPU", 0.0))):
        if not any(n.take(b) for n in after):
            return None
    return after


# What every "no node can hold it any more" line starts with (the trials' own and the sweep's watch's), so that the
# sweep recognises such a failure in a trial's error whichever process raised it.
STRANDED = "no live node can hold"
WAIT_ENV = "FDA_RAY_NODE_WAIT_S"
DEFAULT_WAIT_S = 60.0


def wait_seconds() -> float:
    """$FDA_RAY_NODE_WAIT_S (default 60): how long what a run asks may stay unplaceable on the live nodes (a
    restarted node may come back) before the run says so and stops waiting."""
    from fda_ray.core.parsing import env_seconds

    try:
        return env_seconds(WAIT_ENV, DEFAULT_WAIT_S)
    except ValueError as e:
        from fda_ray.runtime.preflight import PreflightError

        raise PreflightError(str(e)) from None


def free_line() -> str:
    """What the running Ray has free now, of what it has: '{CPU: 0} of {CPU: 2}'."""
    import ray

    total = ray.cluster_resources()
    free = {k: ray.available_resources().get(k, 0.0) for k in total}
    return f"{fmt(free)} of {fmt(total)}"


def holders_line(jobs: Iterable[Mapping], actors: Iterable[Mapping], groups: Iterable[Mapping], own_job: str,
                 most: int = 3) -> str:
    """Who holds a cluster's resources, from Ray's tables (GCS: jobs, actors, placement groups): each live job's
    driver (its pid, host and command), its alive actors and its placement groups' bundles, this command's own
    job named as such. A placement group's id ends with its job's id."""
    count, held = _holdings(actors, groups)
    parts = []
    for j in _holding_jobs(jobs, count, held):
        jid = j.get("JobID", "")
        who = "this command" if jid == own_job else (
            f"job {jid} (pid {j.get('DriverPid')} on {j.get('DriverIPAddress')}"
            + (f": {_command(str(j['Entrypoint']))}" if j.get("Entrypoint") else "") + ")")
        what = [f"{count[jid]} actor(s)"] if count.get(jid) else []
        what += [f"placement groups {fmt(held[jid])}"] if held.get(jid) else []
        parts.append(f"{who}: {', '.join(what)}")
    parts.sort(key=lambda x: x.startswith("this command"))  # the others first: they are why the trials wait
    if not parts:
        return "nothing Ray's tables show (tasks of other jobs, or resources in use outside Ray)"
    return "; ".join(parts[:most]) + (f"; and {len(parts) - most} more job(s)" if len(parts) > most else "")


def _holdings(actors: Iterable[Mapping], groups: Iterable[Mapping]
              ) -> tuple[dict[str, int], dict[str, dict[str, float]]]:
    """Per job id: its alive actors' count, and its live placement groups' bundles summed."""
    count: dict[str, int] = {}
    held: dict[str, dict[str, float]] = {}
    for a in actors:
        if a.get("State") == "ALIVE":
            count[a.get("JobID", "")] = count.get(a.get("JobID", ""), 0) + 1
    for g in groups:
        if g.get("state") in ("CREATED", "RESCHEDULING"):
            total = held.setdefault(str(g.get("placement_group_id", ""))[-8:], {})
            for b in (g.get("bundles") or {}).values():
                for k, v in b.items():
                    total[k] = total.get(k, 0.0) + float(v)
    return count, held


def _holding_jobs(jobs: Iterable[Mapping], count: Mapping[str, int], held: Mapping[str, Mapping[str, float]]
                  ) -> list[Mapping]:
    """The live jobs that hold something: alive actors or placement groups."""
    return [j for j in jobs if not j.get("IsDead") and (count.get(j.get("JobID", "")) or held.get(j.get("JobID", "")))]


def others_hold() -> bool:
    """Whether a job other than this command's holds actors or placement groups in the running Ray (its GCS tables):
    what a wait for resources is owed to, rather than this command's own actors starting slowly. False where the
    tables cannot be read."""
    import ray
    from ray._private import state

    try:
        jobs = state.state.job_table()
        count, held = _holdings(state.actors().values(), ray.util.placement_group_table().values())
    except Exception:  # another Ray's tables: nothing known of others
        return False
    own = ray.get_runtime_context().get_job_id()
    return any(j.get("JobID", "") != own for j in _holding_jobs(jobs, count, held))


def _command(entrypoint: str, most: int = 100) -> str:
    """A job's command line as a person reads it: the interpreter by its name, the rest's end when long."""
    first, _, rest = entrypoint.partition(" ")
    text = f"{Path(first).name} {rest}".strip()
    return text if len(text) <= most else "..." + text[-(most - 3):]


def holders() -> str:
    """holders_line for the running Ray (its GCS tables; no dashboard needed)."""
    import ray
    from ray._private import state

    try:
        jobs = state.state.job_table()
        actors = list(state.actors().values())
        groups = list(ray.util.placement_group_table().values())
    except Exception as e:  # another Ray's tables: say what could not be read rather than fail the sweep
        return f"(Ray's tables could not be read: {type(e).__name__})"
    return holders_line(jobs, actors, groups, ray.get_runtime_context().get_job_id())


def placeable(bundles: Sequence[Mapping[str, float]], cluster: Cluster) -> bool:
    """Whether one group of `bundles` can ever be placed: on the nodes up now, or on nodes of one type the
    autoscaler can add (as many as the group needs)."""
    if _place(bundles, [_Node(s) for s in cluster.nodes]) is not None:
        return True
    return any(_place(bundles, [_Node(t) for _ in range(len(bundles))]) is not None for t in cluster.types)


def _fill(bundles: Sequence[Mapping[str, float]], nodes: Iterable[Mapping[str, float]], limit: int = 10_000
          ) -> tuple[int, list[_Node]]:
    """Place groups of `bundles` one after the other, as Ray does, until one does not fit: (count, nodes after)."""
    state = [_Node(s) for s in nodes]
    count = 0
    while count < limit:
        after = _place(bundles, state)
        if after is None:
            break
        state, count = after, count + 1
    return count, state


def concurrent(bundles: Sequence[Mapping[str, float]], nodes: Iterable[Mapping[str, float]], limit: int = 10_000
               ) -> int:
    """How many groups of `bundles` the `nodes` hold at once (placed one after the other, as Ray does)."""
    return _fill(bundles, nodes, limit)[0]


def binding(bundles: Sequence[Mapping[str, float]], nodes: Sequence[Mapping[str, float]], full: int,
            state: Sequence[_Node]) -> str:
    """The resource that stops one more group from fitting, `full` groups placed (`state`: the nodes after, as
    _fill leaves them): the one that, given freely on the nodes the groups went to (all nodes when none went
    anywhere), lets one more in."""
    used = [i for i, (shape, after) in enumerate(zip(nodes, state))
            if after.free != {k: float(v) for k, v in shape.items() if k != "GPU"} or after.gpus != _gpus_of(shape)]
    used = used or list(range(len(nodes)))
    for res in ("GPU", "CPU"):
        more = [{**s, res: s.get(res, 0.0) + 1024.0} if i in used else s for i, s in enumerate(nodes)]
        if concurrent(bundles, more, full + 1) > full:
            return res
    return "other resources"


# Ray's names for what a placement group reserved (CPU_group_<pg id>, CPU_group_<bundle>_<pg id>, bundle_group_...):
# its own bookkeeping, already counted in the plain CPU/GPU a user asked for.
_PLACEMENT = re.compile(r"_group_(?:\d+_)?[0-9a-f]{28,}$")


def fmt(d: Mapping[str, float], sep: str = ": ") -> str:
    """A bundle or node in an error line: CPU, GPU and custom resources, not Ray's own (memory, node:<ip>, ...)."""
    keep = {k: v for k, v in d.items() if k in ("CPU", "GPU") or not (
        k.startswith("node:") or k.endswith("memory") or k.startswith("accelerator_type") or _PLACEMENT.search(k))}
    return "{" + ", ".join(f"{k}{sep}{v:g}" for k, v in sorted(keep.items())) + "}"


def _flag(p: TrialPlan, res: str, gpu_nodes: bool = True) -> str:
    """The option to change when `res` is short."""
    if res == "GPU":
        if not gpu_nodes:
            return "use CPU clients (--gpus-per-client 0) and --device cpu" if p.actor is not None and \
                p.actor.gpu > 0 else "use --device cpu"
        if p.actor is not None and p.actor.gpu > 0:
            return "lower --gpus-per-client" + (", or host more clients an actor (raise --clients-per-actor, or "
                                                "leave it unset: pooled)" if any(
                                                    f.startswith("clients_per_actor") for f in p.fields) else "")
        return "use --device cpu (or a node with a GPU)"
    if res == "CPU":
        if any(f.startswith("cpus_per_client") for f in p.fields):
            return "lower --cpus-per-client"
        if any(f.startswith("clients_per_actor") for f in p.fields):
            return "lower --clients-per-actor"
        return "lower --threads"
    return f"ask for less {res} (--pin-drivers asks fda_driver)" if res == "fda_driver" else f"ask for less {res}"


def check(p: TrialPlan, cluster: Cluster, *, what: str = "a trial") -> str | None:
    """Refuse, in one line (a PreflightError), a plan whose bundles no node set of `cluster` can ever hold; a
    cluster whose node types are unknown (KubeRay) gets a warning line (returned) instead."""
    from fda_ray.runtime.preflight import PreflightError, RunWarning

    bundles = p.bundles
    if not bundles or placeable(bundles, cluster):
        return None
    short = _short_of(bundles, cluster)
    largest = cluster.largest(by=short)
    asks = _asks(p)
    fields = ", ".join(p.fields) or "the request"
    if not cluster.known:
        import warnings

        line = (f"{fields}: {what} asks {asks} and no node of this cluster holds it now (largest node "
                f"{fmt(largest)}); its node types are unknown here (no autoscaler config on this node, as on "
                "KubeRay), so trials wait for an autoscaler to add such a node")
        warnings.warn(line, RunWarning, stacklevel=2)
        return line
    gpu_nodes = any(s.get("GPU", 0) > 0 for s in cluster.shapes)
    if short == "GPU" and not gpu_nodes:
        why = "no node has a GPU"
    elif short == "GPU" and placeable(bundles, _more_cpus_on_gpu_nodes(cluster)):
        # GPUs given freely let it fit only on the CPU nodes; what stops it on the GPU nodes is their CPUs
        short = "CPU"
        gpu_largest = max((s for s in cluster.shapes if s.get("GPU", 0) > 0), key=lambda s: s.get("CPU", 0.0))
        why = f"the nodes with a GPU have too few CPUs for it (largest {fmt(gpu_largest)})"
        raise PreflightError(f"{fields} is invalid: {what} asks {asks}; {why}; lower --cpus-per-client (fractions "
                             "of a CPU are allowed) or --threads, or use GPU nodes with more CPUs")
    else:
        why = f"no node set of {cluster.source} can ever hold it (largest node {fmt(largest)})"
    raise PreflightError(f"{fields} is invalid: {what} asks {asks}; {why}; {_flag(p, short, gpu_nodes)}")


def _more_cpus_on_gpu_nodes(cluster: Cluster) -> Cluster:
    def more(shapes: Sequence[Mapping[str, float]]) -> tuple[Mapping[str, float], ...]:
        return tuple({**s, "CPU": s.get("CPU", 0.0) + 1024.0} if s.get("GPU", 0) > 0 else s for s in shapes)

    return Cluster(more(cluster.nodes), more(cluster.types), cluster.known, cluster.source)


def _asks(p: TrialPlan) -> str:
    parts = []
    if p.driver is not None:
        parts.append(f"driver {fmt(p.driver.bundle())}")
    if p.actor is not None:
        parts.append(f"{p.num_actors} x {fmt(p.actor.bundle())}")
    return " + ".join(parts) + (f" ({p.strategy})" if p.driver is not None and p.actor is not None else "")


def _short_of(bundles: Sequence[Mapping[str, float]], cluster: Cluster) -> str:
    """The resource whose lack stops the group (the first that, given freely, lets it fit)."""
    names = list(dict.fromkeys(k for b in bundles for k, v in b.items() if v > 0))
    for res in sorted(names, key=lambda r: (r != "GPU", r != "CPU", r)):
        more = Cluster(tuple({**s, res: s.get(res, 0.0) + 1024.0} for s in cluster.nodes),
                       tuple({**s, res: s.get(res, 0.0) + 1024.0} for s in cluster.types))
        if placeable(bundles, more):
            return res
    return names[0] if names else "CPU"


@dataclass(frozen=True)
class Capacity:
    """How many trials of a plan run at once on a cluster (per node type for an autoscaler's types)."""

    at_once: int
    bound: str  # the resource that stops one more
    per_type: tuple[tuple[str, int], ...] = field(default=())

    def line(self, cluster: Cluster) -> str:
        nodes = ", ".join(f"{c} x {s}" if c > 1 else s for s, c in _counts(cluster.nodes))
        text = f"{self.at_once} trial(s) at once on {nodes or 'no node'} ({cluster.source}; bound by {self.bound})"
        for shape, k in self.per_type:
            text += f"; {k} per added node of type {shape}"
        return text


def _counts(nodes: Iterable[Mapping[str, float]]) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for n in nodes:
        out[fmt(n)] = out.get(fmt(n), 0) + 1
    return list(out.items())


def capacity(p: TrialPlan, cluster: Cluster) -> Capacity:
    bundles = p.bundles or [{"CPU": 1.0}]
    nodes = list(cluster.nodes)
    per_type = tuple((fmt(t), concurrent(bundles, [t])) for t in cluster.types)
    full, state = _fill(bundles, nodes)
    return Capacity(full, binding(bundles, nodes, full, state), per_type)


def plan_lines(p: TrialPlan, cluster: Cluster) -> list[str]:
    """The resource plan as --dry-run prints it."""
    lines = [f"plan: each trial asks {len(p.bundles)} bundle(s), {p.strategy}: {p.describe()}"]
    if placeable(p.bundles, cluster):
        lines.append(f"plan: {capacity(p, cluster).line(cluster)}")
    return lines
