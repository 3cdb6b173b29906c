"""The seed papers' figures from a sweep's results, drawn with matplotlib (Agg: no display needed), each as a
PNG and a PDF:

  accuracy        final target accuracy against the grid variable, a line per table row, ours beside the
                  paper's numbers (Auto-weighted FDA, Figure 3)
  beta_<row>      the auto-weighted beta_i per round, a panel per grid value, a line per source (Figures 5-10)
  estimates       sigma (the root of the estimated target variance sigma^2) and the source distance d per round
                  (Auto-weighted FDA's diagnostics)
  heatmap         a categorical or continuous heat map (the synthetic experiment, Figure 2)
  curves          a metric per round, the mean over seeds, a line per table row and a panel per grid value
                  (FSSDA Fig. 2; python -m fda_ray.collect --figure curves)
  grid_heatmap    a metric over the two parameters a grid's columns set (FedWCA's T_a x T_b), one panel per metric
                  on one colour scale (python -m fda_ray.collect --figure heatmap)

The legend rule: a legend never lists lines a reader cannot tell apart. Lines that coincide (within one
percent of the panel's range, about a line's width) are drawn once, under one entry naming them all
(`coinciding`).

The data shapers (`beta_rows`, `estimate_rows`, `predicted_rules`) are pure functions of the rows; every
drawing function returns a `Drawn` naming the files and the series it drew (what the tests check).
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")  # files only: a cluster node has no display
import matplotlib.pyplot as plt  # noqa: E402

from fda_ray.core.storage import StoragePath, storage_path  # noqa: E402
from fda_ray.papers.grids import Grid  # noqa: E402

FORMATS = ("png", "pdf")
DPI = 150
AXIS_NAMES = {"noise": "target feature noise (std of the Gaussian)", "eta": "label shift η", "beta": "static β",
              "source_classes": "classes per source k",
              "target_labelled": "labelled target samples"}
# The noise level is written "noise", not sigma: sigma is the root of the estimated target variance (the estimates
# figure).
VAR_SYMBOLS = {"noise": "noise", "eta": "η", "beta": "β", "target_labelled": "n", "source_classes": "k"}
BAND = 0.05  # beta_i of all sources within this share of the panel's range: drawn as their mean and min-max band
COINCIDE = 0.01  # lines closer than this share of the panel's y range (about a line's width) are one to a reader
# One marker per table row, so lines stay apart in grey print.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")


@dataclass
class Drawn:
    """What a drawing function wrote: the files, and per panel the series labels it drew."""

    paths: list[Any] = field(default_factory=list)  # Path, or StoragePath on an object store
    series: dict[str, list[str]] = field(default_factory=dict)
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)  # panel -> its colour scale (vmin, vmax)
    texts: dict[str, Any] = field(default_factory=dict)  # the figure's words a reader goes by: title, y label, legend


def _save(fig: Any, stem: Path | StoragePath, drawn: Drawn) -> Drawn:
    stem = storage_path(stem)  # a local directory or an object store (fda_ray.core.storage)
    stem.parent.mkdir(parents=True, exist_ok=True)
    for fmt in FORMATS:
        path = stem.with_suffix(f".{fmt}")
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=DPI, bbox_inches="tight")
        path.write_bytes(buf.getvalue())  # atomic: a reader never sees half a file
        drawn.paths.append(Path(path) if path.is_local else path)
    plt.close(fig)
    return drawn


def coinciding(lines: dict[str, Sequence[float]], tol: float = COINCIDE) -> list[list[str]]:
    """Groups of line labels a reader cannot tell apart: lines of the same length whose values differ by at most
    `tol` times the y range of all the lines, everywhere. Each group keeps the first-drawn label's order; a line
    alone is a group of one."""
    ys = [y for v in lines.values() for y in v if not math.isnan(y)]
    span = (max(ys) - min(ys)) if ys else 0.0
    limit = tol * span if span > 0 else 1e-12
    groups: list[list[str]] = []
    for label, v in lines.items():
        for g in groups:
            first = lines[g[0]]
            if len(first) == len(v) and all(abs(a - b) <= limit or (math.isnan(a) and math.isnan(b))
                                            for a, b in zip(first, v)):
                g.append(label)
                break
        else:
            groups.append([label])
    return groups


def group_label(labels: Sequence[str]) -> str:
    """One legend entry for coinciding lines: "source 1-9 (coincide)", "source 1, 3 (coincide)", "A = B"."""
    if len(labels) == 1:
        return labels[0]
    stems = {lab.rsplit(" ", 1)[0] for lab in labels}
    nums = [lab.rsplit(" ", 1)[-1] for lab in labels]
    if len(stems) == 1 and all(n.isdigit() for n in nums):
        ints = sorted(int(n) for n in nums)
        listed = f"{ints[0]}-{ints[-1]}" if ints == list(range(ints[0], ints[-1] + 1)) else ", ".join(map(str, ints))
        return f"{stems.pop()} {listed} (coincide)"
    return " = ".join(labels)


def plot_distinct(ax: Any, xs: dict[str, Sequence[float]], ys: dict[str, Sequence[float]], band: float = 0.0,
                  **style: Any) -> list[str]:
    """Draws each group of coinciding lines once (the legend rule); returns the legend entries drawn. With
    `band` > 0, lines of one length that all stay within that share of the panel's y range of each other are drawn
    as their mean with a min-max band, one entry ("source 1-9 (coincide: mean, band min-max)")."""
    labels = list(ys)
    same_x = len({tuple(xs[k]) for k in labels}) == 1
    if band > 0 and len(labels) > 1 and same_x:
        cols = list(zip(*(ys[k] for k in labels)))  # per x: the lines' values
        every = [y for c in cols for y in c]
        span = max(every) - min(every)
        if span > 0 and max(max(c) - min(c) for c in cols) <= band * span:
            base = group_label(labels)  # "source 1-9 (coincide)" or "A = B"
            label = (base.replace("(coincide)", "(coincide: mean, band min-max)") if "(coincide)" in base
                     else f"{base} (coincide: mean, band min-max)")
            x = xs[labels[0]]
            ax.fill_between(x, [min(c) for c in cols], [max(c) for c in cols], color="C0", alpha=0.25, linewidth=0)
            ax.plot(x, [sum(c) / len(c) for c in cols], color="C0", label=label,
                    **{k: v for k, v in style.items() if k != "markersize"})
            return [label]
    drawn = []
    for i, group in enumerate(coinciding(ys)):
        label = group_label(group)
        ax.plot(xs[group[0]], ys[group[0]], label=label, color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)],
                markevery=max(1, len(ys[group[0]]) // 8), **style)
        drawn.append(label)
    return drawn


def colour(i: int, n: int) -> Any:
    """Row i's colour among n: matplotlib's ten where they suffice, else tab20's twenty (no two rows share one up
    to 20; with the markers cycling over 9, no two share both up to 180)."""
    return f"C{i % 10}" if n <= 10 else plt.get_cmap("tab20").colors[i % 20]


def _wrap(text: str, width: int = 48) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _value_label(variable: str, v: float) -> str:
    return f"{VAR_SYMBOLS.get(variable, variable)} = {v:g}"


def accuracy_figure(summary: dict[str, Any], grid: Grid, row_keys: Sequence[str], values: Sequence[float],
                    stem: str | Path | StoragePath) -> Drawn:
    """Final target accuracy (mean, error bars the 95 % confidence half-width over seeds, as the tables print)
    against the grid variable, a line per row (a regression task's: its test loss, summary["metric"]);
    beside it the paper's numbers on the same axes where the grid has them. One legend names every row, drawn in
    either panel (solid: ours; a row with only the paper's numbers: dashed)."""
    cells = summary["cells"]
    paper_rows = [k for k in row_keys if k in grid.paper]
    panels = 2 if paper_rows else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.0), sharey=True, squeeze=False)
    drawn = Drawn()
    ax = axes[0, 0]
    drawn.series["ours"] = []
    for i, key in enumerate(row_keys):
        row = cells.get(key, {})
        ys = [row.get(f"{v:g}", {}).get("mean", math.nan) for v in values]
        if all(math.isnan(y) for y in ys):
            continue
        err = [row.get(f"{v:g}", {}).get("ci95", 0.0) for v in values]
        label = grid.row(key).label
        # a row keeps its colour and marker in both panels, whichever rows have numbers
        ax.errorbar(values, ys, yerr=err, marker=MARKERS[i % len(MARKERS)], color=colour(i, len(row_keys)), capsize=3,
                    label=label)
        drawn.series["ours"].append(label)
    ax.set_title(f"fda-ray ({summary['profile']} profile; bars: 95 % CI over seeds)", fontsize=9)
    if paper_rows:
        axp = axes[0, 1]
        drawn.series["paper"] = []
        for i, key in enumerate(row_keys):
            if key in grid.paper:
                label = grid.row(key).label
                axp.plot(values, [grid.paper[key].get(v, math.nan) for v in values], marker=MARKERS[i % len(MARKERS)],
                         color=colour(i, len(row_keys)), linestyle="--", label=label)
                drawn.series["paper"].append(label)
        axp.set_title(_wrap(grid.paper_ref or "paper"), fontsize=9)
    for a in axes[0]:
        a.set_xlabel(AXIS_NAMES.get(grid.variable, grid.variable))
        a.set_xticks(list(values))
        if grid.value_labels:  # columns that are settings (FSSDA's domain pairs): their names
            a.set_xticklabels([grid.value_labels.get(v, f"{v:g}") for v in values], rotation=20, fontsize=8)
        a.grid(alpha=0.3)
    loss = summary.get("metric") == "loss"
    axes[0, 0].set_ylabel("target test loss (MSE)" if loss else "target test accuracy (%)")
    handles: dict[str, Any] = {}
    for a in axes[0]:  # ours first: a row drawn in both panels is named once, by its solid line
        for h, label in zip(*a.get_legend_handles_labels()):
            handles.setdefault(label, h)
    axes[0, -1].legend(list(handles.values()), list(handles), loc="center left", bbox_to_anchor=(1.02, 0.5),
                       frameon=False)
    fig.suptitle(f"Sweep {grid.name}: final target {'test loss' if loss else 'accuracy'}")
    drawn.texts = {"title": fig._suptitle.get_text(), "ylabel": axes[0, 0].get_ylabel(), "legend": list(handles)}
    fig.tight_layout()  # the panels' titles (the paper's reference wraps) clear the figure's title
    return _save(fig, stem, drawn)


def beta_rows(rows: list[dict[str, Any]], row_key: str, seed: int = 0) -> dict[float, list[tuple[int, list[float]]]]:
    """grid value -> [(round, beta_i)] of one table row and seed, for the main rounds that have beta_i."""
    out: dict[float, list[tuple[int, list[float]]]] = {}
    for r in rows:
        b = r.get("beta_i")
        if r.get("row") != row_key or r.get("seed") != seed or r.get("phase") not in (None, "main") or not b:
            continue
        out.setdefault(r["grid_value"], []).append((int(r["round"]), [float(x) for x in b]))
    return {v: sorted(pts) for v, pts in out.items()}


def beta_figure(rows: list[dict[str, Any]], grid: Grid, row_key: str, values: Sequence[float], stem: str | Path | StoragePath,
                seed: int = 0) -> Drawn | None:
    """beta_i per round, a panel per grid value and a line per source (seed `seed`); None (nothing written)
    for a row that does not weight automatically or reported no beta_i."""
    from fda_ray.algorithms import ALGORITHMS

    method = grid.row(row_key).method
    if method not in ALGORITHMS or getattr(ALGORITHMS.get(method), "auto_rule", None) is None:
        return None
    by_value = beta_rows(rows, row_key, seed)
    shown = [v for v in values if by_value.get(v)]
    if not shown:
        return None
    cols = min(3, len(shown))
    nrows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 2.9 * nrows), sharey=True, squeeze=False)
    drawn = Drawn()
    for ax, v in zip(axes.flat, shown):
        pts = by_value[v]
        title = grid.value_labels.get(v) or _value_label(grid.variable, v)
        xs = {f"source {i + 1}": [r for r, _ in pts] for i in range(len(pts[0][1]))}
        ys = {f"source {i + 1}": [b[i] for _, b in pts] for i in range(len(pts[0][1]))}
        # sources of one distribution get near-equal beta_i: nine lines a reader cannot tell apart are one band
        drawn.series[title] = plot_distinct(ax, xs, ys, band=BAND, linewidth=1.2, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel(r"$\beta_i$")
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    titles = [grid.value_labels.get(v) or _value_label(grid.variable, v) for v in shown]
    if all(drawn.series[t] == drawn.series[titles[0]] for t in titles):
        # one legend for the figure, under the panels (beside the last panel it squeezed them all)
        handles, names = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="lower center", ncol=min(3, len(names)), frameon=False, fontsize=8)
        fig.tight_layout(rect=(0, 0.06 * math.ceil(len(names) / 3) / nrows, 1, 1))
    else:  # the panels group their sources differently: each names its own lines
        for ax in list(axes.flat)[:len(shown)]:
            ax.legend(fontsize=7, frameon=False)
        fig.tight_layout()
    fig.suptitle(rf"{grid.row(row_key).label}: auto-weighted $\beta_i$ per round (seed {seed})", y=1.02)
    return _save(fig, stem, drawn)


def estimate_rows(rows: list[dict[str, Any]], seed: int = 0) -> dict[float, dict[str, list[tuple[int, float, float]]]]:
    """grid value -> row key -> [(round, sigma, d)] of the main rounds that logged the estimators; d is the
    alpha-free root mean of d_i^2 over the sources. Values are per parameter (fda_ray.algorithms.fda.estimators)."""
    out: dict[float, dict[str, list[tuple[int, float, float]]]] = {}
    for r in rows:
        d2 = r.get("d2_i")
        if r.get("seed") != seed or r.get("phase") not in (None, "main") or not d2 or r.get("sigma2") is None:
            continue
        d = math.sqrt(sum(float(x) for x in d2) / len(d2))
        out.setdefault(r["grid_value"], {}).setdefault(r["row"], []).append(
            (int(r["round"]), math.sqrt(float(r["sigma2"])), d))
    return {v: {k: sorted(pts) for k, pts in by.items()} for v, by in out.items()}


def estimates_figure(rows: list[dict[str, Any]], grid: Grid, values: Sequence[float], stem: str | Path | StoragePath,
                     seed: int = 0) -> Drawn | None:
    """Top row sigma, bottom row d, per round: a panel per grid value, a line per table row. None when no
    trial logged the estimators."""
    by_value = estimate_rows(rows, seed)
    shown = [v for v in values if v in by_value]
    if not shown:
        return None
    fig, axes = plt.subplots(2, len(shown), figsize=(3.4 * len(shown), 5.6), sharex=True, squeeze=False)
    drawn = Drawn()
    keys = [r.key for r in grid.rows]
    for j, v in enumerate(shown):
        for k, (name, symbol) in enumerate(((1, r"$\hat\sigma$"), (2, r"$\hat d$"))):
            ax = axes[k, j]
            title = f"{grid.value_labels.get(v) or _value_label(grid.variable, v)}: {symbol}"
            drawn.series[title] = []
            for key, pts in sorted(by_value[v].items(), key=lambda kv: keys.index(kv[0]) if kv[0] in keys else 99):
                label = grid.row(key).label if key in keys else key
                ax.plot([p[0] for p in pts], [p[name] for p in pts], linewidth=1.2, label=label)
                drawn.series[title].append(label)
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3)
            if k == 1:
                ax.set_xlabel("round")
        axes[0, j].set_yscale("log")
        axes[1, j].set_yscale("log")
    axes[0, 0].set_ylabel(r"target $\hat\sigma = \sqrt{\hat\sigma^2}$")
    axes[1, 0].set_ylabel(r"source distance $\hat d$ (rms)")
    axes[0, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    fig.suptitle(f"Estimated σ and d per round, per parameter (seed {seed})")
    fig.tight_layout()
    return _save(fig, stem, drawn)


def predicted_rules(rows: list[dict[str, Any]]) -> dict[str, dict[float, dict[str, int]]]:
    """row key -> grid value -> {rule the theory predicted: number of main rounds} over all seeds."""
    out: dict[str, dict[float, dict[str, int]]] = {}
    for r in rows:
        rule = r.get("predicted_rule")
        if rule and r.get("phase") in (None, "main"):
            cell = out.setdefault(r["row"], {}).setdefault(r["grid_value"], {})
            cell[rule] = cell.get(rule, 0) + 1
    return out


def heatmap(values: Any, row_labels: Sequence[str], col_labels: Sequence[str], stem: str | Path | StoragePath, *, title: str,
            xlabel: str = "", ylabel: str = "", categories: Sequence[str] | None = None,
            colorbar_label: str = "") -> Drawn:
    """values (R, C): numbers (a colour bar) or, with `categories`, integer codes into it (one colour per
    category, a legend; a negative code is an empty cell)."""
    import numpy as np
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    v = np.asarray(values, dtype=float)
    r, c = v.shape
    if (len(row_labels), len(col_labels)) != (r, c):
        raise ValueError(f"labels must match values of shape {(r, c)}, got {len(row_labels)} rows, {len(col_labels)} columns")
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * c, 1.0 + 0.55 * r))
    drawn = Drawn()
    if categories is not None:
        colours = plt.get_cmap("tab10").colors[: len(categories)]
        masked = np.ma.masked_less(v, 0)
        ax.imshow(masked, cmap=ListedColormap(colours), norm=BoundaryNorm(np.arange(len(categories) + 1) - 0.5, len(colours)),
                  aspect="auto")
        present = sorted({int(x) for x in v.flat if x >= 0})
        ax.legend(handles=[Patch(color=colours[i], label=categories[i]) for i in present],
                  loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
        drawn.series["categories"] = [categories[i] for i in present]
    else:
        im = ax.imshow(v, cmap="viridis", aspect="auto")
        fig.colorbar(im, ax=ax, label=colorbar_label)
        drawn.series["values"] = [colorbar_label or "value"]
    ax.set_xticks(range(c), col_labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(r), row_labels, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _save(fig, stem, drawn)


def curves_figure(curves: dict[float, dict[str, list[tuple[int, float]]]], labels: dict[str, str],
                  value_labels: dict[float, str], stem: str | Path | StoragePath, *, ylabel: str, title: str) -> Drawn:
    """A metric per round (the mean over seeds), a panel per grid value and a line per row (`labels`: row key ->
    label, in the table's order); coinciding lines are one legend entry (the legend rule)."""
    shown = [v for v in value_labels if curves.get(v)]
    if not shown:
        raise ValueError("curves: no row has rounds to draw")
    fig, axes = plt.subplots(1, len(shown), figsize=(5.2 * len(shown), 3.8), sharey=True, squeeze=False)
    drawn = Drawn()
    for ax, v in zip(axes[0], shown):
        keys = [k for k in labels if k in curves[v]]
        xs = {labels[k]: [r for r, _ in curves[v][k]] for k in keys}
        ys = {labels[k]: [y for _, y in curves[v][k]] for k in keys}
        drawn.series[value_labels[v]] = plot_distinct(ax, xs, ys, linewidth=1.3, markersize=3)
        ax.set_title(value_labels[v], fontsize=10)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    axes[0, 0].set_ylabel(ylabel)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, stem, drawn)


def grid_heatmap(panels: dict[str, Any], row_labels: Sequence[str], col_labels: Sequence[str],
                 stem: str | Path | StoragePath, *, xlabel: str, ylabel: str, title: str, unit: str = "%",
                 marks: dict[str, tuple[int, int]] | None = None) -> Drawn:
    """One panel per metric (name -> an (R, C) array, NaN for a cell not run), all on one colour scale with one
    colour bar, so the same colour is the same number in every panel; each cell's number is written in it, and
    `marks` (panel -> (i, j)) outlines a cell (the selected configuration)."""
    import numpy as np
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    arrays = {k: np.asarray(v, dtype=float) for k, v in panels.items()}
    finite = np.concatenate([a[np.isfinite(a)] for a in arrays.values()])
    if finite.size == 0:
        raise ValueError("heatmap: no cell has a number")
    norm = Normalize(vmin=float(finite.min()), vmax=float(finite.max()))
    n = len(arrays)
    fig, axes = plt.subplots(1, n, figsize=(0.9 + 0.75 * len(col_labels) * n + 1.2, 1.4 + 0.55 * len(row_labels)),
                             squeeze=False)
    drawn = Drawn()
    im = None
    for ax, (name, a) in zip(axes[0], arrays.items()):
        im = ax.imshow(a, cmap="viridis", norm=norm, origin="lower")
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                if np.isfinite(a[i, j]):
                    # dark text on the light end of viridis, white on the dark end
                    ax.text(j, i, f"{a[i, j]:.1f}", ha="center", va="center", fontsize=7,
                            color="black" if norm(a[i, j]) > 0.6 else "white")
        if marks and name in marks:
            i, j = marks[name]
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        ax.set_xticks(range(len(col_labels)), col_labels, fontsize=8)
        ax.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
        ax.set_xlabel(xlabel)
        if ax is axes[0, 0]:
            ax.set_ylabel(ylabel)
        ax.set_title(name, fontsize=10)
        drawn.series[name] = [name]
        drawn.scales[name] = (norm.vmin, norm.vmax)
    fig.colorbar(im, ax=list(axes[0]), fraction=0.046 / n, label=unit)
    fig.suptitle(title)
    return _save(fig, stem, drawn)


def sweep_figures(rows: list[dict], summary: dict, grid: Grid, row_keys: Sequence[str], values: Sequence[float],
                  out: Path | StoragePath) -> str:
    """Writes a sweep's figures into `out`; returns the summary.md lines that show them."""
    what = "final target test loss" if summary.get("metric") == "loss" else "final target accuracy"
    lines = ["", f"![{what}](accuracy.png) ([PDF](accuracy.pdf))"]
    accuracy_figure(summary, grid, row_keys, values, out / "accuracy")
    for key in row_keys:
        if beta_figure(rows, grid, key, values, out / f"beta_{key}"):
            lines.append(f"![{grid.row(key).label}: beta_i per round](beta_{key}.png)")
    if estimates_figure(rows, grid, values, out / "estimates"):
        lines.append("![estimated sigma and d per round](estimates.png)")
    lines += predicted_table(rows, grid, row_keys, values)
    return "\n".join(lines) + "\n"


PREDICTED_HEADER = "## The rule the theory predicts, from each run's own estimates"


def predicted_table(rows: list[dict], grid: Grid, row_keys: Sequence[str], values: Sequence[float]) -> list[str]:
    """summary.md's section on the static rule with the smallest estimated Delta error (fda_ray.algorithms.fda.
    diagnostics), counted over main rounds; [] when no run logged its estimates."""
    predicted = predicted_rules(rows)
    if not predicted:
        return []
    lines = ["", PREDICTED_HEADER, "",
             "Main rounds in which each static rule had the smallest estimated Delta error "
             "(Auto-weighted FDA eqs (7), (9), (11); beta as configured).", "",
             "| method | " + " | ".join(grid.value_label(v) for v in values) + " |",
             "|---|" + "---|" * len(values)]
    for key in row_keys:
        if key in predicted:
            lines.append(f"| {grid.row(key).label} | " + " | ".join(
                ", ".join(f"{rule} {k}" for rule, k in sorted(predicted[key].get(v, {}).items(), key=lambda x: -x[1]))
                or "-" for v in values) + " |")
    return lines
