"""A run's start-up, timed phase by phase: what happens before its first round's numbers exist.

    start_run(cfg) -> (experiment, executor, Startup)   the one way a run starts (fda_ray.run, the Ray driver,
                                                         a sweep's trial, the Tune trainable)

The phases, in the driver's order (each the wall time it exposes, so they add up to the start-up's):

    ray_start          connecting to (or starting) Ray, where this run did it
    actors_spawn       asking Ray for the client actors (their processes start while the data loads)
    device_init        the driver's CUDA context (--device cuda), before anything is put on the GPU
    data_load          the dataset read and partitioned, the clients and models built
    actors_start       waiting for the actors' processes (torch imported) beyond the data load
    data_ship          each client's shard and model shipped once to its actor (through the object store) and
                       moved to the actor's device
    first_collect      the first round's client work (the actors' first calls: their CUDA and optimizer set-up)
    first_aggregation  the first round's aggregation (kernel_load inside it: a kernel built or loaded)
    first_evaluation   the first round's evaluation
    kernel_load        the C++/CUDA kernels' build or load in this process (part of the phase that needed them)

A trial record keeps them (rows.json: "startup"), its first report carries them (the sweep's status prints a
phase that took unusually long: SLOW_S), and `python -m benchmarks.sweep` tabulates them.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping

if TYPE_CHECKING:
    from fda_ray.core.config import RunConfig
    from fda_ray.runtime.executors import Executor
    from fda_ray.runtime.experiment import Experiment

PHASES = ("ray_start", "actors_spawn", "device_init", "data_load", "actors_start", "data_ship", "first_collect",
          "first_aggregation", "first_evaluation", "kernel_load")
# Beyond these a phase is unusually long (the sweep's status says so): on CPU and on an H100/H200 each took at
# most a few seconds in the benchmarks (docs/ray-and-clusters.md), except a kernel build (tens of seconds, once
# per machine and torch: kernel_load's bound is a cached load's).
SLOW_S = {"ray_start": 30.0, "actors_spawn": 5.0, "device_init": 20.0, "data_load": 30.0, "actors_start": 30.0,
          "data_ship": 20.0, "first_collect": 30.0, "first_aggregation": 10.0, "first_evaluation": 10.0,
          "kernel_load": 5.0}
REPORT_KEY = "startup"  # a trial's first report: {"startup": {phase: seconds}} (Tune flattens it to startup/<phase>)


@dataclass
class Startup:
    """Seconds by phase (PHASES), filled as the run starts."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        assert name in PHASES, name
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def add(self, name: str, seconds: float) -> None:
        assert name in PHASES, name
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)


def from_report(row: Mapping[str, Any]) -> dict[str, float]:
    """The phases a trial's report carries: nested ({"startup": {...}}) or flattened by Tune (startup/<phase>)."""
    nested = row.get(REPORT_KEY)
    if isinstance(nested, Mapping):
        return {k: float(v) for k, v in nested.items() if isinstance(v, (int, float))}
    prefix = REPORT_KEY + "/"
    return {k[len(prefix):]: float(v) for k, v in row.items() if k.startswith(prefix) and isinstance(v, (int, float))}


def slow_phases(seconds: Mapping[str, float]) -> list[str]:
    """One phrase per phase that took unusually long (SLOW_S), e.g. 'data_ship 42.0 s (usually under 20 s)'."""
    return [f"{name} {seconds[name]:.1f} s (usually under {SLOW_S[name]:g} s)" for name in PHASES
            if name in seconds and seconds[name] > SLOW_S[name]]


def warm_device(device: str) -> None:
    """Create the CUDA context of `device` now, and load cuDNN's and cuBLAS's kernels with one tiny convolution
    and matrix product, forward and backward (a phase of its own, overlapping other work where the caller can),
    rather than inside the first round's first batch."""
    if device.startswith("cuda"):
        from fda_ray.runtime.preflight import device as check_device
        from fda_ray.train.device import warm

        check_device(device)  # a machine without that GPU: the one-line error, before CUDA's own
        warm(device)


def start_run(cfg: RunConfig, *, faults: dict[tuple[int, int], list[str]] | None = None,
              startup: Startup | None = None) -> tuple[Experiment, Executor, Startup]:
    """The experiment and the executor of the resolved `cfg`, with the start-up timed (module docstring). With
    executor "ray" the actors' processes start first, while this process loads the data."""
    from fda_ray.algorithms import ALGORITHMS
    from fda_ray.kernels import loader
    from fda_ray.runtime.executors import build_executor
    from fda_ray.runtime.experiment import build_experiment

    st = startup or Startup()
    kernels_before = loader.seconds()
    if cfg.executor == "ray":
        with st.phase("actors_spawn"):
            executor = build_executor(cfg, num_clients=ALGORITHMS.get(cfg.method).num_clients(cfg), faults=faults)
        try:
            with st.phase("device_init"):
                warm_device(cfg.device)
            with st.phase("data_load"):
                exp = build_experiment(cfg)
            with st.phase("actors_start"):
                executor.wait_started()
            with st.phase("data_ship"):
                executor.load(exp.clients)
        except BaseException:
            executor.shutdown()
            raise
    else:
        with st.phase("device_init"):
            warm_device(cfg.device)
        with st.phase("data_load"):
            exp = build_experiment(cfg)
        executor = build_executor(exp.cfg, exp.clients, faults=faults)
    st.add("kernel_load", loader.seconds() - kernels_before)
    return exp, executor, st
