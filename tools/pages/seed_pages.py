"""Generators for the seed pages' tables and prose (Healthcare FDA's and FSSDA's pages).

Options are `key=value` words: metric=auc (default accuracy), value=0.4 (one grid column; default every column),
digits=N. Rounds are counted from 1 here (round N is the N-th recorded round: the rows' `round` + 1), as the
the Healthcare FDA and FSSDA papers pages count them; the final round is what tables.final takes.
"""
from __future__ import annotations

import statistics

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import _epoch, _final, _labelled, _runs, _sweep, load_sweep


# The published 95 % half-widths that the grids do not carry (fda_ray/papers/paper.py keeps them as comments), by grid,
# metric and row: Healthcare FDA Table 2, CheXpert column (the `conditions` grid's paper column).
PAPER_HALF_WIDTHS: dict[str, dict[str, dict[str, float]]] = {
    "conditions": {
        "accuracy": {"fedavg": 2.44, "fedavg_finetune": 0.77, "fedavg_finetune_auxinfo": 2.11,
                     "fedavg_finetune_gp": 2.27, "fedavg_finetune_auxinfo_gp": 1.17, "oracle": 1.27},
        "auc": {"fedavg": 3.77, "fedavg_finetune": 2.92, "fedavg_finetune_auxinfo": 4.08, "fedavg_finetune_gp": 2.17,
                "fedavg_finetune_auxinfo_gp": 2.28, "oracle": 1.15}},
}
UPPER_BOUNDS = ("oracle",)  # rows never set in bold as "the best" (they see the target's labels in full)


def _two(cell: tuple[float, float, float] | None, std: bool = False) -> str:
    if cell is None:
        return "-"
    mean, half, sd = cell
    return f"{mean:.2f} ± {half:.2f}" + (f" (std {sd:.2f})" if std else "")


@GENERATORS.register("acc-auc-table")
def acc_auc_table(name: str, paper_label: str) -> str:
    """A one-column binary-task sweep (Healthcare FDA Table 2): per row, ACC and AUC (%) of the final round as mean ± the
    95 % half-width over seeds to two decimals, each beside the paper's (with its half-width where
    PAPER_HALF_WIDTHS has it); the best federated mean (not an UPPER_BOUNDS row) of each metric in bold."""
    s = load_sweep(name)
    if len(s.values) != 1:
        raise ValueError(f"acc-auc-table: {name!r} has {len(s.values)} columns; one is needed")
    metrics = (("accuracy", "ACC", s.grid.paper), ("auc", "AUC", s.grid.paper_auc))
    cells = {m: {k: tables.mean_ci(list(x.values())) for (k, _), x in _final(s, m).items()} for m, _, _ in metrics}
    best = {m: max(c[0] for k, c in cells[m].items() if k not in UPPER_BOUNDS) for m, _, _ in metrics}
    head = " | ".join(f"{n} ours | {n} paper ({paper_label})" for _, n, _ in metrics)
    lines = [f"| method | {head} |", "|" + "---|" * (1 + 2 * len(metrics))]
    for k in s.row_keys:
        out = []
        for m, _, paper in metrics:
            c = cells[m].get(k)
            ours = _two(c)
            out.append(f"**{ours}**" if c and k not in UPPER_BOUNDS and c[0] == best[m] else ours)
            p = paper.get(k, {}).get(s.values[0])
            half = PAPER_HALF_WIDTHS.get(s.grid.name, {}).get(m, {}).get(k)
            out.append("-" if p is None else f"{p:.2f}" + (f" ± {half:.2f}" if half is not None else ""))
        lines.append(f"| {s.grid.row(k).label} | " + " | ".join(out) + " |")
    return "\n".join(lines)


@GENERATORS.register("std-table")
def std_table(name: str, paper_label: str) -> str:
    """A one-column sweep (Healthcare FDA Table 6): per row, the final accuracy (%) as mean ± the 95 % half-width (std)
    over seeds to two decimals (the best non-UPPER_BOUNDS mean in bold), the paper's, and the mean over seeds of
    each run's best round."""
    s = load_sweep(name)
    if len(s.values) != 1:
        raise ValueError(f"std-table: {name!r} has {len(s.values)} columns; one is needed")
    cells = {k: tables.mean_ci(list(x.values())) for (k, _), x in _final(s, "accuracy").items()}
    best = max(c[0] for k, c in cells.items() if k not in UPPER_BOUNDS)
    lines = [f"| method | ours | paper ({paper_label}) | ours at each run's best round (mean over seeds) |",
             "|---|---|---|---|"]
    for k in s.row_keys:
        c = cells.get(k)
        ours = _two(c)
        if c and k not in UPPER_BOUNDS and c[0] == best:
            ours = f"**{ours}**"
        ours += f" (std {c[2]:.2f})" if c else ""
        p = s.grid.paper.get(k, {}).get(s.values[0])
        peaks = [tables.peak(r)[1] for r in _runs(s, "accuracy", (k,)).values()]
        lines.append(f"| {s.grid.row(k).label} | {ours} | {'-' if p is None else f'{p:.2f}'} | "
                     f"{statistics.fmean(peaks):.2f} |")
    return "\n".join(lines)


@GENERATORS.register("value-table")
def value_table(name: str, variable: str, *rows: str, round: str | None = None) -> str:
    """One line per grid value (Healthcare FDA's alpha): for each ROW:LABEL, ACC and AUC (%) of the final round as mean
    ± the 95 % half-width over seeds; with round=N, the last row's mean AUC at round N (counted from 1)."""
    s = load_sweep(name)
    pairs = _labelled(rows)
    metrics = (("accuracy", "ACC"), ("auc", "AUC"))
    final = {m: _final(s, m) for m, _ in metrics}
    head = [f"{label} {n}" for _, label in pairs for _, n in metrics]
    if round is not None:
        head.append(f"{pairs[-1][1]} AUC at round {int(round)}")
        early = _runs(s, "auc", (pairs[-1][0],))
    lines = [f"| {variable} | " + " | ".join(head) + " |", "|" + "---|" * (1 + len(head))]
    for v in s.values:
        out = [_two(tables.mean_ci(list(final[m][(k, v)].values())) if (k, v) in final[m] else None)
               for k, _ in pairs for m, _ in metrics]
        if round is not None:
            at = [r[int(round) - 1] for (_, w, _), r in early.items() if w == v and int(round) - 1 in r]
            out.append(f"{statistics.fmean(at):.2f}" if at else "-")
        lines.append(f"| {v:g} | " + " | ".join(out) + " |")
    return "\n".join(lines)


@GENERATORS.register("per-seed")
def per_seed(name: str, *rows: str, metrics: str = "accuracy", value: str | None = None) -> str:
    """Each ROW:LABEL's final-round numbers (%) seed by seed, two decimals, metrics joined by " / ":
    "GP 79.90 / 88.60, 80.55 / 86.83, 79.40 / 84.96; AuxInfo GP ..."."""
    s = load_sweep(name)
    names = metrics.split(",")
    finals = {m: _final(s, m, value) for m in names}
    parts = []
    for k, label in _labelled(rows):
        seeds = sorted({sd for (r, _), x in finals[names[0]].items() if r == k for sd in x})
        if not seeds:
            raise ValueError(f"per-seed: {name!r} has no final round of {k!r}")
        cells = [" / ".join(f"{next(x[sd] for (r, _), x in finals[m].items() if r == k and sd in x):.2f}"
                            for m in names) for sd in seeds]
        parts.append(f"{label} " + ", ".join(cells))
    return "; ".join(parts)


@GENERATORS.register("cell")
def cell(name: str, row: str, value: str, metric: str = "accuracy", digits: str = "2", last: str = "1",
         grid: str | None = None, seed: str | None = None) -> str:
    """One cell: the row's final number (%) at a grid value (last=5: the mean of its last 5 rounds), the mean over
    its seeds (seed=N: that seed's alone): "46.37". grid=NAME reads every trial found in the directory (load_found)."""
    x = _final(_sweep(name, grid), metric, value, last).get((row, float(value)), {})
    x = {int(seed): x[int(seed)]} if seed is not None and int(seed) in x else {} if seed is not None else x
    if not x:
        raise ValueError(f"cell: {name!r} has no final round of {row!r} at {value}"
                         + (f", seed {seed}" if seed else ""))
    return f"{statistics.fmean(x.values()):.{int(digits)}f}"


@GENERATORS.register("diff")
def diff(name: str, a: str, b: str, metric: str = "accuracy", value: str | None = None, digits: str = "1",
         last: str = "1", grid: str | None = None) -> str:
    """Row a's mean (over seeds) minus row b's, averaged over the columns both have: "0.3"."""
    means = tables.column_means(_final(_sweep(name, grid), metric, value, last))
    d = [means[(a, v)] - means[(b, v)] for (k, v) in means if k == a and (b, v) in means]
    if not d:
        raise ValueError(f"diff: no column of {name!r} has both {a!r} and {b!r}")
    return f"{statistics.fmean(d):.{int(digits)}f}"


@GENERATORS.register("std")
def std(name: str, row: str, metric: str = "accuracy", value: str | None = None) -> str:
    """The standard deviation over seeds of a row's final number (one column: value=, or the sweep's only one)."""
    cells = [x for (k, _), x in _final(load_sweep(name), metric, value).items() if k == row]
    if len(cells) != 1:
        raise ValueError(f"std: {row!r} has {len(cells)} columns in {name!r}; name one with value=")
    return f"{statistics.stdev(cells[0].values()):.2f}"


@GENERATORS.register("std-range")
def std_range(name: str, *rows: str, metric: str = "accuracy", value: str | None = None, digits: str = "1") -> str:
    """The lowest and highest standard deviation over seeds of the rows' final numbers, over their cells with two or
    more seeds (value=: some columns): "0.6-1.5"."""
    sds = [statistics.stdev(x.values()) for (k, _), x in _final(load_sweep(name), metric, value).items()
           if k in rows and len(x) > 1]
    if not sds:
        raise ValueError(f"std-range: {name!r} has no cell of {', '.join(rows)} with two or more seeds")
    return tables.span(sds, int(digits))


@GENERATORS.register("wins")
def wins(name: str, a: str, b: str, metric: str = "accuracy") -> str:
    """In how many (column, seed) pairs row a's final number is above b's: "3 of 3"."""
    s = load_sweep(name)
    d = tables.paired_differences(_final(s, metric), a, b, s.values)
    return f"{sum(x > 0 for x in d)} of {len(d)}"


@GENERATORS.register("paired-range")
def paired_range(name: str, a: str, b: str, metric: str = "accuracy", digits: str = "2") -> str:
    """The smallest and largest of a's minus b's final numbers, paired by (column, seed): "0.05-0.45"."""
    s = load_sweep(name)
    return tables.span(tables.paired_differences(_final(s, metric), a, b, s.values), int(digits))


@GENERATORS.register("paper-gap-range")
def paper_gap_range(name: str, *rows: str, metric: str = "accuracy", digits: str = "0", last: str = "1",
                    value: str | None = None) -> str:
    """How far the rows' means (default: every row's) are from the paper's, smallest to largest, over every cell
    with a paper number ("4-23"); all must be on the same side of the paper's."""
    s = load_sweep(name)
    paper = s.grid.paper if metric == "accuracy" else s.grid.paper_auc
    gaps = [m - paper[k][v] for (k, v), m in tables.column_means(_final(s, metric, value, last)).items()
            if v in paper.get(k, {}) and (not rows or k in rows)]
    if not gaps or (min(gaps) < 0 < max(gaps)):
        raise ValueError(f"paper-gap-range: {name!r}'s cells are not all on one side of the paper's")
    return tables.span([abs(g) for g in gaps], int(digits))


@GENERATORS.register("final-range")
def final_range(name: str, *rows: str, metric: str = "accuracy", value: str | None = None, digits: str = "1") -> str:
    """The lowest and highest final number (%) over the runs (seeds, columns) of the rows: "74.0-77.5"."""
    return tables.span([r[max(r)] for r in _runs(load_sweep(name), metric, rows, value).values()], int(digits))


@GENERATORS.register("peak-range")
def peak_range(name: str, *rows: str, what: str = "value", metric: str = "accuracy", value: str | None = None,
               digits: str = "1", seed: str | None = None) -> str:
    """Over the runs of the rows, the range of each run's best round: what=value its number (%), what=round its
    round (from 1), what=epoch its fine-tuning epoch (from 1: _epoch), what=drop the best minus the final number.
    seed=N: that seed's runs alone."""
    s = load_sweep(name)
    picked = {k: r for k, r in _runs(s, metric, rows, value).items() if seed is None or k[2] == int(seed)}
    runs = picked.values()
    peaks = [(tables.peak(r), r[max(r)]) for r in runs]
    if what == "round":
        return tables.span([p[0] + 1 for p, _ in peaks], 0)
    if what == "epoch":
        return tables.span([_epoch(s, k, tables.peak(r)[0]) for k, r in picked.items()], 0)
    if what == "drop":
        return tables.span([p[1] - last for p, last in peaks], int(digits))
    if what == "value":
        return tables.span([p[1] for p, _ in peaks], int(digits))
    raise ValueError(f"what={what!r} is invalid: value, round, epoch or drop")


@GENERATORS.register("round-range")
def round_range(name: str, round: str, *rows: str, metric: str = "accuracy", value: str | None = None,
                digits: str = "1") -> str:
    """The lowest and highest number (%) at round N (counted from 1) over the runs of the rows: "82.2-85.5"."""
    at = [r[int(round) - 1] for r in _runs(load_sweep(name), metric, rows, value).values() if int(round) - 1 in r]
    return tables.span(at, int(digits))


@GENERATORS.register("last-best")
def last_best(name: str, *rows: str, metric: str = "accuracy") -> str:
    """In how many of the rows' runs the final round is the best one: "5 of 6"."""
    runs = _runs(load_sweep(name), metric, rows).values()
    return f"{sum(tables.peak(r)[0] == max(r) for r in runs)} of {len(runs)}"


@GENERATORS.register("spread")
def spread(name: str, row: str, metric: str = "accuracy", digits: str = "1") -> str:
    """The highest minus the lowest column mean of a row: how far apart its columns end ("0.3")."""
    means = [m for (k, _), m in tables.column_means(_final(load_sweep(name), metric)).items() if k == row]
    if not means:
        raise ValueError(f"spread: {name!r} has no row {row!r}")
    return f"{max(means) - min(means):.{int(digits)}f}"
