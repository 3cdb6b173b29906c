"""Ray Tune integration (trainable, resources, schedulers, Optuna; backends.run_tune drives the Tuner): one trial is one
federated run.

    from ray import tune
    import fda_ray.tune as ft
    space = ft.search_space(method=tune.grid_search(["fedgp", "fedda"]), noise=tune.grid_search([0.2, 0.8]))
    tuner = tune.Tuner(ft.with_resources(space), param_space=space,
                       run_config=tune.RunConfig(checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))
    results = tuner.fit()

A trial's parameters are RunConfig fields (`search_space` checks them). The trainable is the run's driver:
it builds the experiment, trains its clients in its own process (executor "serial") or as Ray actors
(executor "ray", placed in the trial's placement group), reports one result per round (so schedulers such as
ASHA can stop a trial early) with a checkpoint, and resumes from its last checkpoint when Tune restarts it
(every draw is seeded by (seed, round, client, purpose): a resumed trial gives an uninterrupted one's numbers).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from ray import tune

from fda_ray.core import interrupts
from fda_ray.core.storage import storage_path
from fda_ray.experiments.records import round_metrics as metrics
from fda_ray.core.config import RunConfig, config_names
from fda_ray.core.notices import RunWarning
from fda_ray.runtime import resources as plans

RUN_FIELDS = config_names()  # (with the FDA family's: beta, ...)
RECORD_KEY = "record_dir"  # a trial parameter that is not a RunConfig field: see trainable()
STATE_FILE = "state.pt"  # a round's resume state in a Tune checkpoint (the same contents as a trial record's)
# A custom resource nodes may declare (`ray start --resources '{"fda_driver": 8}'`). With pin_drivers (the sweep's
# --pin-drivers) trial drivers ask for one unit, so they run only on those nodes; by default they go anywhere,
# beside their clients, and their records go to storage every node reaches (fda_ray.core.storage).
DRIVER_RESOURCE = "fda_driver"
# One placement group per trial: its driver's bundle, then one per client actor (fda_ray.runtime.resources, which
# sizes them), packed on one node when they fit (PACK: spread over nodes only when no node holds them all): the
# driver's aggregation and evaluation then run beside its clients, and the round's weights travel through that
# node's object store.
PLACEMENT_STRATEGY = plans.PLACEMENT_STRATEGY


def search_space(**params: Any) -> dict[str, Any]:
    """A param_space of RunConfig fields; values may be Tune search objects (tune.grid_search, ...). `run` may hold a
    dict of fields (or a grid_search over such dicts: irregular grids, as fda_ray.experiments.sweep uses)."""
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
        raise ValueError("search space field 'params' is invalid: a mapping of method family to its parameters")
    for fam, values in params.items():
        if fam not in known:
            raise ValueError(f"search space params family {fam!r} is invalid: families with parameters are "
                             f"{', '.join(known)}")
        try:
            known[fam].check_names(values)
        except ValueError as e:
            raise ValueError(f"search space field {e}") from None


def flat_params(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters with a nested `run` dict (fda_ray.experiments.sweep's grid) merged in."""
    return {**params.get("run", {}), **{k: v for k, v in params.items() if k != "run"}}


TRIAL_INDEX = "__trial_index__"  # ray.tune.search.Repeater's key: the index of a point's repeat (set_index=True)


def config_from_params(params: dict[str, Any]) -> RunConfig:
    """The trial's RunConfig (validated: a bad value fails the trial with the config's one-line error). Under Ray
    Tune's Repeater (set_index=True, its default) each repeat of a point carries its index, made for seeds: the
    trial's seed is its config's seed (default 0) plus that index, so the repeats are the point's seeds, not copies."""
    params = flat_params(params)
    params.pop(RECORD_KEY, None)
    params.pop("trial", None)
    index = params.pop(TRIAL_INDEX, None)
    if index is not None:
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError(f"{TRIAL_INDEX}={index!r} is invalid: a repeat's index, an integer >= 0 (Ray Tune's "
                             "Repeater sets it)")
        params["seed"] = int(params.get("seed", RunConfig.seed)) + index
    search_space(**params)
    return RunConfig(**params).resolved()


def next_launch(out: Any) -> str:
    """The name of the next Tune launch under out/tune/ (launch-1, launch-2, ...: each --resume adds one)."""
    return f"launch-{sum(1 for _ in storage_path(out / 'tune').glob('launch-*')) + 1}"


def driver_placement(pin: bool = False) -> dict[str, float]:
    """{DRIVER_RESOURCE: 1} when drivers are pinned to the nodes that declare it, else {}."""
    return {DRIVER_RESOURCE: 1.0} if pin else {}


def resources(cfg: RunConfig, driver_extra: dict[str, float] | None = None,
              cluster: plans.Cluster | None = None, check: bool = False) -> tune.PlacementGroupFactory:
    """The trial's placement group (fda_ray.runtime.resources.plan): the driver (plus `driver_extra`, e.g.
    DRIVER_RESOURCE), then one bundle per client actor (executor "ray"), packed on one node when they fit.
    `cluster`: what to size the actors to (default: the running Ray's nodes, else this machine); `check`: refuse,
    in one line (a PreflightError), a group no node of that cluster can ever hold (a Tuner would wait in silence;
    the sweep checks its plan before its launches, and a node lost later is the stranded-trial watch's)."""
    import ray

    if cluster is None:
        cluster = plans.from_ray() if ray.is_initialized() else plans.this_machine()
    p = plans.plan(cfg.resolved(), cluster, in_tune=True, driver_extra=driver_extra)
    if check:
        plans.check(p, cluster)
    return tune.PlacementGroupFactory(p.bundles, strategy=p.strategy)


def trainable(params: dict[str, Any], served: dict[str, list[str]] | None = None) -> None:
    """One run as a Tune function trainable, reporting a result per round.

    A sweep's trial (fda_ray.experiments.sweep): params["run"] = {"trial": a fda_ray.experiments.trials.Trial as a dict,
    RECORD_KEY: the sweep's trials/ directory}; the trial keeps its own record there (state.pt every round, rows.json
    when done) and goes on from it when started again, in this Tune run or a later one (a resumed sweep). Otherwise
    params are RunConfig fields (the programmatic Tuner path) and the trial checkpoints through Tune; `served`
    (with_resources(served=...), from fusion_servers): its clients' training goes to its node's fusion server, fused
    with the other trials' rounds waiting there; a trial whose config cannot fuse (a sampled method or vectorise)
    fails in one line (its bundle is only a driver's share)."""
    from fda_ray.core import plugins
    from fda_ray.runtime.engine import run_rounds, start_run
    from fda_ray.experiments.console import quiet_worker

    plugins.load_in_worker("Tune trial process")  # the sweep's plug-ins ($FDA_RAY_IMPORTS: Ray's runtime_env)
    from fda_ray.experiments.records import Trial, is_done, read_rows
    from fda_ray.experiments.trials import run_trial

    quiet_worker()
    run = params.get("run", {})
    if isinstance(run, dict) and "optuna" in run:  # a point Optuna drew for a search's study: its trial
        from fda_ray.experiments.trials import point_trial

        o = run["optuna"]
        point = {name: params["point"][_safe(name)] for name in o["knobs"]}
        run = {**run, "trial": point_trial(o["base"], o["row"], o["variable"], o["value"], point).to_dict()}
    if isinstance(run, dict) and "group" in run:  # a fused group of a sweep's trials (fda_ray.runtime.fusion)
        warnings.simplefilter("ignore", RunWarning)
        run_fused_group([Trial.from_dict(d) for d in run["group"]], run[RECORD_KEY])
        return
    if isinstance(run, dict) and "trial" in run:
        warnings.simplefilter("ignore", RunWarning)  # the sweep printed the options its trials ignore, once
        metric = run.get("metric")  # a search's study: its scheduler decides on this column
        trial = Trial.from_dict(run["trial"])
        record = storage_path(run[RECORD_KEY]) / trial.key
        done = [0]  # reports so far, a resumed trial's earlier ones included: ASHA's rungs count them too

        def reported(row: dict) -> bool:
            return metric is None or row.get(metric) is not None  # (FedWCA's source pre-training row has none)

        def resumed(rows: list[dict]) -> None:  # the rows run_trial goes on from (after its checks of the state)
            done[0] = sum(map(reported, rows))

        said = [False]  # (whether this call reported a round)

        def report(row: dict) -> None:
            if reported(row):
                done[0] += 1
                said[0] = True
                tune.report({**metrics(row), REPORTS_DONE: done[0]})

        def report_record() -> None:  # the finished record's last reported row, once (no report fails a study)
            rows = [r for r in read_rows(record)["rows"] if reported(r)]
            if rows:
                tune.report({**metrics(rows[-1]), REPORTS_DONE: len(rows)})

        if is_done(record):  # Optuna drew a point it had tried: that trial's result
            report_record()
            return
        group = None
        if run.get("served"):  # its clients' training on its node's fusion server (fda_ray.runtime.fusion_server)
            from fda_ray.runtime.fusion_server import served_group

            group = served_group(run["served"], trial.key)
        run_trial(trial, run[RECORD_KEY], report=report, group=group, on_resume=resumed)  # a path or a URI
        if not said[0] and is_done(record):  # cut off after its last round, before its rows.json: nothing left
            report_record()  # to run, so nothing reported (an Optuna study's Tune refuses a result without its metric)
        return
    cfg = config_from_params(params)
    resume = None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:  # Tune restarted this trial: go on from its checkpoint
        with ckpt.as_directory() as d:
            resume = resume_state(Path(d) / STATE_FILE)
    from fda_ray.runtime.fusion import config_fuses

    if served:  # one of the Tuner's trials, on its node's fusion server
        from fda_ray.experiments.trials import _start_member
        from fda_ray.runtime.fusion_server import served_group

        if not config_fuses(cfg):  # (its bundle is a driver's share: training its clients here would overload it)
            raise ValueError(_not_fusing(cfg, "a trial on fusion servers"))
        key = tune.get_context().get_trial_id()
        exp, executor, startup = _start_member(cfg, key, served_group(served, key))
    else:
        exp, executor, startup = start_run(cfg)
    if resume is not None:  # a checkpoint of another run's shape (PBT's exploit with a mutated num_sources, say)
        from fda_ray.experiments.records import resume_misfit

        why = resume_misfit(resume, exp)
        if why is not None:
            executor.shutdown()
            raise ValueError(f"checkpoint={ckpt.path!r} is invalid for this trial's config: {why} (a scheduler "
                             "that restores a trial from a checkpoint, as PBT's exploit does, may change what a round "
                             "reads, such as beta or the learning rates, not what the run is built of: the clients, "
                             "the model, the method's state)")

    def on_round(state: dict) -> None:
        with tempfile.TemporaryDirectory() as d:
            torch.save(state, Path(d) / STATE_FILE)
            tune.report(metrics(state["rows"][-1]), checkpoint=tune.Checkpoint.from_directory(d))

    try:
        run_rounds(exp, executor, resume=resume, checkpoint=on_round, startup=startup)
    finally:
        executor.shutdown()


def run_fused_group(members: list[Any], records: Any) -> None:
    """A Tune trial that is a fused group: its members not yet done run as one group (fda_ray.experiments.trials.
    run_group), each keeping its own record; every round of every member is reported as {"members": {key: its
    row's metrics}}, so the sweep's status and trackers follow each trial by its own name. A member that fails makes
    the Tune trial fail once the others are done (Tune runs it again: the members done are skipped, the failed
    one goes on from its last round)."""
    import queue
    import threading

    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.records import is_done
    from fda_ray.experiments.trials import run_group

    records = storage_path(records)
    todo = [t for t in members if not is_done(records / t.key)]
    rows: "queue.Queue[tuple[str, dict]]" = queue.Queue()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome.update(run_group(todo, records, report=lambda key, row: rows.put((key, row)),
                                     finished=lambda key: rows.put((key, None))))
        except BaseException as e:  # noqa: BLE001 (raised below, in Tune's thread)
            outcome["__group__"] = e

    th = threading.Thread(target=work, name="fda-group", daemon=True)
    th.start()
    while th.is_alive() or not rows.empty():
        try:
            key, row = rows.get(timeout=0.2)
        except queue.Empty:
            continue
        if row is None:  # a member finished while the group goes on: the launch says it done now
            tune.report({"members": {key: {MEMBER_FINISHED: True}}})
            continue
        tune.report({"members": {key: metrics(row)}, "round": row.get("round")})
    th.join()
    if "__group__" in outcome:
        raise outcome["__group__"]
    failed = {k: e for k, e in outcome.items() if e is not None}
    if failed:
        raise group_error(failed, len(todo))


MEMBER_FINISHED = "member_finished"  # a fused group's report that one member finished (run_fused_group)
GROUP_FAILED = "trials failed: "  # a fused group's error: its members' error lines follow, as a JSON object


def group_error(failed: dict[str, BaseException], size: int) -> RuntimeError:
    """A fused group's error for its failed members: each member's own error line, as JSON on the exception's one
    line, so that the launch reads them back from Tune's trace (member_errors) and names each failed trial with its
    own error, not the group's (a sweep's summary lists trials, not groups)."""
    lines = {k: last_error_line(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
             for k, e in failed.items()}
    return RuntimeError(f"{len(failed)} of the group's {size} {GROUP_FAILED}{json.dumps(lines)}")


def member_errors(text: str | None) -> dict[str, str]:
    """{member key: its error line} of a fused group's error (run_fused_group), read from Tune's trace or error
    text; {} for any other error."""
    text = text or ""
    at = text.rfind(GROUP_FAILED)
    if at < 0 or "of the group's" not in text[max(0, at - 40):at]:
        return {}
    try:
        found = json.JSONDecoder().raw_decode(text, at + len(GROUP_FAILED))[0]
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def group_resources(cfg: RunConfig, driver_extra: dict[str, float] | None = None) -> tune.PlacementGroupFactory:
    """A fused group's placement group: one bundle, its process (`threads` CPUs) and, on --device cuda, one whole
    GPU (a group is one computation on one device; its members' clients live in its process)."""
    bundle = {"CPU": float(cfg.threads), **({"GPU": 1.0} if cfg.device.startswith("cuda") else {}),
              **(driver_extra or {})}
    return tune.PlacementGroupFactory([bundle])


def served_resources(cfg: RunConfig, serve: int, driver_extra: dict[str, float] | None = None
                     ) -> tune.PlacementGroupFactory:
    """A served trial's placement group (fda_ray.runtime.fusion_server.served_bundle): its driver's bundle alone."""
    from fda_ray.runtime.fusion_server import served_bundle

    return tune.PlacementGroupFactory([served_bundle(cfg, serve, driver_extra)])


def keep_working_directory() -> None:
    """Tune's trial processes stay in the working directory of the command that starts them (Tune would move each
    into its trial folder; fda-ray keeps its own records): a relative --data-dir, ./data and a plug-in module next
    to the command are found there as they are by the command. Tune hands the setting on to its trial processes."""
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")


def _space_config(cfg_or_params: RunConfig | dict[str, Any] | None) -> RunConfig:
    """The RunConfig a trainable's resources are sized from: the config, a search space's plain fields (its
    sampled and nested ones left to each trial), or the defaults (one CPU: the serial executor)."""
    if cfg_or_params is None:
        return RunConfig()
    if isinstance(cfg_or_params, RunConfig):
        return cfg_or_params
    return config_from_params({k: v for k, v in cfg_or_params.items()
                               if not isinstance(v, dict) and not hasattr(v, "sample")})


def _not_fusing(cfg: RunConfig, what: str) -> str:
    """The one line refusing a config that cannot fuse for `what`."""
    return (f"method={cfg.method!r}, vectorise={cfg.vectorise!r} is invalid for {what}: trials fuse with vectorise "
            "'on' and a method whose local training is the vectorised epoch recipe")


def with_resources(cfg_or_params: RunConfig | dict[str, Any] | None = None, pin_drivers: bool = False,
                   served: dict[str, list[str]] | None = None, fuse: int = 8):
    """The trainable with the bundles of a config (by default one CPU: the serial executor); with pin_drivers
    the driver bundle asks for DRIVER_RESOURCE (only nodes that declare it run drivers). served (fusion_servers'
    names): each trial sends its clients' training to its node's fusion server and asks only its driver's bundle,
    a 1/fuse share of its threads (and of its GPU share), as a served sweep's trials do. Trials run in this process's
    working directory (keep_working_directory: it sets RAY_CHDIR_TO_TRIAL_DIR=0 for this process unless it is set,
    so every later Tuner of the process keeps it too; set RAY_CHDIR_TO_TRIAL_DIR=1 first to keep Tune's default),
    not in Tune's trial folders."""
    cfg = _space_config(cfg_or_params)
    keep_working_directory()  # a relative data_dir, ./data and a plug-in's files, found as the command finds them
    if served:
        if not isinstance(fuse, int) or isinstance(fuse, bool) or fuse < 1:
            raise ValueError(f"fuse={fuse!r} is invalid: an integer >= 1 (the trials that share a fusion server)")
        return tune.with_resources(tune.with_parameters(trainable, served=served),
                                   served_resources(cfg.resolved(), fuse, driver_placement(pin_drivers)))
    import ray

    # checked against the running Ray's nodes; before ray.init the Tuner may yet join a cluster ($RAY_ADDRESS, one
    # whose nodes declare fda_driver for pin_drivers): this machine's size says nothing of it
    return tune.with_resources(trainable, resources(cfg.resolved(), driver_placement(pin_drivers),
                                                    check=ray.is_initialized()))


@contextmanager
def fusion_servers(cfg_or_params: RunConfig | dict[str, Any]) -> Iterator[dict[str, list[str]]]:
    """The fusion servers of a programmatic Tuner's trials (fda_ray.runtime.fusion_server), for with_resources(
    served=...): one per node (per GPU with device cuda) while the block runs, stopped after it. The config (or
    search space: its plain fields) must fuse: vectorise "on" and a method whose local training is the epoch
    recipe; else a one-line ValueError."""
    from fda_ray.runtime.fusion import config_fuses
    from fda_ray.runtime.fusion_server import serving

    cfg = _space_config(cfg_or_params).resolved()
    if not config_fuses(cfg):
        raise ValueError(_not_fusing(cfg, "fusion servers"))
    from fda_ray.runtime.driver import ensure_ray

    ensure_ray()  # the servers are actors: a Ray first, as the Tuner would start or join one ($RAY_ADDRESS)
    with serving(cfg) as names:
        yield names


REPORTS_DONE = "reports_done"  # a trial's reports so far, those before a resume included: ASHA's time


def asha(metric: str, max_t: int, grace_period: int, reduction_factor: int) -> Any:
    """ASHA (Li et al. 2020) on a search's per-round reports: a trial that reaches a rung (grace_period x
    reduction_factor^k reports, those before a resume counted) below the top 1/reduction_factor of the trials seen
    there stops."""
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr=REPORTS_DONE, metric=metric, mode="max", max_t=max(max_t, grace_period),
                         grace_period=grace_period, reduction_factor=reduction_factor)


def _safe(name: str) -> str:
    """A knob's name as a Tune parameter (Tune flattens nested names with "/"; family knobs carry a ".")."""
    return name.replace(".", "__")


def _domain(dim: Any) -> Any:
    if dim.kind == "choice":
        return tune.choice(list(dim.values))
    return (tune.uniform if dim.kind == "uniform" else tune.loguniform)(dim.low, dim.high)


def study_concurrency(bundles: Sequence[dict], num_samples: int, served: Any = None) -> int:
    """An Optuna study's trials at once when --max-concurrent is not given: as many as the Ray cluster's nodes hold
    (a served trial's beside its node's fusion server, `served` its resolved config), at least 1; num_samples where
    an autoscaler can add nodes (its demand then shows). Tune lets a searcher other than its own keep only one trial
    pending unless a ConcurrencyLimiter says how many may run (ray.tune.execution.tune_controller's
    _get_max_pending_trials): without one the study's trials started one after another, and on fusion servers each
    round was fused with no other trial's (a held-out probe: members 1 in every record)."""
    from fda_ray.runtime import fusion_server

    cluster = plans.from_ray()
    if cluster.types:
        return max(1, num_samples)
    if served is not None:
        cluster = fusion_server.beside_servers(cluster, served.threads, str(served.device).startswith("cuda"))
    return max(1, min(num_samples, plans.concurrent(bundles, cluster.nodes)))


def run_optuna(space: Sequence[Any], base: dict[str, Any], row: str, variable: str, value: float, num_samples: int,
               metric: str, records: Any, out: Any, address: str | None, max_concurrent: int | None,
               max_failures: int, progress: Any, scheduler: Any, on_stopped: Any, points: list[dict],
               rewards: list[float], seed: int = 0, pin_drivers: bool = False, fuse: int = 1,
               again: Sequence[dict] = ()) -> tuple[list[dict], bool]:
    """One study searched by Optuna's TPE sampler (seeded) through Tune's OptunaSearch: num_samples new trials,
    the points settled before told to it as evaluated, the points of `again` (trials cut off before: each goes on
    from its record's last round) its first suggestions. Returns (failures, interrupted). fuse > 1: each trial sends
    its clients' training to a fusion server on its node (fda_ray.runtime.fusion_server), which fuses the rounds of
    the trials running there; a trial asks its driver's 1/fuse share."""
    try:
        import optuna
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch
    except ImportError:
        raise ValueError("search_alg='optuna' is invalid here: Optuna is not installed (pip install "
                         "'fda-ray[optuna]', or use --search-alg random)") from None
    from fda_ray.core import plugins
    from fda_ray.runtime.driver import ensure_ray
    from fda_ray.experiments.records import Trial, is_done

    keep_working_directory()
    ensure_ray(address, num_cpus=None)
    plugins.check_ray_workers("Tune trial process")  # a node whose workers cannot import a plug-in: before any trial
    def flat(point: dict) -> dict:  # (Tune flattens the space: a point names its knobs by their path)
        return {f"point/{_safe(k)}": v for k, v in point.items()}

    # The cut-off trials' points queued first in the study (OptunaSearch takes points either all evaluated or all to
    # run): Optuna drew new points instead, and the cut-off trials were never continued.
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # ("A new study created in memory": a quiet console)
    storage = optuna.storages.InMemoryStorage()
    if again:
        queued = optuna.create_study(storage=storage, study_name="fda-ray", direction="maximize")
        for p in again:
            queued.enqueue_trial(flat(p))
    searcher = OptunaSearch(metric=metric, mode="max", sampler=optuna.samplers.TPESampler(seed=seed),
                            study_name="fda-ray", storage=storage,
                            points_to_evaluate=[flat(p) for p in points] or None, evaluated_rewards=rewards or None)
    stopped: set[str] = set()

    def trial_of(config: dict[str, Any]) -> Any:
        from fda_ray.experiments.trials import point_trial

        o = config["run"]["optuna"]
        return point_trial(o["base"], o["row"], o["variable"], o["value"],
                           {n: config["point"][_safe(n)] for n in o["knobs"]})

    known: dict[str, Any] = {}  # Tune's trial id -> its Trial (planned once, not at every round's result)

    def trial_for(trial: Any) -> Any:
        if trial.trial_id not in known:
            known[trial.trial_id] = trial_of(trial.config)
        return known[trial.trial_id]

    def key_of(config: dict[str, Any]) -> str:
        return trial_of(config).key

    class Callback(tune.Callback):
        # (the status and the trackers follow each trial's rounds, as a grid's or a random search's launch tells
        # them: without these an Optuna study's trials reached no tracker, TensorBoard's included)
        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            from fda_ray.experiments.console import rounds_of

            t = trial_for(trial)
            progress.started(t, rounds_of(t))

        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            progress.at_round(trial_for(trial).key, result)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            key = trial_for(trial).key
            t = Trial.from_dict({"key": key, "row": row, "value": value, "seed": 0, "params": {}})
            if not is_done(records / key):
                complete = on_stopped(records / key)
                stopped.add(key)
                progress.line(t, stopped_line(trial.last_result, complete))
            else:
                progress.line(t, "done")

    from fda_ray.experiments.console import stopped_line, trial_name, tune_errors_log, tune_errors_to
    from fda_ray.experiments.stranded import StrandedWatch, tune_parts

    records, out = storage_path(records), storage_path(out)
    launch = next_launch(out)
    cfg = RunConfig(**base).resolved()
    # as a grid's launch (fda_ray.experiments.backends.run_tune): trials no live node holds after a node loss end
    # the study in one line; trials waiting on another job's resources get one note; Tune's dumps go to a log file
    from fda_ray.runtime import fusion, fusion_server

    served = fuse > 1 and fusion.config_fuses(cfg)
    bundles = (served_resources(cfg, fuse, driver_placement(pin_drivers)) if served
               else resources(cfg, driver_placement(pin_drivers)))
    watch = StrandedWatch(bundles.bundles, **(fusion_server.served_watch(cfg) if served else {}))
    this = Trial.from_dict({"key": row, "row": row, "value": value, "seed": 0, "params": {}})
    searcher = ConcurrencyLimiter(searcher, max_concurrent=max_concurrent or study_concurrency(
        bundles.bundles, num_samples, served=cfg if served else None))

    def on_stranded(reason: str, waiting: list) -> None:
        progress.note(f"note: {len(waiting)} trial(s) of {trial_name(this, variable)}'s study cannot start: "
                      f"{reason}; the running trials finish, then the study ends (resume once the cluster has such a "
                      "node)", stream=sys.stderr)

    def on_waiting(line: str, waiting: list) -> None:
        progress.note(f"note: {len(waiting)} trial(s) of {trial_name(this, variable)}'s study {line}; they start "
                      "once it is free", stream=sys.stderr)

    watch_callback, watch_stopper = tune_parts(watch, on_stranded, on_waiting)
    errors_log = tune_errors_log(out)
    with fusion_server.serving(cfg if served else None) as servers:  # stopped whatever ends the study
        tuner = tune.Tuner(
            tune.with_resources(trainable, bundles),
            param_space={"run": {"optuna": {"base": base, "row": row, "variable": variable, "value": value,
                                            "knobs": [d.name for d in space]},
                                 RECORD_KEY: str(records), "metric": metric, **({"served": servers} if servers else {})},
                         "point": {_safe(d.name): _domain(d) for d in space}},
            tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=num_samples,
                                        reuse_actors=True),
            run_config=tune.RunConfig(name=launch, storage_path=str(out / "tune"), verbose=0,
                                      failure_config=tune.FailureConfig(max_failures=max_failures),
                                      callbacks=[Callback(), watch_callback], stop=watch_stopper))
        with interrupts.graceful(), tune_errors_to(errors_log):  # SIGTERM stops the launch as Tune's Ctrl-C does
            grid = tuner.fit()
    failures = []
    for result in grid:
        if result.error is not None:
            failures.append({"trial": row, "row": row, "value": value, "seed": 0, "attempts": 1,
                             "error": last_error_line(str(result.error)), "log": errors_log})
    if watch.reason is not None:  # the study ended for want of a node: not interrupted, its trials not run
        failures.append({"trial": row, "row": row, "value": value, "seed": 0, "attempts": 0,
                         "error": f"not run: {watch.reason}", "stranded": True})
        return failures, False
    # Tune stops on SIGINT and returns: a trial neither done, stopped nor failed (or fewer trials than asked for)
    # means the study was interrupted
    # (a trial Optuna had drawn but Tune never started has no config: unsettled too)
    unsettled = [r for r in grid if r.error is None and (not r.config or "run" not in r.config or (
                 (key := key_of(r.config)) not in stopped and not is_done(records / key)))]
    return failures, bool(unsettled) or len(grid) < num_samples


def resume_state(path: Path) -> dict | None:
    """A restarted Tune trial's state from its Tune checkpoint (None without one). A damaged one is said in one
    warning line and the trial starts again from round 0 (the file stays Tune's)."""
    if not path.is_file():
        return None
    try:
        return torch.load(path, weights_only=True)
    except Exception as e:
        from fda_ray.core.user_files import torch_damage

        print(f"warning: Tune's checkpoint {path} cannot be read ({torch_damage(path.read_bytes(), e)}); the trial "
              "starts again from round 0", file=sys.stderr)
        return None


def last_error_line(text: str | None) -> str:
    """The line of a Tune error trace that says what went wrong (its last non-empty one: "RuntimeError: ..."),
    cut at interrupts.LINE_MAX characters; "an error" where Tune kept no trace."""
    lines = [x.strip() for x in (text or "").splitlines() if x.strip()]
    if not lines:
        return "an error"
    # "fda_ray.runtime.failures.RunFailed: run stopped in round 1: ..." -> "run stopped in round 1: ...": a run's
    # failure says what it is; another exception keeps its class name, without its module path
    line = re.sub(r"^(?:\w+\.)+(\w+): ", r"\1: ", lines[-1]).removeprefix("RunFailed: ")
    from fda_ray.core.interrupts import cut_line

    return cut_line(line)


def error_text(trial: Any) -> str | None:
    """A Tune trial's error trace as Tune has just written it: its local error.txt (the copy in the sweep's storage,
    which Trial.get_error reads, comes later)."""
    try:
        return Path(trial.error_file).read_text(errors="replace")
    except (OSError, TypeError):
        return None
