"""The tables of the DomainBed result pages, from a sweep's trial records (every seed found there).

    python docs/results/domainbed_summary.py docs/results/domainbed-colored-quick domainbed-colored
    python docs/results/domainbed_summary.py docs/results/domainbed-rotated-quick domainbed-rotated

Prints, per row and held-out environment, the final-round accuracy and the mean of the last 5 rounds (seed
004's DomainBed metric), mean (std) over the seeds found, beside the published numbers the grid carries
(ColoredMNIST: 004 Table 3, and Table 1 where it differs or where Table 3 has no row), then each
environment's ranking of the rows by the last-5 mean.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fda_ray.experiments.sweep import LAST_ROUNDS, final_accuracies  # noqa: E402
from fda_ray.experiments.trials import Trial, is_done, read_rows, result_rows  # noqa: E402
from tuning.grids import GRIDS  # noqa: E402
from tuning.paper import TABLE1_CMNIST, TABLE3_CMNIST, TABLE3_CMNIST_STD  # noqa: E402


def cell(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ({statistics.stdev(values):.2f})"


def main(out: str, grid_name: str) -> None:
    grid = GRIDS[grid_name]
    rows: list[dict] = []
    for rec in sorted((Path(out) / "trials").iterdir()):
        if is_done(rec):
            trial = Trial.from_dict(__import__("json").loads((rec / "trial.json").read_text()))
            rows += result_rows(trial, grid, read_rows(rec))
    final, last5 = final_accuracies(rows), final_accuracies(rows, last=LAST_ROUNDS)
    values = sorted({v for _, v in final})
    colored = grid.dataset.startswith("colored")
    head = ["method"] + [f"{grid.value_label(v).split(' (')[0]} final" for v in values] + \
        [f"{grid.value_label(v).split(' (')[0]} last 5" for v in values] + ["avg last 5", "n"]
    if colored:
        head += ["004 T3", "004 T3 avg", "004 T1 (if other)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    keys = [r.key for r in grid.rows if any((r.key, v) in final for v in values)]
    for key in keys:
        f = [list(final.get((key, v), {}).values()) for v in values]
        l5 = [list(last5.get((key, v), {}).values()) for v in values]
        avg = statistics.fmean(statistics.fmean(x) for x in l5) if all(l5) else None
        n = sorted({len(x) for x in f})
        line = [grid.row(key).label] + [cell(x) for x in f] + [cell(x) for x in l5] + \
            [f"{avg:.2f}" if avg is not None else "-", "/".join(map(str, n))]
        if colored:
            t3 = TABLE3_CMNIST.get(key)
            line.append(" / ".join(f"{t3[v]:.2f} ({TABLE3_CMNIST_STD[key][v]:.2f})" for v in values) if t3 else "-")
            line.append(f"{statistics.fmean(t3.values()):.2f}" if t3 else "-")
            t1 = TABLE1_CMNIST.get(key)
            line.append(" / ".join(f"{t1[v]:.2f}" for v in values) + f" (avg {statistics.fmean(t1.values()):.2f})"
                        if t1 and t1 != t3 else "-")
        print("| " + " | ".join(line) + " |")
    print()
    for v in values:
        ranked = sorted(((statistics.fmean(last5[(k, v)].values()), k) for k in keys if (k, v) in last5), reverse=True)
        print(f"- {grid.value_label(v)}, by the last-5 mean: " + " > ".join(f"{grid.row(k).label} {a:.1f}"
                                                                             for a, k in ranked))


if __name__ == "__main__":
    main(*sys.argv[1:3])
