"""Ray Tune integration (the only module that imports ray.tune): one trial is one federated run.

    from ray import tune
    import fda_ray.tune as ft
    tuner = tune.Tuner(ft.with_resources(space), param_space=ft.search_space(method=tune.grid_search(["fedgp", "fedda"]),
                                                                             noise=tune.grid_search([0.2, 0.8])))
    results = tuner.fit()

A trial's parameters are RunConfig fields (`search_space` checks them). The trainable is the run's driver:
it builds the experiment, trains its clients in its own process (executor "serial") or as Ray actors
(executor "ray", placed in the trial's placement group), reports one result per round (so schedulers such as
ASHA can stop a trial early) with a checkpoint, and resumes from its last checkpoint when Tune restarts it
(every draw is seeded by (seed, round, client, purpose): a resumed trial gives an uninterrupted one's numbers).
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from ray import tune

from fda_ray.config import RunConfig
from fda_ray.preflight import RunWarning, actor_gpus

RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))
RECORD_KEY = "record_dir"  # a trial parameter that is not a RunConfig field: see trainable()
STATE_FILE = "state.pt"  # a round's resume state in a Tune checkpoint (the same contents as a trial record's)
DRIVER_CPUS = 1.0  # the driver aggregates and evaluates
# A custom resource the head node of cluster.yaml declares. Trial drivers ask for one unit, so they run on
# the head and their checkpoints stay on its disk: Tune needs S3 or NFS for checkpoints written on other
# nodes, while client actors (which never checkpoint) go wherever GPUs are.
DRIVER_RESOURCE = "fda_driver"


def search_space(**params: Any) -> dict[str, Any]:
    """A param_space of RunConfig fields; values may be Tune search objects (tune.grid_search, ...).
    `run` may hold a dict of fields (or a grid_search over such dicts: irregular grids, as fda_ray.sweep uses)."""
    bad = sorted(k for k in params if k not in RUN_FIELDS and k not in ("run", RECORD_KEY))
    if bad:
        raise ValueError(f"search space field {bad[0]!r} is invalid: RunConfig fields are {', '.join(RUN_FIELDS)}")
    _check_family_params(params.get("params", {}))
    return dict(params)


def _check_family_params(params: Any) -> None:
    """params={family: {field: value or a Tune search object}}: the families and fields must exist (the values
    are checked when each trial's RunConfig is built)."""
    from fda_ray.algorithms import family_params

    if hasattr(params, "sample") or isinstance(params, dict) and "grid_search" in params:
        return  # a search over whole params dicts: each is checked as a trial's config
    known = family_params()
    if not isinstance(params, dict):
        raise ValueError(f"search space field 'params' is invalid: a mapping of method family to its parameters")
    for fam, values in params.items():
        if fam not in known:
            raise ValueError(f"search space params family {fam!r} is invalid: families with parameters are "
                             f"{', '.join(known)}")
        try:
            known[fam].check_names(values)
        except ValueError as e:
            raise ValueError(f"search space field {e}") from None


def flat_params(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters with a nested `run` dict (fda_ray.sweep's grid) merged in."""
    return {**params.get("run", {}), **{k: v for k, v in params.items() if k != "run"}}


def config_from_params(params: dict[str, Any]) -> RunConfig:
    """The trial's RunConfig (validated: a bad value fails the trial with the config's one-line error)."""
    params = flat_params(params)
    params.pop(RECORD_KEY, None)
    params.pop("trial", None)
    search_space(**params)
    return RunConfig(**params).resolved()


def driver_placement() -> dict[str, float]:
    """{DRIVER_RESOURCE: 1} on a cluster whose nodes declare it (cluster.yaml's head), else {}."""
    import ray

    return {DRIVER_RESOURCE: 1.0} if ray.is_initialized() and ray.cluster_resources().get(DRIVER_RESOURCE) else {}


def resources(cfg: RunConfig, driver_extra: dict[str, float] | None = None) -> tune.PlacementGroupFactory:
    """The trial's bundles: the driver (plus `driver_extra`, e.g. DRIVER_RESOURCE), then (executor "ray")
    one per client actor."""
    extra = dict(driver_extra or {})
    if cfg.executor == "serial":
        gpu = {"GPU": 1} if cfg.device.startswith("cuda") else {}
        return tune.PlacementGroupFactory([{"CPU": float(cfg.threads), **gpu, **extra}])
    from fda_ray.algorithms import ALGORITHMS

    resolved = cfg.resolved()
    num_clients = ALGORITHMS.get(resolved.method).num_clients(resolved)
    from fda_ray.executors import actor_size

    k = actor_size(cfg, num_clients)  # pooled to the cluster as the executor pools (one trial may fill it)
    actors = math.ceil(num_clients / k)
    # An actor runs its clients with `threads` threads, whatever their number (cpus_per_client: per client).
    per_actor = {"CPU": float(cfg.cpus_per_client * k) if cfg.cpus_per_client else float(cfg.threads)}
    if cfg.gpus_per_client > 0:
        per_actor["GPU"] = actor_gpus(cfg.gpus_per_client, k)
    return tune.PlacementGroupFactory([{"CPU": DRIVER_CPUS, **extra}] + [per_actor] * actors)


def metrics(row: dict[str, Any]) -> dict[str, Any]:
    """What a trial reports for one round: the row's numbers (lists stay lists), without NaN surprises."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


def trainable(params: dict[str, Any]) -> None:
    """One run as a Tune function trainable, reporting a result per round.

    A sweep's trial (fda_ray.sweep): params["run"] = {"trial": a fda_ray.trials.Trial as a dict, RECORD_KEY: the
    sweep's trials/ directory}; the trial keeps its own record there (state.pt every round, rows.json when done)
    and goes on from it when started again, in this Tune run or a later one (a resumed sweep).
    Otherwise params are RunConfig fields (the programmatic Tuner path) and the trial checkpoints through Tune."""
    from fda_ray.engine import build_executor, build_experiment, run_rounds
    from fda_ray.trials import Trial, run_trial

    run = params.get("run", {})
    if isinstance(run, dict) and "trial" in run:
        warnings.simplefilter("ignore", RunWarning)  # the sweep printed the options its trials ignore, once
        metric = run.get("metric")  # a search's study: its scheduler decides on this column

        def report(row: dict) -> None:
            if metric is None or row.get(metric) is not None:  # (FedWCA's source pre-training row has none)
                tune.report(metrics(row))

        run_trial(Trial.from_dict(run["trial"]), Path(run[RECORD_KEY]), report=report)
        return
    cfg = config_from_params(params)
    resume = None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:  # Tune restarted this trial: go on from its checkpoint
        with ckpt.as_directory() as d:
            path = Path(d) / STATE_FILE
            resume = torch.load(path, weights_only=True) if path.is_file() else None
    exp = build_experiment(cfg)
    executor = build_executor(exp.cfg, exp.clients)

    def on_round(state: dict) -> None:
        with tempfile.TemporaryDirectory() as d:
            torch.save(state, Path(d) / STATE_FILE)
            tune.report(metrics(state["rows"][-1]), checkpoint=tune.Checkpoint.from_directory(d))

    try:
        run_rounds(exp, executor, resume=resume, checkpoint=on_round)
    finally:
        executor.shutdown()


def with_resources(cfg_or_params: RunConfig | dict[str, Any] | None = None):
    """The trainable with the bundles of a config (by default one CPU: the serial executor); on a cluster
    that declares DRIVER_RESOURCE (connect with ray.init first) the driver bundle asks for it."""
    if cfg_or_params is None:
        cfg = RunConfig()
    elif isinstance(cfg_or_params, RunConfig):
        cfg = cfg_or_params
    else:
        plain = {k: v for k, v in cfg_or_params.items() if not isinstance(v, dict) and not hasattr(v, "sample")}
        cfg = config_from_params(plain)
    return tune.with_resources(trainable, resources(cfg.resolved(), driver_placement()))


def asha(metric: str, max_t: int, grace_period: int, reduction_factor: int) -> Any:
    """ASHA (Li et al. 2020) on a search's per-round reports: a trial that reaches a rung (grace_period x
    reduction_factor^k reports) below the top 1/reduction_factor of the trials seen there stops."""
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", metric=metric, mode="max", max_t=max(max_t, grace_period),
                         grace_period=grace_period, reduction_factor=reduction_factor)

