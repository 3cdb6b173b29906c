"""Results collected over any number of sweep and search directories: one table per grid (DomainBed's
collect_results, for fda-ray's records).

    python -m fda_ray.collect docs/results/fmnist-noise docs/results/fmnist-noise-seeds-0.6
    python -m fda_ray.collect docs/results/search-beta --format latex
    python -m fda_ray.collect DIR... --format csv --out results.csv

A directory is read as its summary.md `Command:` line says (the grid or the search, the profile, the options that
change numbers), or as `--grid NAME` for a folder of records without one. Directories of the same grid, profile
and options are one table: their trials are pooled by seed (a trial recorded in two of them, the same key, counts
once: from the first directory named). Each cell is the trials' final-round metric (--last K: each seed's mean
over its last K rounds, Auto-weighted FDA's DomainBed metric) as the mean and the 95 % confidence half-width over seeds
(t_{0.975, n-1} s / sqrt(n), fda_ray.experiments.tables), n, and where the grid carries the paper's number, that
number and the gap (ours minus the paper's). A search's table is its selection (selection.json): per study and
selection rule, the configuration the rule selected and its reruns' test accuracy on new seeds.

Formats: Markdown (default), CSV (one line a cell, every number unrounded) and LaTeX (a tabular per table).
"""
from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from fda_ray.core.registry import did_you_mean
from fda_ray.experiments import tables
from fda_ray.experiments.records import ROWS_FILE, finished, read_rows, record_damage
from fda_ray.papers.grids import Grid
from fda_ray.core.interrupts import cli_main

if TYPE_CHECKING:
    from fda_ray.core.parsing import OneLineParser

FORMATS = ("markdown", "csv", "latex")
PM_TEX = r"$\pm$"


class CollectError(ValueError):
    """Bad input to collect: one line naming the field, the value and what is allowed."""


@dataclass(frozen=True)
class Source:
    """How a directory was made: a grid or a search, its profile, and the options that change numbers."""

    path: Path
    kind: str  # "grid" | "search"
    name: str  # the grid's or the search's name
    profile: str
    options: tuple[tuple[str, str], ...] = ()  # (RunConfig field, value) the command set, sorted

    @property
    def group(self) -> tuple:
        return (self.kind, self.name, self.profile, self.options)


@dataclass
class Cell:
    seeds: dict[int, float]  # seed -> final metric (%)
    paper: float | None = None

    @property
    def values(self) -> list[float]:
        return [self.seeds[s] for s in sorted(self.seeds)]

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def half(self) -> float | None:
        return tables.mean_ci(self.values)[1] if len(self.values) > 1 else None

    @property
    def gap(self) -> float | None:
        return None if self.paper is None else self.mean - self.paper


@dataclass
class GridTable:
    source: Source
    directories: list[str]
    metric: str
    last: int
    row_labels: dict[str, str]  # row key -> label, in the grid's order
    value_labels: dict[float, str]  # grid value -> label, in the grid's order
    cells: dict[tuple[str, float], Cell]
    builds: list[str]
    duplicates: int = 0  # trials found in more than one directory (read from the first)
    paper_ref: str = ""
    scale: float = 100.0  # 100: fractions shown in %; 1: numbers as recorded (a lambda, a count)
    rows: list[dict] = field(default_factory=list, repr=False)  # every round of every trial read (figures)

    @property
    def unit(self) -> str:
        return " (%)" if self.scale == 100 else ""

    def average(self, key: str) -> float | None:
        """The row's Avg. column: the mean of its columns' means (the papers' Avg.), when every column has one."""
        means = [self.cells[(key, v)].mean for v in self.value_labels if (key, v) in self.cells]
        return sum(means) / len(means) if means and len(means) == len(self.value_labels) else None

    def paired(self, a: str, b: str) -> list[float]:
        """a's minus b's number, paired by (column, seed)."""
        finals = {kv: c.seeds for kv, c in self.cells.items()}
        return tables.paired_differences(finals, a, b, self.value_labels)

    @property
    def title(self) -> str:
        opts = "".join(f", {k}={v}" for k, v in self.source.options)
        return f"{self.source.name} ({self.source.profile} profile{opts})"


@dataclass
class SearchTable:
    source: Source
    directory: str
    lines: list[dict] = field(default_factory=list)  # study, rule, selected, rerun values


def describe(path: Path, grid: str | None = None) -> Source:
    """The Source of a results directory, from its sweep.json (for a directory from before manifests, its
    summary.md's `Command:` line); `grid` names the grid of a folder without either (every trial found is read as
    that grid's)."""
    from fda_ray.experiments.arguments import manifest_of

    m = manifest_of(path)
    if m is None:
        if grid is None:
            raise CollectError(f"dir={str(path)!r} is invalid: it has no sweep.json nor a summary.md with a "
                               "'Command:' line; pass --grid NAME to read its trials as a grid's")
        return Source(path, "grid", grid, "found")
    options = tuple(sorted((k, str(v)) for k, v in m.overrides.items()))
    if grid is not None and grid != m.name:  # (it relabelled a noise sweep as Table 11's eta columns, with gaps)
        raise CollectError(f"grid={grid!r} is invalid for dir={str(path)!r}: its sweep.json says it ran {m.kind} "
                           f"{m.name!r}; --grid names the grid of a folder of records without one")
    if m.kind == "search":
        return Source(path, "search", m.name, m.profile, options)
    return Source(path, "grid", m.name, m.profile, options)


def _build_text(env: dict | None) -> str:
    """A record's build as summary.md names it (fda_ray.core.build.FIELDS: the libraries, the code, the
    aggregation kernels' implementation, the CPU capability, the plug-ins), each field the record has."""
    from fda_ray.core.build import FIELDS

    if not env or all(env.get(k) is None for k in ("torch", "numpy", "code")):
        return "an unknown build (recorded before builds were)"
    return ", ".join(f"{k} {env[k]}" for k in FIELDS if env.get(k) is not None)


def grid_of(src: Source) -> Grid:
    """The grid a directory ran: a built-in one by name, else the definition the sweep kept beside its records
    (grid.yaml: a grid file's, as it was when the sweep ran), else the grid file its command names."""
    from fda_ray.experiments.trials import load_grid
    from fda_ray.papers.files import DefinitionFileError, is_file_ref
    from fda_ray.papers.grids import GRIDS

    if src.name in GRIDS:
        return GRIDS[src.name]
    kept = src.path / "grid.yaml"
    try:
        if kept.is_file():
            return load_grid(str(kept))
        if is_file_ref(src.name):
            return load_grid(src.name)
    except DefinitionFileError as e:
        raise CollectError(str(e)) from None
    raise CollectError(f"grid={src.name!r} is invalid: a grid file (.yaml, .yml, .json) or one of {', '.join(GRIDS)}")


def is_fraction(rows: Sequence[dict], metric: str) -> bool:
    """Whether a round column reads as a fraction, shown in % (an accuracy, an AUC, a weight): not a loss, and every
    recorded number (a list's entries too) in [0, 1]. A loss of 0.8 shown as "80.0" under "(%)" misled."""
    if "loss" in metric.lower():
        return False
    for r in rows:
        v = r.get(metric)
        if isinstance(v, str):  # (a list kept as JSON text)
            try:
                v = json.loads(v)
            except ValueError:
                continue
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and not 0 <= x <= 1:
                return False
    return True


def grid_table(sources: Sequence[Source], metric: str = "accuracy", last: int = 1, scale: float | None = None
               ) -> GridTable:
    """One grid's table over directories of the same group (Source.group). scale: 100 shows a fraction in %, 1 a
    number as recorded; None: 100 for a fraction, else 1 (is_fraction)."""
    from fda_ray.experiments.records import collect

    grid = grid_of(sources[0])
    rows: list[dict] = []
    seen: set[tuple] = set()  # (row, value, seed, kind): a cell's record comes from the first directory named
    builds: dict[str, None] = {}
    logged: dict[str, None] = {}  # the round columns with numbers the records log: what --metric can name
    duplicates = 0
    for src in sources:
        records = src.path / "trials"
        if not records.is_dir():
            raise CollectError(f"dir={str(src.path)!r} is invalid: it has no trials/ folder of records")
        _unfinished(src.path, records)
        trials = []
        for rec in one_record_a_cell(src, grid, list(finished(records, where=str(src.path)))):
            cell = (rec.trial.row, rec.trial.value, rec.trial.seed, rec.trial.kind)
            if cell in seen:
                duplicates += 1
                continue
            seen.add(cell)
            trials.append(rec.trial)
            builds[_build_text(rec.data.get("environment"))] = None
            logged.update((k, None) for r in rec.data.get("rows") or () for k, v in r.items()
                          if k != "round" and _numeric(v))
        rows += collect(trials, grid, records)[0]
    if metric == "accuracy" and tables.is_regression(rows):
        metric, scale = "loss", 1.0  # a regression task (synthetic data): no accuracy; its test loss, as summary.md
    if rows and metric not in logged:  # a misspelt metric, a text column or a setting, not a round's number
        raise CollectError(f"metric={metric!r} is invalid: one of {', '.join(logged)} (the numbers its records log "
                           f"each round){did_you_mean(metric, list(logged))}")
    if scale is None:
        scale = 100.0 if is_fraction(rows, metric) else 1.0
    final = tables.final(rows, metric, last, scale)
    if not final:
        raise CollectError(f"dir={str(sources[0].path)!r} is invalid: no finished trial with a {metric!r} to read")
    paper = grid.paper if metric == "accuracy" else grid.paper_auc if metric == "auc" else {}
    row_labels = {r.key: r.label for r in grid.rows if any(k == r.key for k, _ in final)}
    value_labels = {v: grid.value_label(v) for v in grid.values if any(x == v for _, x in final)}
    cells = {(k, v): Cell(dict(final[(k, v)]), paper.get(k, {}).get(v)) for k in row_labels for v in value_labels
             if (k, v) in final}
    source = sources[0] if sources[0].name == grid.name else replace(sources[0], name=grid.name)  # a file's path
    return GridTable(source, [str(s.path) for s in sources], metric, last, row_labels, value_labels, cells,
                     list(builds), duplicates, grid.paper_ref, scale, rows)


def _numeric(v: Any) -> bool:
    """A round column --metric can read: a number, or a list of numbers (averaged), not text or a list of lists."""
    if isinstance(v, list):
        return bool(v) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def one_record_a_cell(src: Source, grid: Grid, found: list) -> list:
    """The records of `found` (finished records of src's trials/) a table reads: one a (row, value, seed, kind),
    of the settings the folder's sweep.json plans. Of a planned cell's records (a resume with --new-settings keeps
    the old records beside the new), the plan's own, else one that differs from it only by a documented default
    (records.MOVED_DEFAULTS), else the last written (records of an older fda-ray's defaults); of a cell the plan does
    not hold (an earlier chunk's), the records of the folder's options, the last written. Each left out is said in
    one warning line (the table read whichever key sorted last, under a title naming the other settings). A folder without a sweep.json (--grid) keeps only the
    records of the grid's rows, methods and dataset, likewise said."""
    from fda_ray.experiments.records import moved_by_a_documented_default

    by_cell: dict[tuple, list] = {}
    foreign: list[str] = []
    for rec in found:
        t = rec.trial
        if src.profile == "found":  # (no manifest: the records could be any grid's)
            row = next((r for r in grid.rows if r.key == t.row), None)
            method, dataset = t.params.get("method"), t.params.get("dataset", grid.dataset)
            if row is None or (method is not None and method != row.method) or dataset != grid.dataset:
                foreign.append(rec.path.name)
                continue
        by_cell.setdefault((t.row, t.value, t.seed, t.kind), []).append(rec)
    if foreign:
        print(f"warning: {src.path}: {len(foreign)} record(s) left out, not of grid {grid.name!r}'s rows, methods and "
              f"dataset: {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}", file=sys.stderr)
    planned = _planned(src, grid)

    def newest(recs: list) -> list:  # the last written of a cell's records, as a list (none: [])
        return [max(recs, key=lambda r: (r.path / ROWS_FILE).mtime())] if recs else []

    out, aside = [], []
    for cell, recs in by_cell.items():
        want = planned.get(cell)
        if want is not None:  # (none of the plan's settings, as records of an older fda-ray: the last written)
            pick = ([r for r in recs if r.path.name == want.key]
                    or [r for r in recs if moved_by_a_documented_default(r.path, want)] or newest(recs))[:1]
        else:  # (a cell of an earlier chunk: of the settings the folder's options name, as its title says)
            pick = newest([r for r in recs if _of_options(r, src.options)])
        aside += [r.path.name for r in by_cell[cell] if r not in pick]
        out += pick
    if aside:
        print(f"warning: {src.path}: {len(aside)} record(s) left out, recorded with other settings than its sweep.json "
              f"plans (a resume with --new-settings keeps them beside): {', '.join(aside[:3])}"
              f"{' ...' if len(aside) > 3 else ''}", file=sys.stderr)
    return out


def _unfinished(where: Path, records: Path) -> None:
    """One warning line for the trial folders a table leaves out because they have not finished (no rows.json: a
    trial running, or one cut off) or lack their trial.json: a mid-sweep table's n is then not the planned one."""
    from fda_ray.experiments.records import TRIAL_FILE

    running = sorted(r.name for r in records.iterdir() if r.is_dir() and not (r / ROWS_FILE).is_file())
    nameless = sorted(r.name for r in records.iterdir() if (r / ROWS_FILE).is_file() and not (r / TRIAL_FILE).is_file())
    for names, why in ((running, "not finished (running, or cut off: no rows.json)"),
                       (nameless, "without their trial.json")):
        if names:
            print(f"warning: {where}: {len(names)} trial(s) {why} left out: {', '.join(names[:3])}"
                  f"{' ...' if len(names) > 3 else ''}", file=sys.stderr)


def _of_options(rec: Any, options: tuple[tuple[str, str], ...]) -> bool:
    """Whether a record ran with the settings a folder's sweep.json names (Source.options: --rounds 3, ...),
    read from its rows.json's config (a field it lacks: not compared)."""
    config = rec.data.get("config") or {}
    return all(k not in config or str(config[k]) == v for k, v in options)


def _planned(src: Source, grid: Grid) -> dict[tuple, Any]:
    """(row, value, seed, kind) -> the trial the folder's sweep.json plans ({} without one, or one that no longer
    plans)."""
    from fda_ray.experiments.arguments import manifest_of
    from fda_ray.experiments.trials import plan_manifest

    m = manifest_of(src.path)
    if m is None or m.kind != "grid":
        return {}
    try:
        trials = plan_manifest(grid, m)
    except (ValueError, TypeError, AttributeError):
        return {}
    return {(t.row, t.value, t.seed, t.kind): t for t in trials}


def selection_damage(sel: dict[str, Any]) -> str | None:
    """Why a search's selection.json (parsed, a mapping) is not what fda_ray.experiments.search writes, or None: per
    study a mapping with its trials (a list of mappings, each with its key and the point it tried), each rule's
    selected trial key and each rule's reruns (lists of trial keys); its references, per setting value, the
    reference rows' lists of test accuracies."""
    studies = sel.get("studies")
    if not isinstance(studies, dict):
        return "it has no 'studies' mapping"
    for study, s in studies.items():
        if not isinstance(s, dict):
            return f"study {study!r} is {type(s).__name__}, not a mapping"
        trials = s.get("trials") or []
        if not isinstance(trials, list) or not all(isinstance(t, dict) and isinstance(t.get("key"), str)
                                                   and isinstance(t.get("point") or {}, dict) for t in trials):
            return f"study {study!r}'s trials are not a list of mappings, each with its key and point"
        selected = s.get("selected") or {}
        if not isinstance(selected, dict) or not all(k is None or isinstance(k, str) for k in selected.values()):
            return f"study {study!r}'s selected is not a mapping of rules to trial keys"
        reruns = s.get("reruns") or {}
        if not isinstance(reruns, dict) or not all(isinstance(ks, list) and all(isinstance(k, str) for k in ks)
                                                   for ks in reruns.values()):
            return f"study {study!r}'s reruns are not a mapping of rules to lists of trial keys"
    references = sel.get("references") or {}
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    if not isinstance(references, dict) or not all(
            _is_value(v) and isinstance(rows, dict) and all(isinstance(accs, list) and all(map(number, accs))
                                                           for accs in rows.values())
            for v, rows in references.items()):
        return "its references are not a mapping of settings to rows' lists of test accuracies"
    return None


def _is_value(text: str) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def search_table(src: Source) -> SearchTable:
    """A search's selection: per study and rule, the selected point and its reruns' final test accuracy (%)."""
    from fda_ray.core.user_files import DamagedFileError, read_json

    path = src.path / "selection.json"
    if not path.is_file():
        raise CollectError(f"dir={str(src.path)!r} is invalid: a search directory without selection.json")
    try:
        sel = read_json(path, "selection.json", dict)
    except DamagedFileError as e:
        raise CollectError(str(e)) from None
    if (why := selection_damage(sel)) is not None:
        raise CollectError(f"selection.json={str(path)!r} is invalid: {why}")
    table = SearchTable(src, str(src.path))
    for study, s in sel["studies"].items():
        points = {t["key"]: t.get("point") or {} for t in s.get("trials") or []}
        for rule, key in (s.get("selected") or {}).items():
            reruns = []
            for k in (s.get("reruns") or {}).get(rule, []):
                rec = src.path / "trials" / k
                if not (rec / ROWS_FILE).is_file():
                    continue
                if (why := record_damage(rec)) is not None:
                    print(f"warning: trial {k} in {src.path}: its {ROWS_FILE} is damaged ({why}); left out",
                          file=sys.stderr)
                    continue
                acc = [r["accuracy"] for r in read_rows(rec)["rows"] if r.get("accuracy") is not None]
                if acc:
                    reruns.append(100 * acc[-1])
            table.lines.append({"study": study, "rule": "oracle (reads test labels)" if rule == "oracle" else rule,
                                "selected": points.get(key, {}), "trial": key, "reruns": reruns})
    # the reference rows (the auto-weighted rules beside a static-beta search), on the reruns' seeds, labelled as
    # the search labels its settings (its search.yaml, kept beside the records)
    definition = None
    if sel.get("references"):
        from fda_ray.papers.files import search_file
        from fda_ray.papers.searches import SEARCHES

        try:  # (a folder from before search.yaml was kept: the built-in search of its name)
            definition = search_file(str(src.path / "search.yaml")) if (src.path / "search.yaml").is_file() \
                else SEARCHES.get(src.name)
        except ValueError:  # a damaged definition: the settings as selection.json keys them
            definition = None
    for value, rows in (sel.get("references") or {}).items():
        setting = definition.value_label(float(value)) if definition is not None else value
        for row, accs in rows.items():
            table.lines.append({"study": f"{row} @ {setting}", "rule": "reference", "selected": {},
                                "trial": None, "reruns": [float(a) for a in accs]})
    return table


def collect_tables(dirs: Sequence[str | Path], grid: str | None = None, metric: str = "accuracy",
                   last: int = 1, scale: float | None = None) -> list[GridTable | SearchTable]:
    """The tables of the directories: one per group of grid directories (in the order first named), one per
    search directory."""
    if not dirs:
        raise CollectError("dirs=[] is invalid: name one or more sweep or search directories")
    groups: dict[tuple, list[Source]] = {}
    order: list[tuple | Source] = []
    for d in dirs:
        path = Path(d)
        if not path.is_dir():
            from fda_ray.core.storage import sync_hint

            raise CollectError(f"dir={str(d)!r} is invalid: not a folder{sync_hint(d)}")
        src = describe(path, grid)
        if src.kind == "search":
            order.append(src)
            continue
        if src.group not in groups:
            groups[src.group] = []
            order.append(src.group)
        groups[src.group].append(src)
    return [search_table(o) if isinstance(o, Source) else grid_table(groups[o], metric, last, scale) for o in order]


# ---------------------------------------------------------------- formats

def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _cell_text(c: Cell | None, digits: int, pm: str = "±") -> str:
    if c is None:
        return "-"
    text = f"{c.mean:.{digits}f}" + (f" {pm} {c.half:.{digits}f}" if c.half is not None else "") + f" (n={len(c.seeds)})"
    if c.paper is not None:
        text += f" / {c.paper:.{digits}f} [{c.gap:+.{digits}f}]"
    return text


def _point(p: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in p.items()) or "-"


def _rerun(values: list[float], digits: int, pm: str = "±") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (n=1)"
    mean, half, _ = tables.mean_ci(values)
    return f"{mean:.{digits}f} {pm} {half:.{digits}f} (n={len(values)})"


def _paired_lines(t: GridTable, a: str, digits: int) -> list[str]:
    """a minus each other row, paired by (column, seed): the mean difference, its 95 % interval, a's wins."""
    if a not in t.row_labels:
        raise CollectError(f"paired={a!r} is invalid for {t.title}: one of its rows {', '.join(t.row_labels)}")
    out = [f"{t.row_labels[a]} minus each row, paired by (column, seed): mean difference, 95 % interval, "
           f"{t.row_labels[a]} higher in:", ""]
    for b, label in t.row_labels.items():
        if b == a:
            continue
        d = t.paired(a, b)
        if not d:
            out.append(f"- {label}: no (column, seed) pair")
            continue
        wins = f"higher in {sum(x > 0 for x in d)} of {len(d)}"
        if len(d) == 1:
            out.append(f"- {label}: {d[0]:+.{digits}f} (one pair; {wins})")
            continue
        mean, half, _ = tables.mean_ci(d)
        out.append(f"- {label}: {mean:+.{digits}f} (95 % interval {mean - half:+.{digits}f} to "
                   f"{mean + half:+.{digits}f}; {wins})")
    return out + [""]


# --average on a table of one column: no Avg. column, and this line says why.
ONE_COLUMN = "Avg.: left out, the table has one column (its Avg. would repeat that column)."


def to_markdown(tabs: Sequence[GridTable | SearchTable], digits: int = 1, average: bool = False,
                paired: str | None = None) -> str:
    out = []
    for t in tabs:
        if isinstance(t, SearchTable):
            out.append(f"## Search {t.source.name} ({t.source.profile} profile): {t.directory}\n")
            out.append("| study | rule | selected | rerun test accuracy |\n|---|---|---|---|")
            for x in t.lines:
                out.append(f"| {x['study']} | {x['rule']} | {_point(x['selected'])} | {_rerun(x['reruns'], digits)} |")
            out.append("")
            continue
        what = t.metric + (f", mean of the last {t.last} rounds" if t.last > 1 else ", final round")
        out.append(f"## {t.title}: {', '.join(t.directories)}\n")
        out.append(f"{what}{t.unit}: mean ± 95 % half-width (n seeds)"
                   + (" / the paper's [ours minus the paper's]" if any(c.paper is not None for c in t.cells.values())
                      else "") + ".\n")
        avg = average and len(t.value_labels) > 1
        out.append("| method | " + " | ".join(t.value_labels.values()) + (" | Avg." if avg else "") + " |")
        out.append("|---" * (len(t.value_labels) + 1 + avg) + "|")
        for k, label in t.row_labels.items():
            out.append(f"| {label} | " + " | ".join(_cell_text(t.cells.get((k, v)), digits) for v in t.value_labels)
                       + (f" | {_num(t.average(k), digits)}" if avg else "") + " |")
        out.append("")
        if avg:
            out += ["Avg.: the mean of the columns' means, where every column has one.", ""]
        elif average:  # (said, not silent: the Avg. of one column would repeat it)
            out += [ONE_COLUMN, ""]
        if paired:
            out += _paired_lines(t, paired, digits)
        out.append("Build: " + "; ".join(t.builds) + ("" if len(t.builds) == 1 else " (mixed)") + ".")
        if t.duplicates:
            out.append(f"{t.duplicates} trial(s) recorded in more than one directory were read from the first.")
        if t.paper_ref:
            out.append(f"Paper: {t.paper_ref}.")
        out.append("")
    return "\n".join(out)


def to_csv(tabs: Sequence[GridTable | SearchTable]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["kind", "name", "profile", "options", "directories", "row", "label", "value", "value_label",
                "metric", "n", "mean", "half_width_95", "seeds", "paper", "gap", "selected"])
    for t in tabs:
        opts = ";".join(f"{k}={v}" for k, v in t.source.options)
        if isinstance(t, SearchTable):
            for x in t.lines:
                vals = x["reruns"]
                mean = half = None
                if vals:
                    mean = sum(vals) / len(vals)
                    half = tables.mean_ci(vals)[1] if len(vals) > 1 else None
                w.writerow(["search", t.source.name, t.source.profile, opts, t.directory, x["study"], x["rule"], "",
                            "", "accuracy", len(vals), mean, half, ";".join(map(str, vals)), "", "",
                            json.dumps(x["selected"], sort_keys=True)])
            continue
        for (k, v), c in t.cells.items():
            w.writerow(["grid", t.source.name, t.source.profile, opts, ";".join(t.directories), k, t.row_labels[k], v,
                        t.value_labels[v], t.metric if t.last == 1 else f"{t.metric} (last {t.last})", len(c.seeds),
                        c.mean, c.half, ";".join(f"{s}:{c.seeds[s]}" for s in sorted(c.seeds)),
                        "" if c.paper is None else c.paper, "" if c.gap is None else c.gap, ""])
    return buf.getvalue()


def _tex(s: str) -> str:
    s = "".join({"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$",
                 "{": r"\{", "}": r"\}"}.get(ch, ch) for ch in s)  # one pass: no escape is escaped again
    return s.replace("->", r"$\to$").replace("±", PM_TEX)


def to_latex(tabs: Sequence[GridTable | SearchTable], digits: int = 1, average: bool = False) -> str:
    out = []
    for t in tabs:
        if isinstance(t, SearchTable):
            out += [f"% search {t.source.name} ({t.source.profile}): {t.directory}", r"\begin{tabular}{lllr}",
                    r"\toprule", r"Study & Rule & Selected & Rerun test acc. \\", r"\midrule"]
            for x in t.lines:
                out.append(f"{_tex(x['study'])} & {_tex(x['rule'])} & {_tex(_point(x['selected']))} & "
                           + _rerun(x['reruns'], digits, pm=PM_TEX) + r" \\")
            out += [r"\bottomrule", r"\end{tabular}", ""]
            continue
        avg = average and len(t.value_labels) > 1
        ns = {len(c.values) for c in t.cells.values()}
        per_cell = len(ns) > 1  # the seeds differ between cells: each cell says its own
        seeds = "[seeds] where the cells' seeds differ" if per_cell else f"over {ns.pop()} seed(s)"
        out += [f"% {t.title}: {', '.join(t.directories)}; {t.metric}"
                + ("" if t.last == 1 else f" (mean of the last {t.last} rounds)")
                + f"{t.unit}, mean $\\pm$ 95 % half-width {seeds}; (paper)",
                r"\begin{tabular}{l" + "c" * (len(t.value_labels) + avg) + "}", r"\toprule",
                "Method & " + " & ".join(_tex(x) for x in t.value_labels.values()) + (" & Avg." if avg else "")
                + r" \\", r"\midrule"]
        for k, label in t.row_labels.items():
            cells = []
            for v in t.value_labels:
                c = t.cells.get((k, v))
                if c is None:
                    cells.append("--")
                    continue
                s = f"{c.mean:.{digits}f}" + (f" $\\pm$ {c.half:.{digits}f}" if c.half is not None else "")
                if per_cell:
                    s += f" [{len(c.values)}]"
                if c.paper is not None:
                    s += f" ({c.paper:.{digits}f})"
                cells.append(s)
            if avg:
                cells.append(_num(t.average(k), digits).replace("-", "--") if t.average(k) is None
                             else _num(t.average(k), digits))
            out.append(f"{_tex(label)} & " + " & ".join(cells) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}"] + ([f"% {ONE_COLUMN}"] if average and not avg else []) + [""]
    return "\n".join(out)


# ---------------------------------------------------------------- figures

FIGURES = ("curves", "heatmap", "sweep")


def two_parameters(grid: Grid, values: Sequence[float]) -> tuple[str, list[Any], str, list[Any], dict[float, tuple[int, int]]]:
    """A grid whose columns set two parameters (FedWCA's T_a x T_b): (the first's name, its levels, the second's,
    its levels, value -> (i, j)). An error for a grid whose columns vary one field or more than two."""
    from fda_ray.experiments.records import dotted

    fields = {v: dotted(grid.value_fields.get(v, {grid.variable: v})) for v in values}
    names = sorted({k for f in fields.values() for k in f})
    varying = [k for k in names if len({repr(f.get(k)) for f in fields.values()}) > 1]
    if len(varying) != 2:
        raise CollectError(f"figure='heatmap' is invalid for grid {grid.name!r}: its columns vary "
                           f"{len(varying)} parameter(s) ({', '.join(varying) or grid.variable}), a heat map needs two")
    a, b = varying
    levels_a = sorted({f[a] for f in fields.values()})
    levels_b = sorted({f[b] for f in fields.values()})
    return a, levels_a, b, levels_b, {v: (levels_a.index(f[a]), levels_b.index(f[b])) for v, f in fields.items()}


def draw(tabs: Sequence[GridTable | SearchTable], figure: str, stem: str | Path | None, panels: Sequence[str],
         ) -> list[Path]:
    """The figure of each grid table (curves: the metric per round; heatmap: over the two parameters its
    columns set, a panel per metric of `panels`, the first panel's best cell outlined in each); written to
    `stem` (one table) or <its first directory>/<figure> (.png and .pdf). Returns the PNG paths."""
    import numpy as np

    from fda_ray.experiments import figures

    grids = [t for t in tabs if isinstance(t, GridTable)]
    if not grids:
        raise CollectError(f"figure={figure!r} is invalid here: no grid directory among the directories")
    if stem is not None and len(grids) > 1:
        raise CollectError(f"figure_out={str(stem)!r} is invalid with {len(grids)} grid tables: leave it out (each "
                           "figure goes to its table's first directory)")
    written = []
    for t in grids:
        out = Path(stem) if stem is not None else Path(t.directories[0]) / figure
        what = f"{t.metric}{t.unit}"
        if figure == "sweep":  # the sweep's own figures (accuracy, beta_<row>, estimates), redrawn into its folder
            from fda_ray.experiments.figures import sweep_figures
            from fda_ray.experiments.summary import summarize

            if stem is not None:
                raise CollectError("figure_out is invalid with --figure sweep: its figures go to the directory")
            if len(t.directories) > 1:  # (it drew the pooled seeds over the first folder's own figures)
                raise CollectError(f"figure='sweep' is invalid with {len(t.directories)} directories of one grid: it "
                                   "redraws one sweep's own figures into its folder; name one directory")
            grid = grid_of(t.source)
            keys, values = list(t.row_labels), list(t.value_labels)
            _, summary = summarize(t.rows, [], grid, t.source.profile, keys, values, "")
            sweep_figures(t.rows, summary, grid, keys, values, Path(t.directories[0]))
            written.append(Path(t.directories[0]) / "accuracy.png")
            continue
        if figure == "curves":
            runs = tables.runs(t.rows, t.metric, t.scale)
            curves = {v: tables.mean_curves(runs, v) for v in t.value_labels}
            figures.curves_figure(curves, t.row_labels, t.value_labels, out, ylabel=what,
                                  title=f"{t.title}: {t.metric} per round, mean over seeds")
        else:
            grid = grid_of(t.source)
            values = list(t.value_labels)
            a, la, b, lb, at = two_parameters(grid, values)
            if len(t.row_labels) != 1:
                raise CollectError(f"figure='heatmap' is invalid for {t.title}: it has {len(t.row_labels)} rows; "
                                   "pick one with a directory of one row")
            (key,) = t.row_labels
            arrays = {}
            for m in panels:
                final = tables.final(t.rows, m, t.last, t.scale)
                grid_ = np.full((len(la), len(lb)), np.nan)
                for v in values:
                    seeds = final.get((key, v))
                    if seeds:
                        grid_[at[v]] = sum(seeds.values()) / len(seeds)
                if np.isnan(grid_).all():
                    raise CollectError(f"panels={m!r} is invalid for {t.title}: no trial recorded it")
                arrays[m] = grid_
            first = arrays[panels[0]]
            best = tuple(int(x) for x in np.unravel_index(np.nanargmax(first), first.shape))
            figures.grid_heatmap(arrays, [f"{x:g}" if isinstance(x, float) else str(x) for x in la],
                                 [f"{x:g}" if isinstance(x, float) else str(x) for x in lb], out,
                                 xlabel=b.rsplit(".", 1)[-1], ylabel=a.rsplit(".", 1)[-1],
                                 title=f"{t.row_labels[key]}, {t.title}: mean over seeds; outlined: the best "
                                       f"{panels[0]}", unit=t.unit.strip(" ()") or "value",
                                 marks={m: best for m in arrays})
        written.append(out.with_suffix(".png"))
    return written


@cli_main
def write_missing_manifests(dirs: list[str]) -> int:
    """sweep.json for each directory that has only summary.md's command (fda_ray.experiments.manifest)."""
    from fda_ray.experiments.manifest import FILE, ManifestError, read, write
    from fda_ray.experiments.arguments import manifest_of

    for d in dirs:
        path = Path(d)
        try:
            if read(path) is not None:
                print(f"{path / FILE}: there already", file=sys.stderr)
                continue
            m = manifest_of(path)
        except ManifestError as e:  # a damaged sweep.json is the user's to look at: not overwritten
            print(f"error: {e}", file=sys.stderr)
            return 2
        if m is None:
            print(f"error: dir={d!r} is invalid: it has no summary.md with a 'Command:' line", file=sys.stderr)
            return 2
        if m.kind == "grid":  # a grid its readers cannot find is said now, and no sweep.json is written for it
            try:
                grid_of(Source(path, "grid", m.name, m.profile))
            except CollectError as e:
                print(f"error: summary.md={str(path / 'summary.md')!r} is invalid: its Command: line's {e}; no "
                      f"{FILE} written", file=sys.stderr)
                return 2
        write(path, m)
        print(f"{path / FILE}: written ({m.kind} {m.name}, {m.profile})", file=sys.stderr)
    return 0


def parser() -> "OneLineParser":
    """The command line of `python -m fda_ray.collect`."""
    from fda_ray.core import plugins
    from fda_ray.core.parsing import OneLineParser, first_paragraph

    p = OneLineParser(prog="python -m fda_ray.collect", description=first_paragraph(__doc__), command="collect")
    plugins.add_option(p)
    p.add_argument("dirs", nargs="*", help="sweep or search directories (each with its summary.md and trials/)")
    p.add_argument("--format", default="markdown", choices=FORMATS, help="markdown (default), csv or latex")
    p.add_argument("--metric", default="accuracy", help="the round column to tabulate (accuracy, auc, "
                                                          "val_accuracy, ...)")
    p.add_argument("--last", type=int, default=1, help="each seed's mean over its last K rounds (default 1: the "
                                                       "final round; 5: Auto-weighted FDA's DomainBed metric)")
    p.add_argument("--digits", type=int, default=1, help="decimals in Markdown and LaTeX")
    p.add_argument("--grid", default=None, help="read directories without a summary.md as this grid's trials")
    p.add_argument("--out", default=None, help="write to this file instead of standard output")
    p.add_argument("--scale", type=float, default=None, help="100: the metric is a fraction, shown in %%; 1: shown as "
                   "recorded (a lambda, a count). Default: 100 for a metric whose numbers are all in [0, 1] and that "
                   "is not a loss, else 1")
    p.add_argument("--average", action="store_true", help="an Avg. column: the mean of the columns' means")
    p.add_argument("--paired", default=None, help="a row key: that row minus each other row, paired by (column, "
                                                  "seed), with a 95 %% interval")
    p.add_argument("--figure", default=None, choices=FIGURES, help="also draw: curves (the metric per round, mean "
                                                                   "over seeds), heatmap (over the two parameters "
                                                                   "a grid's columns set) or sweep (the sweep's own "
                                                                   "figures, redrawn into its directory)")
    p.add_argument("--figure-out", default=None, help="the figure's path without suffix (default: <the table's "
                                                      "first directory>/<figure>)")
    p.add_argument("--panels", default=None, help="heatmap: comma-separated metrics, one panel each on one colour "
                                                  "scale (default: --metric); the first's best cell is outlined")
    p.add_argument("--write-manifests", action="store_true", help="instead of a table: write the sweep.json of each "
                   "directory from before manifests, read from its summary.md's Command: line")
    return p


RECORD_FILES = ("sweep.json", "summary.md", "grid.yaml", "results.parquet", "selection.json")


def _over_records(target: Path, dirs: Sequence[str]) -> str | None:
    """The input folder's record `target` would write over (a file under its trials/, or one of RECORD_FILES at
    its top: `--out DIR/trials/<key>/rows.json` replaced a trial's record with the table), or None."""
    target = target.expanduser().resolve()
    for d in dirs:
        d_ = Path(d).expanduser().resolve()
        if target.is_relative_to(d_ / "trials") or (target.parent == d_ and target.name in RECORD_FILES):
            return f"{d}'s records ({target.relative_to(d_)})"
    return None


def main(argv: list[str] | None = None) -> int:
    from fda_ray.core import plugins
    from fda_ray.core.storage import atomic_local
    from fda_ray.core.user_files import DamagedFileError
    from fda_ray.experiments.manifest import ManifestError
    from fda_ray.runtime import preflight

    if (code := plugins.preload(sys.argv[1:] if argv is None else argv)) is not None:  # a file grid's plug-ins
        return code
    p = parser()
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    if a.write_manifests:
        return write_missing_manifests(a.dirs)
    try:
        if a.last < 1:
            raise CollectError(f"last={a.last} is invalid: an integer >= 1")
        if not 0 <= a.digits <= 6:
            raise CollectError(f"digits={a.digits} is invalid: an integer from 0 to 6")
        if a.scale is not None and (not math.isfinite(a.scale) or a.scale <= 0):
            raise CollectError(f"scale={a.scale:g} is invalid: a positive number (100 for %, 1 as recorded)")
        if a.paired is not None and a.format != "markdown":
            raise CollectError(f"paired={a.paired!r} is invalid with --format {a.format}: Markdown only")
        if (a.figure_out or a.panels) and not a.figure:
            raise CollectError("figure_out/panels are invalid without --figure curves|heatmap")
        for flag, where in (("out", a.out), ("figure_out", a.figure_out)):  # never over an input's records
            if where and (inside := _over_records(Path(where), a.dirs)) is not None:
                raise CollectError(f"{flag}={where!r} is invalid: it would write over {inside}; choose a file "
                                   "outside the folders' trials/ and their sweep.json, summary.md, grid.yaml")
        # before the records are read: a table (or a figure) computed and then not written would be lost
        if a.out:
            preflight.output_file("out", a.out)
        if a.figure_out:
            preflight.output_file("figure_out", a.figure_out)
        tabs = collect_tables(a.dirs, a.grid, a.metric, a.last, a.scale)
        grid_only = [f"{k}={v!r}" for k, v, default in (("metric", a.metric, "accuracy"), ("last", a.last, 1),
                                                          ("average", a.average, False), ("scale", a.scale, None))
                     if v != default]
        if grid_only and any(isinstance(t, SearchTable) for t in tabs):  # (they were ignored there without a word)
            said = f"{', '.join(grid_only)} {'is' if len(grid_only) == 1 else 'are'}"
            if all(isinstance(t, SearchTable) for t in tabs):
                raise CollectError(f"{said} invalid here: a search directory's table is its selections' reruns' test "
                                   "accuracy (selection.json); they read a grid's rounds")
            print(f"note: {said} for the grid tables; a search directory's table is its selections' reruns' test "
                  "accuracy", file=sys.stderr)
        if (a.paired is not None or a.figure) and all(isinstance(t, SearchTable) for t in tabs):
            what = f"paired={a.paired!r}" if a.paired is not None else f"figure={a.figure!r}"
            where = f"{', '.join(a.dirs)} {'is a search' if len(a.dirs) == 1 else 'are searches'}"
            raise CollectError(f"{what} is invalid here: it reads a grid's rows, and {where}"
                               + ("" if a.paired is not None else " (a search draws its trajectory.png itself)"))
        if a.figure and not a.figure_out:  # its default place, each grid table's first directory, checked as
            for t in tabs:                     # --figure-out is (a read-only results folder: a traceback after work)
                if isinstance(t, GridTable):
                    default = Path(t.directories[0]) / ("accuracy" if a.figure == "sweep" else a.figure)
                    try:
                        preflight.output_file("figure", default.with_suffix(".png"))
                    except preflight.PreflightError as e:
                        raise CollectError(f"{e}; the figure goes to the table's first directory"
                                           + ("" if a.figure == "sweep" else ": --figure-out FILE puts it elsewhere")
                                           ) from None
        text = {"markdown": lambda: to_markdown(tabs, a.digits, a.average, a.paired), "csv": lambda: to_csv(tabs),
                "latex": lambda: to_latex(tabs, a.digits, a.average)}[a.format]()
        if a.figure:
            panels = [m for m in (a.panels or a.metric).split(",") if m.strip()]
            try:
                for png in draw(tabs, a.figure, a.figure_out, panels):
                    print(f"figure: {png} (and .pdf)", file=sys.stderr)
            except OSError as e:  # checked above, yet refused now (a disk filled meanwhile): the table is not lost
                if isinstance(e, FileNotFoundError):  # (a record gone: said below, as a missing input)
                    raise
                print(text, end="" if text.endswith("\n") else "\n")
                named = e.filename and not Path(str(e.filename)).name.startswith(".fda-tmp-")  # (not its temporary)
                where = f" {e.filename}" if named else ""
                print(f"error: figure={a.figure!r} could not be written{where} ({e.strerror or type(e).__name__}); "
                      "the table is on standard output above", file=sys.stderr)
                return 1
    except (CollectError, ManifestError, DamagedFileError, FileNotFoundError, preflight.PreflightError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)  # (a damaged sweep.json, too)
        return 2
    except OverflowError:  # a huge --scale: the metric times it (its mean, its spread) is past the largest float
        said = f"scale={a.scale:g} is invalid" if a.scale else "the values are too large to average"
        print(f"error: {said}: a positive number that keeps the values finite (100 for %, 1 as recorded; --scale 1 "
              "shows a number as recorded)", file=sys.stderr)
        return 2
    if a.out:
        try:
            with atomic_local(a.out) as tmp:  # (its folder made, as --parquet's; whole or not at all)
                tmp.write_text(text)
        except OSError as e:  # checked above, yet refused now (a disk filled meanwhile): the table is not lost
            print(text, end="" if text.endswith("\n") else "\n")
            print(f"error: out={a.out!r} could not be written ({e.strerror or type(e).__name__}); the table is on "
                  "standard output above", file=sys.stderr)
            return 1
    else:
        print(text, end="" if text.endswith("\n") else "\n")
    return 0
