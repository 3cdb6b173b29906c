"""The tables of the result pages of seeds 000 and 002, from a sweep's trial records (every seed found there).

    python docs/results/grid_summary.py docs/results/conditions conditions
    python docs/results/grid_summary.py docs/results/noniid-000 noniid-000
    python docs/results/grid_summary.py docs/results/aux-alpha aux-alpha

Prints, per row and grid value, the final-round accuracy (and AUC on binary tasks) as mean +- the 95 %
confidence half-width over the seeds found (t_{0.975, n-1} s / sqrt(n): what 000 Table 2 prints as "+-"), with
the standard deviation, beside the published numbers the grid carries; then the rows ranked by each metric.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fda_ray.experiments.sweep import collect, final_accuracies  # noqa: E402
from fda_ray.experiments.tables import mean_ci  # noqa: E402
from fda_ray.experiments.trials import Trial  # noqa: E402
from tuning.grids import GRIDS  # noqa: E402

def cell(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    mean, half, sd = mean_ci(values)
    return f"{mean:.2f} ± {half:.2f} (std {sd:.2f}, n={len(values)})"


def finished_rows(out: str, grid) -> list[dict]:
    """Every round of the finished trials recorded under <out>/trials (sweep.collect's rows)."""
    records = Path(out) / "trials"
    trials = [Trial.from_dict(json.loads((rec / "trial.json").read_text())) for rec in sorted(records.iterdir())
              if (rec / "trial.json").is_file()]
    return collect(trials, grid, records)[0]


def main(out: str, grid_name: str) -> None:
    grid = GRIDS[grid_name]
    rows = finished_rows(out, grid)
    metrics = [("accuracy", "ACC", grid.paper)] + ([("auc", "AUC", grid.paper_auc)]
                                                    if any(r.get("auc") is not None for r in rows) else [])
    for metric, name, paper in metrics:
        final = final_accuracies(rows, metric=metric)
        print(f"\n{name} (%), final round, ours (mean ± 95 % CI) / paper\n")
        print("| method | " + " | ".join(grid.value_label(v) for v in grid.values) + " |")
        print("|" + "---|" * (len(grid.values) + 1))
        for r in grid.rows:
            cells = []
            for v in grid.values:
                c = cell(list(final.get((r.key, v), {}).values()))
                p = paper.get(r.key, {}).get(v)
                cells.append(c + (f" / {p:.2f}" if p is not None else ""))
            print(f"| {r.label} | " + " | ".join(cells) + " |")
        for v in grid.values:
            means = {r.label: statistics.fmean(final[(r.key, v)].values()) for r in grid.rows if (r.key, v) in final}
            order = sorted(means, key=means.get, reverse=True)
            print(f"\n{name} ranking, {grid.value_label(v)}: " + " > ".join(f"{k} {means[k]:.2f}" for k in order))


if __name__ == "__main__":
    main(*sys.argv[1:3])
