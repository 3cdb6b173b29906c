"""Generators for docs/scaling.md: the projection of the paper reproduction onto 1, 8 and 32 GPUs
(benchmarks.projection), rendered from the committed records like every other generated block.

    <!-- records: projection -->                         the command's whole output (PAGE_ARGS), tables and all
    <!-- records: projection-fact NAME key=value ... --> one number of it, as the output writes it

The page's command line is PAGE_ARGS (docs/scaling.md shows it; tests/test_projection.py runs it). The projection is
computed once (benchmarks.projection.compute, from the repository root) and the facts read its numbers, not its
text; FACTS lists them with their keywords. A fact that states something the prose relies on (`work-max`: the
named grids are the largest; `chain-trial`: the longest chain is one trial) fails with a ValueError when the records
no longer say so, as claims.py's `order` does.
"""
from __future__ import annotations

import inspect
import os
from functools import lru_cache
from typing import Callable

from benchmarks import projection as pj
from tools.pages.engine import GENERATORS
from tools.pages.records import ROOT

# the command line of docs/scaling.md's projection (its fenced block shows it after python -m benchmarks.projection)
PAGE_ARGS = ("--markdown", "--measured-noise-column-s", "101", "--cluster-json", "docs/results/bench-cluster.json")
SETS = {"grids": "all projected grids", "searches": "all projected searches", "all": "grids and searches"}


@lru_cache(maxsize=None)
def page_projection() -> tuple[pj.Projection, bool]:
    """The projection of PAGE_ARGS run from the repository root (its --cluster-json is relative to it), and whether
    they ask for Markdown."""
    kwargs, markdown = pj.arguments(list(PAGE_ARGS))
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        return pj.compute(**kwargs), markdown
    finally:
        os.chdir(here)


@GENERATORS.register("projection")
def projection() -> str:
    """`python -m benchmarks.projection` + PAGE_ARGS: its whole output."""
    p, markdown = page_projection()
    return pj.report(p, markdown)


# ---------------------------------------------------------------- the facts

def _total(p: pj.Projection, set: str, checked: str = "no") -> pj.Projected:
    if set not in SETS:
        raise ValueError(f"set={set!r} is invalid: {', '.join(SETS)}")
    if checked not in ("yes", "no"):
        raise ValueError(f"checked={checked!r} is invalid: yes (the check's totals, the last table) or no")
    totals = p.totals
    if checked == "yes":
        if p.check is None or not p.check.totals:
            raise ValueError("checked=yes: the projection has no check with a measured time")
        totals = p.check.totals
    return next(t for t in totals if t.group.name == SETS[set])


def _row(p: pj.Projection, grid: str | None, search: str | None) -> pj.Projected:
    if (grid is None) == (search is None):
        raise ValueError("name one grid= or one search=")
    rows, name = (p.grid_rows, grid) if grid is not None else (p.search_rows, search)
    for r in rows:
        if r.group.name == name:
            return r
    raise ValueError(f"{'grid' if grid is not None else 'search'}={name!r} is not projected; projected: "
                     f"{', '.join(r.group.name for r in rows)}")


def _check(p: pj.Projection) -> pj.Check:
    if p.check is None or p.check.ratio is None:
        raise ValueError("the projection has no check of the noise grid's 0.4 column against a measured time")
    return p.check


def _factor(p: pj.Projection) -> pj.GpuFactor:
    if p.factor is None:
        raise ValueError("the projection has no CPU->GPU factor (no pair of records)")
    return p.factor


def _spread(p: pj.Projection) -> tuple[int, float, float]:
    s = pj.spread(p.records)
    if s is None:
        raise ValueError("no work was recorded twice")
    return s


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("h") else "s")


def records(p):
    """The trial records read ("Records: N ...")."""
    return str(len(p.records))


def gpu_records(p):
    """The records from a GPU."""
    return str(sum(r.gpu for r in p.records))


def factor(p):
    """F, the CPU->GPU factor."""
    return f"{_factor(p).value:.1f}"


def factor_low(p):
    """The lowest of F's pairs."""
    return f"{_factor(p).low:.1f}"


def factor_high(p):
    """The highest of F's pairs."""
    return f"{_factor(p).high:.1f}"


def factor_models(p):
    """The model(s) of F's pairs."""
    return ", ".join(_factor(p).models)


def factor_pairs(p):
    """The pairs of records F is the median of."""
    return str(_factor(p).pairs)


def overhead(p):
    """The per-trial overhead from --cluster-json: "1.2 s"."""
    return f"{p.overhead:.1f} s"


def spread_sets(p):
    """The sets of 2 or more records of the same work."""
    return str(_spread(p)[0])


def spread_median(p):
    """Slowest over fastest of a set of records of the same work, the median over the sets."""
    return f"{_spread(p)[1]:.2f}"


def spread_max(p):
    """Slowest over fastest of a set of records of the same work, the largest."""
    return f"{_spread(p)[2]:.2f}"


def planned(p, kind: str = "all"):
    """The planned trials: kind=all, grid or search."""
    groups = {"all": p.grids + p.searches, "grid": p.grids, "search": p.searches}
    if kind not in groups:
        raise ValueError(f"kind={kind!r} is invalid: {', '.join(groups)}")
    return str(sum(g.trials for g in groups[kind]))


def projected(p):
    """The planned trials that are projected (a trial shared by two grids counted in each)."""
    return str(p.planned - p.not_projected)


def not_projected(p):
    """The planned trials that are not projected."""
    return str(p.not_projected)


def not_projected_share(p):
    """The not projected trials' share of the planned ones: "60 %"."""
    return f"{100 * p.not_projected / p.planned:.0f} %"


def not_projected_groups(p):
    """The grids and searches not projected, in words: "10 grids", "9 grids and 1 search"."""
    grids = sum(g.reason is not None for g in p.grids)
    searches = sum(g.reason is not None for g in p.searches)
    parts = [_plural(n, w) for n, w in ((grids, "grid"), (searches, "search")) if n]
    return " and ".join(parts) or "no grid"


def trials(p, set: str = "all"):
    """The trials of a set (set=grids, searches, all) run at once, each once."""
    return str(_total(p, set).group.trials)


def makespan(p, gpus: str, set: str = "all", checked: str = "no"):
    """The set's makespan on gpus= GPUs (one of the page's); checked=yes: the check's totals (the last table)."""
    t = _total(p, set, checked)
    if int(gpus) not in t.spans:
        raise ValueError(f"gpus={gpus!r} is invalid: one of {', '.join(map(str, p.gpus))} (the page's --gpus)")
    return pj.fmt_s(t.spans[int(gpus)])


def stop_gpus(p, set: str = "all", checked: str = "no"):
    """The G at which the set stops scaling."""
    return str(_total(p, set, checked).stop.gpus)


def makespan_there(p, set: str = "all", checked: str = "no"):
    """The set's makespan where it stops scaling (its longest chain)."""
    return pj.fmt_s(_total(p, set, checked).stop.makespan)


def slots(p, set: str = "all"):
    """The slots (G x K) where the set stops scaling."""
    return str(_total(p, set).stop.slots)


def sharing(p, set: str = "all"):
    """The set's trials beyond one a slot where it stops scaling (0 when every trial has its own)."""
    s = _total(p, set).stop
    return str(max(0, s.trials - s.slots))


def _chain(p: pj.Projection, set: str) -> tuple[pj.Job, ...]:
    name = _total(p, set).group.name
    return next(c for t, c in zip(p.totals, p.chains) if t.group.name == name)


def chain(p, set: str = "all"):
    """The set's longest chain of trials, as the output names it: "domainbed-rotated: fedrep"."""
    return " -> ".join(j.label for j in _chain(p, set))


def chain_trial(p, set: str = "all"):
    """The set's longest chain, which must be one grid trial, in words: "`domainbed-rotated`'s fedrep (150 rounds, 5
    sources; cpu-scaled/F)"; a ValueError when it is more than one trial."""
    from fda_ray.experiments.trials import plan
    from fda_ray.core.config import RunConfig
    from fda_ray.papers.grids import GRIDS

    jobs = _chain(p, set)
    if len(jobs) != 1:
        raise ValueError(f"chain-trial: the longest chain of {SETS[set]!r} is {len(jobs)} trials: "
                         f"{' -> '.join(j.label for j in jobs)}")
    job = jobs[0]
    grid, row = job.label.split(": ", 1)
    if grid not in GRIDS:
        raise ValueError(f"chain-trial: the longest chain of {SETS[set]!r} is {job.label!r}, not a grid's trial")
    projected = GRIDS.get(grid + pj.TWIN_SUFFIX, GRIDS[grid])  # (a grid on MNIST is projected from its twin's trials)
    trial = next(t for t in plan(projected, "paper") if t.key == job.key)
    cfg = RunConfig(**trial.params).resolved()
    return f"`{grid}`'s {row} ({cfg.rounds} rounds, {_plural(cfg.num_sources, 'source')}; `{job.basis}`)"


def work(p, grid: str | None = None, search: str | None = None):
    """A projected grid's (grid=) or search's (search=) work: its slot time summed, the overhead included."""
    return pj.fmt_s(_row(p, grid, search).work)


def work_max(p, **options: str):
    """The largest work of the projected grids (kind=grid, the default) or searches (kind=search) but those named
    (except=a,b,...; optional); a ValueError when it exceeds a named one's (the named are then not the largest)."""
    named = [x for x in options.pop("except", "").split(",") if x]
    kind = options.pop("kind", "grid")
    if options:
        raise ValueError(f"work-max: unknown keyword(s) {', '.join(options)}; known: kind, except")
    if kind not in ("grid", "search"):
        raise ValueError(f"kind={kind!r} is invalid: grid or search")
    rows = p.grid_rows if kind == "grid" else p.search_rows
    rest = [r for r in rows if r.group.name not in named]
    if not rest:
        raise ValueError(f"work-max: every projected {kind} is named")
    top = max(rest, key=lambda r: r.work)
    if named:
        least = min((_row(p, x, None) if kind == "grid" else _row(p, None, x) for x in named), key=lambda r: r.work)
        if top.work > least.work:
            raise ValueError(f"work-max: {top.group.name!r} ({pj.fmt_s(top.work)}) has more work than "
                             f"{least.group.name!r} ({pj.fmt_s(least.work)}), which except= names among the largest")
    return pj.fmt_s(top.work)


def stop_range(p, kind: str = "grid"):
    """The lowest and highest G at which a projected grid (kind=grid) or search (kind=search) stops scaling."""
    rows = {"grid": p.grid_rows, "search": p.search_rows}
    if kind not in rows:
        raise ValueError(f"kind={kind!r} is invalid: grid or search")
    gs = [r.stop.gpus for r in rows[kind]]
    return f"{min(gs)} to {max(gs)}" if min(gs) != max(gs) else str(min(gs))


def scaled(p, grid: str | None = None, search: str | None = None):
    """A projected grid's (search's) trials whose time is scaled from another size (gpu-scaled, cpu-scaled/F)."""
    return str(sum("scaled" in j.basis for j in _row(p, grid, search).group.jobs))


def check_projected(p):
    """The check's projected time of the noise grid's 0.4 column on 1 GPU."""
    return pj.fmt_s(_check(p).projected)


def check_measured(p):
    """The check's measured time (--measured-noise-column-s)."""
    return pj.fmt_s(_check(p).measured)


def check_ratio(p):
    """Measured over projected: "6.4" (the output's "6.4x")."""
    return f"{_check(p).ratio:.1f}"


def check_models(p):
    """The model(s) of the check's trials."""
    return ", ".join(_check(p).models)


FACTS: dict[str, Callable[..., str]] = {f.__name__.replace("_", "-"): f for f in (
    records, gpu_records, factor, factor_low, factor_high, factor_pairs, factor_models, overhead, spread_sets,
    spread_median, spread_max, planned, projected, not_projected, not_projected_share, not_projected_groups,
    trials, makespan, stop_gpus, makespan_there, slots, sharing, chain, chain_trial, work, work_max, stop_range,
    scaled, check_projected, check_measured, check_ratio, check_models)}


@GENERATORS.register("projection-fact")
def projection_fact(name: str, *words: str, **options: str) -> str:
    """One number of the projection block, as its output writes it: FACTS[name] with the spec's key=value words."""
    if words:
        raise ValueError(f"projection-fact {name}: {' '.join(words)!r} is invalid: key=value words after the name")
    if name not in FACTS:
        raise ValueError(f"projection-fact: {name!r} is unknown; known: {', '.join(FACTS)}")
    f = FACTS[name]
    try:
        inspect.signature(f).bind(None, **options)
    except TypeError as e:
        keys = [k for k in list(inspect.signature(f).parameters)[1:]]
        raise ValueError(f"projection-fact {name}: {e}; its keywords: {', '.join(keys) or 'none'}") from None
    return f(page_projection()[0], **options)
