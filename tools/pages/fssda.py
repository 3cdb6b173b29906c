"""Generators for FSSDA's tables (FSSDA): the splits' tables (iid, non-iid), the teacher, the rounds to reach a
goal, paired lambdas, and metrics logged in the trials' last round."""
from __future__ import annotations

import json
import statistics

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import Sweep, _final, _labelled, _last_rounds, _mean_of, _sweep, load_sweep


def _last_metric(s: Sweep, row: str, value: float, metric: str) -> list[float]:
    """The row's `metric` (a list: its mean) in each seed's last round, seed by seed, where logged."""
    last = _last_rounds(s)
    xs = [_mean_of(last[k].get(metric)) for k in sorted(last) if k[0] == row and k[1] == value]
    return [x for x in xs if x is not None]


def _columns(s: Sweep, columns: str | None) -> list[str]:
    # default: the grid's labels, arrows and pluses spaced ("fmnist-m + edges -> clean"); a spec cannot hold ">"
    labels = columns.split("|") if columns else [s.grid.value_label(v).replace("->", " -> ").replace("+", " + ")
                                                 for v in s.values]
    if len(labels) != len(s.values):
        raise ValueError(f"columns={columns!r} is invalid: {s.name!r} has {len(s.values)} columns")
    return labels


@GENERATORS.register("split-table")
def split_table(name: str, *rows: str, corner: str = "method", columns: str | None = None, lead: str = "0",
                lambda_row: str | None = None) -> str:
    """Per ROW:LABEL and column, the final accuracy (%) as "mean ± 95 % half-width" to one decimal (tables.short_ci).
    Bold: the best mean of its column among the rows of its split (the rows whose key ends alike after its last
    "_": iid, noniid), where the split has more than one row and the best leads the next by more than `lead`
    points. lambda_row=LABEL adds a line of the rows' devices' mean lambda in the last round (mean over seeds),
    joined by " / "."""
    s = load_sweep(name)
    pairs = _labelled(rows)
    means = tables.column_means(_final(s, "accuracy"))
    final = _final(s, "accuracy")
    split = {k: k.rsplit("_", 1)[-1] for k, _ in pairs}
    lines = [f"| {corner} | " + " | ".join(_columns(s, columns)) + " |", "|" + "---|" * (len(s.values) + 1)]
    for k, label in pairs:
        cells = []
        for v in s.values:
            c = tables.short_ci(list(final.get((k, v), {}).values()))
            mates = sorted((means[(j, v)] for j, _ in pairs if split[j] == split[k] and (j, v) in means), reverse=True)
            if (k, v) in means and len(mates) > 1 and means[(k, v)] == mates[0] and mates[0] - mates[1] > float(lead):
                c = f"**{c}**"
            cells.append(c)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if lambda_row:
        cells = [" / ".join(f"{statistics.fmean(_last_metric(s, k, v, 'imitation_lambda_i')):.2f}" for k, _ in pairs)
                 for v in s.values]
        lines.append(f"| {lambda_row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@GENERATORS.register("teacher-table")
def teacher_table(name: str, *rows: str, columns: str | None = None) -> str:
    """Per ROW:LABEL (FSSDA rows) and column: the teacher's final accuracy (%, the mean over the source models) as
    "mean ± 95 % half-width" over seeds, and the devices' mean lambda in the last round (mean over seeds)."""
    s = load_sweep(name)
    lines = ["| | " + " | ".join(_columns(s, columns)) + " |", "|" + "---|" * (len(s.values) + 1)]
    for k, label in _labelled(rows):
        cells = []
        for v in s.values:
            teach = [100 * x for x in _last_metric(s, k, v, "teacher_accuracy")]
            lam = _last_metric(s, k, v, "imitation_lambda_i")
            cells.append(f"{tables.short_ci(teach)} / {statistics.fmean(lam):.2f}" if lam else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_curve(s: Sweep, row: str, value: float) -> list[float]:
    """The row's accuracy (%) round by round, the mean over its seeds (as long as the shortest seed's run)."""
    runs = [r for (k, v, _), r in sorted(tables.runs(list(s.rows)).items()) if k == row and v == value]
    if not runs:
        raise ValueError(f"{s.name!r} has no run of {row!r}")
    n = min(len(r) for r in runs)
    return [statistics.fmean(r[i] for r in runs) for i in sorted(runs[0])[:n]]


@GENERATORS.register("reach-table")
def reach_table(name: str, goal: str, *rows: str, goal_label: str = "serial variant") -> str:
    """A one-column sweep (FSSDA Fig. 2): per ROW:LABEL, the final accuracy (%, "mean ± 95 % half-width") and
    the first round (from 1) at which its mean curve over seeds reaches the `goal` row's final mean."""
    s = load_sweep(name)
    v = s.values[0]
    target = _mean_curve(s, goal, v)[-1]
    final = _final(s, "accuracy")
    lines = [f"| protocol | final accuracy | rounds to reach the {goal_label}'s final {target:.1f} % |",
             "|---|---|---|"]
    for k, label in _labelled(rows):
        curve = _mean_curve(s, k, v)
        hit = next((i + 1 for i, m in enumerate(curve) if m >= target), None)
        lines.append(f"| {label} | {tables.short_ci(list(final[(k, v)].values()))} | {hit or '-'} |")
    return "\n".join(lines)


@GENERATORS.register("reach")
def reach(name: str, goal: str, row: str) -> str:
    """The first round (from 1) at which the row's mean curve over seeds reaches the `goal` row's final mean."""
    s = load_sweep(name)
    target = _mean_curve(s, goal, s.values[0])[-1]
    return str(next((i + 1 for i, m in enumerate(_mean_curve(s, row, s.values[0])) if m >= target), "-"))


@GENERATORS.register("paired-table")
def paired_table(name: str, ref: str, *others: str, columns: str | None = None, splits: str = "iid,noniid",
                 below: str = "2") -> str:
    """Per column and split, `ref` (e.g. adaptive lambda) minus each of `others` (rows named with {split}, e.g.
    fssda_lambda0.1_{split}), paired by seed, the mean over the seeds; a line's lowest mean is in bold with the
    seeds' own differences in brackets where it is below -`below` points."""
    s = load_sweep(name)
    final = _final(s, "accuracy")
    names = splits.split(",")
    head = " | ".join(f"{sp.replace('noniid', 'non-iid')}: " + " / ".join(
        "- " + o.split("lambda")[-1].split("_")[0] for o in others) for sp in names)
    lines = [f"| pair | {head} |", "|---|" + "---|" * len(names)]
    for v, label in zip(s.values, _columns(s, columns)):
        cells = []
        for sp in names:
            diffs = [tables.paired_differences(final, ref.format(split=sp), o.format(split=sp), [v]) for o in others]
            means = [statistics.fmean(d) for d in diffs]
            low = min(range(len(means)), key=means.__getitem__)
            parts = [f"{m:+.1f}" for m in means]
            if means[low] < -float(below):
                parts[low] = f"**{parts[low]}** (" + ", ".join(f"{x:+.1f}" for x in diffs[low]) + ")"
            cells.append(" / ".join(parts))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pick(x, index: str | None) -> float | None:
    """A logged list metric's element `index` (per source: teacher_accuracy), or for a list of lists (per device:
    imitation_weights_i) the mean over the outer list of each inner list's element; without index, its mean."""
    if isinstance(x, str):
        x = json.loads(x)
    if index is None or x is None:
        return _mean_of(x)
    i = int(index)
    return statistics.fmean(y[i] for y in x) if x and isinstance(x[0], list) else float(x[i])


def _last_values(s: Sweep, metric: str, rows: tuple[str, ...], value: str | None, index: str | None,
                 scale: str) -> dict[tuple[str, float, int], float]:
    out = {k: _pick(r.get(metric), index) for k, r in _last_rounds(s).items()
           if k[0] in rows and (value is None or k[1] == float(value))}
    out = {k: float(scale) * x for k, x in out.items() if x is not None}
    if not out:
        raise ValueError(f"{s.name!r} logs no {metric!r} for {', '.join(rows)}")
    return out


@GENERATORS.register("last-mean")
def last_mean(name: str, metric: str, row: str, value: str, index: str | None = None, scale: str = "100",
              digits: str = "1") -> str:
    """A logged metric in the trials' last round (a list: its mean, or element `index`), times `scale` (100: %),
    the mean over the seeds of one row at one grid value: the teacher's accuracy "8.2", lambda "0.94" (scale=1)."""
    xs = _last_values(load_sweep(name), metric, (row,), value, index, scale)
    return f"{statistics.fmean(xs.values()):.{int(digits)}f}"


@GENERATORS.register("last-range")
def last_range(name: str, metric: str, *rows: str, value: str | None = None, index: str | None = None,
               scale: str = "100", over: str = "runs", digits: str = "0") -> str:
    """The lowest and highest of a logged metric in the last round (as last-mean) over the rows' runs
    (over=runs: every seed and column), or over their columns' means over seeds (over=columns): "3-13"."""
    xs = _last_values(load_sweep(name), metric, rows, value, index, scale)
    if over == "columns":
        by: dict[tuple[str, float], list[float]] = {}
        for (k, v, _), x in xs.items():
            by.setdefault((k, v), []).append(x)
        return tables.span([statistics.fmean(x) for x in by.values()], int(digits))
    if over != "runs":
        raise ValueError(f"over={over!r} is invalid: runs or columns")
    return tables.span(xs.values(), int(digits))


@GENERATORS.register("student-teacher")
def student_teacher(name: str, *rows: str, within: str = "3", what: str = "count") -> str:
    """The distilling rows' runs: each one's final accuracy minus its teacher's (the mean over the source models),
    in points. what=count: in how many the two are within `within` points ("21 of 24"); what=outside: the range
    of the distances of the others ("6.7-11.7")."""
    s = load_sweep(name)
    last = _last_rounds(s)
    gaps = [100 * (r["accuracy"] - _mean_of(r["teacher_accuracy"])) for k, r in last.items()
            if k[0] in rows and r.get("teacher_accuracy") is not None]
    if not gaps:
        raise ValueError(f"student-teacher: {name!r} has no teacher for {', '.join(rows)}")
    near = [abs(g) <= float(within) for g in gaps]
    if what == "count":
        return f"{sum(near)} of {len(gaps)}"
    if what == "outside":
        return tables.span([abs(g) for g, n in zip(gaps, near) if not n], 1)
    raise ValueError(f"what={what!r} is invalid: count or outside")


@GENERATORS.register("gaps")
def gaps(name: str, *pairs: str, value: str | None = None, digits: str = "1", last: str = "1",
         grid: str | None = None, sep: str = "-") -> str:
    """The lowest and highest of A's mean minus B's (means over seeds), over every A:B pair and column (or some
    columns, value=100,200): "4.6-7.5" (sep=to: "4.6 to 7.5")."""
    means = tables.column_means(_final(_sweep(name, grid), "accuracy", value, last))
    d = []
    for pair in pairs:
        a, b = pair.split(":")
        d += [m - means[(b, v)] for (k, v), m in means.items() if k == a and (b, v) in means]
    text = tables.span(d, int(digits))
    return text if sep == "-" else text.replace("-", f" {sep} ", 1) if not text.startswith("-") else \
        "-" + text[1:].replace("-", f" {sep} ", 1)


@GENERATORS.register("row-range")
def row_range(name: str, *rows: str, digits: str = "1", last: str = "1", value: str | None = None,
              grid: str | None = None) -> str:
    """The lowest and highest column mean (over seeds) of the rows (or at one column, value=): "52.8-64.8"."""
    means = [m for (k, _), m in tables.column_means(_final(_sweep(name, grid), "accuracy", value, last)).items()
             if k in rows]
    return tables.span(means, int(digits))
