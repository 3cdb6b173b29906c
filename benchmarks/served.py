"""Served trials (fda_ray.runtime.fusion_server) against the same trials as Tune trials of their own, side by side.

    python -m benchmarks.served                          # the quick noise grid's 0.4 column, 2 seeds, on this machine
    python -m benchmarks.served --device cuda --profile paper --seeds 3 --fuse 32 --json out.json

A search under ASHA or Optuna fuses through fusion servers: every trial stays its own Tune trial (the scheduler acts
on single trials) and sends its clients' training to a server on its node, which runs the rounds waiting there as
one cohort. This benchmark runs one set of trials through fda_ray.experiments.backends.run_tune twice in one
process, each on a fresh local Ray, under Tune's FIFO scheduler (a scheduler that stops nothing, so both runs do the
same work and served mode is on): `plain` (--fuse off: each trial trains its clients in its own process) and
`served` (--fuse N). It prints and writes (--json) per run: the wall seconds, trials per minute, the trials at once
(from the records' started_at / finished_at), the server's batches and the trials per batch (from the records'
`fused`), and the largest gap between a trial's served and plain accuracy (float tolerance: within 2 test samples).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import checked_args
from benchmarks.sweep import at_once, machine, read_trials


def parser() -> Any:
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.served", description=__doc__.splitlines()[0])
    p.add_argument("--grid", default="noise")
    p.add_argument("--profile", default="quick")
    p.add_argument("--values", default="0.4", help="the grid's values (comma-separated)")
    p.add_argument("--methods", default="fedgp,fedda,fedgp_auto,fedda_auto,source_only,target_only")
    p.add_argument("--seeds", type=typed("seeds", int, "an integer"), default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--fuse", type=typed("fuse", int, "an integer"), default=8, help="served: --fuse N")
    p.add_argument("--rounds", type=typed("rounds", int, "an integer"), default=None, help="override the profile's")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", default=None, help="also write the result to this file")
    return p


def _run(trials: list, fuse: int, out: Path) -> dict[str, Any]:
    import ray
    from ray.tune.schedulers import FIFOScheduler

    from fda_ray.experiments.backends import Progress, run_tune
    from fda_ray.experiments.records import read_rows

    t0 = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        failures, interrupted = run_tune(list(trials), out / "trials", out, None, None, 0,
                                         Progress(len(trials), "noise", stream=open(os.devnull, "w")),
                                         scheduler=FIFOScheduler(), fuse=fuse)
    finally:
        ray.shutdown()
    wall = time.perf_counter() - t0
    if failures or interrupted:
        raise RuntimeError(f"fuse {fuse}: {len(failures)} trial(s) failed ({failures[:1]}), interrupted {interrupted}")
    records = {t.key: read_rows(out / "trials" / t.key) for t in trials}
    spans = [(t["started_at"], t["finished_at"]) for t in read_trials(out)]
    fused = [r.get("fused") for r in records.values() if r.get("fused")]
    return {"fuse": fuse, "trials": len(trials), "wall_seconds": wall, "trials_per_minute": 60 * len(trials) / wall,
            "trials_at_once_max": at_once(spans),
            "trials_per_batch_max": max((f["members"] for f in fused), default=None),
            "server_batches_median": statistics.median([f["batches"] for f in fused]) if fused else None,
            "_records": records}


def invalid(a: Any) -> str | None:
    """The error line for parsed arguments main refuses before it plans anything (None: none)."""
    if a.device not in ("cpu", "cuda"):
        return f"error: device={a.device!r} is invalid: cpu or cuda"
    if a.fuse < 2:
        return f"error: fuse={a.fuse!r} is invalid: a whole number >= 2 (the served run's --fuse)"
    return None


def plan_trials(a: Any) -> list:
    """The trials both runs train (planning trains nothing: tests/test_lease_scripts.py plans the GPU lease's)."""
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    overrides: dict[str, Any] = {"vectorise": "on", "device": a.device}
    if a.data_dir:
        overrides["data_dir"] = a.data_dir
    if a.rounds:
        overrides["rounds"] = a.rounds
    return plan(GRIDS[a.grid], a.profile, rows=a.methods.split(","), values=[float(v) for v in a.values.split(",")],
                seeds=a.seeds, overrides=overrides)


def main(argv: list[str] | None = None) -> int:
    a = checked_args(parser(), invalid, sys.argv[1:] if argv is None else list(argv))
    if isinstance(a, int):
        return a
    trials = plan_trials(a)
    runs = []
    with tempfile.TemporaryDirectory() as d:
        for fuse in (1, a.fuse):
            print(f"bench.served: fuse {fuse} ...", file=sys.stderr, flush=True)
            runs.append(_run(trials, fuse, Path(d) / f"fuse-{fuse}"))
    plain, served = runs
    gap = max(abs(x["accuracy"] - y["accuracy"]) for t in trials
              for x, y in zip(plain["_records"][t.key]["rows"], served["_records"][t.key]["rows"]))
    for r in runs:
        r.pop("_records")
    m = machine()
    result = {"machine": m, "grid": a.grid, "profile": a.profile, "values": a.values, "methods": a.methods,
              "seeds": a.seeds, "device": a.device, "runs": runs, "accuracy_gap_points_max": gap,
              "command": "python -m benchmarks.served " + " ".join(sys.argv[1:] if argv is None else argv)}
    print(f"{a.grid} {a.profile} values {a.values}, {a.seeds} seed(s), {len(trials)} trials, device {a.device}; "
          f"{m['cpus']} CPUs, {m['gpu'] or 'no GPU'}; torch {m['torch']}, Ray {m['ray']}; {m['date']}\n")
    print(table(result))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def table(result: dict[str, Any]) -> str:
    """The runs side by side (a function of the JSON, so a committed record prints the same table)."""
    plain = result["runs"][0]["wall_seconds"]
    lines = ["| run | trials | wall | x plain | trials/min | trials at once | trials per batch (most) | "
             "server batches (median) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        name = "plain (--fuse off)" if r["fuse"] == 1 else f"served (--fuse {r['fuse']})"
        lines.append(f"| {name} | {r['trials']} | {r['wall_seconds']:.1f} s | {plain / r['wall_seconds']:.2f} | "
                     f"{r['trials_per_minute']:.1f} | {r['trials_at_once_max']} | "
                     f"{r['trials_per_batch_max'] if r['trials_per_batch_max'] is not None else '-'} | "
                     f"{r['server_batches_median'] if r['server_batches_median'] is not None else '-'} |")
    lines.append(f"\nlargest accuracy gap between a trial served and plain: {result['accuracy_gap_points_max']:.2f} "
                 "points (float tolerance: 2 test samples)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
