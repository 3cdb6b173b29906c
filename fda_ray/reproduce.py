"""Reproduce a published grid with the serial engine in a few local processes, then tabulate it.

    python -m fda_ray.reproduce --grid noise --out runs/fmnist-noise --workers 2 \
        --table docs/results/fmnist-noise.md

Each run's History is written as <out>/<method>_<variable><value>_s<seed>.parquet the moment it finishes;
a rerun skips runs whose file exists, so an interrupted grid resumes. Work shared by construction:
source_only never reads the target, so one run per seed is evaluated at every noise level (eval_noise)
and finetune_offline fine-tunes its final weights per noise level (engine.finetune_from gives the same
numbers as a full finetune_offline run; tests/test_engine.py checks both).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import torch

from fda_ray.config import RunConfig
from fda_ray.methods import METHODS
from tuning.grids import GRIDS, Grid


def _name(method: str, grid: Grid, value: float | None, seed: int) -> str:
    v = "all" if value is None else f"{value:g}"
    return f"{method}_{grid.variable}{v}_s{seed}"


def _job(kind: str, cfg: RunConfig, path: str, weights_from: str | None) -> tuple[str, float, float]:
    from fda_ray.engine import finetune_from, run

    t = time.perf_counter()
    if kind == "finetune":
        hist = finetune_from(cfg, torch.load(weights_from, weights_only=True))
    else:
        hist = run(cfg)
        if cfg.method == "source_only":
            torch.save(hist.final_weights, Path(path).with_suffix(".pt"))
    hist.to_parquet(path)
    return path, hist.final_accuracy, time.perf_counter() - t


def plan(grid: Grid, overrides: dict, out: Path) -> list[tuple[str, RunConfig, Path, Path | None]]:
    """(kind, config, output path, weights it needs) for every run of the grid.

    Order: by seed; within a seed the cheap runs first (source_only, then the methods that train only the
    target), then the runs that train every client, grid value by value starting from the middle, so an
    interrupted grid has whole columns rather than whole rows.
    """
    jobs = []
    max_seeds = max(grid.seeds_for(v) for v in grid.values)
    middle_out = sorted(grid.values, key=lambda v: abs(grid.values.index(v) - (len(grid.values) - 1) / 2))
    for seed in range(max_seeds):
        values = [v for v in middle_out if seed < grid.seeds_for(v)]
        base = RunConfig(dataset=grid.dataset, seed=seed, threads=1, **overrides)
        src_path = out / (_name("source_only", grid, None, seed) + ".parquet")
        if "source_only" in grid.methods or "finetune_offline" in grid.methods:
            jobs.append(("run", base.replace(method="source_only", eval_noise=tuple(sorted(values))), src_path, None))
        cheap = [m for m in grid.methods if m != "source_only" and not METHODS.get(m).train_sources]
        heavy = [m for m in grid.methods if m != "source_only" and METHODS.get(m).train_sources]
        for v in values:
            for m in cheap:
                jobs.append(("run", base.replace(method=m, **{grid.variable: v}), out / (_name(m, grid, v, seed) + ".parquet"), None))
        for v in values:
            for m in heavy:
                cfg = base.replace(method=m, **{grid.variable: v})
                path = out / (_name(m, grid, v, seed) + ".parquet")
                if m == "finetune_offline":
                    jobs.append(("finetune", cfg, path, src_path.with_suffix(".pt")))
                else:
                    jobs.append(("run", cfg, path, None))
    return jobs


def execute(jobs, workers: int) -> None:
    todo = [j for j in jobs if not j[2].exists()]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} runs already on disk; {len(todo)} to run", flush=True)
    t0 = time.perf_counter()
    done = 0
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        running: dict = {}
        while todo or running:
            ready = [j for j in todo if j[3] is None or j[3].exists()]
            while ready and len(running) < workers:
                j = ready.pop(0)
                todo.remove(j)
                running[pool.submit(_job, j[0], j[1], str(j[2]), None if j[3] is None else str(j[3]))] = j
            if not running:
                raise RuntimeError("runs wait for source_only weights that no run will produce: " + str(todo[0][2]))
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                j = running.pop(f)
                try:
                    path, acc, secs = f.result()
                except Exception as e:  # keep the finished runs; report and go on
                    print(f"FAILED {j[2].name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                    continue
                done += 1
                print(f"[{done}/{done + len(todo) + len(running)}] {Path(path).name}: acc {100 * acc:.2f} "
                      f"({secs:.0f} s, elapsed {time.perf_counter() - t0:.0f} s)", flush=True)


def collect(grid: Grid, out: Path) -> dict[tuple[str, float], list[float]]:
    """Final target accuracies (%) per (method, value) over the seeds found on disk."""
    import pyarrow.parquet as pq

    res: dict[tuple[str, float], list[float]] = {}
    for seed in range(max(grid.seeds_for(v) for v in grid.values)):
        src = out / (_name("source_only", grid, None, seed) + ".parquet")
        if src.exists():
            t = pq.read_table(src).to_pylist()
            last = t[-1]
            for v, acc in zip(eval(last["eval_noise"]) if isinstance(last["eval_noise"], str) else last["eval_noise"],
                              last["eval_noise_accuracy"]):
                res.setdefault(("source_only", float(v)), []).append(100 * acc)
        for m in grid.methods:
            for v in grid.values:
                p = out / (_name(m, grid, v, seed) + ".parquet")
                if m != "source_only" and p.exists():
                    res.setdefault((m, v), []).append(100 * pq.read_table(p).to_pylist()[-1]["accuracy"])
    return res


def table(grid: Grid, res: dict, command: str) -> str:
    head = "| method | " + " | ".join(f"{grid.variable} {v:g}" for v in grid.values) + " |"
    lines = [head, "|" + "---|" * (len(grid.values) + 1)]
    for m in grid.methods:
        cells = []
        for v in grid.values:
            ours = res.get((m, v), [])
            paper = grid.paper.get(m, {}).get(v)
            if not ours:
                o = "—"
            elif len(ours) == 1:
                o = f"{ours[0]:.2f}"
            else:
                o = f"{statistics.mean(ours):.2f} ± {statistics.stdev(ours):.2f} (n={len(ours)})"
            p = "—" if paper is None else f"{paper:.2f}"
            flag = " **!**" if ours and paper is not None and abs(statistics.mean(ours) - paper) > 3 else ""
            cells.append(f"{o} / {p}{flag}")
        lines.append(f"| {grid.labels.get(m, m)} | " + " | ".join(cells) + " |")
    return (f"Cells: ours / paper ({grid.paper_ref}); mean ± std over seeds where n > 1; "
            f"**!** marks a gap of more than 3 points.\n\nCommand: `{command}`\n\n" + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fda_ray.reproduce", description=__doc__.split("\n")[0])
    p.add_argument("--grid", default="noise", help=f"one of {', '.join(GRIDS)}")
    p.add_argument("--profile", default="paper")
    p.add_argument("--out", default="runs/fmnist-noise")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--table", default=None, help="write the markdown table here")
    p.add_argument("--only-table", action="store_true", help="tabulate what is on disk, run nothing")
    a = p.parse_args(argv)
    if a.grid not in GRIDS:
        p.error(f"--grid {a.grid!r} is invalid: known grids: {', '.join(GRIDS)}")
    grid = GRIDS[a.grid]
    if a.profile not in grid.profiles:
        p.error(f"--profile {a.profile!r} is invalid: known profiles: {', '.join(grid.profiles)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if not a.only_table:
        execute(plan(grid, grid.profiles[a.profile], out), a.workers)
    # The command that computes (or resumes) these runs; --only-table just re-reads them.
    command = f"python -m fda_ray.reproduce --grid {a.grid} --profile {a.profile} --out {a.out} --workers {a.workers}"
    text = table(grid, collect(grid, out), command)
    print(text)
    if a.table:
        Path(a.table).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
