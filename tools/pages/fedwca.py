"""Generators for FedWCA: its logged per-client metrics (Eq. 3's beta, Eq. 1's alpha, the per-domain
accuracy, FINCH's clusters), and how far the cells moved between two sweeps of one grid (moved-table, moved-share)."""
from __future__ import annotations

import statistics

from fda_ray.experiments import tables
from tools.pages.engine import GENERATORS
from tools.pages.records import Sweep, _as_list, _last_rounds, _sweep


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
    from fda_ray.papers.grids import FMNIST5_NAMES

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


def _fedwca_last(s: Sweep, row: str, metric: str) -> dict[tuple[str, float, int], dict]:
    """(row, value, seed) -> the last round of each of the row's runs that logged `metric`."""
    return {k: r for k, r in _last_rounds(s).items() if k[0] == row and r.get(metric) is not None}


def _moves(after: str, before: str, metric: str, grid: str | None):
    """(after's Sweep, after's finals, {(row, value): the mean over seeds of after minus before, paired by seed})
    for the cells with at least one seed in both."""
    a, b = _sweep(after, grid), _sweep(before, grid)
    fa, fb = tables.final(list(a.rows), metric), tables.final(list(b.rows), metric)
    moves = {}
    for kv, now in fa.items():
        d = [now[sd] - fb[kv][sd] for sd in sorted(now) if sd in fb.get(kv, {})]
        if d:
            moves[kv] = statistics.fmean(d)
    return a, fa, moves


@GENERATORS.register("moved-table")
def moved_table(after: str, before: str, metric: str = "accuracy", grid: str | None = None) -> str:
    """What changed between two sweeps of one grid (the same rows, columns and seeds under two versions): per row
    and column the mean over seeds of after minus before, paired by seed, and the average over the columns."""
    a, _, moves = _moves(after, before, metric, grid)
    lines = ["| method | " + " | ".join(a.grid.value_label(v) for v in a.values) + " | Avg. |",
             "|" + "---|" * (len(a.values) + 2)]
    for k in a.row_keys:
        means = [moves[(k, v)] for v in a.values if (k, v) in moves]
        cells = [f"{moves[(k, v)]:+.1f}" if (k, v) in moves else "-" for v in a.values]
        avg = f"{statistics.fmean(means):+.1f}" if len(means) == len(a.values) else "-"
        lines.append(f"| {a.grid.row(k).label} | " + " | ".join(cells) + f" | {avg} |")
    return "\n".join(lines)


@GENERATORS.register("moved-share")
def moved_share(after: str, before: str, metric: str = "accuracy", grid: str | None = None) -> str:
    """The largest move of a cell between two sweeps (moved-table's mean paired difference) as a share of the
    cell's 95 % half-width over its seeds in `after`: "0.17" (every cell moved by at most 0.17 of its interval)."""
    _, fa, moves = _moves(after, before, metric, grid)
    shares = [abs(m) / tables.mean_ci(list(fa[kv].values()))[1] for kv, m in moves.items() if len(fa[kv]) > 1]
    if not shares:
        raise ValueError(f"moved-share: no cell of {after!r} has seeds paired in {before!r}")
    return f"{max(shares):.2f}"


@GENERATORS.register("fedwca-clusters")
def fedwca_clusters(name: str, row: str = "fedwca", grid: str | None = None) -> str:
    """FedWCA Table 12: FINCH's partition of the clients by source and seed, each cluster written as its clients'
    domains (x count), the number of clusters and the purity (the share of clients whose cluster's most common
    domain is their own)."""
    from collections import Counter

    from fda_ray.papers.grids import FMNIST5_NAMES

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
