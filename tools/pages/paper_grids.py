"""Generators for one-seed grids beside the paper (Auto-weighted FDA's tables): the summary table renamed, gaps to the paper,
a run's best round and the width of its last rounds."""
from __future__ import annotations

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import _and, _epoch, _final, _one_run, _signed, load_sweep
from tools.pages.summaries import summary_table


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
def near_paper(name: str, *rows: str, within: str = "3", last: str = "1") -> str:
    """In how many cells (of the rows, default all) our mean is within `within` points of the paper's: "13 of 16".
    last=5: the mean of each run's last 5 rounds (Auto-weighted FDA's DomainBed metric), as the DomainBed tables."""
    s = load_sweep(name)
    means = tables.column_means(_final(s, "accuracy", last=last))
    gaps = [m - s.grid.paper[k][v] for (k, v), m in means.items()
            if v in s.grid.paper.get(k, {}) and (not rows or k in rows)]
    return f"{sum(abs(g) <= float(within) for g in gaps)} of {len(gaps)}"


@GENERATORS.register("paper-rows-diff")
def paper_rows_diff(grid: str, a: str, b: str, digits: str = "1") -> str:
    """The paper's own numbers (a built-in grid's table): row a minus row b, averaged over the columns both have
    (the paper's Avg. column's difference): "9.6"."""
    from fda_ray.papers.grids import GRIDS

    paper = GRIDS[grid].paper
    d = [x - paper[b][v] for v, x in paper.get(a, {}).items() if v in paper.get(b, {})]
    if not d:
        raise ValueError(f"paper-rows-diff: grid {grid!r} has no paper column with both {a!r} and {b!r}")
    return f"{sum(d) / len(d):.{int(digits)}f}"


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
def tail_range(name: str, row: str, value: str, n: str = "10", digits: str = "1", skip: str = "0",
              seed: str | None = None) -> str:
    """A one-seed cell's (seed=N: that seed's run's) lowest and highest accuracy (%) over its last n rounds:
    "66.0-68.2" (skip=1: the n rounds before its last one)."""
    run = _one_run(load_sweep(name), row, value, seed)
    keys = sorted(run)[:len(run) - int(skip)]
    return tables.span([run[k] for k in keys[-int(n):]], int(digits))
