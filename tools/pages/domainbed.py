"""Generators for Auto-weighted FDA's DomainBed tables: per held-out environment, the final round and the mean of the last 5
rounds (Auto-weighted FDA's metric), beside Auto-weighted FDA's Table 3."""
from __future__ import annotations

import statistics

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import Sweep, _final, _labelled, _sweep


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
    """Per row and held-out environment: the final round and the mean of its last 5 rounds (Auto-weighted FDA's metric), each
    "mean (std)" over the seeds, the average of the last-5 means, n=yes the seeds found per cell; on ColoredMNIST
    grids Auto-weighted FDA Table 3 (mean (std)), its average, and Table 1 where it differs or Table 3 has no row."""
    from fda_ray.papers.paper import TABLE1_CMNIST, TABLE3_CMNIST, TABLE3_CMNIST_STD

    s = _sweep(name, grid)
    final, last5 = _final(s, "accuracy"), _final(s, "accuracy", last=5)
    colored = s.grid.dataset.startswith("colored")
    head = (["method"] + [f"{_env(s, v)} final" for v in s.values] + [f"{_env(s, v)} last 5" for v in s.values]
            + ["avg last 5"] + (["n"] if n == "yes" else []))
    if colored:
        head += (["paper T3", "paper T3 avg"] if n == "yes" else [f"paper T3: {' / '.join(_env(s, v) for v in s.values)}",
                                                                  "T3 avg"]) + ["paper T1 (if other)"]
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
            # (the averages are over the environments shown, as ours is: a sweep of some environments so far)
            line.append(f"{statistics.fmean(t3[v] for v in s.values):.2f}" if t3 else "-")
            line.append(" / ".join(f"{t1[v]:.2f}" for v in s.values)
                        + f" (avg {statistics.fmean(t1[v] for v in s.values):.2f})" if t1 and t1 != t3 else "-")
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
    final", or one number where they agree in every seed), the last-5 "mean (std)" over seeds, Auto-weighted FDA Table 3's."""
    from fda_ray.papers.paper import TABLE3_CMNIST, TABLE3_CMNIST_STD

    s = _sweep(name, grid)
    v = float(value)
    final, last5 = _final(s, "accuracy", value), _final(s, "accuracy", value, last=5)
    pairs = _labelled(rows)
    seeds = sorted({sd for k, _ in pairs for sd in final.get((k, v), {})})
    lines = [f"| method, {_env(s, v)} held out | " + " | ".join(f"seed {sd}" for sd in seeds)
             + " | mean (std), last 5 | paper T3 |", "|" + "---|" * (len(seeds) + 3)]
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


@GENERATORS.register("seed-ordering")
def seed_ordering(name: str, grid: str | None = None) -> str:
    """The rows ranked by their mean over seeds of the average of their last-5 means over the held-out environments,
    "mean (sd)" each, joined by ">" where the order holds in every seed and by "~" where some seed reverses it,
    then each reversed pair with its count: "FedDA above FedGP in 2 of 3 seeds"."""
    s = _sweep(name, grid)
    last5 = _final(s, "accuracy", last=5)
    seeds = sorted({sd for cell in last5.values() for sd in cell})
    per = {k: {sd: statistics.fmean(last5[(k, v)][sd] for v in s.values) for sd in seeds}
           for k in s.row_keys if all(sd in last5.get((k, v), {}) for v in s.values for sd in seeds)}
    if len(seeds) < 2 or len(per) < 2:
        raise ValueError(f"seed-ordering: {name!r} needs two seeds and two rows with every held-out environment")
    order = sorted(per, key=lambda k: -statistics.fmean(per[k].values()))
    text, flips = s.grid.row(order[0]).label + f" {statistics.fmean(per[order[0]].values()):.2f} " \
        f"({statistics.stdev(per[order[0]].values()):.2f})", []
    for a, b in zip(order, order[1:]):
        above = sum(per[a][sd] > per[b][sd] for sd in seeds)
        text += (" > " if above == len(seeds) else " ~ ") + s.grid.row(b).label + \
            f" {statistics.fmean(per[b].values()):.2f} ({statistics.stdev(per[b].values()):.2f})"
        if above < len(seeds):
            flips.append(f"{s.grid.row(a).label} above {s.grid.row(b).label} in {above} of {len(seeds)} seeds")
    return text + ("; " + ", ".join(flips) if flips else "; every step holds in every seed")
