"""Sweeps of a named grid through Ray Tune, on a laptop or a cluster, with results people can read.

    python -m fda_ray.sweep --grid noise                      # quick profile, local Ray
    python -m fda_ray.sweep --grid noise --profile paper --address auto --gpus-per-client 0.1
    python -m fda_ray.sweep --grid noise --resume             # go on after an interruption

Each trial is one run (fda_ray.tune.trainable), one result per round. Output in --out (default
sweeps/<grid>-<profile>):
- trials/<method>-<variable><value>-seed<k>-<hash>/: the trial's own record, state.pt after every round
  (written atomically) and rows.pt once it is done. This, not Tune's experiment state, is what --resume
  reads: finished trials are kept as they are, a trial cut off mid-run goes on from its last round, so a
  sweep killed at any moment (Ctrl-C, OOM, a lost node, a power cut) loses at most one round per trial;
- tune/launch-<n>/: Tune's logs of each launch;
- results.parquet: a row per trial and round, the hyper-parameters as columns;
- summary.md: final target accuracy per method and grid value, mean +- std over seeds, the paper's number
  beside it, failed trials listed (a failing trial is retried --max-failures times, then reported while
  the others finish);
- accuracy.png (accuracy against the grid variable per method, the paper's beside it) and
  beta_<method>.png for auto-weighted methods (beta_i per round, a panel per grid value).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fda_ray.tune import RECORD_KEY, ROWS_FILE
from tuning.grids import GRIDS, Grid

PROFILES = ("quick", "paper")


class SweepError(ValueError):
    """Bad sweep arguments: the message is the one line the CLI prints."""


def trials(grid: Grid, profile: str, seeds: int | None, extra: dict[str, Any]) -> list[dict[str, Any]]:
    """One RunConfig dict per trial: every method x grid value x seed (quick: 1 seed unless --seeds)."""
    from fda_ray.config import RunConfig

    if profile not in grid.profiles:
        raise SweepError(f"profile={profile!r} is invalid: grid {grid.name!r} has {', '.join(grid.profiles)}")
    out = []
    for value in grid.values:
        n_seeds = seeds if seeds is not None else (1 if profile == "quick" else grid.seeds_for(value))
        for method in grid.methods:
            for seed in range(n_seeds):
                params = {"dataset": grid.dataset, "method": method, grid.variable: value, "seed": seed,
                          **grid.fixed, **grid.profiles[profile], **extra}
                try:
                    RunConfig(**params).resolved()
                except ValueError as e:
                    raise SweepError(str(e).splitlines()[0]) from e
                out.append(params)
    return out


def _fmt_s(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def progress_callback(total: int, variable: str):
    from ray import tune

    class Progress(tune.Callback):
        """Prints done/total, elapsed and an estimate of the time left each time a trial ends."""

        def __init__(self) -> None:
            self.t0 = time.time()
            self.done = 0
            self.failed = 0

        def _line(self, trial: Any, what: str) -> None:
            self.done += 1
            elapsed = time.time() - self.t0
            left = elapsed / self.done * (total - self.done)
            run = trial.config.get("run", {})
            name = (f"{run.get('method')} {variable}={run.get(variable)} seed {run.get('seed')}" if run
                    else trial.trial_id)
            print(f"[{self.done}/{total}] {what}: {name}; elapsed {_fmt_s(elapsed)}, left ~{_fmt_s(left)}", flush=True)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self._line(trial, "done")

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self.failed += 1
            self._line(trial, "FAILED")

    return Progress()


def trial_key(params: dict[str, Any], variable: str) -> str:
    """A trial's directory name under trials/: readable, and unique per config (a hash of every field)."""
    digest = hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{params['method']}-{variable}{params[variable]}-seed{params['seed']}-{digest}"


def trial_dirname(trial: Any) -> str:
    """Tune's trial directories named like the trial records (Tune's default spells out the whole config)."""
    record = trial.config.get("run", {}).get(RECORD_KEY)
    return f"{Path(record).name}-{trial.trial_id}" if record else trial.trial_id


def attempts(trial_path: str | None) -> int:
    """How often a failed trial ran: Tune appends a "Failure # k" entry to error.txt per failure."""
    err = Path(trial_path or "") / "error.txt"
    return err.read_text(errors="replace").count("Failure # ") if err.is_file() else 1


def is_done(params: dict[str, Any]) -> bool:
    return (Path(params[RECORD_KEY]) / ROWS_FILE).is_file()


def failures_of(result_grid: Any) -> list[dict]:
    """The trials of a Tune run that failed for good: their config, last error line and attempts."""
    out = []
    for result in result_grid:
        if result.error is not None:
            run = {k: v for k, v in result.config.get("run", {}).items() if k != RECORD_KEY}
            out.append({**run, "trial": Path(result.path).name if result.path else "",
                        "error": str(result.error).strip().splitlines()[-1][:300], "attempts": attempts(result.path)})
    return out


def collect(todo: list[dict[str, Any]], grid: Grid) -> list[dict]:
    """A row per (finished trial, round) from the trials' own records, the trial's config as columns."""
    import torch

    rows: list[dict] = []
    for params in todo:
        if not is_done(params):
            continue
        record = torch.load(Path(params[RECORD_KEY]) / ROWS_FILE, weights_only=False)
        run = {k: v for k, v in params.items() if k != RECORD_KEY}
        for row in record["rows"]:
            rows.append({**run, "grid": grid.name, "grid_variable": grid.variable, "grid_value": run[grid.variable],
                         "trial": Path(params[RECORD_KEY]).name, **row})
    return rows


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(dict.fromkeys(k for r in rows for k in r))
    cols = {}
    for k in keys:
        # Missing values arrive as NaN from Tune's dataframe (also in list columns such as beta_i): None.
        vals = [None if isinstance(v, float) and math.isnan(v) else v for v in (r.get(k) for r in rows)]
        if any(isinstance(v, (dict, tuple)) for v in vals):
            vals = [json.dumps(v) if v is not None else None for v in vals]
        cols[k] = vals
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pydict(cols), tmp)
    os.replace(tmp, path)


def summarize(rows: list[dict], failures: list[dict], grid: Grid, profile: str) -> tuple[str, dict]:
    """summary.md text and the same numbers as a dict: final accuracy (%) per method x value."""
    final: dict[tuple[str, Any], dict[int, float]] = {}
    for r in rows:  # rows are sorted by round within a trial: the last one is the final round
        if r.get("accuracy") is not None:
            final.setdefault((r["method"], r["grid_value"]), {})[r["seed"]] = 100 * float(r["accuracy"])
    cells: dict[str, dict[str, Any]] = {}
    head = "| method | " + " | ".join(f"{grid.variable} {v:g}" for v in grid.values) + " |"
    lines = [f"# Sweep `{grid.name}` ({profile} profile)", "",
             f"Final target test accuracy (%), mean ± std over seeds (n), paper: {grid.paper_ref or '-'}.", "",
             head, "|" + "---|" * (len(grid.values) + 1)]
    for m in grid.methods:
        out = []
        for v in grid.values:
            accs = list(final.get((m, v), {}).values())
            paper = grid.paper.get(m, {}).get(v)
            cell = "-"
            if accs:
                mean = statistics.fmean(accs)
                sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
                cell = f"{mean:.2f} ± {sd:.2f} (n={len(accs)})" if len(accs) > 1 else f"{mean:.2f}"
                cells.setdefault(m, {})[f"{v:g}"] = {"mean": mean, "std": sd, "n": len(accs), "paper": paper}
            if paper is not None:
                cell += f" / {paper:.2f}"
            out.append(cell)
        lines.append(f"| {grid.labels.get(m, m)} | " + " | ".join(out) + " |")
    lines += ["", "Cells: ours / paper where the paper gives a number."]
    if failures:
        lines += ["", f"## Failed trials ({len(failures)})", ""]
        lines += [f"- {f.get('method')} {grid.variable}={f.get(grid.variable)} seed={f.get('seed')} "
                  f"({f.get('attempts', 1)} attempts): {f['error']}" for f in failures]
    return "\n".join(lines) + "\n", {"grid": grid.name, "profile": profile, "cells": cells, "failures": failures}


def figures(rows: list[dict], summary: dict, grid: Grid, out: Path) -> str:
    """Writes the sweep's PNG plots into `out`; returns the summary.md lines that show them."""
    from fda_ray.figures import accuracy_figure, beta_figure, estimates_figure, predicted_rules

    lines = ["", "![final target accuracy](accuracy.png)"]
    accuracy_figure(summary, grid, out / "accuracy.png")
    for m in grid.methods:
        if beta_figure(rows, grid, m, out / f"beta_{m}.png"):
            lines.append(f"![{m}: beta_i per round](beta_{m}.png)")
    if estimates_figure(rows, grid, out / "estimates.png"):
        lines.append("![estimated sigma and d per round](estimates.png)")
    predicted = predicted_rules(rows, grid)
    if predicted:
        # The static rule with the smallest estimated Delta error (fda_ray.diagnostics), counted over rounds.
        lines += ["", "## The rule the theory predicts, from each run's own estimates", "",
                  "Main rounds in which each static rule had the smallest estimated Delta error "
                  "(seed 004 eqs (7), (9), (11); beta as configured).", "",
                  "| method | " + " | ".join(f"{grid.variable} {v:g}" for v in grid.values) + " |",
                  "|---|" + "---|" * len(grid.values)]
        for m in grid.methods:
            if m in predicted:
                lines.append(f"| {grid.labels.get(m, m)} | " + " | ".join(
                    ", ".join(f"{rule} {k}" for rule, k in sorted(predicted[m].get(v, {}).items(), key=lambda x: -x[1]))
                    or "-" for v in grid.values) + " |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fda_ray.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--grid", required=True, help=f"one of {', '.join(GRIDS)}")
    p.add_argument("--profile", default="quick", help="quick (a laptop, minutes) or paper (the seeds' settings)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: quick 1, paper the grid's)")
    p.add_argument("--out", default=None, help="output directory (default sweeps/<grid>-<profile>)")
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: $RAY_ADDRESS or a local Ray)")
    p.add_argument("--gpus-per-client", type=float, default=0.0, help="> 0: clients are Ray actors on GPU shares")
    p.add_argument("--max-concurrent", type=int, default=None, help="trials at once (default: as resources allow)")
    p.add_argument("--max-failures", type=int, default=2, help="retries of a failing trial")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--resume", action="store_true", help="continue the sweep in --out, finished trials kept")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        if a.grid not in GRIDS:
            raise SweepError(f"grid={a.grid!r} is invalid: known grids: {', '.join(GRIDS)}")
        grid = GRIDS[a.grid]
        if a.profile not in PROFILES:
            raise SweepError(f"profile={a.profile!r} is invalid: one of {', '.join(PROFILES)}")
        if a.seeds is not None and a.seeds < 1:
            raise SweepError(f"seeds={a.seeds} is invalid: an integer >= 1")
        if a.max_concurrent is not None and a.max_concurrent < 1:
            raise SweepError(f"max_concurrent={a.max_concurrent} is invalid: an integer >= 1")
        if a.max_failures < 0:
            raise SweepError(f"max_failures={a.max_failures} is invalid: an integer >= 0")
        on_cluster = bool(a.address or os.environ.get("RAY_ADDRESS"))
        # Clients as Ray actors where they have somewhere to go (GPU shares, a cluster); else each trial
        # trains its clients in its own process, one core per trial (a laptop).
        extra: dict[str, Any] = {"threads": 1, "data_dir": a.data_dir}
        if a.gpus_per_client > 0 or on_cluster:
            extra.update(executor="ray", gpus_per_client=a.gpus_per_client, cpus_per_client=1.0)
        todo = trials(grid, a.profile, a.seeds, extra)
        out = Path(a.out or f"sweeps/{grid.name}-{a.profile}").resolve()
        records = out / "trials"
        if records.exists() and not a.resume:
            raise SweepError(f"out={str(out)!r} is invalid: it holds a sweep already; pass --resume to continue it "
                             "or choose another --out")
        if a.resume and not records.exists():
            raise SweepError(f"resume=True is invalid: {str(records)!r} does not exist (nothing to resume)")
        for params in todo:
            params[RECORD_KEY] = str(records / trial_key(params, grid.variable))
        from fda_ray.data import DatasetNotFound, load
        load(grid.dataset, a.data_dir)
    except (SweepError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except DatasetNotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    import ray
    from ray import tune

    import fda_ray.tune as ft
    from fda_ray.driver import ensure_ray

    pending = [p for p in todo if not is_done(p)]
    print(f"sweep {grid.name} ({a.profile}): {len(todo)} trials -> {out}"
          + (f"; resuming, {len(todo) - len(pending)} finished before" if a.resume else ""), flush=True)
    records.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    failures: list[dict] = []
    if pending:
        ensure_ray(a.address, num_cpus=None)
        # Each launch is its own Tune run: what carries over is in the trial records (trials/<key>/).
        launch = f"launch-{sum(1 for _ in (out / 'tune').glob('launch-*')) + 1}" if (out / "tune").exists() else "launch-1"
        tuner = tune.Tuner(
            ft.with_resources(todo[0]),  # every trial of a grid asks the same resources
            param_space={"run": tune.grid_search(pending)},
            # reuse_actors: a trial's process (torch imported, kernels loaded) runs the next trial too.
            tune_config=tune.TuneConfig(max_concurrent_trials=a.max_concurrent, reuse_actors=True,
                                        trial_dirname_creator=trial_dirname),
            run_config=tune.RunConfig(
                name=launch, storage_path=str(out / "tune"), verbose=0,
                failure_config=tune.FailureConfig(max_failures=a.max_failures),
                callbacks=[progress_callback(len(pending), grid.variable)]))
        failures = failures_of(tuner.fit())
    rows = collect(todo, grid)
    write_parquet(rows, out / "results.parquet")
    text, summary = summarize(rows, failures, grid, a.profile)
    summary["wall_seconds"] = time.time() - t0
    summary["resumed"] = a.resume
    summary["trials_run"] = len(pending)
    text += (f"\nWall time: {summary['wall_seconds']:.0f} s for {len(pending)} trials"
             + (f" ({len(todo) - len(pending)} more had finished before --resume)" if len(pending) < len(todo) else "") + ".\n")
    text += figures(rows, summary, grid, out)
    (out / "summary.md").write_text(text)
    print(json.dumps(summary, indent=1) if a.json else text)
    if ray.is_initialized():
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
