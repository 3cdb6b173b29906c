"""The driver of a Ray run: it owns the global model and the round loop, and its clients are actors.

    run_ray(cfg)               in this process (connects to a cluster or starts a local Ray)
    DriverActor.remote(cfg)    the same driver as a Ray actor, so one program can run many runs at once

The round loop is `fda_ray.runtime.loop.run_rounds`, the serial run's own loop, with the Ray executor that
`fda_ray.runtime.executors.build_executor` builds. The driver loads the dataset and ships each client's shard to its
actor through the object store, so the nodes that host clients need no copy of the dataset.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable

import ray

from fda_ray.core import interrupts, plugins
from fda_ray.runtime import node_watch, preflight
from fda_ray.core.config import RunConfig
from fda_ray.runtime.startup import Startup, start_run
from fda_ray.core.history import History
from fda_ray.runtime.loop import run_rounds
from fda_ray.runtime.ray_executor import RayExecutor


def ensure_ray(address: str | None = None, num_cpus: int | None = None, field: str = "ray_address") -> None:
    """Connect to Ray: keep a running session; else join `address` (or $RAY_ADDRESS); else join the live cluster
    a `ray start` on this machine left its address for (Ray's own default); else start a local Ray."""
    if ray.is_initialized():
        return
    address, field = preflight.address_and_field(address, field)  # the message names what the user set
    # The plug-ins loaded here (fda_ray.core.plugins), for the workers of a joined cluster; a started Ray's inherit them.
    env_vars = plugins.ray_env()
    # The wait for nodes that hold a trial ($FDA_RAY_NODE_WAIT_S, fda_ray.runtime.resources.wait_seconds) is
    # the command's setting: a joined cluster's workers (a trial's driver judging its lost actors) read it too.
    from fda_ray.runtime.resources import WAIT_ENV

    from fda_ray.core.quiet import QUIET_ENV

    # ... and so is a quiet console (fda_ray.core.quiet): a started Ray's workers inherit it, a joined cluster's
    # (`ray start` nodes) do not, and printed torch's and the actors' notices under a quiet sweep
    env_vars = {**env_vars, **{k: os.environ[k] for k in (WAIT_ENV, QUIET_ENV) if k in os.environ}}
    env = {"runtime_env": {"env_vars": env_vars}} if env_vars else {}
    if address:
        preflight.ray_address(address, field=field)  # ray.init would wait for minutes for an address nobody answers at
        try:
            ray.init(address=address, log_to_driver=True, logging_level=_logging_level(), **env)
        except ConnectionError as e:
            raise preflight.PreflightError(f"{field}={address!r} is invalid: {str(e).splitlines()[0]}") from None
    else:
        left = preflight.left_by_ray_start()
        if left and left[2]:  # a live `ray start` cluster on this machine (a `ray up` head): join it, as Ray does
            ray.init(log_to_driver=True, logging_level=_logging_level(), **env)
            _say_joined(left)
        else:
            if left:  # a dead cluster's address file would make ray.init fail; say what is skipped and why
                print(f"note: {left[0]} names a Ray cluster at {left[1]} that no longer answers (left by a `ray "
                      "start` that ended without `ray stop`); starting a local Ray instead", file=sys.stderr)
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
                     logging_level=_logging_level(), **env)
            node_watch.start()  # its raylet lost: one line, not Ray's log dump (fda_ray.runtime.node_watch)
    interrupts.rearm()  # ray.init installed Ray's SIGTERM handler (sys.exit, then Ray's crash dump): ours again


def _say_joined(left: tuple[str, str, bool]) -> None:
    """One note when a command given no address joined the cluster a `ray start` left running (Ray's default):
    which one, what it has and has free now (what else runs there shares it)."""
    from fda_ray.runtime.resources import free_line

    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    print(f"note: joined the Ray cluster that `ray start` left running at {left[1]} (named in {left[0]}): "
          f"{nodes} node(s), free now {free_line()}; its trials share it with whatever else runs there (`ray stop` "
          "ends that cluster, and the next command starts a Ray of its own)", file=sys.stderr)


def _logging_level() -> int:
    """Ray's own log level: ERROR when a sweep asked for a quiet console (FDA_RAY_QUIET=1, set by
    fda_ray.experiments.console.quiet: the runtime does not import the front end), else Ray's default INFO."""
    return logging.ERROR if os.environ.get("FDA_RAY_QUIET") == "1" else logging.INFO


def check_client_resources(cfg: RunConfig) -> None:
    """The client actors' plan (fda_ray.runtime.resources) fits the nodes the cluster has or can add (else Ray
    would wait forever): one line naming the request, the largest node and the option to change."""
    from fda_ray.runtime import resources

    cluster = resources.from_ray(joined=bool(cfg.ray_address or os.environ.get("RAY_ADDRESS")))
    resources.check(resources.plan(cfg, cluster), cluster, what="a run")


class Driver:
    """One run of `cfg` with its clients as Ray actors."""

    def __init__(self, cfg: RunConfig, faults: dict[tuple[int, int], list[str]] | None = None,
                 startup: Startup | None = None) -> None:
        self.cfg = cfg.require_resolved("Driver")
        self.faults = faults
        self.startup = startup or Startup()  # phases so far (ray_start, where run_ray started Ray)
        self.executor: RayExecutor | None = None
        self.gpu_memory: list[dict[str, int]] = []  # per client actor, read at the end of a GPU run

    def run(self, progress: Callable[[dict], None] | None = None) -> History:
        cfg = self.cfg
        preflight.run(cfg)
        check_client_resources(cfg)
        # The actors' processes start first: they import torch while this process loads the dataset.
        exp, self.executor, startup = start_run(cfg, faults=self.faults, startup=self.startup)
        try:
            hist = run_rounds(exp, self.executor, progress, startup=startup)
            if cfg.gpus_per_client > 0:
                self.gpu_memory = self.executor.gpu_memory()
            return hist
        finally:
            self.executor.shutdown()


@ray.remote(num_cpus=0)
class DriverActor:
    """A driver as an actor (it asks no CPU of its own: its clients hold the resources)."""

    def __init__(self, cfg: RunConfig, faults: dict[tuple[int, int], list[str]] | None = None) -> None:
        self.driver = Driver(cfg.resolved(), faults)  # an entry point: resolves once (free if resolved)

    def run(self, print_progress: bool = False) -> History:
        progress = (lambda row: print(f"round {row['round']} acc {row['accuracy']:.4f}", flush=True)) \
            if print_progress else None
        return self.driver.run(progress)

    def gpu_memory(self) -> list[dict[str, int]]:
        return self.driver.gpu_memory


def run_ray(cfg: RunConfig, progress: Callable[[dict], None] | None = None,
            faults: dict[tuple[int, int], list[str]] | None = None) -> History:
    """One run of `cfg` with Ray client actors, driven from this process."""
    cfg = cfg.resolved()  # an entry point (engine.run passes its resolved config: then free)
    startup = Startup()
    with startup.phase("ray_start"):
        ensure_ray(cfg.ray_address)
    return Driver(cfg, faults, startup).run(progress)
