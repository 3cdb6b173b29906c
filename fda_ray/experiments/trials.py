"""The trials of a grid, and one trial's run with its own record (no Ray, no Tune: the sweep's backends and
fda_ray.experiments.tune's trainable call these).

    plan(grid, profile, rows=..., values=..., seeds=..., overrides=...) -> [Trial]
    run_trial(trial, records)                                  -> the History; records/<key>/ holds its record

With a grid's `share_source_only` (fda_ray.papers.grids), one source_only trial per seed is evaluated at every
value (eval_noise) and the finetune_offline trials fine-tune from its final weights (kind "finetune"). What a trial
is and how its record is kept: fda_ray.experiments.records.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from fda_ray.core.storage import StoragePath, storage_path
from fda_ray.experiments.records import (ROWS_FILE, STATE_FILE, TRIAL_FILE, WEIGHTS_FILE, Trial,
                                         _note_start, _save_json, _save_torch, environment, load_state, resume_misfit,
                                         trial_key)
from fda_ray.core.config import RunConfig
from fda_ray.papers.grids import MAX_SAMPLES, MAX_SEEDS, Grid  # noqa: F401  (the commands import the caps from here)


def _same(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)


def merge_fields(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """RunConfig fields from layers, later ones winning; the families' parameters ("params") merge field by
    field, so a row's fssda.imitation and a column's fssda.kd_temperature both stand."""
    out: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            if name == "params":
                fams = out.setdefault("params", {})
                for fam, values in value.items():
                    fams[fam] = {**fams.get(fam, {}), **values}
            else:
                out[name] = value
    return out


def select_rows(grid: Grid, rows: Sequence[str] | None, within: Sequence[str] | None = None) -> list[str]:
    """Row keys chosen by name: a row key (fedgp_beta1) or a method (fedgp: all of its rows; with `within`, a
    profile's rows, those of them the profile runs, so `--methods fedgp` on the quick noise grid leaves out
    FedGP_1 as the profile does, while `--methods fedgp_beta1` names it and runs it)."""
    if not rows:
        return [r.key for r in grid.rows]
    keys: list[str] = []
    for name in rows:
        by_method = [r.key for r in grid.rows if r.method == name]
        if within is not None:  # (a method the profile leaves out entirely: all its rows)
            by_method = [k for k in by_method if k in within] or by_method
        hit = [r.key for r in grid.rows if r.key == name or r.key in by_method]
        if not hit:
            from fda_ray.core.registry import did_you_mean

            names = list(dict.fromkeys([r.key for r in grid.rows] + [r.method for r in grid.rows]))
            raise ValueError(f"methods={name!r} is invalid: grid {grid.name!r} has rows {', '.join(names)}"
                             f"{did_you_mean(name, names)}")
        keys += [k for k in hit if k not in keys]
    return [r.key for r in grid.rows if r.key in keys]  # the table's order


def select_values(grid: Grid, values: Sequence[float] | None) -> list[float]:
    if not values:
        return list(grid.values)
    out = []
    for v in values:
        match = [g for g in grid.values if _same(g, v)]
        if not match:
            raise ValueError(f"values={v:g} is invalid: grid {grid.name!r} has {grid.variable} in "
                             f"{', '.join(f'{g:g}' for g in grid.values)}")
        out += [m for m in match if m not in out]
    return [g for g in grid.values if g in out]


def plan(grid: Grid, profile: str, *, rows: Sequence[str] | None = None, values: Sequence[float] | None = None,
         seeds: int | None = None, overrides: dict[str, Any] | None = None) -> list[Trial]:
    """Every trial of `grid` (or of the chosen rows and values; by default the profile's, if it names them):
    row x value x seed, in the order they should
    run: by seed, then shared source_only, the rows that train no source, then the rest value by value from
    the middle of the grid outwards (an interrupted grid has whole columns rather than whole rows)."""
    from fda_ray.algorithms import ALGORITHMS

    if profile not in grid.profiles:
        raise ValueError(f"profile={profile!r} is invalid: grid {grid.name!r} has {', '.join(grid.profiles)}")
    if seeds is not None and (not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS):
        raise ValueError(f"seeds={seeds!r} is invalid: an integer from 1 to {MAX_SEEDS}")
    overrides = dict(overrides or {})
    prof = grid.profiles[profile]
    # the profile's rows are keys, not names (the name fedgp would also take fedgp_beta1)
    chosen = select_rows(grid, rows, prof.rows) if rows or prof.rows is None else [r.key for r in grid.rows if r.key in prof.rows]
    vals = select_values(grid, values or prof.values)
    if grid.variable in overrides:
        raise ValueError(f"{grid.variable}={overrides[grid.variable]!r} is invalid here: it is the grid's variable "
                         f"(choose its values with --values)")
    for key in chosen:
        row_params = grid.row(key).params
        clash = sorted((set(row_params) & set(overrides)) - {"params"})
        if clash:
            raise ValueError(f"{clash[0]}={overrides[clash[0]]!r} is invalid here: row {key!r} sets it "
                             f"({grid.row(key).label})")
        for fam, values in overrides.get("params", {}).items():  # families' parameters merge field by field
            for name in set(values) & set(row_params.get("params", {}).get(fam, {})):
                raise ValueError(f"{fam}.{name}={values[name]!r} is invalid here: row {key!r} sets it "
                                 f"({grid.row(key).label})")
    # families' parameters merge field by field here too: a command line's --fedwca-prototypes keeps the grid's
    # fedwca.local_epochs (a plain dict merge dropped it)
    base = merge_fields({"dataset": grid.dataset}, grid.fixed, prof.fields, overrides)

    def n_seeds(v: float) -> int:
        return seeds if seeds is not None else (prof.seeds if prof.seeds is not None else grid.seeds_for(v))

    def make(row_key: str, value: float | None, seed: int, kind: str = "run", weights_from: str | None = None,
             save_weights: bool = False, at: tuple[float, ...] = ()) -> Trial:
        row = grid.row(row_key)
        # the column's settings (a grid of settings, fda_ray.papers.grids.Grid.value_fields) or its variable's value
        column = {} if value is None else dict(grid.value_fields.get(value, {grid.variable: value}))
        params = merge_fields(base, {"method": row.method, "seed": seed}, row.params,
                              prof.row_fields.get(row_key, {}), column)
        if at:
            params["eval_noise"] = list(at)
        try:
            RunConfig(**params).resolved()
        except ValueError as e:
            raise ValueError(str(e).splitlines()[0]) from None
        key = trial_key(row_key, grid.variable, value, seed, params, kind, weights_from)
        return Trial(key, row_key, value, seed, params, kind, weights_from, save_weights, at)

    share = grid.share_source_only and any(k in chosen for k in ("source_only", "finetune_offline"))
    middle_out = sorted(vals, key=lambda v: abs(vals.index(v) - (len(vals) - 1) / 2))
    out: list[Trial] = []
    for seed in range(max(n_seeds(v) for v in vals)):
        at = [v for v in middle_out if seed < n_seeds(v)]
        shared = None
        if share:
            # noise 0 for its own training: source_only never reads the target; eval_noise reads every value
            # its final weights are always kept (one flat vector a seed): a grid extended later with
            # finetune_offline starts from them rather than training source_only again (rerun_for_weights)
            shared = make("source_only", None, seed, save_weights=True, at=tuple(sorted(at)))
            out.append(shared)
        rest = [k for k in chosen if not (share and k in ("source_only", "finetune_offline"))]
        cheap = [k for k in rest if not getattr(ALGORITHMS.get(grid.row(k).method), "train_sources", True)]
        heavy = [k for k in rest if k not in cheap]
        if shared is not None and "finetune_offline" in chosen:
            cheap = ["finetune_offline"] + cheap
        for v in at:
            for k in cheap:
                if k == "finetune_offline" and shared is not None:
                    out.append(make(k, v, seed, kind="finetune", weights_from=shared.key))
                else:
                    out.append(make(k, v, seed))
        for v in at:
            out += [make(k, v, seed) for k in heavy]
    return out



def plan_manifest(grid: Grid, m: Any) -> list[Trial]:
    """The trials a grid sweep's manifest (sweep.json: its profile, rows, values, seeds and overrides) plans."""
    return plan(grid, m.profile, rows=list(m.rows) if m.rows else None, values=list(m.values) if m.values else None,
                seeds=m.seeds, overrides=dict(m.overrides))

def run_trial(trial: Trial, records: StoragePath | Path | str, report: Callable[[dict], None] | None = None,
              group: Any = None, on_resume: Callable[[list[dict]], None] | None = None) -> Any:
    """Run `trial` (or go on from its state.pt), keeping its record in records/<key>/ (a local or shared
    directory, or an object store: fda_ray.core.storage); returns its History. report(row) is called after
    every round (Tune reports there). group: the fda_ray.runtime.fusion.TrialGroup it is a member of (its clients
    then live in this process and train in the group's batches; run_group). on_resume(rows): the rows of the state
    it goes on from, once, before its first round ([] from round 0)."""
    from fda_ray.runtime.engine import finetune_from, run_rounds, start_run
    from fda_ray.runtime.startup import REPORT_KEY

    records = storage_path(records)
    record = records / trial.key
    record.mkdir(parents=True, exist_ok=True)
    _save_json(trial.to_dict(), record / TRIAL_FILE)
    started_at = time.time()
    from fda_ray import kernels

    kernels.forget_ran()  # (a reused trial process ran other trials before: this record names this trial's)
    cfg = trial.config().resolved()
    gpu_memory = GpuMemory(cfg.device)
    if trial.kind == "finetune":
        source = records / str(trial.weights_from) / WEIGHTS_FILE
        if not source.is_file():
            raise FileNotFoundError(f"trial {trial.key} starts from {source}, which does not exist (run trial "
                                    f"{trial.weights_from} first)")
        nodes = _note_start(record, None, started_at=started_at)
        hist = finetune_from(cfg, source.load_torch(), report)
    else:
        if group is None:
            exp, executor, startup = start_run(cfg)  # the actors start while the data loads (timed phases)
        else:
            exp, executor, startup = _start_member(cfg, trial.key, group)
        reported: list[bool] = []

        def on_round(state: dict) -> None:
            _save_torch({**state, "trial": trial.key}, record / STATE_FILE)  # named: a wrong one is refused
            if report:  # the first report carries the start-up's phases (the status names a slow one)
                row = state["rows"][-1]
                # A fused or served member's first round waits for its group's builds and first batch: not its own
                # slow start-up (every member was noted for the group's), so that phase is not reported for it.
                phases = {k: v for k, v in startup.seconds.items() if group is None or k != "first_collect"}
                report(row if reported else {**row, REPORT_KEY: phases})
                reported.append(True)

        finished = False
        try:
            resume = load_state(record, fits=lambda st: resume_misfit(st, exp))
            if on_resume is not None:  # the rows it goes on from ([]: from round 0), before its first report
                on_resume(list(resume["rows"]) if resume is not None else [])
            # (a fused group's trials; a fusion server's batches are whichever trials' rounds wait: not known here)
            nodes = _note_start(record, resume, executor, started_at,
                                fused=len(group.members) if hasattr(group, "members") else None)
            hist = run_rounds(exp, executor, resume=resume, checkpoint=on_round, startup=startup)
            finished = True
            gpu_memory.read_actors(executor)
        finally:
            executor.shutdown(keep=finished)  # a finished trial's actors may serve the sweep's next trial
    if trial.save_weights:
        _save_torch(hist.final_weights.detach().cpu().contiguous(), record / WEIGHTS_FILE)
    # how the attempt that finished it ran fused: its group, its batches, the round it started from (nodes.json
    # says for each attempt whether it ran in a group: a member retried alone ran its first rounds fused)
    fused = {"fused": {**group.record(trial.key), "from_round": nodes[-1].get("from_round", 0)}} \
        if group is not None else {}
    seconds = hist.seconds
    # a group's member or a served trial: its own work and its share of the batches, not the rounds of the others it
    # waited through (fusion.TrialGroup.own_seconds, fusion_server.ServedGroup.own_seconds)
    if hasattr(group, "own_seconds") and trial.kind != "finetune":
        seconds = group.own_seconds(trial.key, hist.seconds, executor.waited)
        fused["fused"]["wall_seconds"] = hist.seconds
    _save_json({"config": cfg.to_dict(), "rows": hist.rows, "seconds": seconds,
                "environment": environment(kernels.ran()),
                "nodes": nodes, "startup": hist.startup, "finished_at": time.time(), **gpu_memory.record(), **fused},
               record / ROWS_FILE)
    return hist


def _start_member(cfg: Any, key: str, group: Any) -> tuple[Any, Any, Any]:
    """A group member's experiment (built under fusion.BUILD_LOCK: building seeds torch's global generator) and its
    executor in the group; the start-up's phases timed as start_run times them."""
    from fda_ray.kernels import loader
    from fda_ray.runtime.experiment import build_experiment
    from fda_ray.runtime.fusion import BUILD_LOCK
    from fda_ray.runtime.startup import Startup, warm_device

    st = Startup()
    kernels_before = loader.seconds()
    with BUILD_LOCK:
        with st.phase("device_init"):
            warm_device(cfg.device)
        with st.phase("data_load"):
            exp = build_experiment(cfg)
    st.add("kernel_load", loader.seconds() - kernels_before)
    with st.phase("data_ship"):  # a fusion server's: the clients shipped to it (a group in this process: nothing)
        executor = group.executor(key, exp.clients)
    return exp, executor, st


def run_group(trials: Sequence[Trial], records: StoragePath | Path | str,
              report: Callable[[str, dict], None] | None = None,
              finished: Callable[[str], None] | None = None) -> dict[str, BaseException | None]:
    """Run `trials` as one fused group (fda_ray.runtime.fusion) in this process: each trial's run_trial in a thread
    of its own, keeping its own record; their clients' local training in the group's batches. Returns each trial's
    exception (None: finished). A failing trial leaves the group and the others go on; Ctrl-C stops them all (their
    records keep their last finished round) and is raised again here. report(key, row): after each trial's rounds;
    finished(key): as soon as a trial has finished (its record whole), while the others go on."""
    import atexit
    import threading

    from fda_ray.runtime.fusion import TrialGroup

    records = storage_path(records)
    threads = {t.config().resolved().threads for t in trials}
    if len(threads) > 1:
        raise ValueError(f"threads={sorted(threads)} is invalid in one group: a group's trials share one thread count")
    group = TrialGroup([t.key for t in trials], threads=threads.pop() if threads else 1)
    outcome: dict[str, BaseException | None] = {}

    def one(t: Trial) -> None:
        try:
            run_trial(t, records, report=(lambda row: report(t.key, row)) if report else None, group=group)
            outcome[t.key] = None
            if finished is not None:
                try:
                    finished(t.key)
                except Exception:  # (the status's message only: its record is whole, it finished)
                    pass
        except BaseException as e:  # noqa: BLE001 (the member's own outcome; the group goes on)
            outcome[t.key] = e
        finally:
            group.leave(t.key)

    threads = [threading.Thread(target=one, args=(t,), name=f"fda-trial-{i}", daemon=True)
               for i, t in enumerate(trials)]

    def at_exit() -> None:  # the process exits under the group (run_group in a thread of a Tune trial told to end):
        group.stop()  # its members stop at their next round (each keeps its last finished one) and leave torch
        deadline = time.monotonic() + 10
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))

    atexit.register(at_exit)
    for th in threads:
        th.start()
    try:
        for th in threads:
            while th.is_alive():
                th.join(0.2)
    except KeyboardInterrupt:
        group.stop()
        for th in threads:
            th.join()
        raise
    finally:
        atexit.unregister(at_exit)
        group.close()
    return outcome


class GpuMemory:
    """A GPU trial's memory for its record ("gpu_memory", bytes, as PyTorch's allocator counts it: the CUDA contexts
    aside): this process's peaks (its peak counters reset when the trial starts: a reused trial process ran others
    before) and each GPU client actor's since its clients were loaded. Nothing for a trial on the CPU."""

    def __init__(self, device: str) -> None:
        import torch

        self.on = device.startswith("cuda") and torch.cuda.is_available()
        self.actors: list[dict[str, int]] = []
        if self.on:
            torch.cuda.reset_peak_memory_stats(device)
            self.device = device

    def read_actors(self, executor: Any) -> None:
        """The GPU client actors' memory, read before they are shut down or kept (a serial trial has none)."""
        if self.on and hasattr(executor, "gpu_memory"):
            self.actors = [m for m in executor.gpu_memory() if m.get("peak_reserved")]

    def record(self) -> dict[str, Any]:
        if not self.on:
            return {}
        import torch

        return {"gpu_memory": {"process": {"peak_allocated": int(torch.cuda.max_memory_allocated(self.device)),
                                           "peak_reserved": int(torch.cuda.max_memory_reserved(self.device))},
                               "actors": self.actors}}


def point_trial(base: dict[str, Any], row: str, variable: str, value: float, point: dict[str, Any]) -> Trial:
    """The trial of one point of a study (knob names as in fda_ray.papers.searches.Dim: "family.name" under params)."""
    layers = [{"params": {k.split(".", 1)[0]: {k.split(".", 1)[1]: v}}} if "." in k else {k: v}
              for k, v in point.items()]
    params = merge_fields(base, *layers)
    try:
        RunConfig(**params).resolved()
    except ValueError as e:
        raise ValueError(str(e).splitlines()[0]) from None
    return Trial(trial_key(row, variable, value, params["seed"], params), row, value, params["seed"], params)


def load_grid(ref: str) -> Grid:
    """A built-in grid by name (fda_ray.papers.grids), or the grid a .yaml/.yml/.json file defines (fda_ray.papers.files): its
    keys and values checked, then every profile planned and each row's first trial built into a RunConfig, so a
    bad field or value is one line now rather than an error in a worker."""
    from fda_ray.papers.files import grid_file, resolve
    from fda_ray.papers.grids import GRIDS

    def firsts(grid: Grid, profile: str) -> list[tuple[str, dict]]:
        trials = plan(grid, profile, seeds=1)
        return [(f"row {row!r}", t.params) for row, t in {t.row: t for t in reversed(trials)}.items()]

    return resolve(ref, GRIDS, "grid", "grids", grid_file, firsts)
