"""One run's curve and logged estimates beside the paper (the DomainBed pages' gaps).

Every generator here takes grid=NAME to read every trial found in a directory without a summary.md (load_found), and
seed=N for a cell of several seeds. Rounds are counted from 1, the warm-up included.
"""
from __future__ import annotations

import statistics

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import _as_list, _cell_rows, _final, _signed, _sweep


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
    number (the grid's), signed: "−8.55"; unit=std: in units of Auto-weighted FDA Table 3's std for that cell ("−10.4"), which
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
    from fda_ray.papers.paper import TABLE3_CMNIST, TABLE3_CMNIST_STD

    if not s.grid.dataset.startswith("colored") or v not in TABLE3_CMNIST_STD.get(row, {}) \
            or TABLE3_CMNIST[row][v] != s.grid.paper[row][v]:
        raise ValueError(f"paper-diff: Auto-weighted FDA Table 3 prints no std for {row!r} at {value} on {name!r}'s grid")
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
    of the paper's number (the grid's): where a run cut there would match Auto-weighted FDA's last-5 metric: "5-46", "30-32, 40",
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
                 digits: str = "2", seed: str | None = None, grid: str | None = None,
                 significant: str | None = None) -> str:
    """The lowest and highest of a logged metric (a per-source list: each of its elements) over one run's rounds of
    `phase` (last=N: its last N such rounds): FedDA_Auto's beta_i "0.08-0.14"; "−0.54 to −0.41" where one end is
    negative (a cosine); significant=N: N significant digits instead of `digits` decimals ("8.9e-05-0.00031")."""
    rows = [r for r in _cell_rows(_sweep(name, grid), row, value, seed) if r.get("phase") == phase
            and r.get(metric) is not None]
    if last is not None:
        rows = rows[-int(last):]
    xs = [float(x) for r in rows for x in (_as_list(r[metric]) if isinstance(_as_list(r[metric]), list)
                                           else [_as_list(r[metric])])]
    if not xs:
        raise ValueError(f"logged-range: {name!r} logs no {metric!r} for {row!r} at {value} in phase {phase!r}")
    lo, hi, d = min(xs), max(xs), int(digits)
    if significant is not None:
        n = int(significant)
        return f"{lo:.{n}g} to {hi:.{n}g}"
    return f"{_minus(lo, d)} to {_minus(hi, d)}" if lo < 0 else f"{lo:.{d}f}-{hi:.{d}f}"


@GENERATORS.register("paper-gaps")
def paper_gaps(name: str, within: str = "3", n: str = "10", grid: str | None = None) -> str:
    """Every cell whose last-5 mean (the mean over its seeds) is more than `within` points from the paper's number,
    one line each, with what its rounds say of the gap: the paper's number inside the range of the seeds' last-5
    means (seed noise; two seeds or more); the mean curve still moving towards it by `within` points or more over
    its last n rounds (a run stopped while still moving); the rounds at which the mean curve's 5-round mean meets it
    (a run cut there would match); "open" where none of these holds, a gap the rounds do not explain."""
    s = _sweep(name, grid)
    w, k = float(within), int(n)
    last5 = _final(s, "accuracy", last=5)
    runs = tables.runs(list(s.rows))
    lines = ["| method | held out | ours: last-5 mean (seeds) | paper | gap | what the rounds say |",
             "|---|---|---|---|---|---|"]
    for key in s.row_keys:
        for v in s.values:
            paper = s.grid.paper.get(key, {}).get(v)
            seeds = list(last5.get((key, v), {}).values())
            if paper is None or not seeds or abs(statistics.fmean(seeds) - paper) <= w:
                continue
            gap = statistics.fmean(seeds) - paper
            says = []
            if len(seeds) >= 2 and min(seeds) <= paper <= max(seeds):
                says.append(f"the paper's number is inside our seeds' range ({min(seeds):.1f}-{max(seeds):.1f})")
            curve = tables.mean_curves(runs, v).get(key, [])
            xs = [x for _, x in curve]
            if len(xs) > k:
                move = xs[-1] - xs[-1 - k]
                if (gap < 0 and move >= w) or (gap > 0 and move <= -w):
                    says.append(f"still {'rising' if move > 0 else 'falling'} at the end ({_signed(move, 1)} over "
                                f"its last {k} rounds)")
            hits = [curve[i][0] + 1 for i in range(4, len(xs)) if abs(statistics.fmean(xs[i - 4:i + 1]) - paper) <= w]
            if hits:
                says.append(f"its 5-round mean meets it at rounds {_ranges(hits)} of {curve[-1][0] + 1}")
            label = s.grid.value_label(v).split(" (")[0]
            ours = f"{statistics.fmean(seeds):.2f} ({len(seeds)})"
            lines.append(f"| {s.grid.row(key).label} | {label} | {ours} | {paper:.2f} | {_signed(gap, 2)} | "
                         f"{'; '.join(says) or 'open'} |")
    return "\n".join(lines)
