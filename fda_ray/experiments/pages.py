"""Results pages whose numbers come from the trial records: generated blocks in Markdown.

A page marks every generated part with an HTML comment that names a generator and its arguments, and closes it:

    <!-- records: table fmnist-ablation -->
    | method | noise 0.2 | ...
    <!-- /records -->

or, inside a sentence, one number: `above FedDA by <!-- records: gap-range fmnist-ablation fedda -->1.3 to 19.1
<!-- /records --> points`. Markdown renders the comments as nothing. The arguments name a sweep directory under
docs/results (its trials/ records and the `Command:` line of its summary.md, which fixes the grid, the profile, the
rows and the values) and the generator's own words.

    python -m fda_ray.pages                 # rewrite every block of every page from the records
    python -m fda_ray.pages --check         # list the blocks whose text differs from the records; exit 1 if any

tests/test_pages.py runs the check on every committed page, so a typed number that disagrees with its records
fails the suite. The generators are pure functions of the records (GENERATORS, by name); the statistics are
fda_ray.experiments.tables'. A spec word `key=value` is a keyword argument (`cell conditions oracle 0 digits=1`);
a spec cannot hold ">" (the block pattern stops there), so column labels with arrows are the generators' own.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from fda_ray.core.registry import Registry
from fda_ray.experiments import tables

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
PAGES = ("README.md", "docs/*.md", "docs/results/*.md")  # where blocks may be, relative to the repository
FENCE = re.compile(r"(^```.*?^```[^\n]*$)", re.S | re.M)  # fenced code blocks, kept whole by split
BLOCK = re.compile(r"<!-- records: (?P<spec>[^\n]*?) -->(?P<body>.*?)<!-- /records -->", re.S)


# ---------------------------------------------------------------- a sweep directory's records

@dataclass(frozen=True)
class Sweep:
    """What a results directory's summary.md command planned, and its finished rows (sweep.collect's)."""

    name: str
    grid: object  # tuning.grids.Grid
    profile: str
    row_keys: tuple[str, ...]
    values: tuple[float, ...]
    rows: tuple[dict, ...]


def command_of(directory: Path) -> str:
    """The `Command:` line of a sweep directory's summary.md."""
    for line in (directory / "summary.md").read_text().splitlines():
        if line.startswith("Command: `"):
            return line[len("Command: `"):line.rindex("`")]
    raise ValueError(f"dir={str(directory)!r} is invalid: its summary.md has no 'Command:' line")


@lru_cache(maxsize=None)
def load_sweep(name: str) -> Sweep:
    """docs/results/<name>: the trials its command planned (with that command's rows and values), their rows."""
    from fda_ray.experiments.sweep import collect, config_fields, parser
    from fda_ray.experiments.trials import plan
    from tuning.grids import GRIDS

    directory = RESULTS / name
    argv = shlex.split(command_of(directory))
    argv = argv[argv.index("fda_ray.sweep") + 1:]
    a = parser().parse_args(argv)
    if a.grid is None:
        raise ValueError(f"dir={name!r} is invalid: its command runs a search, not a grid")
    grid = GRIDS[a.grid]
    methods = a.methods.split(",") if a.methods else None
    values = [float(v) for v in a.values.split(",")] if a.values else None
    trials = plan(grid, a.profile, rows=methods, values=values, seeds=a.seeds, overrides=config_fields(a))
    planned = {t.row for t in trials}
    row_keys = tuple(r.key for r in grid.rows if r.key in planned)
    cols = tuple(v for v in grid.values if any(t.value == v or v in t.values for t in trials))
    rows, _ = collect(trials, grid, directory / "trials")
    return Sweep(name, grid, a.profile, row_keys, cols, tuple(rows))


@lru_cache(maxsize=None)
def load_found(name: str, grid_name: str) -> Sweep:
    """docs/results/<name>: every finished trial recorded under its trials/ (whatever command ran it, every seed
    found; a directory without a summary.md, or one that later launches added seeds to), read as grid
    `grid_name`'s trials. The rows and columns are the grid's that have a finished trial."""
    from fda_ray.experiments.sweep import collect
    from fda_ray.experiments.trials import Trial
    from tuning.grids import GRIDS

    grid = GRIDS[grid_name]
    records = RESULTS / name / "trials"
    trials = [Trial.from_dict(json.loads((rec / "trial.json").read_text())) for rec in sorted(records.iterdir())
              if (rec / "trial.json").is_file()]
    rows, _ = collect(trials, grid, records)
    if not rows:
        raise ValueError(f"dir={name!r} is invalid: no finished trial under docs/results/{name}/trials")
    row_keys = tuple(r.key for r in grid.rows if any(x["row"] == r.key for x in rows))
    values = tuple(v for v in grid.values if any(x["grid_value"] == v for x in rows))
    return Sweep(name, grid, "", row_keys, values, tuple(rows))


def _sweep(name: str, grid: str | None = None) -> Sweep:
    """load_sweep(name), or with a grid name every trial found there (load_found)."""
    return load_found(name, grid) if grid else load_sweep(name)


# ---------------------------------------------------------------- generators

GENERATORS: Registry[Callable[..., str]] = Registry("generator")


@GENERATORS.register("table")
def summary_table(name: str) -> str:
    """The sweep's own main table (summary.md's first: final accuracy, ours / paper, mean ± std over seeds)."""
    from fda_ray.experiments.sweep import summarize

    s = load_sweep(name)
    text, _ = summarize(list(s.rows), [], s.grid, s.profile, s.row_keys, s.values, "")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method |"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


@GENERATORS.register("ci-table")
def ci_table(name: str, metric: str = "accuracy") -> str:
    """Per row and column: the final round's `metric` (%) as mean ± the 95 % confidence half-width over the seeds
    (tables.mean_ci), an Avg. column (the mean of the columns' means) when every column has runs, the paper's
    number after a slash where the grid has one (accuracy), and the best mean of each column in bold."""
    s = load_sweep(name)
    final = tables.final(list(s.rows), metric)
    paper = s.grid.paper if metric == "accuracy" else {}
    means = {(k, v): statistics.fmean(final[(k, v)].values()) for k in s.row_keys for v in s.values if (k, v) in final}
    best = {v: max((m for (k, w), m in means.items() if w == v), default=None) for v in s.values}
    avg_col = all((k, v) in means for k in s.row_keys for v in s.values)
    lines = ["| method | " + " | ".join(s.grid.value_label(v) for v in s.values) + (" | Avg. |" if avg_col else " |"),
             "|" + "---|" * (len(s.values) + 1 + avg_col)]
    avgs = {k: statistics.fmean(means[(k, v)] for v in s.values) for k in s.row_keys} if avg_col else {}
    top = max(avgs.values()) if avgs else None
    for k in s.row_keys:
        cells = []
        for v in s.values:
            vals = list(final.get((k, v), {}).values())
            c = tables.short_ci(vals)
            if vals and len(means) > len(s.values) and means[(k, v)] == best[v]:
                c = f"**{c}**"
            p = paper.get(k, {}).get(v)
            cells.append(c + (f" / {p:.1f}" if p is not None else ""))
        if avg_col:
            a = f"{avgs[k]:.1f}"
            cells.append(f"**{a}**" if avgs[k] == top else a)
        lines.append(f"| {s.grid.row(k).label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@GENERATORS.register("paired")
def paired(name: str, ref: str, other: str, metric: str = "accuracy") -> str:
    """`ref` minus `other`, paired by (column, seed) over the sweep: "+1.6 points, higher in 13 of 15"."""
    s = load_sweep(name)
    d = tables.paired_differences(tables.final(list(s.rows), metric), ref, other, s.values)
    if not d:
        raise ValueError(f"paired: no (column, seed) has both {ref!r} and {other!r} in {name!r}")
    return f"{statistics.fmean(d):+.1f} points, higher in {sum(x > 0 for x in d)} of {len(d)}"


@GENERATORS.register("gap-range")
def gap_range(name: str, base: str, *rows: str) -> str:
    """The smallest and largest difference, over the columns, between each of `rows` (default: every other row)
    and `base` (means over seeds): "1.3 to 19.1"."""
    s = load_sweep(name)
    final = tables.final(list(s.rows), "accuracy")
    mean = {kv: statistics.fmean(x.values()) for kv, x in final.items()}
    others = rows or tuple(k for k in s.row_keys if k != base)
    gaps = [mean[(k, v)] - mean[(base, v)] for k in others for v in s.values if (k, v) in mean and (base, v) in mean]
    return f"{min(gaps):.1f} to {max(gaps):.1f}"


@GENERATORS.register("build")
def build_note(*names: str) -> str:
    """Which build recorded each sweep's or search's trials (fda_ray.core.build), or that it is unknown (records
    made before builds were kept)."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.sweep import builds_line

    by: dict[str, list[str]] = {}  # what recorded them -> the directories
    for name in names:
        found, text = builds_line(storage_path(str(RESULTS / name / "trials")))
        if not found:
            raise ValueError(f"build: {name!r} has no finished trial under docs/results/{name}/trials")
        by.setdefault(text.strip().removeprefix("Recorded by ").rstrip("."), []).append(f"`{name}`")
    parts = [f"{', '.join(dirs)}: {what}" + (" (their records predate build recording: a rerun on another build "
                                               "may move cells by points)" if what == "an unknown build" else "")
             for what, dirs in by.items()]
    return "Build. " + "; ".join(parts) + "."


# ---------------------------------------------------------------- generators for the seed pages' tables and prose
#
# Options are `key=value` words: metric=auc (default accuracy), value=0.4 (one grid column; default every column),
# digits=N. Rounds are counted from 1 here (round N is the N-th recorded round: the rows' `round` + 1), as the
# seed 000/002 pages count them; the final round is what tables.final takes.

# The published 95 % half-widths that the grids do not carry (tuning/paper.py keeps them as comments), by grid,
# metric and row: seed 000 Table 2, CheXpert column (the `conditions` grid's paper column).
PAPER_HALF_WIDTHS: dict[str, dict[str, dict[str, float]]] = {
    "conditions": {
        "accuracy": {"fedavg": 2.44, "fedavg_finetune": 0.77, "fedavg_finetune_auxinfo": 2.11,
                     "fedavg_finetune_gp": 2.27, "fedavg_finetune_auxinfo_gp": 1.17, "oracle": 1.27},
        "auc": {"fedavg": 3.77, "fedavg_finetune": 2.92, "fedavg_finetune_auxinfo": 4.08, "fedavg_finetune_gp": 2.17,
                "fedavg_finetune_auxinfo_gp": 2.28, "oracle": 1.15}},
}
UPPER_BOUNDS = ("oracle",)  # rows never set in bold as "the best" (they see the target's labels in full)


def _final(s: Sweep, metric: str, value: str | None = None,
           last: str | int = 1) -> dict[tuple[str, float], dict[int, float]]:
    final = tables.final(list(s.rows), metric, int(last))
    keep = None if value is None else {float(x) for x in str(value).split(",")}  # one value or several: "0,1"
    return {kv: x for kv, x in final.items() if keep is None or kv[1] in keep}


def _runs(s: Sweep, metric: str, rows: tuple[str, ...], value: str | None = None) -> dict[tuple, dict[int, float]]:
    runs = tables.runs(list(s.rows), metric)
    keep = None if value is None else {float(x) for x in str(value).split(",")}  # one value or several: "0.4,0.6"
    picked = {k: r for k, r in runs.items() if k[0] in rows and (keep is None or k[1] in keep)}
    if not picked:
        raise ValueError(f"{s.name!r} has no run of {', '.join(rows)}" + (f" at {value}" if value else ""))
    return picked


def _epoch(s: Sweep, run: tuple[str, float, int], round_: int) -> int:
    """A recorded round (from 0) of a Finetune_Offline run as its fine-tuning epoch, counted from 1: the rounds of
    phase "finetune" follow the Source Only rounds (recorded in some sweeps, not in others)."""
    k, v, sd = run
    first = [r["round"] for r in s.rows if r["row"] == k and r["grid_value"] == v and int(r["seed"]) == sd
             and r.get("phase") == "finetune"]
    if not first:
        raise ValueError(f"{s.name!r}: the run {k!r} at {v}, seed {sd}, has no fine-tuning epoch")
    return round_ - min(first) + 1


def _two(cell: tuple[float, float, float] | None, std: bool = False) -> str:
    if cell is None:
        return "-"
    mean, half, sd = cell
    return f"{mean:.2f} ± {half:.2f}" + (f" (std {sd:.2f})" if std else "")


def _labelled(pairs: tuple[str, ...]) -> list[tuple[str, str]]:
    """ROW:LABEL words -> [(row, label)]."""
    bad = [p for p in pairs if ":" not in p]
    if bad:
        raise ValueError(f"{bad[0]!r} is invalid: a row is named ROW:LABEL")
    return [tuple(p.split(":", 1)) for p in pairs]


@GENERATORS.register("acc-auc-table")
def acc_auc_table(name: str, paper_label: str) -> str:
    """A one-column binary-task sweep (seed 000 Table 2): per row, ACC and AUC (%) of the final round as mean ± the
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
    """A one-column sweep (seed 000 Table 6): per row, the final accuracy (%) as mean ± the 95 % half-width (std)
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
    """One line per grid value (seed 000's alpha): for each ROW:LABEL, ACC and AUC (%) of the final round as mean
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


# ---------------------------------------------------------------- claims with their seed spread (issue 38)
# A claim about an ordering or a gap states each mean with its 95 % interval over seeds, and holds for the means:
# `order` raises (and so fails the page's check) when a rerun's records no longer put the rows in the stated order.

def _cell_values(s: Sweep, row: str, value: str, metric: str = "accuracy", last: str = "1") -> list[float]:
    x = _final(s, metric, value, last).get((row, float(value)), {})
    if not x:
        raise ValueError(f"{s.name!r} has no final round of {row!r} at {value}")
    return [x[k] for k in sorted(x)]


def _with_ci(values: list[float], digits: int) -> str:
    """"69.1 ± 0.8" (mean ± 95 % half-width) for 2+ seeds, "69.1 (one seed)" for one."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (one seed)"
    mean, half, _ = tables.mean_ci(values)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


@GENERATORS.register("cell-ci")
def cell_ci(name: str, row: str, value: str, metric: str = "accuracy", digits: str = "1", last: str = "1",
            grid: str | None = None) -> str:
    """One cell's final number (%) as mean ± the 95 % confidence half-width over its seeds: "69.1 ± 0.8" (last=5:
    each seed's mean of its last 5 rounds, 004's DomainBed metric)."""
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
    if len(d) < 2:
        raise ValueError(f"diff-ci: {name!r} has {len(d)} (column, seed) pair(s) of {a!r} and {b!r}; an interval "
                         "needs 2 or more")
    mean, half, _ = tables.mean_ci(d)
    if not mean > 0:
        raise ValueError(f"diff-ci: in {name!r}, {a!r} minus {b!r} is {mean:.2f} on average, not positive")
    _check_spread(spread, mean - half, f"{name!r}: {a!r} minus {b!r}")
    n = int(digits)
    return (f"{mean:+.{n}f} points (95 % interval {mean - half:+.{n}f} to {mean + half:+.{n}f}; higher in "
            f"{sum(x > 0 for x in d)} of {len(d)})")


def _check_spread(spread: str | None, low: float, what: str) -> None:
    """spread=within: the interval's low end is <= 0; outside: it is above 0."""
    if spread is None:
        return
    if spread not in ("within", "outside"):
        raise ValueError(f"spread={spread!r} is invalid: within or outside")
    if (low > 0) != (spread == "outside"):
        raise ValueError(f"diff-ci: {what} is no longer {spread} the seeds' spread (interval's low end {low:+.2f})")


# ---------------------------------------------------------------- searches: the selections' reruns on fresh seeds

def _search_finals(name: str, keys: list[str]) -> dict[int, float]:
    """{seed: final test accuracy (%)} of the finished trials `keys` of docs/results/<name>/trials."""
    from fda_ray.experiments.trials import read_rows
    from tuning.selection import final_value

    out = {}
    for key in keys:
        rec = RESULTS / name / "trials" / key
        if (rec / "rows.json").is_file():
            v = final_value(read_rows(rec)["rows"], "accuracy")
            if v is not None:
                out[int(json.loads((rec / "trial.json").read_text())["seed"])] = 100 * v
    return out


def _search_cell(name: str, study_or_value: str, rule_or_row: str) -> dict[int, float]:
    """A search's rerun numbers by seed: a study's rule's selection ("fedgp @ noise 0.6" oracle: the trial keys
    selection.json lists), or a reference row at a value (0.6 fedda_auto: its trials under trials/)."""
    selection = json.loads((RESULTS / name / "selection.json").read_text())
    if study_or_value in selection["studies"]:
        keys = selection["studies"][study_or_value].get("reruns", {}).get(rule_or_row)
        if keys is None:
            raise ValueError(f"{name!r}: study {study_or_value!r} has no rerun of rule {rule_or_row!r}")
    else:
        value = float(study_or_value)
        keys = [rec.name for rec in sorted((RESULTS / name / "trials").iterdir()) if (rec / "trial.json").is_file()
                and (t := json.loads((rec / "trial.json").read_text()))["row"] == rule_or_row
                and t["value"] is not None and float(t["value"]) == value]
    got = _search_finals(name, keys)
    if not got:
        raise ValueError(f"{name!r} has no finished rerun of {study_or_value!r} {rule_or_row!r}")
    return got


@GENERATORS.register("search-ci")
def search_ci(name: str, study_or_value: str, rule_or_row: str, digits: str = "2") -> str:
    """A search's number to report: the selected configuration's (or a reference row's) final test accuracy on the
    fresh seeds, mean ± 95 % half-width: `search-ci search-beta "fedgp @ noise 0.6" oracle`, or
    `search-ci search-beta 0.6 fedda_auto`."""
    return _with_ci(list(_search_cell(name, study_or_value, rule_or_row).values()), int(digits))


@GENERATORS.register("search-diff-ci")
def search_diff_ci(name: str, a_study_or_value: str, a: str, b_study_or_value: str, b: str,
                   digits: str = "1", spread: str | None = None) -> str:
    """Search cell A minus cell B (each as search-ci names it), paired by seed, with its 95 % interval."""
    x, y = _search_cell(name, a_study_or_value, a), _search_cell(name, b_study_or_value, b)
    d = [x[k] - y[k] for k in sorted(x) if k in y]
    if len(d) < 2:
        raise ValueError(f"search-diff-ci: {len(d)} seed(s) have both; an interval needs 2 or more")
    mean, half, _ = tables.mean_ci(d)
    if not mean > 0:
        raise ValueError(f"search-diff-ci: in {name!r}, {a} minus {b} is {mean:.2f} on average, not positive")
    _check_spread(spread, mean - half, f"{name!r}: {a} minus {b}")
    n = int(digits)
    return (f"{mean:+.{n}f} points (95 % interval {mean - half:+.{n}f} to {mean + half:+.{n}f}; higher in "
            f"{sum(v > 0 for v in d)} of {len(d)})")


# ---------------------------------------------------------------- single runs' Parquet files (python -m fda_ray --parquet)

@GENERATORS.register("run-file")
def run_file(name: str, file: str, what: str = "final", metric: str = "accuracy", round: str | None = None,
             digits: str = "2") -> str:
    """One run's `metric` (%) from docs/results/<name>/<file>.parquet (every round of a `python -m fda_ray
    --parquet` run): what=final (its last row), peak (its best round) or at (round=N, as the rows number it)."""
    import pyarrow.parquet as pq

    path = RESULTS / name / f"{file}.parquet"
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
    result = json.loads((RESULTS / name / "grid.json").read_text())
    return f"{100 * agreement({'config': result['config'], 'cells': result['cells']})[f'agreement_{kind}']:.0f}"


# ---------------------------------------------------------------- seed 002's tables (FSSDA)

def _mean_of(x) -> float | None:
    """A logged metric as one number: a per-client or per-source list's mean (JSON text or a list), else itself."""
    if isinstance(x, str):
        x = json.loads(x)
    if x is None or (isinstance(x, list) and not x):
        return None
    return statistics.fmean(_mean_of(y) for y in x) if isinstance(x, list) else float(x)


def _last_rounds(s: Sweep) -> dict[tuple[str, float, int], dict]:
    """(row, grid value, seed) -> the trial's last recorded round (its row dict)."""
    out: dict[tuple[str, float, int], dict] = {}
    for r in s.rows:
        k = (r["row"], r["grid_value"], int(r["seed"]))
        if k not in out or r["round"] > out[k]["round"]:
            out[k] = r
    return out


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
    """A one-column sweep (seed 002 Fig. 2): per ROW:LABEL, the final accuracy (%, "mean ± 95 % half-width") and
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


# ---------------------------------------------------------------- seed 004's DomainBed tables

def _mean_std(values: list[float]) -> str:
    """"mean (std)" to two decimals; one value alone; "-" for none (the DomainBed pages' cells)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ({statistics.stdev(values):.2f})"


def _env(s: Sweep, v: float) -> str:
    return s.grid.value_label(v).split(" (")[0]


@GENERATORS.register("domainbed-table")
def domainbed_table(name: str, grid: str | None = None, n: str = "no") -> str:
    """Per row and held-out environment: the final round and the mean of its last 5 rounds (seed 004's metric), each
    "mean (std)" over the seeds, the average of the last-5 means, n=yes the seeds found per cell; on ColoredMNIST
    grids 004 Table 3 (mean (std)), its average, and Table 1 where it differs or Table 3 has no row."""
    from tuning.paper import TABLE1_CMNIST, TABLE3_CMNIST, TABLE3_CMNIST_STD

    s = _sweep(name, grid)
    final, last5 = _final(s, "accuracy"), _final(s, "accuracy", last=5)
    colored = s.grid.dataset.startswith("colored")
    head = (["method"] + [f"{_env(s, v)} final" for v in s.values] + [f"{_env(s, v)} last 5" for v in s.values]
            + ["avg last 5"] + (["n"] if n == "yes" else []))
    if colored:
        head += (["004 T3", "004 T3 avg"] if n == "yes" else [f"004 T3: {' / '.join(_env(s, v) for v in s.values)}",
                                                              "T3 avg"]) + ["004 T1 (if other)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in s.row_keys:
        f = [list(final.get((key, v), {}).values()) for v in s.values]
        l5 = [list(last5.get((key, v), {}).values()) for v in s.values]
        line = [s.grid.row(key).label] + [_mean_std(x) for x in f] + [_mean_std(x) for x in l5]
        line.append(f"{statistics.fmean(statistics.fmean(x) for x in l5):.2f}" if all(l5) else "-")
        if n == "yes":
            line.append("/".join(str(k) for k in sorted({len(x) for x in f})))
        if colored:
            t3, t1 = TABLE3_CMNIST.get(key), TABLE1_CMNIST.get(key)
            line.append(" / ".join(f"{t3[v]:.2f} ({TABLE3_CMNIST_STD[key][v]:.2f})" for v in s.values) if t3 else "-")
            line.append(f"{statistics.fmean(t3.values()):.2f}" if t3 else "-")
            line.append(" / ".join(f"{t1[v]:.2f}" for v in s.values) + f" (avg {statistics.fmean(t1.values()):.2f})"
                        if t1 and t1 != t3 else "-")
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


@GENERATORS.register("domainbed-ranking")
def domainbed_ranking(name: str, grid: str | None = None) -> str:
    """One bullet per held-out environment: the rows ranked by their last-5 mean (mean over seeds), one decimal."""
    s = _sweep(name, grid)
    means = tables.column_means(_final(s, "accuracy", last=5))
    out = []
    for v in s.values:
        ranked = sorted(((means[(k, v)], k) for k in s.row_keys if (k, v) in means), reverse=True)
        out.append(f"- {s.grid.value_label(v)}, by the last-5 mean: "
                   + " > ".join(f"{s.grid.row(k).label} {m:.1f}" for m, k in ranked))
    return "\n".join(out)


@GENERATORS.register("seed-table")
def seed_table(name: str, value: str, *rows: str, grid: str | None = None) -> str:
    """One held-out environment, seed by seed: per ROW:LABEL each seed's last-5 mean and final accuracy ("last 5 /
    final", or one number where they agree in every seed), the last-5 "mean (std)" over seeds, 004 Table 3's."""
    from tuning.paper import TABLE3_CMNIST, TABLE3_CMNIST_STD

    s = _sweep(name, grid)
    v = float(value)
    final, last5 = _final(s, "accuracy", value), _final(s, "accuracy", value, last=5)
    pairs = _labelled(rows)
    seeds = sorted({sd for k, _ in pairs for sd in final.get((k, v), {})})
    lines = [f"| method, {_env(s, v)} held out | " + " | ".join(f"seed {sd}" for sd in seeds)
             + " | mean (std), last 5 | 004 T3 |", "|" + "---|" * (len(seeds) + 3)]
    for k, label in pairs:
        f, l5 = final[(k, v)], last5[(k, v)]
        same = all(f"{f[sd]:.2f}" == f"{l5[sd]:.2f}" for sd in f)
        cells = [f"{l5[sd]:.2f}" if same else f"{l5[sd]:.2f} / {f[sd]:.2f}" if sd in f else "-" for sd in seeds]
        t3 = TABLE3_CMNIST.get(k)
        lines.append(f"| {label} ({'last 5 = final' if same else 'last 5 / final'}) | " + " | ".join(cells)
                     + f" | {_mean_std(list(l5.values()))} | "
                     + (f"{t3[v]:.2f} ({TABLE3_CMNIST_STD[k][v]:.2f})" if t3 else "-") + " |")
    return "\n".join(lines)


@GENERATORS.register("row-mean")
def row_mean(name: str, row: str, last: str = "1", digits: str = "2", grid: str | None = None) -> str:
    """A row's average over the columns of its means over seeds (last=5: of the last-5 means): "82.19"."""
    means = [m for (k, _), m in tables.column_means(_final(_sweep(name, grid), "accuracy", last=last)).items()
             if k == row]
    if not means:
        raise ValueError(f"row-mean: {name!r} has no row {row!r}")
    return f"{statistics.fmean(means):.{int(digits)}f}"


# ---------------------------------------------------------------- one-seed grids beside the paper (seed 004's tables)

def _signed(x: float, digits: int = 2) -> str:
    """+0.11 / −4.48 (a typographic minus, as the pages print a gap to the paper)."""
    return f"{x:+.{digits}f}".replace("-", "\u2212")


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _one_run(s: Sweep, row: str, value: str, seed: str | None = None) -> dict[int, float]:
    """The cell's only run (seed=N: that seed's run)."""
    runs = [r for (k, v, sd), r in tables.runs(list(s.rows)).items()
            if k == row and v == float(value) and (seed is None or sd == int(seed))]
    if len(runs) != 1:
        raise ValueError(f"{s.name!r} has {len(runs)} runs of {row!r} at {value}; one is needed")
    return runs[0]


@GENERATORS.register("paper-table")
def paper_table(name: str, columns: str) -> str:
    """The sweep's own summary table (as `table`: ours / paper, **!** beyond 3 points) with the columns renamed
    ("100 labelled|200|500|1000")."""
    lines = summary_table(name).splitlines()
    labels = columns.split("|")
    if len(labels) != lines[1].count("---") - 1:
        raise ValueError(f"columns={columns!r} is invalid: {name!r}'s table has {lines[1].count('---') - 1} columns")
    return "\n".join(["| method | " + " | ".join(labels) + " |", *lines[1:]])


@GENERATORS.register("rise")
def rise(name: str, row: str, digits: str = "1") -> str:
    """A row's mean at the sweep's last column minus at its first (columns in the grid's order): "5.5"."""
    s = load_sweep(name)
    means = tables.column_means(_final(s, "accuracy"))
    return f"{means[(row, s.values[-1])] - means[(row, s.values[0])]:.{int(digits)}f}"


@GENERATORS.register("diffs")
def diffs(name: str, a: str, b: str, digits: str = "1", sign: str = "no") -> str:
    """Row a's mean minus row b's, column by column in the grid's order: "7.4, 7.2, 8.7 and 9.5" (sign=yes:
    "+0.3, −0.2, ...")."""
    s = load_sweep(name)
    means = tables.column_means(_final(s, "accuracy"))
    d = [means[(a, v)] - means[(b, v)] for v in s.values if (a, v) in means and (b, v) in means]
    return _and([_signed(x, int(digits)) if sign == "yes" else f"{x:.{int(digits)}f}" for x in d])


@GENERATORS.register("near-paper")
def near_paper(name: str, *rows: str, within: str = "3") -> str:
    """In how many cells (of the rows, default all) our mean is within `within` points of the paper's: "13 of 16"."""
    s = load_sweep(name)
    means = tables.column_means(_final(s, "accuracy"))
    gaps = [m - s.grid.paper[k][v] for (k, v), m in means.items()
            if v in s.grid.paper.get(k, {}) and (not rows or k in rows)]
    return f"{sum(abs(g) <= float(within) for g in gaps)} of {len(gaps)}"


@GENERATORS.register("paper-gap")
def paper_gap(name: str, row: str, value: str, digits: str = "2") -> str:
    """One cell's mean minus the paper's, signed: "−4.48"."""
    s = load_sweep(name)
    m = tables.column_means(_final(s, "accuracy"))[(row, float(value))]
    return _signed(m - s.grid.paper[row][float(value)], int(digits))


@GENERATORS.register("peak")
def peak(name: str, row: str, value: str, what: str = "value", digits: str = "1", seed: str | None = None) -> str:
    """A one-seed cell's best round (seed=N: that seed's run in a cell of several): what=value its accuracy (%),
    what=round its round counted from 1 (the warm-up rounds included: "after round 7"), what=epoch its
    fine-tuning epoch (from 1: _epoch; "after epoch 20")."""
    s = load_sweep(name)
    run = _one_run(s, row, value, seed)
    r, x = tables.peak(run)
    if what == "round":
        return str(r + 1)
    if what == "epoch":
        sd = next(sd for (k, v, sd) in tables.runs(list(s.rows))
                  if k == row and v == float(value) and (seed is None or sd == int(seed)))
        return str(_epoch(s, (row, float(value), sd), r))
    if what == "value":
        return f"{x:.{int(digits)}f}"
    raise ValueError(f"what={what!r} is invalid: value, round or epoch")


@GENERATORS.register("tail-range")
def tail_range(name: str, row: str, value: str, n: str = "10", digits: str = "1", skip: str = "0") -> str:
    """A one-seed cell's lowest and highest accuracy (%) over its last n rounds: "66.0-68.2" (skip=1: the n rounds
    before its last one)."""
    run = _one_run(load_sweep(name), row, value)
    keys = sorted(run)[:len(run) - int(skip)]
    return tables.span([run[k] for k in keys[-int(n):]], int(digits))


# ---------------------------------------------------------------- the Fashion-MNIST grids' prose (noise, label shift,
# source classes): one cell's seeds, one run's rounds, a logged estimate's mean over rounds

def _seed_runs(s: Sweep, row: str, value: str, metric: str = "accuracy") -> dict[int, dict[int, float]]:
    """seed -> {round: metric (%)} of one cell."""
    runs = {sd: r for (k, v, sd), r in tables.runs(list(s.rows), metric).items() if k == row and v == float(value)}
    if not runs:
        raise ValueError(f"{s.name!r} has no run of {row!r} at {value}")
    return runs


@GENERATORS.register("seed-list")
def seed_list(name: str, row: str, value: str, what: str = "final", metric: str = "accuracy", digits: str = "2",
              join: str = "comma") -> str:
    """One cell seed by seed: what=final each seed's final number (%), what=peak each seed's best round's:
    "11.67, 16.40, 16.56" (join=and: "84.33, 80.33 and 79.00"); what=spread the highest final minus the lowest."""
    runs = _seed_runs(load_sweep(name), row, value, metric)
    if what == "spread":
        last = [r[max(r)] for r in runs.values()]
        return f"{max(last) - min(last):.{int(digits)}f}"
    if what not in ("final", "peak"):
        raise ValueError(f"what={what!r} is invalid: final, peak or spread")
    xs = [f"{(r[max(r)] if what == 'final' else tables.peak(r)[1]):.{int(digits)}f}" for _, r in sorted(runs.items())]
    return _and(xs) if join == "and" else ", ".join(xs)


def _cell_rows(s: Sweep, row: str, value: str, seed: str | None) -> list[dict]:
    """The recorded rounds of one run (seed=N; without it, the cell's only seed), in round order."""
    rows = [r for r in s.rows if r["row"] == row and r["grid_value"] == float(value)]
    seeds = sorted({int(r["seed"]) for r in rows})
    if seed is None and len(seeds) != 1:
        raise ValueError(f"{s.name!r} has {len(seeds)} seeds of {row!r} at {value}; name one with seed=")
    pick = seeds[0] if seed is None else int(seed)
    out = sorted((r for r in rows if int(r["seed"]) == pick), key=lambda r: r["round"])
    if not out:
        raise ValueError(f"{s.name!r} has no run of {row!r} at {value}, seed {seed}")
    return out


@GENERATORS.register("at-round")
def at_round(name: str, row: str, value: str, round: str, metric: str = "accuracy", seed: str | None = None,
             scale: str = "100", digits: str = "1", group: str = "no") -> str:
    """One run's logged metric (times `scale`) at round N counted from 1 (the warm-up rounds included; round=first:
    its first recorded round, a fine-tuning run's first epoch): "41.6" after round 3; group=yes spaces the
    thousands ("11 795")."""
    rows = _cell_rows(load_sweep(name), row, value, seed)
    if round == "first":
        r = rows[0]
    else:
        r = next((x for x in rows if x["round"] == int(round) - 1), None)
        if r is None:
            raise ValueError(f"at-round: {name!r} has no round {round} of {row!r} at {value}")
    x = float(scale) * float(r[metric])
    return f"{x:,.{int(digits)}f}".replace(",", " ") if group == "yes" else f"{x:.{int(digits)}f}"


def _run_mean(s: Sweep, metric: str, row: str, value: float, seed: str | None, phase: str) -> float:
    xs = [_mean_of(r.get(metric)) for r in _cell_rows(s, row, str(value), seed) if r.get("phase") == phase]
    xs = [x for x in xs if x is not None]
    if not xs:
        raise ValueError(f"{s.name!r} logs no {metric!r} for {row!r} at {value} in phase {phase!r}")
    return statistics.fmean(xs)


@GENERATORS.register("run-mean")
def run_mean(name: str, metric: str, row: str, value: str, seed: str | None = None, phase: str = "main",
             digits: str = "4") -> str:
    """A logged metric of one run (a list, e.g. per source: its mean) averaged over the run's rounds of `phase`:
    FedDA_Auto's mean beta_i over the main rounds and the sources, "0.0377"."""
    return f"{_run_mean(load_sweep(name), metric, row, float(value), seed, phase):.{int(digits)}f}"


@GENERATORS.register("run-mean-range")
def run_mean_range(name: str, metric: str, row: str, seed: str | None = None, phase: str = "main",
                   digits: str = "3") -> str:
    """run-mean's lowest and highest over the sweep's columns: "0.029-0.044"."""
    s = load_sweep(name)
    return tables.span([_run_mean(s, metric, row, v, seed, phase) for v in s.values], int(digits))


@GENERATORS.register("paper-gap-max")
def paper_gap_max(name: str, *rows: str, value: str | None = None, digits: str = "2", sign: str = "yes") -> str:
    """Of the rows' cells (default: every row's; value=: some columns) with a paper number, the gap to the paper
    (our mean minus the paper's) largest in size, signed ("+1.44", "−0.91"; sign=no: its size, "0.91")."""
    s = load_sweep(name)
    gaps = [m - s.grid.paper[k][v] for (k, v), m in tables.column_means(_final(s, "accuracy", value)).items()
            if v in s.grid.paper.get(k, {}) and (not rows or k in rows)]
    if not gaps:
        raise ValueError(f"paper-gap-max: {name!r} has no cell with a paper number for {', '.join(rows) or 'any row'}")
    g = max(gaps, key=abs)
    return _signed(g, int(digits)) if sign == "yes" else f"{abs(g):.{int(digits)}f}"


@GENERATORS.register("tail-list")
def tail_list(name: str, row: str, value: str, n: str = "10", digits: str = "1") -> str:
    """A one-seed cell's accuracy (%) in each of its last n rounds, in order: "57.9, 47.1, 63.3"."""
    run = _one_run(load_sweep(name), row, value)
    return ", ".join(f"{run[k]:.{int(digits)}f}" for k in sorted(run)[-int(n):])


@GENERATORS.register("tail-width")
def tail_width(name: str, *rows: str, value: str | None = None, n: str = "10", digits: str = "1") -> str:
    """Over the rows' runs (value=: some columns), the largest highest-minus-lowest accuracy (%) within a run's last
    n rounds: how far the end of a run still moves ("0.9")."""
    runs = _runs(load_sweep(name), "accuracy", rows, value).values()
    widths = [max(x) - min(x) for x in ([r[k] for k in sorted(r)[-int(n):]] for r in runs)]
    return f"{max(widths):.{int(digits)}f}"


@GENERATORS.register("reseeded-table")
def reseeded_table(before: str, *after: str, within: str = "3", digits: str = "1") -> str:
    """Cells of `before` rerun with more seeds in the sweeps `after` (seed 004 Table 10's one-seed gaps): per cell,
    the number the old table had (its seed 0), the rerun's seed 0, the rerun's mean ± 95 % half-width over its
    seeds, the paper's number, the gap of the mean, and whether the paper's number lies inside the interval."""
    old = _final(load_sweep(before), "accuracy")
    n = int(digits)
    lines = ["| method | column | old table (seed 0) | rerun, seed 0 | rerun, mean ± 95 % | seeds | paper | gap | "
             "paper inside the interval |", "|---|---|---|---|---|---|---|---|---|"]
    for name in after:
        s = load_sweep(name)
        final = _final(s, "accuracy")
        for k in s.row_keys:
            for v in s.values:
                x = final.get((k, v))
                paper = s.grid.paper.get(k, {}).get(v)
                if not x or paper is None:
                    continue
                vals = [x[sd] for sd in sorted(x)]
                mean, half, _ = tables.mean_ci(vals) if len(vals) > 1 else (vals[0], float("nan"), 0.0)
                gap = mean - paper
                flag = " **!**" if abs(gap) > float(within) else ""
                inside = "-" if len(vals) < 2 else "yes" if abs(gap) <= half else "no"
                was = old.get((k, v), {}).get(0)
                lines.append(f"| {s.grid.row(k).label} | {s.grid.value_label(v)} | "
                             + (f"{was:.{n}f}" if was is not None else "-") + " | "
                             + (f"{x[0]:.{n}f}" if 0 in x else "-") + f" | {_with_ci(vals, n)} | {len(vals)} | "
                             f"{paper:.{n}f} | {_signed(gap, n)}{flag} | {inside} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- seed 003 (FedWCA): its logged per-client metrics

def _fedwca_rounds(s: Sweep, rows: tuple[str, ...], metric: str):
    """(row, value, seed, round row) for every round of the rows' trials that logged `metric`."""
    for r in s.rows:
        if r["row"] in rows and r.get(metric) is not None:
            yield r


@GENERATORS.register("fedwca-beta")
def fedwca_beta(name: str, *rows: str, grid: str | None = None) -> str:
    """Eq. 3's beta_1 (the weight of the soft model f_bar in the initial model): per round the mean over the
    clients, its lowest and highest over every round of the rows' runs, and its mean: "0.40-0.87, 0.52 on
    average"."""
    xs = [statistics.fmean(float(b[1]) for b in _as_list(r["beta"]))
          for r in _fedwca_rounds(_sweep(name, grid), rows, "beta")]
    return f"{min(xs):.2f}-{max(xs):.2f}, {statistics.fmean(xs):.2f} on average"


@GENERATORS.register("fedwca-alpha")
def fedwca_alpha(name: str, row: str, grid: str | None = None) -> str:
    """Eq. 1's alpha_k over the clients and rounds of a row's runs: the mean largest weight, and how often it is
    on the client's own cluster: "0.66, on its own cluster 65 % of the time"."""
    top, own = [], []
    for r in _fedwca_rounds(_sweep(name, grid), (row,), "alpha"):
        clusters = _as_list(r["clusters"])
        for k, a in enumerate(_as_list(r["alpha"])):
            top.append(max(a))
            own.append(max(range(len(a)), key=a.__getitem__) == clusters[k])
    return f"{statistics.fmean(top):.2f}, on its own cluster {100 * statistics.fmean(own):.0f} % of the time"


@GENERATORS.register("fedwca-domains")
def fedwca_domains(name: str, row: str, value: str, grid: str | None = None) -> str:
    """The last round's accuracy (%) on each target domain (`domain_accuracy`), the mean over seeds, named:
    "clean 73.1, rotate-45 23.7, invert 78.8, edges 70.8"."""
    from tuning.grids import FMNIST5_NAMES

    s = _sweep(name, grid)
    v = float(value)
    last = [r for (k, w, _), r in sorted(_last_rounds(s).items()) if k == row and w == v
            and r.get("domain_accuracy") is not None]
    if not last:
        raise ValueError(f"fedwca-domains: no run of {row!r} at {value} in {name!r}")
    per = [_as_list(r["domain_accuracy"]) for r in last]
    names = [d for i, d in enumerate(FMNIST5_NAMES) if i != int(v)]
    return ", ".join(f"{d} {100 * statistics.fmean(p[i] for p in per):.1f}" for i, d in enumerate(names))


@GENERATORS.register("fedwca-guard")
def fedwca_guard(name: str, *rows: str, grid: str | None = None) -> str:
    """Trap 3's guard: how many clients a round compared raw similarities (`prototype_guard`), lowest and highest
    over the rows' rounds that label with prototypes: "20-32"."""
    xs = [float(r["prototype_guard"]) for r in _fedwca_rounds(_sweep(name, grid), rows, "prototype_guard")]
    return f"{min(xs):.0f}-{max(xs):.0f}"


def _as_list(v):
    """A logged list metric as a list (the parquet path stores it as JSON text)."""
    return json.loads(v) if isinstance(v, str) else v


def _fedwca_last(s: Sweep, row: str, metric: str) -> dict[tuple[str, float, int], dict]:
    """(row, value, seed) -> the last round of each of the row's runs that logged `metric`."""
    return {k: r for k, r in _last_rounds(s).items() if k[0] == row and r.get(metric) is not None}


@GENERATORS.register("moved-table")
def moved_table(after: str, before: str, metric: str = "accuracy", grid: str | None = None) -> str:
    """What changed between two sweeps of one grid (the same rows, columns and seeds under two versions): per row
    and column the mean over seeds of after minus before, paired by seed, and the average over the columns."""
    a, b = _sweep(after, grid), _sweep(before, grid)
    fa, fb = tables.final(list(a.rows), metric), tables.final(list(b.rows), metric)
    lines = ["| method | " + " | ".join(a.grid.value_label(v) for v in a.values) + " | Avg. |",
             "|" + "---|" * (len(a.values) + 2)]
    for k in a.row_keys:
        cells, means = [], []
        for v in a.values:
            now, then = fa.get((k, v), {}), fb.get((k, v), {})
            d = [now[seed] - then[seed] for seed in sorted(now) if seed in then]
            cells.append(f"{statistics.fmean(d):+.1f}" if d else "-")
            if d:
                means.append(statistics.fmean(d))
        avg = f"{statistics.fmean(means):+.1f}" if len(means) == len(a.values) else "-"
        lines.append(f"| {a.grid.row(k).label} | " + " | ".join(cells) + f" | {avg} |")
    return "\n".join(lines)


@GENERATORS.register("moved-share")
def moved_share(after: str, before: str, metric: str = "accuracy", grid: str | None = None) -> str:
    """The largest move of a cell between two sweeps (moved-table's mean paired difference) as a share of the
    cell's 95 % half-width over its seeds in `after`: "0.17" (every cell moved by at most 0.17 of its interval)."""
    a, b = _sweep(after, grid), _sweep(before, grid)
    fa, fb = tables.final(list(a.rows), metric), tables.final(list(b.rows), metric)
    shares = []
    for kv, now in fa.items():
        d = [now[sd] - fb[kv][sd] for sd in sorted(now) if sd in fb.get(kv, {})]
        if d and len(now) > 1:
            shares.append(abs(statistics.fmean(d)) / tables.mean_ci(list(now.values()))[1])
    if not shares:
        raise ValueError(f"moved-share: no cell of {after!r} has seeds paired in {before!r}")
    return f"{max(shares):.2f}"


@GENERATORS.register("fedwca-clusters")
def fedwca_clusters(name: str, row: str = "fedwca", grid: str | None = None) -> str:
    """003 Table 12: FINCH's partition of the clients by source and seed, each cluster written as its clients'
    domains (x count), the number of clusters and the purity (the share of clients whose cluster's most common
    domain is their own)."""
    from collections import Counter

    from tuning.grids import FMNIST5_NAMES

    s = _sweep(name, grid)
    last = _fedwca_last(s, row, "clusters")
    lines = ["| source | seed | clusters (each: its clients' domains) | clusters | purity |", "|---|---|---|---|---|"]
    for (_, v, seed), r in sorted(last.items()):
        targets = [e for e in range(len(FMNIST5_NAMES)) if e != int(v)]
        assign = _as_list(r["clusters"])
        per = len(assign) // len(targets)
        domain = [FMNIST5_NAMES[targets[k // per]] for k in range(len(assign))]
        groups = []
        for c in sorted(set(assign)):
            counts = Counter(d for d, a in zip(domain, assign) if a == c)
            groups.append("{" + ", ".join(f"{d} x{n}" for d, n in counts.items()) + "}")
        lines.append(f"| {s.grid.value_label(v)} | {seed} | {' '.join(groups)} | {r['num_clusters']} | "
                     f"{r['cluster_purity']:.2f} |")
    return "\n".join(lines)


@GENERATORS.register("fedwca-purity")
def fedwca_purity(name: str, row: str = "fedwca", grid: str | None = None) -> str:
    """How well FINCH's partitions recover the domains over a row's runs: "12 of 15 runs have every cluster on one
    domain (purity 1.00), the others 0.81-0.97; 6-11 clusters for 4 domains"."""
    s = _sweep(name, grid)
    last = _fedwca_last(s, row, "cluster_purity")
    purity = [float(r["cluster_purity"]) for r in last.values()]
    sizes = [int(r["num_clusters"]) for r in last.values()]
    pure = sum(p >= 1.0 for p in purity)
    rest = [p for p in purity if p < 1.0]
    domains = len(s.grid.values) - 1
    return (f"{pure} of {len(purity)} runs have every cluster on one domain (purity 1.00)"
            + (f", the others {min(rest):.2f}-{max(rest):.2f}" if rest else "")
            + f"; {min(sizes)}-{max(sizes)} clusters for {domains} domains")


# ---------------------------------------------------------------- one run's curve and logged estimates beside the paper
# (the DomainBed pages' gaps): every generator here takes grid=NAME to read every trial found in a directory without a
# summary.md (load_found), and seed=N for a cell of several seeds. Rounds are counted from 1, the warm-up included.

def _minus(x: float, digits: int) -> str:
    """A number to `digits` decimals with a typographic minus, no plus: "−0.54", "0.31"."""
    return f"{x:.{digits}f}".replace("-", "\u2212")


def _curve(name: str, row: str, value: str, seed: str | None, grid: str | None,
           metric: str = "accuracy") -> list[tuple[int, float]]:
    """One run's (round from 1, metric (%)) in round order: the cell's only seed, or seed=N."""
    rows = _cell_rows(_sweep(name, grid), row, value, seed)
    out = [(int(r["round"]) + 1, 100 * float(r[metric])) for r in rows if r.get(metric) is not None]
    if not out:
        raise ValueError(f"{name!r} logs no {metric!r} for {row!r} at {value}")
    return out


@GENERATORS.register("paper-diff")
def paper_diff(name: str, row: str, value: str, last: str = "5", unit: str = "points", digits: str = "2",
               grid: str | None = None) -> str:
    """One cell's mean over seeds (last=5: of each seed's last-5 mean; last=1: the final round) minus the paper's
    number (the grid's), signed: "−8.55"; unit=std: in units of 004 Table 3's std for that cell ("−10.4"), which
    only Table 3's ColoredMNIST rows carry."""
    s = _sweep(name, grid)
    v = float(value)
    means = tables.column_means(_final(s, "accuracy", value, last))
    if (row, v) not in means or v not in s.grid.paper.get(row, {}):
        raise ValueError(f"paper-diff: {name!r} has no cell of {row!r} at {value} with a paper number")
    gap = means[(row, v)] - s.grid.paper[row][v]
    if unit == "points":
        return _signed(gap, int(digits))
    if unit != "std":
        raise ValueError(f"unit={unit!r} is invalid: points or std")
    from tuning.paper import TABLE3_CMNIST, TABLE3_CMNIST_STD

    if not s.grid.dataset.startswith("colored") or v not in TABLE3_CMNIST_STD.get(row, {}) \
            or TABLE3_CMNIST[row][v] != s.grid.paper[row][v]:
        raise ValueError(f"paper-diff: 004 Table 3 prints no std for {row!r} at {value} on {name!r}'s grid")
    return _signed(gap / TABLE3_CMNIST_STD[row][v], int(digits))


@GENERATORS.register("tail-rise")
def tail_rise(name: str, row: str, value: str, n: str = "10", digits: str = "1", seed: str | None = None,
              grid: str | None = None) -> str:
    """One run's accuracy (%) in its last round minus n rounds before it, signed: "+5.6" (still rising at the end)."""
    curve = _curve(name, row, value, seed, grid)
    if len(curve) <= int(n):
        raise ValueError(f"tail-rise: the run of {row!r} at {value} has {len(curve)} rounds; n={n} needs more")
    return _signed(curve[-1][1] - curve[-1 - int(n)][1], int(digits))


@GENERATORS.register("run-peak")
def run_peak(name: str, row: str, value: str, what: str = "value", digits: str = "1", seed: str | None = None,
             grid: str | None = None) -> str:
    """One run's best round (the first on a tie): what=value its accuracy (%), what=round its round from 1 ("52" of
    a 2 + 50-round run: its last)."""
    curve = _curve(name, row, value, seed, grid)
    best = max(x for _, x in curve)
    at = next(k for k, x in curve if x == best)
    if what == "round":
        return str(at)
    if what == "value":
        return f"{best:.{int(digits)}f}"
    raise ValueError(f"what={what!r} is invalid: value or round")


def _ranges(rounds: list[int]) -> str:
    """[5, 6, 7, 9] -> "5-7, 9"; [] -> "none"."""
    if not rounds:
        return "none"
    parts, start = [], rounds[0]
    for a, b in zip(rounds, rounds[1:] + [None]):
        if b != a + 1:
            parts.append(f"{start}-{a}" if a != start else str(a))
            start = b
    return ", ".join(parts)


@GENERATORS.register("meets-paper")
def meets_paper(name: str, row: str, value: str, within: str = "1", grid: str | None = None) -> str:
    """The rounds (from 1, warm-up included) at which the cell's curve, the mean over its seeds round by round, is
    within `within` points of the paper's final number: where our runs meet it ("3-9, 14"; "none"), and the
    last round's number ("of 52"; a fine-tuning run's rounds follow its Source Only rounds)."""
    s = _sweep(name, grid)
    paper = s.grid.paper.get(row, {}).get(float(value))
    if paper is None:
        raise ValueError(f"meets-paper: {name!r}'s grid has no paper number for {row!r} at {value}")
    runs = [r for (k, v, _), r in sorted(tables.runs(list(s.rows)).items()) if k == row and v == float(value)]
    if not runs:
        raise ValueError(f"meets-paper: {name!r} has no run of {row!r} at {value}")
    rounds = sorted(set.intersection(*(set(r) for r in runs)))
    hits = [k + 1 for k in rounds if abs(statistics.fmean(r[k] for r in runs) - paper) <= float(within)]
    return f"{_ranges(hits)} of {rounds[-1] + 1}"


@GENERATORS.register("near-paper-rounds")
def near_paper_rounds(name: str, row: str, value: str, n: str = "5", within: str = "3", seed: str | None = None,
                      grid: str | None = None) -> str:
    """The rounds (from 1) at which one run's mean accuracy over its last n rounds so far is within `within` points
    of the paper's number (the grid's): where a run cut there would match 004's last-5 metric: "5-46", "30-32, 40",
    "none"."""
    s = _sweep(name, grid)
    paper = s.grid.paper.get(row, {}).get(float(value))
    if paper is None:
        raise ValueError(f"near-paper-rounds: {name!r}'s grid has no paper number for {row!r} at {value}")
    curve = _curve(name, row, value, seed, grid)
    k = int(n)
    hits = [curve[i][0] for i in range(k - 1, len(curve))
            if abs(statistics.fmean(x for _, x in curve[i - k + 1:i + 1]) - paper) <= float(within)]
    return _ranges(hits)


@GENERATORS.register("logged-range")
def logged_range(name: str, metric: str, row: str, value: str, phase: str = "main", last: str | None = None,
                 digits: str = "2", seed: str | None = None, grid: str | None = None) -> str:
    """The lowest and highest of a logged metric (a per-source list: each of its elements) over one run's rounds of
    `phase` (last=N: its last N such rounds): FedDA_Auto's beta_i "0.08-0.14"; "−0.54 to −0.41" where one end is
    negative (a cosine)."""
    rows = [r for r in _cell_rows(_sweep(name, grid), row, value, seed) if r.get("phase") == phase
            and r.get(metric) is not None]
    if last is not None:
        rows = rows[-int(last):]
    xs = [float(x) for r in rows for x in (_as_list(r[metric]) if isinstance(_as_list(r[metric]), list)
                                           else [_as_list(r[metric])])]
    if not xs:
        raise ValueError(f"logged-range: {name!r} logs no {metric!r} for {row!r} at {value} in phase {phase!r}")
    lo, hi, d = min(xs), max(xs), int(digits)
    return f"{_minus(lo, d)} to {_minus(hi, d)}" if lo < 0 else f"{lo:.{d}f}-{hi:.{d}f}"


# ---------------------------------------------------------------- pages

OPTION = re.compile(r"^(?P<key>[a-z_]+)=(?P<value>.*)$", re.S)


def render(spec: str) -> str:
    """A block's text: its generator called with the spec's words; a word `key=value` is a keyword argument."""
    words = shlex.split(spec)
    if not words:
        raise ValueError("a records block names no generator")
    args = [w for w in words[1:] if not OPTION.match(w)]
    kwargs = {m["key"]: m["value"] for m in map(OPTION.match, words[1:]) if m}
    return GENERATORS.get(words[0])(*args, **kwargs)


def rewrite(text: str) -> tuple[str, list[str]]:
    """(the page with every block regenerated, the specs of the blocks whose text changed). A block's body keeps
    the newlines around it: a table block is written on its own lines, an inline one inline."""
    changed: list[str] = []

    def one(m: re.Match) -> str:
        body = m.group("body")
        lead = body[:len(body) - len(body.lstrip("\n"))]
        trail = body[len(body.rstrip("\n")):]
        new = render(m.group("spec"))
        if body.strip("\n") != new:
            changed.append(m.group("spec"))
        return f"<!-- records: {m.group('spec')} -->{lead}{new}{trail}<!-- /records -->"

    # a fenced code block shows the syntax (docs/sweeps-and-searches.md): its example is text, not a block
    parts = FENCE.split(text)
    return "".join(p if i % 2 else BLOCK.sub(one, p) for i, p in enumerate(parts)), changed


def pages(root: Path = ROOT) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fda_ray.pages", description=__doc__.splitlines()[0])
    p.add_argument("pages", nargs="*", help="pages to regenerate (default: README.md, docs/*.md and docs/results/*.md)")
    p.add_argument("--check", action="store_true", help="change nothing; list the blocks that differ, exit 1 if any")
    a = p.parse_args(argv)
    stale = 0
    for page in [Path(x) for x in a.pages] or pages():
        text = page.read_text()
        try:
            new, changed = rewrite(text)
        except (ValueError, KeyError) as e:
            print(f"error: {page}: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
        for spec in changed:
            print(f"{page}: {spec}" + (": differs from the records" if a.check else ": rewritten"))
        stale += len(changed)
        if changed and not a.check:
            page.write_text(new)
    return 1 if a.check and stale else 0


# generators that live beside their subject and register themselves here
from fda_ray.experiments import pages_projection  # noqa: E402,F401  (docs/scaling.md's projection)

if __name__ == "__main__":
    raise SystemExit(main())
