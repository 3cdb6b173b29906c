"""Sweeps of a named grid (fda_ray.papers.grids), on a laptop or a cluster, with results people can read.

    python -m fda_ray.sweep --grid noise                                   quick profile, Ray Tune, local Ray
    python -m fda_ray.sweep --grid label-shift --methods fedgp,fedda --values 0.1 --rounds 2   try it small
    python -m fda_ray.sweep --grid noise --profile paper --backend local --workers 2      no Ray: a process pool
    python -m fda_ray.sweep --grid noise --profile paper --address auto --gpus-per-client 0.1     a cluster
    python -m fda_ray.sweep --grid noise --resume                          go on after an interruption
    python -m fda_ray.sweep --grid noise --dry-run                         print the trials, run nothing

Every RunConfig field is also a flag (`--rounds 5`, `--lr-target 0.001`, ...): it overrides that field in
every trial. Each trial is one run with its own record (fda_ray.experiments.trials). Output in --out (default
sweeps/<grid>-<profile>):
- trials/<key>/: each trial's record: state.pt after every round, rows.json once it is done. This, not
  Tune's experiment state, is what --resume reads: finished trials are kept, a trial cut off mid-run goes on
  from its last round, so a sweep killed at any moment loses at most one round per running trial. (Ray 2.60
  writes Tune's experiment state with a plain open("w"); after a SIGKILL it can be empty, half-written or
  trials behind, and Tuner.restore then starts a new experiment.)
- tensorboard/<key>/ (and mlflow.db, wandb/ with --track): every trial's per-round metrics
  (fda_ray.experiments.tracking);
- tune/launch-<n>/ (backend tune): Tune's own logs of each launch (progress.csv and result.json per trial);
- results.parquet: a row per trial and round, the trial's fields as columns;
- summary.md: final target accuracy per table row and grid value, mean ± the 95 % confidence half-width over seeds,
  the paper's number beside it and every gap over 3 points marked; failed trials and an interruption are stated;
- accuracy.{png,pdf} (Auto-weighted FDA Figure 3 style), beta_<row>.{png,pdf} for auto-weighted rows (Figures 5-10),
  estimates.{png,pdf} (the estimated sigma and d per round).
Exit code: 0 when every trial finished; 1 when a trial failed for good; 130 when interrupted; 2 bad input.
The parser and the checks of the arguments are fda_ray.experiments.arguments' (the readers of an old directory's
`Command:` line parse it with the same parser); this module is the command only.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import sys
import time
from typing import Any, Callable

from fda_ray.core import locks, plugins
from fda_ray.core.storage import StoragePath, StoreError, storage_path
from fda_ray.runtime import node_watch, preflight, resources
from fda_ray.core.registry import did_you_mean
from fda_ray.experiments.cli import config_fields
from fda_ray.experiments.arguments import (RESUME_WORDS, SCHEDULERS, SweepError, _list, check_backend, check_counts,
                                            check_fuse, check_plan_for, check_search_only, chunk_manifest,
                                            held_by_another, manifest_from_args, parser, search_chunk)
from fda_ray.experiments.manifest import read as read_manifest, write as write_manifest
from fda_ray.data.base import DatasetNotFound
from fda_ray.experiments.backends import Progress, failure_advice, run_local, run_tune, write_parquet
from fda_ray.experiments import console, tracking
from fda_ray.experiments.console import counted, quiet
from fda_ray.experiments.tracking import Tracking
from fda_ray.experiments.records import (ROWS_FILE, Trial, changed_settings, collect, is_done, rerun_for_weights,
                                         set_aside_damaged)
from fda_ray.experiments.summary import builds_line, summarize
from fda_ray.experiments.trials import load_grid, plan, plan_manifest
from fda_ray.papers.grids import GRIDS, Grid
from fda_ray.papers.files import dump as dump_definition, grid_to_dict, search_to_dict, write_definition
from fda_ray.papers.searches import SEARCHES
from fda_ray.core.interrupts import cli_main, write_failure
from fda_ray.runtime.fusion import group_size


def _auto_resume(a: Any, records: Any) -> None:
    """--resume auto: resume exactly when `records` (the sweep's or search's trials/) exist."""
    if a.resume == "auto":
        a.resume = records.exists()


@cli_main
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if (code := plugins.preload(argv)) is not None:  # before the parser and the grid-file checks
        return code
    p = parser()
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    argv = p.parsed_argv  # a --config file's flags written out: the summary's command replays without the file
    quiet(a.verbose)  # before Ray starts (fda_ray.experiments.console)
    if a.search is not None or a.grid is None:
        return search_main(a, argv, p.error_line)
    try:
        grid = load_grid(a.grid)
        if a.print_grid:
            print(dump_definition(grid_to_dict(grid), a.print_grid), end="")
            return 0
        if a.profile not in grid.profiles:
            raise SweepError(f"profile={a.profile!r} is invalid for grid {a.grid!r}: one of {', '.join(grid.profiles)}"
                             f"{did_you_mean(a.profile, grid.profiles)}")
        check_backend(a)
        check_counts(a)
        check_search_only(argv, [o for action in p._actions for o in action.option_strings])
        check_fuse(a)
        if a.pin_drivers and a.backend == "local":
            raise SweepError("pin_drivers=True is invalid with --backend local: it places Tune trials on Ray nodes")
        overrides = config_fields(a)
        track = tracking.parse(a.track)
        _tune_defaults(a, overrides)
        if a.backend == "local" and overrides.get("executor", "serial") != "serial":
            raise SweepError(f"executor={overrides['executor']!r} is invalid with --backend local: its trials run "
                             "serially in a process pool (use --backend tune for Ray client actors)")
        trials = plan(grid, a.profile, rows=_list(a.methods, str, "methods"), values=_list(a.values, float, "values"),
                      seeds=a.seeds, overrides=overrides)
        planned = {t.row for t in trials}
        row_keys = [r.key for r in grid.rows if r.key in planned]  # the paper's table order
        values = [v for v in grid.values if any(t.value == v or v in t.values for t in trials)]
        out = storage_path(a.out or f"sweeps/{grid.name}-{a.profile}")  # a path or a URI (s3://...)
        records = out / "trials"
        # before any work: results must have somewhere to go, under names the filesystem takes, with room for them
        longest = max((t.key for t in trials), key=len)
        where = preflight.output_dir("out", out, below=f"trials/{longest}/{ROWS_FILE}.before-rerun.99",
                                     need=64 * preflight.MiB + preflight.MiB * len(trials))
        preflight.layout("out", out, where, files=("results.parquet", "summary.md", "grid.yaml"), dirs=("trials",))
        _auto_resume(a, records)
        if a.resume and (why := held_by_another(out, "grid", a.grid, grid)):  # before anything in it changes
            raise SweepError(f"out={str(out)!r} is invalid for --grid {a.grid}: {why}")
        if records.exists() and not a.resume and not a.dry_run:
            raise SweepError(f"out={str(out)!r} is invalid: it holds a sweep already; pass --resume to continue it "
                             "or choose another --out")
        if a.resume and not records.exists():
            raise SweepError(f"resume=True is invalid: {str(records)!r} does not exist (nothing to resume)")
        damaged = set_aside_damaged(records, move=not a.dry_run) if a.resume else {}
        for line in damaged.values():
            print(line, file=sys.stderr)
        if a.resume:
            same_build(records, a.mix_builds, trials[0].config().resolved(), here_runs=_runs_here(a))
            changed = changed_settings(trials, records)
            if changed and not a.new_settings:
                raise SweepError(f"resume=True is invalid: {changed}; pass --new-settings to add trials of these "
                                 "settings beside them (the summary shows this command's trials only), or choose "
                                 "another --out")
            # finished trials others start from that kept no usable weights run again (once the resume is allowed)
            rerun = rerun_for_weights(trials, records, move=not a.dry_run)
            for line in rerun.values():
                print(line, file=sys.stderr)
            damaged.update(rerun)
        check_plan_for(a)
        if a.dry_run:
            if a.plan_for is None:  # planned for this machine: what its trials need from it, checked now (as the
                # run checks it: the device only on the local backend; on Ray the nodes hold the devices, and a
                # head without a GPU plans a --gpus-per-client sweep for its cluster)
                _check_here(grid.dataset, trials[0].config().resolved(), overrides, device=a.backend == "local")
            # the groups of the trials a run would train: not the finished ones (a resume groups what is left)
            todo = [t for t in trials if t.key in damaged or not is_done(records / t.key)]
            lines, refusal = dry_run_plan(trials[0].config().resolved(), a, todo)
            for t in trials:
                state = "to run (damaged record)" if t.key in damaged else "done" if is_done(records / t.key) \
                    else "to run"
                extra = f" (from {t.weights_from})" if t.weights_from else ""
                print(f"{t.key}: {grid.row(t.row).label}, {t.params.get('method')}"
                      f"{' beta ' + str(t.params['beta']) if 'beta' in t.params else ''}{extra} [{state}]")
            print(counted(len(trials), "trial"))
            print("\n".join(lines))
            if refusal:
                print(refusal, file=sys.stderr)
            return 2 if refusal else 0
        _preflight(grid.dataset, trials[0].config().resolved(), a.backend, a.address, overrides, out, a.pin_drivers)
        warning = preflight.ignored_warning([t.config() for t in trials], names=overrides)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    except (SweepError, ValueError) as e:
        print(p.error_line(e), file=sys.stderr)
        return 2
    except DatasetNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    command = _command(argv)
    try:
        with locks.held(out, "out", command):  # one writer per --out (an object store's prefix: a lease)
            return _execute(a, grid, trials, out, records, command, row_keys, values, track)
    except locks.LockedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _held_manifest(out: StoragePath) -> Any:
    """The sweep.json already in `out` (None: none, or one that cannot be read: --resume has refused those)."""
    from fda_ray.experiments.manifest import ManifestError

    try:
        return read_manifest(out)
    except ManifestError:
        return None


def _execute(a: Any, grid: Grid, trials: list[Trial], out: StoragePath, records: StoragePath, command: str,
             row_keys: list[str], values: list[float], track: Any) -> int:
    """Run a checked sweep's pending trials, then collect and summarise every trial's record."""
    pending = [t for t in trials if not is_done(records / t.key)]
    print(f"sweep {grid.name} ({a.profile}, backend {a.backend}): {counted(len(trials), 'trial')} -> {out}"
          + (f"; resuming, {len(trials) - len(pending)} finished before" if a.resume else ""), flush=True)
    records.mkdir(parents=True, exist_ok=True)
    write_definition(grid, out / "grid.yaml")  # what ran, beside its records (collect reads a file grid from it)
    # what the sweep is, for its readers (sweep.json): every chunk's rows, values and seeds so far
    merged = chunk_manifest(_held_manifest(out), manifest_from_args(a, command), grid)
    write_manifest(out, merged)
    t0 = time.time()
    failures: list[dict] = []
    interrupted = False
    tracker = Tracking(track, out, f"{grid.name}-{a.profile}")
    console.OBSERVERS[:] = [tracker]
    progress = Progress(len(pending), grid.variable)
    node_watch.set_kept(lambda: f"the {sum(1 for t in trials if is_done(records / t.key))} finished trials' records "
                        f"and the others' last rounds are in {records}; resume with: {command} --resume")
    try:
        first = trials[0].config().resolved()
        fuse = group_size(a.fuse, first.device)
        if pending and a.backend == "local":
            if (note := oversubscribed(a.workers, min(a.workers or 1, len(pending)), first)) is not None:
                print(note, file=sys.stderr)
            workers = a.workers or local_workers(first, fuse=fuse)
            failures = run_local(pending, records, workers, a.max_failures, progress, fuse=fuse)
        elif pending:
            failures, interrupted = run_tune(pending, records, out, a.address, a.max_concurrent, a.max_failures,
                                             progress, pin_drivers=a.pin_drivers, fuse=fuse)
    except KeyboardInterrupt:
        interrupted = True
    except StoreError as e:
        _shutdown_ray()
        return _store_down(e, records, command)
    finally:
        console.OBSERVERS.clear()
        tracker.close()
    if not locks.still_held(out):  # --out removed, moved or replaced (a store's lease taken over): not summarised
        if not out.is_local:
            print(f"error: out={str(out)!r} was taken over by another sweep while this one ran (this one was not "
                  f"heard from for minutes): its trials' records are kept there; no summary is written over the "
                  f"other sweep's. When it has ended, resume with: {command} --resume", file=sys.stderr)
            _shutdown_ray()
            return 1
        print(f"error: out={str(out)!r} was removed, moved or replaced while the sweep ran (its lock file is gone): "
              "the records of the trials that finished before are wherever the folder went, the later ones in "
              f"{records}; no summary is written over a part of them. Put the records back into one folder, then "
              f"resume with: {command} --resume", file=sys.stderr)
        _shutdown_ray()
        return 1
    try:
        shown = _with_earlier_chunks(grid, merged, trials, records)
        if len(shown) > len(trials):  # the summary's table: every chunk's rows and values, in the grid's order
            row_keys = [r.key for r in grid.rows if any(t.row == r.key for t in shown)]
            values = [v for v in grid.values if any(t.value == v or v in t.values for t in shown)]
        return _summarise(a, grid, trials, out, records, command, row_keys, values, pending, failures, interrupted, t0,
                          shown)
    except StoreError as e:
        _shutdown_ray()
        return _store_down(e, records, command)
    except OSError as e:  # the disk refused the results table, the summary or a figure: the trials' records stay
        line = write_failure(e)
        if line is None:
            raise
        done = sum(1 for t in trials if is_done(records / t.key))
        print(f"error: {line}; the {done} finished trials' records are kept in {records}; free the space (or fix the "
              f"path), then resume with: {command} --resume", file=sys.stderr)
        return 1


def _store_down(e: StoreError, records: StoragePath, command: str) -> int:
    """One line for an object store that stopped answering mid-sweep (exit 1): the records written before stay."""
    print(f"error: {e}; the finished trials' records stay in {records}, and a trial cut off keeps its last round: "
          f"once the store answers, resume with: {command} --resume", file=sys.stderr)
    return 1


def _with_earlier_chunks(grid: Grid, merged: Any, trials: list[Trial], records: StoragePath) -> list[Trial]:
    """This launch's trials and the finished trials of the folder's earlier chunks of the same sweep (sweep.json's
    union of every chunk: a chunk of other --methods, --values or --seeds into the same --out), in the plan's order:
    what the summary, results.parquet and figures show, so that a chunk's summary keeps the chunks before it."""
    try:
        planned = plan_manifest(grid, merged)
    except (ValueError, TypeError, AttributeError):  # (a manifest this grid cannot plan any more: this launch's own)
        return trials
    mine = {t.key for t in trials}
    known = {t.key for t in planned}
    return [t for t in planned if t.key in mine or is_done(records / t.key)] + [t for t in trials if t.key not in known]


def _summarise(a: Any, grid: Grid, trials: list[Trial], out: StoragePath, records: StoragePath, command: str,
               row_keys: list[str], values: list[float], pending: list[Trial], failures: list[dict],
               interrupted: bool, t0: float, shown: list[Trial] | None = None) -> int:
    """The sweep's results table, summary and figures from every trial's record (`shown`: this launch's trials and
    the earlier chunks' finished ones; default `trials`); the exit code."""
    shown = trials if shown is None else shown
    rows, trial_seconds = collect(shown, grid, records)
    write_parquet(rows, out / "results.parquet")
    text, summary = summarize(rows, failures, grid, a.profile, row_keys, values, command)
    done = sum(1 for t in trials if is_done(records / t.key))
    summary.update(wall_seconds=time.time() - t0, resumed=a.resume, trials=len(trials), trials_done=done,
                   trials_run=len(pending), interrupted=interrupted)
    if interrupted:
        text += (f"\n**Interrupted**: {done} of {len(trials)} trials finished. Continue with "
                 f"`{command} --resume`.\n")
    summary["trial_seconds"] = trial_seconds
    summary["builds"], builds_text = builds_line(records, {t.key for t in shown})
    text += builds_text
    text += (f"\nWall time: {summary['wall_seconds']:.0f} s for {counted(len(pending), 'trial')}"
             + (f" ({len(trials) - len(pending)} more had finished before --resume)" if len(pending) < len(trials) else "")
             + (f"; the tables also hold the {len(shown) - len(trials)} finished trials of this folder's earlier "
                "chunks (sweep.json)" if len(shown) > len(trials) else "")
             + f"; the finished trials' own run time adds up to {summary['trial_seconds']:.0f} s.\n")
    if not a.no_figures and rows:
        from fda_ray.experiments.figures import sweep_figures
        text += sweep_figures(rows, summary, grid, row_keys, values, out)
    (out / "summary.md").write_text(text)  # atomic, locally or on an object store
    print(json.dumps(summary, indent=1) if a.json else text)
    _shutdown_ray()
    if interrupted:
        print(f"interrupted: {done} of {len(trials)} trials finished; resume with: {command} --resume",
              file=sys.stderr)
        return 130
    for line in failure_advice(failures, done, str(records), command):
        print(line, file=sys.stderr)
    return 1 if failures or done < len(trials) else 0


def _tune_defaults(a: Any, overrides: dict[str, Any]) -> None:
    """Tune on GPU shares or a cluster: clients as Ray actors, where they have somewhere to go (else each trial
    trains its clients in its own process: a laptop), and with GPU clients a driver that aggregates and
    evaluates on its node's GPU. The actors' sizes and requests are fda_ray.runtime.resources' plan. Fields the
    user set stay as set."""
    from fda_ray.experiments.arguments import tune_defaults

    if a.backend == "tune":
        tune_defaults(overrides, a.address)


def _runs_here(a: Any) -> bool:
    """Whether this machine runs the trials (no cluster joined): then its CPU and kernels are theirs."""
    return not (getattr(a, "address", None) or os.environ.get("RAY_ADDRESS"))


def expected_aggregation(cfg: Any) -> str | None:
    """The aggregation kernels' implementation a trial of `cfg` would run on this machine (cpp, cuda, reference),
    or None where this machine cannot tell (a CUDA trial on a machine without a GPU)."""
    import torch

    from fda_ray import kernels

    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        return None
    return kernels.implementation(cfg.device, cfg.aggregation_impl)


def same_build(records: StoragePath, mix: bool, cfg: Any = None, here_runs: bool = True) -> None:
    """A resumed sweep adds trials of this build (fda_ray.core.build) to those already in `records`: if some were
    recorded by another build, one table would mix two builds' numbers, so it refuses in one line unless `mix`.
    A change of the aggregation kernels' implementation (a kernel that no longer builds: the reference) or of the
    CPU capability counts like a change of torch, where this machine runs the trials (`here_runs`; `cfg`: the
    sweep's first trial, whose implementation is looked up only when a record names one). Records that name no
    build (made before builds were recorded) cannot be compared: a warning line."""
    from fda_ray.core.build import FIELDS, build, differences
    from fda_ray.experiments.records import recorded_builds

    recorded = recorded_builds(records)
    named = here_runs and cfg is not None and any(dict(zip(FIELDS, env)).get("aggregation") for env in recorded)
    here = build(expected_aggregation(cfg) if named else None)
    if not here_runs:  # the cluster's nodes, not this one, run the trials: their CPU is not this one's
        here["cpu"] = None
    unknown, other, diffs = 0, 0, {}
    for env, keys in recorded.items():
        if all(v is None for v in env):
            unknown += len(keys)
            continue
        diff = differences(dict(zip(FIELDS, env)), here)
        if diff:  # (records of one build can fall in several groups: one names its aggregation, another none)
            other += len(keys)
            diffs.update(dict.fromkeys(diff))
    if other and not mix:
        raise SweepError(f"resume=True is invalid: {other} trial(s) in {records} were recorded by another build "
                         f"({'; '.join(diffs)}); pass --mix-builds to add this build's trials to them, or choose "
                         "another --out")
    if unknown:
        print(f"warning: {unknown} trial(s) in {records} name no build (recorded before builds were): "
              "they may come from another one", file=sys.stderr)


def _preflight(dataset: str, first: Any, backend: str, address: str | None, overrides: dict[str, Any],
               out: StoragePath, pin_drivers: bool = False) -> None:
    """What the trials need from the machine, before any work: the data, the weights file, the device (local);
    on Ray, the trials' placement groups against the cluster's nodes (fda_ray.runtime.resources: refused in one line
    before Tune would wait for them) and, on several nodes, an --out that every node sees and writes (a probe from
    each)."""
    _check_here(dataset, first, overrides, device=backend == "local")  # (on Ray the nodes hold the devices)
    if backend == "local":
        return
    from fda_ray.runtime.driver import ensure_ray

    ensure_ray(address, num_cpus=None, field="address")
    p, cluster = trial_plan(first, address, pin_drivers)
    warning = resources.check(p, cluster)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    preflight.shared_storage("out", out)


def _check_here(dataset: str, first: Any, overrides: dict[str, Any], device: bool = True) -> None:
    """What the trials need from this machine (the pre-flight's and --dry-run's checks): the dataset is found,
    the weights file exists and, with `device`, the device is here."""
    from fda_ray.data import load

    load(dataset, overrides.get("data_dir"))
    preflight.model_weights(first.model_weights, first.model)
    if device:
        preflight.device(first.device)


def _joined(a: Any) -> str | None:
    """The cluster a dry run plans on: --address, else $RAY_ADDRESS (a `ray job submit` job, KubeRay's RayJob: the
    run joins it, and the plan was this machine's: "no node has a GPU" on a CPU head), else None."""
    return getattr(a, "address", None) or os.environ.get("RAY_ADDRESS") or None


def trial_plan(first: Any, address: str | None, pin_drivers: bool, plan_for: str | None = None
               ) -> tuple[resources.TrialPlan, resources.Cluster]:
    """A Tune trial's plan (every trial of a sweep asks the same) on the cluster it will run on: the nodes
    --plan-for names, else the running Ray's (joined with --address or $RAY_ADDRESS), else this machine."""
    import fda_ray.experiments.tune as ft

    if plan_for is not None:
        cluster = resources.parse_nodes(plan_for)
    else:
        import ray

        joined = bool(address or os.environ.get("RAY_ADDRESS"))
        cluster = resources.from_ray(joined) if ray.is_initialized() else resources.this_machine()
    p = resources.plan(first, cluster, in_tune=True, driver_extra=ft.driver_placement(pin_drivers))
    if pin_drivers:
        p = dataclasses.replace(p, fields=p.fields + ("pin_drivers=True",))
    return p, cluster


def local_workers(first: Any, node: Any = None, fuse: int = 1) -> int:
    """The local backend's worker processes: a trial's share of the machine each (resources.local_workers); with
    fused groups on a GPU, one process per GPU (a group is one computation on one device)."""
    n = resources.local_workers(first, node)
    if fuse > 1 and first.device.startswith("cuda"):
        gpus = (node or resources.this_machine()).total("GPU")
        n = max(1, min(n, int(gpus) or 1))
    return n


def fused_lines(trials: list[Trial], size: int, workers: int | None, what: str) -> list[str]:
    """--dry-run's lines for --fuse: each group (its members, by row and seed) and the trials that run alone, why."""
    from fda_ray.runtime.fusion import plan_groups, why_not_fused

    if size <= 1:
        return []
    groups = plan_groups(trials, size)
    fused = [g for g in groups if len(g) > 1]
    alone = [g[0] for g in groups if len(g) == 1]
    lines = [f"fused: {sum(len(g) for g in fused)} of {len(trials)} trials in {len(fused)} group(s) of at most {size} "
             f"(each group one computation on one device: {what})"]
    for i, g in enumerate(fused):
        rows = ", ".join(f"{t.row} {t.value if t.value is not None else 'all'} s{t.seed}" for t in g)
        lines.append(f"  group {i + 1} ({len(g)} trials): {rows}")
    reasons: dict[str, int] = {}
    for t in alone:
        why = why_not_fused(t, size)
        why = why if why != "fusible" else "no other trial of its kind to fuse with"
        reasons[why] = reasons.get(why, 0) + 1
    for why, n in reasons.items():
        lines.append(f"  alone: {n} trial(s): {why}")
    return lines


def oversubscribed(given: int | None, running: int, first: Any, node: Any = None) -> str | None:
    """A warning line where --workers (`given`) runs more trials at once (`running`: no more than there are) than
    the machine has CPUs for (each `threads`): the trials then share cores, each runs slower, and the sweep as a
    whole is no faster (the default is one trial a core)."""
    node = node or resources.this_machine()
    cpus = node.total("CPU")
    if given is None or first.device.startswith("cuda") or running * first.threads <= cpus:
        return None
    return (f"warning: workers={given} runs {running} trials at once, {running * first.threads:g} CPUs "
            f"({first.threads} thread(s) a trial) of the {cpus:g} {node.source} has: the trials share cores and each "
            f"runs slower (default: {local_workers(first, node)})")


def dry_run_plan(first: Any, a: Any, trials: list[Trial] | None = None) -> tuple[list[str], str | None]:
    """The resource plan --dry-run prints, and the one-line refusal when the trials can never be placed."""
    fuse = group_size(getattr(a, "fuse", "off"), first.device)
    if a.backend == "local":
        node = resources.parse_nodes(a.plan_for) if a.plan_for is not None else resources.this_machine()
        workers = a.workers or local_workers(first, node, fuse)
        grouped = False
        if fuse > 1 and trials:  # (no more at once than there are groups and trials alone)
            from fda_ray.runtime.fusion import plan_groups

            groups = plan_groups(trials, fuse)
            workers, grouped = min(workers, len(groups)), any(len(g) > 1 for g in groups)
        elif trials:  # (--workers 100000 for 4 trials: 4 at once)
            workers = min(workers, len(trials))
        line = [f"plan: {workers} {'group(s)' if grouped else 'trial(s)'} at once (backend local: worker processes, "
                f"each {'group' if grouped else 'trial'} serially in one of them; {first.threads} thread(s), device "
                f"{first.device})"]
        line += fused_lines(trials or [], fuse, workers, f"a worker process, {first.threads} thread(s), "
                                                          f"device {first.device}")
        if (note := oversubscribed(a.workers, workers, first, node)) is not None:
            line.append(note)
        if first.device.startswith("cuda") and a.plan_for is not None and node.total("GPU") < 1:
            return line, f"error: device={first.device!r} is invalid: {node.source} has no GPU; use --device cpu"
        return line, None
    fused_head: list[str] = []
    serve = group_size(getattr(a, "fuse", "off"), first.device, served=True)
    if fuse > 1 and _served(a, first):
        if serve > 1:
            return _served_plan(first, a, serve)
        fused_head = [f"plan: --fuse {a.fuse} serves no trial of a study on {first.device} (fusion servers measured "
                      "slower than trials of their own on CPUs); its reruns run in fused groups"]
        trials = None
    if fuse > 1 and trials:
        import fda_ray.experiments.tune as ft
        from fda_ray.runtime.fusion import plan_groups

        if a.plan_for is not None:
            cluster = resources.parse_nodes(a.plan_for)
        elif _joined(a):  # the cluster the groups would run on
            from fda_ray.runtime.driver import ensure_ray

            ensure_ray(a.address, num_cpus=None, field="address")  # (or $RAY_ADDRESS, named so)
            cluster = resources.from_ray(True)
        else:
            cluster = resources.this_machine()
        bundle = {k: v for k, v in ft.group_resources(first, ft.driver_placement(a.pin_drivers)).bundles[0].items()
                  if v > 0}
        ask = ", ".join(f"{k} {v:g}" for k, v in bundle.items())
        per_node = [min(int(n.get(k, 0.0) // v) for k, v in bundle.items()) for n in cluster.nodes]
        groups = len([g for g in plan_groups(trials, fuse) if len(g) > 1])
        at_once = min(sum(per_node), groups)  # (never more than the groups there are)
        fused_head = [f"plan: each fused group is one Tune trial asking {{{ask}}}: {at_once} group(s) at once "
                      f"on {cluster.source}" + (f" (room for {sum(per_node)})" if sum(per_node) > groups else "")]
        fused_head += fused_lines(trials, fuse, None, f"one Tune trial asking {{{ask}}}")
        if not any(min(int(n.get(k, 0.0) // v) for k, v in bundle.items()) for n in cluster.shapes):
            largest = ", ".join(f"{k} {v:g}" for k, v in cluster.largest().items())
            why = "; --pin-drivers asks fda_driver: drop it, or give nodes that resource" \
                if a.pin_drivers and "fda_driver" not in cluster.largest() else ""
            return fused_head, (f"error: fuse={a.fuse!r}{', pin_drivers=True' if a.pin_drivers else ''} is invalid "
                                f"here: a fused group (of up to {fuse} trials) asks {{{ask}}} and the largest node of "
                                f"{cluster.source} has {{{largest}}}{why}")
        alone = [g[0] for g in plan_groups(trials, fuse) if len(g) == 1]
        if not alone:
            return fused_head, None
        first = alone[0].config().resolved()  # the trials that run alone: planned as before
        fused_head.append("the trials that run alone:")
    if _joined(a) and a.plan_for is None:
        from fda_ray.runtime.driver import ensure_ray

        ensure_ray(a.address, num_cpus=None, field="address")  # (or $RAY_ADDRESS, named so)
    p, cluster = trial_plan(first, _joined(a), a.pin_drivers, a.plan_for)
    lines = fused_head + resources.plan_lines(p, cluster)
    try:
        resources.check(p, cluster)
    except preflight.PreflightError as e:
        return lines, f"error: {e}"
    return lines, None


def _served(a: Any, first: Any) -> bool:
    """Whether a search's trials train on fusion servers: a scheduler or Optuna decides on single Tune trials."""
    from fda_ray.runtime.fusion import config_fuses

    return bool(getattr(a, "search", None)) and a.backend == "tune" and config_fuses(first) and (
        getattr(a, "scheduler", "none") != "none" or getattr(a, "search_alg", "random") == "optuna")


def _served_plan(first: Any, a: Any, fuse: int) -> tuple[list[str], str | None]:
    """--dry-run of a search whose trials train on fusion servers (fda_ray.runtime.fusion_server): what a trial
    and a server ask, and how many trials each node runs at once."""
    import fda_ray.experiments.tune as ft
    from fda_ray.runtime.fusion_server import SERVER_GPU, served_bundle, servers_on

    if a.plan_for is not None:
        cluster = resources.parse_nodes(a.plan_for)
    elif _joined(a):
        from fda_ray.runtime.driver import ensure_ray

        ensure_ray(a.address, num_cpus=None, field="address")  # (or $RAY_ADDRESS, named so)
        cluster = resources.from_ray(True)
    else:
        cluster = resources.this_machine()
    bundle = {k: v for k, v in served_bundle(first, fuse, ft.driver_placement(a.pin_drivers)).items() if v > 0}
    ask = ", ".join(f"{k} {v:g}" for k, v in bundle.items())
    cuda = first.device.startswith("cuda")
    per_node = []
    for n in cluster.nodes:
        servers = servers_on(n, first.threads, cuda)
        left = {k: n.get(k, 0.0) - (servers * first.threads if k == "CPU" else servers * SERVER_GPU if k == "GPU"
                                    else 0.0) for k in bundle}
        per_node.append(min(int(max(0.0, left[k]) // v) for k, v in bundle.items()) if servers else 0)
    server = f"{{CPU {first.threads:g}" + (f", GPU {SERVER_GPU:g}}} per GPU" if cuda else "} per node")
    lines = [f"plan: each trial is a Tune trial of its own (the scheduler and the searcher act on single trials) "
             f"asking {{{ask}}} for its driver (1/{fuse} of a trial's); its clients train on its node's fusion "
             f"server {server}, which fuses the rounds of the trials waiting there: {sum(per_node)} trial(s) at once "
             f"on {cluster.source}",
             "the reruns (no scheduler) run as fused groups, one Tune trial each"]
    if not sum(per_node):
        largest = resources.fmt(cluster.largest(by="CPU"), sep=" ")  # (CPU, GPU, custom ones; not Ray's own)
        return lines, (f"error: fuse={fuse} is invalid here: a fusion server asks {server} beside a trial's "
                       f"{{{ask}}} and the largest node of {cluster.source} has {largest}")
    return lines, None


def _command(argv: list[str]) -> str:
    """The command line as the summary repeats it (without --resume and --verbose)."""
    kept, skip = [], False
    for x in argv:
        if skip and x.strip().lower() in RESUME_WORDS:  # --resume's own value
            skip = False
            continue
        skip = x == "--resume"
        if x not in ("--resume", "--verbose") and not x.startswith("--resume="):
            kept.append(x)
    return "python -m fda_ray.sweep " + " ".join(shlex.quote(x) for x in kept)


def _shutdown_ray() -> None:
    try:
        import ray
        if ray.is_initialized():
            ray.shutdown()
    except ImportError:
        pass


def search_main(a: Any, argv: list[str], error_line: Callable[[Exception], str]) -> int:
    """--search NAME: fda_ray.experiments.search's studies, selection and reruns; `error_line`: the parser's (it
    names a config file's key)."""
    import dataclasses

    from fda_ray.experiments.search import load_search, studies

    try:
        if a.grid is not None:
            raise SweepError(f"grid={a.grid!r} is invalid with --search {a.search}: run a grid or a search")
        if a.search is None:
            raise SweepError("grid=None is invalid: name a grid (--grid, one of "
                             f"{', '.join(GRIDS)}) or a search (--search, one of {', '.join(SEARCHES)})")
        search = load_search(a.search)
        if a.print_grid:
            print(dump_definition(search_to_dict(search), a.print_grid), end="")
            return 0
        if a.profile not in search.profiles:
            raise SweepError(f"profile={a.profile!r} is invalid: one of {', '.join(search.profiles)}"
                             f"{did_you_mean(a.profile, search.profiles)}")
        check_backend(a)
        if a.scheduler not in SCHEDULERS:
            raise SweepError(f"scheduler={a.scheduler!r} is invalid: one of {', '.join(SCHEDULERS)}")
        from fda_ray.experiments.search import SEARCH_ALGS
        if a.search_alg not in SEARCH_ALGS:
            raise SweepError(f"search_alg={a.search_alg!r} is invalid: one of {', '.join(SEARCH_ALGS)}")
        if a.search_alg == "optuna":
            if a.backend == "local":
                raise SweepError("search_alg='optuna' is invalid with --backend local: it runs on Ray Tune")
            try:
                import optuna  # noqa: F401
            except ImportError:
                raise SweepError("search_alg='optuna' is invalid here: Optuna is not installed (pip install "
                                 "'fda-ray[optuna]', or use --search-alg random)") from None
        if a.backend == "local" and a.scheduler != "none":
            raise SweepError(f"scheduler={a.scheduler!r} is invalid with --backend local: early stopping runs on "
                             "Ray Tune (--backend tune), or pass --scheduler none")
        check_counts(a)
        check_fuse(a)
        if a.seeds is not None:
            raise SweepError(f"seeds={a.seeds} is invalid with --search: a search runs seed 0 and reruns its "
                             "selections on --rerun-seeds fresh seeds")
        if a.rerun_seeds is not None:
            search = dataclasses.replace(search, rerun_seeds=a.rerun_seeds)
        overrides = config_fields(a)
        track = tracking.parse(a.track)
        _tune_defaults(a, overrides)
        studies(search, _list(a.methods, str, "methods"), _list(a.values, float, "values"))  # (checked)
        num_samples = a.num_samples or search.num_samples[a.profile]
        from fda_ray.experiments.search import changed_search_settings, kept_counts, search_trials

        out = storage_path(a.out or f"sweeps/search-{search.name}-{a.profile}")
        preflight.output_dir("out", out)
        _auto_resume(a, out / "trials")
        if a.resume and (why := held_by_another(out, "search", a.search, search)):  # before anything in it changes
            raise SweepError(f"out={str(out)!r} is invalid for --search {a.search}: {why}")
        if a.resume:  # a search run in chunks (--values 0.2, then 0.6): every chunk's studies, run and reported
            merged = search_chunk(_held_manifest(out), manifest_from_args(a, ""), search)
            a.methods = ",".join(merged.rows) if merged.rows else None
            a.values = ",".join(map(repr, merged.values)) if merged.values else None
            search, num_samples = kept_counts(search, out, num_samples, {"num_samples": a.num_samples,
                                                                        "rerun_seeds": a.rerun_seeds})
        plan = studies(search, _list(a.methods, str, "methods"), _list(a.values, float, "values"))
        first = search_trials(search, a.profile, plan[0], 1, overrides)[0].config().resolved()
        if a.resume and (why := changed_search_settings(search, a.profile, plan, num_samples, overrides,
                                                        out / "trials", a.search_alg)):
            raise SweepError(f"resume=True is invalid: {why}; choose another --out for a search of these settings")
        if (out / "trials").exists() and not a.resume and not a.dry_run:
            raise SweepError(f"out={str(out)!r} is invalid: it holds a search already; pass --resume to continue it "
                             "or choose another --out")
        if a.resume and not (out / "trials").exists():
            raise SweepError(f"resume=True is invalid: {str(out / 'trials')!r} does not exist (nothing to resume)")
        if a.resume:
            same_build(out / "trials", a.mix_builds, first, here_runs=_runs_here(a))
        check_plan_for(a)
        if a.dry_run:
            if a.plan_for is None:  # (the device as its run checks it: on the local backend only)
                _check_here(search.dataset, first, overrides, device=a.backend == "local")
            if a.search_alg == "optuna":
                print(f"{len(plan)} studies x {num_samples} trials drawn by Optuna as the search goes")
            else:
                per_study = []
                for study in plan:
                    listed = search_trials(search, a.profile, study, num_samples, overrides)
                    per_study.append(len(listed))  # (a space of choices alone has at most its grid's points)
                    for t in listed:
                        print(f"{t.key}: {study.name(search)}")
                print(f"{len(plan)} studies x {max(per_study)} trials"
                      f"{f' (its space has {max(per_study)} points)' if max(per_study) < num_samples else ''}, then "
                      f"each rule's selection on {search.rerun_seeds} fresh seeds and {len(search.references)} "
                      "reference rows")
            lines, refusal = dry_run_plan(first, a, None if a.search_alg == "optuna" else [
                t for study in plan for t in search_trials(search, a.profile, study, num_samples, overrides)])
            print("\n".join(lines))
            if refusal:
                print(refusal, file=sys.stderr)
            return 2 if refusal else 0
        _preflight(search.dataset, first, a.backend, a.address, overrides, out, a.pin_drivers)
    except (SweepError, ValueError) as e:
        print(error_line(e), file=sys.stderr)
        return 2
    except DatasetNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        with locks.held(out, "out", _command(argv)):  # one writer per --out, as for a grid sweep
            out.mkdir(parents=True, exist_ok=True)
            write_manifest(out, manifest_from_args(a, _command(argv)))  # what the search is (sweep.json)
            tracker = Tracking(track, out, f"search-{search.name}-{a.profile}")
            console.OBSERVERS[:] = [tracker]
            try:
                code = _run_search(a, search, out, num_samples, overrides, argv, first)
            finally:
                console.OBSERVERS.clear()
                tracker.close()
    except locks.LockedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _shutdown_ray()
    return code


def _run_search(a: Any, search: Any, out: Any, num_samples: int, overrides: dict, argv: list[str],
                first: Any) -> int:
    from fda_ray.experiments.search import run_search

    return run_search(search, profile=a.profile, out=out, num_samples=num_samples, backend=a.backend,
                      workers=a.workers or resources.local_workers(first), max_concurrent=a.max_concurrent, max_failures=a.max_failures,
                      scheduler=a.scheduler, search_alg=a.search_alg, methods=_list(a.methods, str, "methods"),
                      values=_list(a.values, float, "values"), overrides=overrides, address=a.address,
                      command=_command(argv), no_figures=a.no_figures, pin_drivers=a.pin_drivers,
                      fuse=group_size(a.fuse, first.device),
                      serve=group_size(a.fuse, first.device, served=True))


if __name__ == "__main__":
    sys.exit(main())
