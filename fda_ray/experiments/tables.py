"""The statistics results tables print (summary.md, collect, the pages), pure functions of a sweep's rows.

    final_accuracies(rows, last)    (row, grid value) -> {seed: the final round's (or last k rounds') metric (%)}
    scalar(x)                       a round column's number (a list: the mean of its entries)
    final(rows, metric)             (row, grid value) -> {seed: the final round's metric (%)}
    mean_ci(values)                 (mean, the 95 % confidence half-width t_{0.975, n-1} s / sqrt(n), s)
    short_ci(values)                "mean ± half-width" to one decimal: what Healthcare FDA Table 2 prints as "±"
    paired_differences(final, a, b) a's minus b's, paired by (column, seed)
    runs(rows, metric)              (row, grid value, seed) -> {round: metric (%)}: every round of each trial
    mean_curves(runs, value)        row -> [(round, mean over seeds)] at one grid value
    peak(run)                       (round, metric) of a run's best round (the first, on a tie)
    span(values, digits)            "low-high" of some numbers
    column_means(final)             (row, grid value) -> the mean over seeds
"""
from __future__ import annotations

import functools
import json
import math
import statistics
from typing import Any, Iterable, Mapping

def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function I_x(a, b) (modified Lentz; converges
    fast for x < (a + 1) / (a + b + 2))."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom: 1 - I_{df / (df + t^2)}(df / 2, 1 / 2) / 2 for t > 0."""
    tail = _betainc(df / 2, 0.5, df / (df + t * t)) / 2
    return 1 - tail if t > 0 else tail


@functools.lru_cache(maxsize=None)  # (every table cell asks it; a bisection costs ~1 ms)
def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with df degrees of freedom, to float precision (bisection on t_cdf)."""
    if df < 1:
        raise ValueError(f"df={df} is invalid: an integer >= 1")
    lo, hi = 1.9, 13.0  # t975 falls from 12.706 (df 1) to the normal's 1.95996
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if t_cdf(mid, df) < 0.975 else (lo, mid)
    return (lo + hi) / 2


def is_regression(rows: list[dict]) -> bool:
    """Whether `rows` are a regression task's (the synthetic data of Auto-weighted FDA App. B): evaluation logs its
    accuracy as NaN there (fda_ray.train.evaluation; a record's JSON holds it as null), so a table of them is the
    test loss instead: rows with an accuracy column, none of it a finite number, and a loss."""
    accs = [r["accuracy"] for r in rows if "accuracy" in r]
    return bool(accs) and not any(isinstance(a, (int, float)) and math.isfinite(a) for a in accs) and \
        any(isinstance(r.get("loss"), (int, float)) for r in rows)


def final_accuracies(rows: list[dict], last: int = 1, metric: str = "accuracy", scale: float = 100.0
                     ) -> dict[tuple[str, float], dict[int, float]]:
    """(row key, grid value) -> {seed: accuracy (%)}: each trial's last round at each value, or with last=k
    the mean of its last k rounds (Auto-weighted FDA's DomainBed metric: "the average of the last 5 epochs"). A final
    row that evaluates without training (kNN-Per's kNN evaluation) is the trial's number on its own.
    metric: the row column ("auc" for Healthcare FDA's binary tasks; a list-valued one is averaged over its entries);
    scale: 100 for a fraction shown in %, 1 for a number shown as it is (a lambda, a count)."""
    by_trial: dict[tuple[str, float, str], list[dict]] = {}
    for r in rows:
        if r.get(metric) is not None:
            by_trial.setdefault((r["row"], r["grid_value"], r["trial"]), []).append(r)
    out: dict[tuple[str, float], dict[int, float]] = {}
    for (row, value, _), rs in by_trial.items():
        rs.sort(key=lambda r: r["round"])
        tail = rs[-1:] if rs[-1].get("phase") == "knn" else rs[-last:]
        out.setdefault((row, value), {})[int(rs[-1]["seed"])] = scale * statistics.fmean(scalar(r[metric]) for r in tail)
    return out


def scalar(x: Any) -> float:
    """A round column's number: a per-client or per-source list (FSSDA's teacher_accuracy, its devices'
    imitation_lambda_i; a Parquet file keeps such lists as JSON text) is the mean of its entries."""
    if isinstance(x, str):
        x = json.loads(x)
    if isinstance(x, (list, tuple)):
        if not x:
            raise ValueError("an empty list has no mean")
        return statistics.fmean(float(v) for v in x)
    return float(x)


def final(rows: Iterable[dict], metric: str = "accuracy", last: int = 1, scale: float = 100.0
          ) -> dict[tuple[str, float], dict[int, float]]:
    """(row key, grid value) -> {seed: metric (%)} of each trial's last round (the sweep's final_accuracies), or
    with last=k the mean of its last k rounds (Auto-weighted FDA's DomainBed metric, k = 5); scale=1 keeps a number that is
    not a fraction (a lambda, a count) as it is."""
    return final_accuracies(list(rows), last=last, metric=metric, scale=scale)


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """(mean, the 95 % confidence half-width t_{0.975, n-1} s / sqrt(n), s) of n >= 2 values."""
    if len(values) < 2:
        raise ValueError(f"values={values!r} is invalid: a confidence interval needs 2 or more")
    if not all(math.isfinite(v) for v in values):  # a diverged seed (NaN, inf): its mean says so, no spread
        return statistics.fmean(values), math.nan, math.nan  # (statistics.stdev raises on them)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    return mean, t975(len(values) - 1) * sd / math.sqrt(len(values)), sd


def short_ci(values: list[float]) -> str:
    """"mean ± 95 % CI half-width" to one decimal ("-" for none, the value alone for one)."""
    if len(values) < 2:
        return f"{values[0]:.1f}" if values else "-"
    mean, half, _ = mean_ci(values)
    return f"{mean:.1f} ± {half:.1f}"


def paired_differences(final_: Mapping[tuple[str, float], Mapping[int, float]], a: str, b: str,
                       columns: Iterable[float]) -> list[float]:
    """a's minus b's metric for every (column, seed) both have, in column then seed order."""
    out = []
    for v in columns:
        mine, theirs = final_.get((a, v), {}), final_.get((b, v), {})
        out += [mine[s] - theirs[s] for s in sorted(mine) if s in theirs]
    return out


def runs(rows: Iterable[dict], metric: str = "accuracy", scale: float = 100.0
         ) -> dict[tuple[str, float, int], dict[int, float]]:
    """(row key, grid value, seed) -> {round: metric (%)}: every recorded round of each trial (rounds as the rows
    number them, from 0)."""
    out: dict[tuple[str, float, int], dict[int, float]] = {}
    for r in rows:
        if r.get(metric) is not None:
            out.setdefault((r["row"], r["grid_value"], int(r["seed"])), {})[int(r["round"])] = scale * scalar(r[metric])
    return out


def mean_curves(runs_: Mapping[tuple[str, float, int], Mapping[int, float]], value: float
                ) -> dict[str, list[tuple[int, float]]]:
    """row key -> [(round, the mean over seeds)] at one grid value, over the rounds every seed recorded."""
    by_row: dict[str, list[Mapping[int, float]]] = {}
    for (row, v, _), run in sorted(runs_.items()):
        if v == value:
            by_row.setdefault(row, []).append(run)
    out = {}
    for row, seeds in by_row.items():
        rounds = sorted(set.intersection(*(set(s) for s in seeds)))
        out[row] = [(k, statistics.fmean(s[k] for s in seeds)) for k in rounds]
    return out


def peak(run: Mapping[int, float]) -> tuple[int, float]:
    """(round, metric) of a run's best round; the first such round on a tie."""
    best = max(run.values())
    return min(k for k, x in run.items() if x == best), best


def span(values: Iterable[float], digits: int = 1) -> str:
    """"low-high" of some numbers, each to `digits` decimals."""
    values = list(values)
    if not values:
        raise ValueError("span: no values")
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def column_means(final_: Mapping[tuple[str, float], Mapping[int, float]]) -> dict[tuple[str, float], float]:
    """(row key, grid value) -> the mean of its seeds' numbers."""
    return {kv: statistics.fmean(x.values()) for kv, x in final_.items() if x}
