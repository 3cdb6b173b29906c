"""Claims with their seed spread (issue 38).

A claim about an ordering or a gap states each mean with its 95 % interval over seeds, and holds for the means:
`order` raises (and so fails the page's check) when a rerun's records no longer put the rows in the stated order.
"""
from __future__ import annotations

import statistics

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import Sweep, _final, _paired_text, _sweep, _with_ci


def _cell_values(s: Sweep, row: str, value: str, metric: str = "accuracy", last: str = "1") -> list[float]:
    x = _final(s, metric, value, last).get((row, float(value)), {})
    if not x:
        raise ValueError(f"{s.name!r} has no final round of {row!r} at {value}")
    return [x[k] for k in sorted(x)]


@GENERATORS.register("cell-ci")
def cell_ci(name: str, row: str, value: str, metric: str = "accuracy", digits: str = "1", last: str = "1",
            grid: str | None = None) -> str:
    """One cell's final number (%) as mean ± the 95 % confidence half-width over its seeds: "69.1 ± 0.8" (last=5:
    each seed's mean of its last 5 rounds, Auto-weighted FDA's DomainBed metric)."""
    return _with_ci(_cell_values(_sweep(name, grid), row, value, metric, last), int(digits))


@GENERATORS.register("order")
def order(name: str, value: str, *rows: str, metric: str = "accuracy", digits: str = "1", last: str = "1",
          grid: str | None = None) -> str:
    """The rows at one grid value in the order the claim states, each as mean ± 95 % half-width, joined by ">":
    "FedDA_Auto 73.0 ± 4.0 > FedGP_Auto 71.4 ± 3.3 > Target Only 67.0 ± 7.1". An error if the means are not in that
    order (the claim no longer holds for the mean)."""
    s = _sweep(name, grid)
    if len(rows) < 2:
        raise ValueError(f"order: name two or more rows, got {list(rows)}")
    cells = [(k, _cell_values(s, k, value, metric, last)) for k in rows]
    means = [statistics.fmean(v) for _, v in cells]
    for (a, _), (b, _), ma, mb in zip(cells, cells[1:], means, means[1:]):
        if not ma > mb:
            raise ValueError(f"order: in {name!r} at {value}, {a!r} ({ma:.2f}) is not above {b!r} ({mb:.2f})")
    return " > ".join(f"{s.grid.row(k).label} {_with_ci(v, int(digits))}" for k, v in cells)


@GENERATORS.register("diff-ci")
def diff_ci(name: str, a: str, b: str, value: str | None = None, metric: str = "accuracy", digits: str = "1",
            last: str = "1", spread: str | None = None, grid: str | None = None) -> str:
    """Row a minus row b, paired by (column, seed) over the sweep's columns (value=: some), as the mean difference
    and its 95 % interval: "+2.1 points (95 % interval -4.0 to +8.2; higher in 2 of 3)". An error if the mean
    difference is not positive (state the claim the other way round), or if spread=within (the interval includes
    0) or spread=outside (it does not) says otherwise: the prose's words about the spread are checked too."""
    s = _sweep(name, grid)
    cols = [float(x) for x in value.split(",")] if value else list(s.values)
    d = tables.paired_differences(_final(s, metric, last=last), a, b, cols)
    return _paired_text(d, f"in {name!r}, {a!r} minus {b!r}", spread, digits, "diff-ci")


@GENERATORS.register("best-column")
def best_column(name: str, row: str, metric: str = "accuracy", grid: str | None = None) -> str:
    """The grid value (its label) where the row's final mean `metric` is highest: a selection stated from the records
    ("T_a 0.05, T_b 0.05"). A tie for the highest mean is an error: the records would not select one."""
    s = _sweep(name, grid)
    means = {v: m for (k, v), m in tables.column_means(_final(s, metric)).items() if k == row}
    if not means:
        raise ValueError(f"best-column: {name!r} has no row {row!r}")
    top = max(means.values())
    best = [v for v, m in means.items() if m == top]
    if len(best) > 1:
        raise ValueError(f"best-column: {row!r} ties at {top:.4f} in {[s.grid.value_label(v) for v in best]}")
    return s.grid.value_label(best[0])
