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
fda_ray.experiments.tables'.
"""
from __future__ import annotations

import argparse
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
PAGES = ("README.md", "docs/results/*.md")  # where blocks may be, relative to the repository
BLOCK = re.compile(r"<!-- records: (?P<spec>[^>]*?) -->(?P<body>.*?)<!-- /records -->", re.S)


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
    from fda_ray.experiments.trials import recorded_builds

    by: dict[str, list[str]] = {}  # what recorded them -> the directories
    for name in names:
        records = storage_path(str(RESULTS / name / "trials"))
        keys = {k for found in recorded_builds(records).values() for k in found}
        if not keys:
            raise ValueError(f"build: {name!r} has no finished trial under docs/results/{name}/trials")
        _, text = builds_line(records, keys)
        by.setdefault(text.strip().removeprefix("Recorded by ").rstrip("."), []).append(f"`{name}`")
    parts = [f"{', '.join(dirs)}: {what}" + (" (their records predate build recording: a rerun on another build "
                                               "may move cells by points)" if what == "an unknown build" else "")
             for what, dirs in by.items()]
    return "Build. " + "; ".join(parts) + "."


# ---------------------------------------------------------------- pages

def render(spec: str) -> str:
    words = shlex.split(spec)
    if not words:
        raise ValueError("a records block names no generator")
    return GENERATORS.get(words[0])(*words[1:])


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

    return BLOCK.sub(one, text), changed


def pages(root: Path = ROOT) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fda_ray.pages", description=__doc__.splitlines()[0])
    p.add_argument("pages", nargs="*", help="pages to regenerate (default: README.md and docs/results/*.md)")
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


if __name__ == "__main__":
    raise SystemExit(main())
