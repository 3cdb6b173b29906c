"""Generators for single runs' files: a run's Parquet file (python -m fda_ray --parquet) and the synthetic grid's
grid.json."""
from __future__ import annotations

import json

from tools.pages import records
from tools.pages.engine import GENERATORS


@GENERATORS.register("run-file")
def run_file(name: str, file: str, what: str = "final", metric: str = "accuracy", round: str | None = None,
             digits: str = "2") -> str:
    """One run's `metric` (%) from docs/results/<name>/<file>.parquet (every round of a `python -m fda_ray
    --parquet` run): what=final (its last row), peak (its best round) or at (round=N, as the rows number it)."""
    import pyarrow.parquet as pq

    path = records.RESULTS / name / f"{file}.parquet"
    if not path.is_file():
        raise ValueError(f"run-file: {str(path)!r} does not exist")
    t = pq.read_table(path, columns=["round", metric]).to_pylist()
    got = [(r["round"], 100 * r[metric]) for r in t if r[metric] is not None]
    if what == "final":
        x = got[-1][1]
    elif what == "peak":
        x = max(v for _, v in got)
    elif what == "at" and round is not None:
        hit = [v for k, v in got if k == int(round)]
        if not hit:
            raise ValueError(f"run-file: {file!r} has no round {round}")
        x = hit[-1]
    else:
        raise ValueError(f"what={what!r} is invalid: final, peak, or at with round=N")
    return f"{x:.{int(digits)}f}"


@GENERATORS.register("synthetic-agreement")
def synthetic_agreement(name: str, kind: str) -> str:
    """The synthetic grid's share of cells where the rule predicted at initialisation is the best after training
    (fda_ray.experiments.synthetic_grid.agreement, recomputed from the cells of docs/results/<name>/grid.json):
    kind static or auto: "44"."""
    from fda_ray.experiments.synthetic_grid import agreement

    if kind not in ("static", "auto"):
        raise ValueError(f"kind={kind!r} is invalid: static or auto")
    result = json.loads((records.RESULTS / name / "grid.json").read_text())
    return f"{100 * agreement({'config': result['config'], 'cells': result['cells']})[f'agreement_{kind}']:.0f}"


@GENERATORS.register("bench-sweep")
def bench_sweep(name: str) -> str:
    """The sweep benchmark's tables (python -m benchmarks.sweep --json) from docs/results/bench-sweep/<name>.json,
    under a line naming the machine, the column, torch and Ray, and the date it ran."""
    from benchmarks.sweep import table

    path = records.RESULTS / "bench-sweep" / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"bench-sweep: {str(path)!r} does not exist")
    result = json.loads(path.read_text())
    m = result["machine"]
    extra = " ".join(result.get("extra") or [])
    head = (f"{result['grid']} grid, {result['profile']} profile, column {result['values']}, {result['seeds']} "
            f"seed(s){' (' + extra + ')' if extra else ''}; {m['cpus']} CPUs, {m['gpu'] or 'no GPU'}; torch "
            f"{m['torch']}, Ray {m['ray']}, Python {m['python']}; {m['date']}.")
    return head + "\n\n" + table(result)
