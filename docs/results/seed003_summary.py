"""The tables and figures of the seed 003 (FedWCA) result page, from the sweeps' trial records.

    python docs/results/seed003_summary.py table docs/results/fedwca-fmnist fedwca-fmnist
    python docs/results/seed003_summary.py table docs/results/fedwca-ablation fedwca-ablation
    python docs/results/seed003_summary.py heatmap docs/results/fedwca-temperatures fedwca-temperatures

table: per row and column (source domain), the final round's client-averaged test accuracy (%) as mean ± the 95 %
confidence half-width over the seeds found, an Avg. column (the mean over the columns' means, as 003 Table 2), and
the published numbers where the grid carries them (FINCH's partitions, 003 Table 12: the generator
fedwca-clusters of `python -m fda_ray.pages`). heatmap: the T_a x T_b grid's final
validation and test accuracy (heatmap.png / .pdf in the sweep's folder), the pair the validation splits select and
its test accuracy beside the best test accuracy of the grid (the oracle, reported as such).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fda_ray.experiments.tables import short_ci  # noqa: E402
from grid_summary import finished_rows  # noqa: E402  (this folder)
from tuning.grids import FEDWCA_TEMPERATURES, FMNIST5_NAMES, GRIDS  # noqa: E402


def _finals(out: str, grid_name: str) -> dict[tuple[str, float], list[dict]]:
    """(row, value) -> the last round of each seed's run."""
    last: dict[tuple[str, float, int], dict] = {}
    for r in finished_rows(out, GRIDS[grid_name]):
        key = (r["row"], r["grid_value"], r["seed"])
        if key not in last or r["round"] > last[key]["round"]:
            last[key] = r
    runs: dict[tuple[str, float], list[dict]] = {}
    for (row, value, _), r in sorted(last.items()):
        runs.setdefault((row, value), []).append(r)
    return runs


def _list(v):
    return json.loads(v) if isinstance(v, str) else v


def table(out: str, grid_name: str) -> None:
    grid, runs = GRIDS[grid_name], _finals(out, grid_name)
    for metric, title in (("accuracy", "test"), ("val_accuracy", "validation")):
        print(f"\nfinal round, client-averaged {title} accuracy (%), mean ± 95 % CI over seeds"
              + (" / paper" if grid.paper and metric == "accuracy" else "") + "\n")
        print("| method | " + " | ".join(grid.value_label(v) for v in grid.values) + " | Avg. |")
        print("|" + "---|" * (len(grid.values) + 2))
        for r in grid.rows:
            cells, means = [], []
            for v in grid.values:
                vals = [100 * x[metric] for x in runs.get((r.key, v), [])]
                p = grid.paper.get(r.key, {}).get(v) if metric == "accuracy" else None
                cells.append(short_ci(vals) + (f" / {p:.1f}" if p is not None else ""))
                if vals:
                    means.append(statistics.fmean(vals))
            avg = f"{statistics.fmean(means):.1f}" if len(means) == len(grid.values) else "-"
            print(f"| {r.label} | " + " | ".join(cells) + f" | {avg} |")
    ref = next((r for r in grid.rows if r.key == "fedwca"), None)
    if ref is not None:
        print("\nFedWCA minus each row, paired by (column, seed): mean difference (points) and FedWCA's wins\n")
        for r in grid.rows:
            if r.key == ref.key:
                continue
            diffs = []
            for v in grid.values:
                mine = {x["seed"]: x["accuracy"] for x in runs.get((ref.key, v), [])}
                diffs += [100 * (mine[x["seed"]] - x["accuracy"]) for x in runs.get((r.key, v), []) if x["seed"] in mine]
            if diffs:
                print(f"- {r.label}: {statistics.fmean(diffs):+.1f} points, FedWCA higher in "
                      f"{sum(d > 0 for d in diffs)} of {len(diffs)}")
    print("\nclusters found (FedWCA rows: mean number of clusters / mean purity over seeds):\n")
    for r in grid.rows:
        got = [(v, runs.get((r.key, v), [])) for v in grid.values]
        if not any(x and "num_clusters" in x[0] for _, x in got):
            continue
        cells = [f"{statistics.fmean(x['num_clusters'] for x in xs):.1f} / "
                 f"{statistics.fmean(x['cluster_purity'] for x in xs):.2f}" if xs else "-" for _, xs in got]
        print(f"| {r.label} | " + " | ".join(cells) + " |")


def heatmap(out: str, grid_name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid, runs = GRIDS[grid_name], _finals(out, grid_name)
    n = len(FEDWCA_TEMPERATURES)
    val, test = np.full((n, n), np.nan), np.full((n, n), np.nan)
    for v in grid.values:
        xs = runs.get((grid.rows[0].key, v), [])
        if xs:
            i, j = divmod(int(v), n)
            val[i, j] = 100 * statistics.fmean(x["val_accuracy"] for x in xs)
            test[i, j] = 100 * statistics.fmean(x["accuracy"] for x in xs)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, data, title in ((axes[0], val, "validation accuracy (%)"), (axes[1], test, "test accuracy (%)")):
        im = ax.imshow(data, cmap="viridis", origin="lower")
        ax.set_xticks(range(n), [f"{t:g}" for t in FEDWCA_TEMPERATURES])
        ax.set_yticks(range(n), [f"{t:g}" for t in FEDWCA_TEMPERATURES])
        ax.set_xlabel("T_b")
        ax.set_ylabel("T_a")
        ax.set_title(title)
        for i in range(n):
            for j in range(n):
                if not np.isnan(data[i, j]):
                    ax.text(j, i, f"{data[i, j]:.1f}", ha="center", va="center", fontsize=7, color="w")
        fig.colorbar(im, ax=ax, fraction=0.046)
    source = ", ".join(FMNIST5_NAMES[e] for e in grid.fixed.get("source_envs", ()))
    fig.suptitle(f"FedWCA, T_a x T_b (source {source}, {grid_name}; the validation splits select, the test is shown)")
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(Path(out) / f"heatmap.{ext}", dpi=130)
    print("| T_a \\ T_b | " + " | ".join(f"{t:g}" for t in FEDWCA_TEMPERATURES) + " |")
    print("|" + "---|" * (n + 1))
    for i, ta in enumerate(FEDWCA_TEMPERATURES):
        print(f"| {ta:g} | " + " | ".join("-" if np.isnan(val[i, j]) else f"{val[i, j]:.1f} / {test[i, j]:.1f}"
                                          for j in range(n)) + " |")
    if np.isnan(val).all():
        return
    i, j = np.unravel_index(np.nanargmax(val), val.shape)
    oi, oj = np.unravel_index(np.nanargmax(test), test.shape)
    print(f"\nselected on validation: T_a {FEDWCA_TEMPERATURES[i]:g}, T_b {FEDWCA_TEMPERATURES[j]:g}: validation "
          f"{val[i, j]:.1f}, test {test[i, j]:.1f}; test-set oracle (not a selection rule): T_a "
          f"{FEDWCA_TEMPERATURES[oi]:g}, T_b {FEDWCA_TEMPERATURES[oj]:g}, test {test[oi, oj]:.1f}; spread of the "
          f"test accuracy over the grid {np.nanmin(test):.1f}-{np.nanmax(test):.1f}")


if __name__ == "__main__":
    cmd, out, name = sys.argv[1:4]
    {"table": table, "heatmap": heatmap}[cmd](out, name)
