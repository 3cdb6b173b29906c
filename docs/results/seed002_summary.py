"""The tables and figures of the seed 002 (FSSDA) result page, from the sweeps' trial records.

    python docs/results/seed002_summary.py table docs/results/fssda-fmnist fssda-fmnist
    python docs/results/seed002_summary.py table docs/results/fssda-lambda fssda-lambda
    python docs/results/seed002_summary.py table docs/results/fssda-temperature fssda-temperature
    python docs/results/seed002_summary.py curves docs/results/fssda-paradigm fssda-paradigm

table: per row and column, the final-round target accuracy (%) as mean ± the 95 % confidence half-width over the
seeds found (t_{0.975, n-1} s / sqrt(n)), and for the rows that distil, the teachers' final accuracy on the same
samples and the devices' mean lambda (the hard labels' weight) in the last round. curves: the mean accuracy per
round of every row (002 Fig. 2) as a figure (curves.png / .pdf in the sweep's folder), and the first round at which
each row reaches the final accuracy of the serial variant.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fda_ray.experiments.tables import short_ci  # noqa: E402
from grid_summary import finished_rows  # noqa: E402  (this folder)
from tuning.grids import GRIDS  # noqa: E402


def _runs(out: str, grid_name: str) -> dict[tuple[str, float], list[list[dict]]]:
    """(row, value) -> each seed's rounds (dicts), from the finished trials' records."""
    rows = finished_rows(out, GRIDS[grid_name])
    runs: dict[tuple[str, float], dict[int, list[dict]]] = {}
    for r in rows:
        runs.setdefault((r["row"], r["grid_value"]), {}).setdefault(r["seed"], []).append(r)
    return {k: [sorted(v, key=lambda x: x["round"]) for _, v in sorted(seeds.items())] for k, seeds in runs.items()}


def _mean_list(v) -> float:
    v = json.loads(v) if isinstance(v, str) else v
    return statistics.fmean(v) if isinstance(v, list) else float(v)


def table(out: str, grid_name: str) -> None:
    grid, runs = GRIDS[grid_name], _runs(out, grid_name)
    print("| method | " + " | ".join(grid.value_label(v) for v in grid.values) + " |")
    print("|" + "---|" * (len(grid.values) + 1))
    for r in grid.rows:
        cells = []
        for v in grid.values:
            seeds = runs.get((r.key, v), [])
            c = short_ci([100 * s[-1]["accuracy"] for s in seeds])
            p = grid.paper.get(r.key, {}).get(v)
            cells.append(c + (f" / {p:.1f}" if p is not None else ""))
        print(f"| {r.label} | " + " | ".join(cells) + " |")
    print("\nteacher accuracy (%, the mean of the source models', final round) / devices' mean lambda, last round:\n")
    print("| method | " + " | ".join(grid.value_label(v) for v in grid.values) + " |")
    print("|" + "---|" * (len(grid.values) + 1))
    for r in grid.rows:
        if r.method not in ("fssda", "fssda_serial", "ssda_only"):
            continue
        cells = []
        for v in grid.values:
            seeds = runs.get((r.key, v), [])
            teach = [100 * _mean_list(s[-1]["teacher_accuracy"]) for s in seeds if s[-1].get("teacher_accuracy")]
            lam = [_mean_list(s[-1]["imitation_lambda_i"]) for s in seeds if s[-1].get("imitation_lambda_i")]
            cells.append(f"{short_ci(teach) if teach else '-'} / {statistics.fmean(lam):.2f}" if lam else "-")
        print(f"| {r.label} | " + " | ".join(cells) + " |")


def curves(out: str, grid_name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid, runs = GRIDS[grid_name], _runs(out, grid_name)
    v = grid.values[0]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    finals = {}
    means_by_row = {}
    for r in grid.rows:
        seeds = runs.get((r.key, v), [])
        if not seeds:
            continue
        n = min(len(s) for s in seeds)
        means = [100 * statistics.fmean(s[i]["accuracy"] for s in seeds) for i in range(n)]
        means_by_row[r.key] = means
        finals[r.key] = means[-1]
        ax.plot(range(1, n + 1), means, label=r.label)
    ax.set_xlabel("round (communication rounds; serial: source rounds first)")
    ax.set_ylabel("target accuracy (%)")
    ax.set_title(f"{grid.value_label(v)}, mean over seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(Path(out) / f"curves.{ext}")
    serial = next((k for k in means_by_row if "serial" in k), None)
    for k, means in means_by_row.items():
        line = f"{k}: final {means[-1]:.1f}, best {max(means):.1f} at round {means.index(max(means)) + 1}"
        if serial is not None:
            goal = finals[serial]
            hit = next((i + 1 for i, m in enumerate(means) if m >= goal), None)
            line += f"; first round >= serial's final {goal:.1f}: {hit}"
        print(line)


if __name__ == "__main__":
    {"table": table, "curves": curves}[sys.argv[1]](*sys.argv[2:4])
