"""The seed papers' figures from a sweep's results: accuracy against the grid variable per method (004 Figure
3), and the auto-weighted beta_i per round (004 Figures 5-10). Pure functions of the rows and the summary;
drawing is fda_ray.plot.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fda_ray.plot import Panel, Series, line_chart
from tuning.grids import Grid

AXIS_NAMES = {"noise": "feature noise std", "eta": "label shift eta", "beta": "static beta",
              "target_labelled": "labelled target samples"}


def accuracy_figure(summary: dict[str, Any], grid: Grid, path: str | Path) -> None:
    """Final target accuracy (mean, std error bars over seeds) against the grid variable, a line per method;
    beside it the paper's numbers on the same axes where the grid has them."""
    cells = summary["cells"]
    xlabel = AXIS_NAMES.get(grid.variable, grid.variable)
    values = list(grid.values)
    ours = []
    for m in grid.methods:
        row = cells.get(m, {})
        ys = [row.get(f"{v:g}", {}).get("mean", math.nan) for v in values]
        if all(math.isnan(y) for y in ys):
            continue
        ours.append(Series(grid.labels.get(m, m), values, ys, [row.get(f"{v:g}", {}).get("std", 0.0) for v in values]))
    panels = [Panel(f"ours ({summary['profile']} profile)", xlabel, "target test accuracy (%)", ours, xticks=values)]
    paper = [Series(grid.labels.get(m, m), values, [grid.paper[m].get(v, math.nan) for v in values])
             for m in grid.methods if m in grid.paper]
    if paper:
        panels.append(Panel(f"paper ({grid.paper_ref.split(',')[0]})" if grid.paper_ref else "paper",
                            xlabel, "target test accuracy (%)", paper, xticks=values))
    line_chart(panels, path, title=f"Sweep {grid.name}: final target accuracy")


def beta_rows(rows: list[dict[str, Any]], grid: Grid, method: str, seed: int = 0) -> dict[float, list[tuple[int, list[float]]]]:
    """grid value -> [(round, beta_i)] of one method and seed, for the rounds that have beta_i."""
    out: dict[float, list[tuple[int, list[float]]]] = {}
    for r in rows:
        b = r.get("beta_i")
        if r.get("method") != method or r.get("seed") != seed or r.get("phase") not in (None, "main") or not b:
            continue
        out.setdefault(r["grid_value"], []).append((int(r["round"]), [float(x) for x in b]))
    return {v: sorted(pts) for v, pts in out.items()}


def beta_figure(rows: list[dict[str, Any]], grid: Grid, method: str, path: str | Path, seed: int = 0) -> bool:
    """beta_i per round, a panel per grid value and a line per source client (seed `seed`); False (nothing
    written) for a method that does not weight automatically or reported no beta_i."""
    from fda_ray.methods import METHODS

    if method not in METHODS or METHODS.get(method).auto_rule is None:
        return False
    by_value = beta_rows(rows, grid, method, seed)
    if not by_value:
        return False
    panels = []
    for v in grid.values:
        pts = by_value.get(v)
        if not pts:
            continue
        n = len(pts[0][1])
        series = [Series(f"source {i + 1}", [r for r, _ in pts], [b[i] for _, b in pts]) for i in range(n)]
        panels.append(Panel(f"{grid.variable} = {v:g}", "round", "beta_i", series))
    line_chart(panels, path, title=f"{grid.labels.get(method, method)}: auto-weighted beta_i per round (seed {seed})",
               panel_size=(400, 300))
    return True


def estimate_rows(rows: list[dict[str, Any]], grid: Grid, seed: int = 0) -> dict[float, dict[str, list[tuple[int, float, float]]]]:
    """grid value -> method -> [(round, sigma, d)] of the rounds that logged the estimators (seed `seed`);
    d is the alpha-free root mean of d_i^2 over the sources. Values are per parameter (fda_ray.estimators)."""
    out: dict[float, dict[str, list[tuple[int, float, float]]]] = {}
    for r in rows:
        d2 = r.get("d2_i")
        if r.get("seed") != seed or r.get("phase") not in (None, "main") or not d2 or r.get("sigma2") is None:
            continue
        d = math.sqrt(sum(float(x) for x in d2) / len(d2))
        out.setdefault(r["grid_value"], {}).setdefault(r["method"], []).append(
            (int(r["round"]), math.sqrt(float(r["sigma2"])), d))
    return {v: {m: sorted(pts) for m, pts in by.items()} for v, by in out.items()}


def estimates_figure(rows: list[dict[str, Any]], grid: Grid, path: str | Path, seed: int = 0) -> bool:
    """The estimated target variance sigma and source distance d per round (the diagnostics of seed 004 that
    decide which rule should win): top row sigma, bottom row d, a panel per grid value, a line per method.
    False (nothing written) when no trial logged them."""
    by_value = estimate_rows(rows, grid, seed)
    values = [v for v in grid.values if v in by_value]
    if not values:
        return False
    panels = []
    for k, name in ((1, "sigma (target variance)"), (2, "d (source distance, rms over sources)")):
        for v in values:
            series = [Series(grid.labels.get(m, m), [p[0] for p in pts], [p[k] for p in pts])
                      for m, pts in by_value[v].items()]
            panels.append(Panel(f"{grid.variable} = {v:g}", "round", name, series))
    line_chart(panels, path, title=f"Estimated sigma and d per round, per parameter (seed {seed})",
               panel_size=(330, 260), columns=len(values))
    return True


def predicted_rules(rows: list[dict[str, Any]], grid: Grid) -> dict[str, dict[float, dict[str, int]]]:
    """method -> grid value -> {rule the theory predicted: number of main rounds} over all seeds."""
    out: dict[str, dict[float, dict[str, int]]] = {}
    for r in rows:
        rule = r.get("predicted_rule")
        if rule and r.get("phase") in (None, "main"):
            cell = out.setdefault(r["method"], {}).setdefault(r["grid_value"], {})
            cell[rule] = cell.get(rule, 0) + 1
    return out
