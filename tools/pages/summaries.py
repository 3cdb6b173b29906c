"""Generators over a whole sweep: its own summary table (`table`), the table with 95 % intervals (`ci-table`), a
paired difference over its columns and seeds (`paired`), the range of the gaps to one row (`gap-range`), and which build
recorded its trials (`build`)."""
from __future__ import annotations

import statistics

from fda_ray.experiments import tables
from tools.pages import records
from tools.pages.engine import GENERATORS
from tools.pages.records import load_sweep


@GENERATORS.register("table")
def summary_table(name: str) -> str:
    """The sweep's own main table (summary.md's first: final accuracy, ours / paper, mean ± the 95 % confidence
    half-width over seeds)."""
    from fda_ray.experiments.summary import summarize

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
def gap_range(name: str, base: str, *rows: str, of: str = "ours") -> str:
    """The smallest and largest difference, over the columns, between each of `rows` (default: every other row)
    and `base` (means over seeds): "1.3 to 19.1". of=paper: the same differences in the paper's numbers for the
    sweep's rows and columns."""
    s = load_sweep(name)
    if of == "paper":
        mean = {(k, v): x for k, by in s.grid.paper.items() for v, x in by.items()}
    elif of == "ours":
        mean = tables.column_means(tables.final(list(s.rows), "accuracy"))
    else:
        raise ValueError(f"of={of!r} is invalid: ours or paper")
    others = rows or tuple(k for k in s.row_keys if k != base)
    gaps = [mean[(k, v)] - mean[(base, v)] for k in others for v in s.values if (k, v) in mean and (base, v) in mean]
    return f"{min(gaps):.1f} to {max(gaps):.1f}"


@GENERATORS.register("build")
def build_note(*names: str) -> str:
    """Which build recorded each sweep's or search's trials (fda_ray.core.build), or that it is unknown (records
    made before builds were kept)."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.summary import builds_line

    by: dict[str, list[str]] = {}  # what recorded them -> the directories
    for name in names:
        found, text = builds_line(storage_path(str(records.RESULTS / name / "trials")))
        if not found:
            raise ValueError(f"build: {name!r} has no finished trial under docs/results/{name}/trials")
        by.setdefault(text.strip().removeprefix("Recorded by ").rstrip("."), []).append(f"`{name}`")
    parts = [f"{', '.join(dirs)}: {what}" + (" (their records predate build recording: a rerun on another build "
                                               "may move cells by points)" if what == "an unknown build" else "")
             for what, dirs in by.items()]
    return "Build. " + "; ".join(parts) + "."


@GENERATORS.register("registered")
def registered(what: str) -> str:
    """How many built-in grids or searches fda-ray ships (the registries' sizes): "35"."""
    from fda_ray.papers.grids import GRIDS
    from fda_ray.papers.searches import SEARCHES

    found = {"grids": GRIDS, "searches": SEARCHES}.get(what)
    if found is None:
        raise ValueError(f"what={what!r} is invalid: grids or searches")
    return str(len(found))


@GENERATORS.register("trial-time")
def trial_time(name: str) -> str:
    """The finished trials' own run time, from the `Wall time:` line of docs/results/<name>/summary.md: what a sweep
    run in chunks or resumed cost, whichever launch ran each trial: "42 854 s (11.9 h)"."""
    import re

    text = (records.RESULTS / name / "summary.md").read_text()
    m = re.search(r"the finished trials' own run time adds up to (\d+) s", text)
    if m is None:
        raise ValueError(f"trial-time: docs/results/{name}/summary.md names no finished trials' own run time")
    seconds = int(m.group(1))
    return f"{seconds:,} s ({seconds / 3600:.1f} h)".replace(",", " ")


@GENERATORS.register("trials-done")
def trials_done(name: str) -> str:
    """How many finished trial records docs/results/<name>/trials holds (a sweep still running in chunks): "13"."""
    from fda_ray.experiments.records import finished

    trials = records.RESULTS / name / "trials"
    if not trials.is_dir():
        raise ValueError(f"trials-done: docs/results/{name}/trials is not a folder")
    return str(sum(1 for _ in finished(trials)))


@GENERATORS.register("wall")
def wall(name: str) -> str:
    """The wall time and trial count of the launch that wrote docs/results/<name>/summary.md, from its `Wall time:`
    line: "1 429 s for 25 trials"."""
    import re

    text = (records.RESULTS / name / "summary.md").read_text()
    m = re.search(r"^Wall time(?: of this launch)?: (\d+) s(?: for (\d+) trials)?", text, flags=re.M)
    if m is None:
        raise ValueError(f"wall: docs/results/{name}/summary.md has no 'Wall time:' line")
    seconds = f"{int(m.group(1)):,}".replace(",", " ")
    return f"{seconds} s" + (f" for {m.group(2)} trials" if m.group(2) else "")
