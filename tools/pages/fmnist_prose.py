"""Generators for the Fashion-MNIST grids' prose (noise, label shift, source classes): one cell's seeds, one run's
rounds, a logged estimate's mean over rounds."""
from __future__ import annotations

import statistics

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import (
    Sweep, _and, _cell_rows, _final, _mean_of, _one_run, _runs, _signed, _with_ci, load_sweep)


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
    """Cells of `before` rerun with more seeds in the sweeps `after` (Auto-weighted FDA Table 10's one-seed gaps): per cell,
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
