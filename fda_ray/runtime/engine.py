"""The public entry point: one federated run of a config, with the executor it names.

    fda_ray.run(cfg) -> History           serial: this process; ray: client actors (fda_ray.runtime.driver)
    finetune_from(cfg, weights) -> History    only finetune_offline's fine-tuning, from given FedAvg weights

The layers below read top to bottom: experiment (config -> data, algorithm, clients), executors (where the
clients run), loop (the rounds), driver (the Ray shell: actors started while the data loads).
"""
from __future__ import annotations

from typing import Callable

import torch

from fda_ray.algorithms import ALGORITHMS
from fda_ray.core.config import RunConfig
from fda_ray.runtime.executors import SerialExecutor, build_executor
from fda_ray.runtime.experiment import Experiment, build_experiment
from fda_ray.runtime.failures import ClientFailure, RunFailed, RunInterrupted
from fda_ray.core.history import History
from fda_ray.runtime.loop import run_rounds
from fda_ray.runtime.startup import Startup, start_run

__all__ = ["ClientFailure", "Experiment", "RunFailed", "RunInterrupted", "SerialExecutor", "Startup", "build_executor",
           "build_experiment", "finetune_from", "run", "run_rounds", "start_run"]


def run(cfg: RunConfig, progress: Callable[[dict], None] | None = None) -> History:
    """One federated run of `cfg` with the executor it names (`cfg.executor`: "serial" or "ray"). The trial's
    boundary: the config is resolved here, once, and every layer below reads that resolved config."""
    cfg = cfg.resolved()
    if cfg.executor == "ray":
        from fda_ray.runtime.driver import run_ray  # Ray is imported only when it is used

        return run_ray(cfg, progress)
    exp, executor, startup = start_run(cfg)
    return run_rounds(exp, executor, progress, startup=startup)


def finetune_from(cfg: RunConfig, start_flat: torch.Tensor, progress: Callable[[dict], None] | None = None) -> History:
    """Only the fine-tuning phase of finetune_offline, from given FedAvg weights (M,), serially.

    The FedAvg phase of finetune_offline never reads the target, so its weights equal those of a
    source_only run of the same seed; starting from them here gives the same result as a full run.
    """
    cfg = cfg.resolved()
    if not getattr(ALGORITHMS.get(cfg.method), "finetune", False):
        raise ValueError(f"method={cfg.method!r} is invalid for finetune_from: only finetune_offline fine-tunes")
    exp = build_experiment(cfg)
    start = {"next_round": cfg.warmup_rounds + cfg.rounds, "state": {"global": start_flat}, "rows": []}
    return run_rounds(exp, build_executor(exp.cfg, exp.clients, kind="serial"), progress, resume=start)
