"""A results directory's records: docs/results/<name> read as a Sweep (load_sweep: the trials its summary.md command
planned; load_found: every finished trial found there, read as a named grid's), and the private helpers that several
generator families share: reading a sweep's rows (_final, _runs, _cell_rows, ...) and writing their numbers (_with_ci,
_signed, _and, ...).

The generators read RESULTS at call time as records.RESULTS (this module's attribute), so a test that points it
elsewhere (monkeypatch.setattr(pages.records, "RESULTS", tmp_path)) reaches every one of them.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fda_ray.experiments import tables

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


@dataclass(frozen=True)
class Sweep:
    """What a results directory's summary.md command planned, and its finished rows (sweep.collect's)."""

    name: str
    grid: object  # fda_ray.papers.grids.Grid
    profile: str
    row_keys: tuple[str, ...]
    values: tuple[float, ...]
    rows: tuple[dict, ...]


def command_of(directory: Path) -> str:
    """The command that ran a results directory (its sweep.json's)."""
    return _manifest(directory).command


def _manifest(directory: Path):
    """What a results directory ran: its sweep.json (fda_ray.experiments.manifest)."""
    from fda_ray.experiments.manifest import read

    m = read(directory)
    if m is None:
        raise ValueError(f"dir={str(directory)!r} is invalid: it has no sweep.json (write one for a directory from "
                         "before manifests with: python -m fda_ray.collect --write-manifests DIR)")
    return m


@lru_cache(maxsize=None)
def load_sweep(name: str) -> Sweep:
    """docs/results/<name>: the trials its sweep.json planned (with that sweep's rows and values), their rows."""
    from fda_ray.experiments.records import collect
    from fda_ray.experiments.trials import plan_manifest
    from fda_ray.papers.grids import GRIDS

    directory = RESULTS / name
    m = _manifest(directory)
    if m.kind != "grid":
        raise ValueError(f"dir={name!r} is invalid: it holds a search, not a grid sweep")
    grid = GRIDS[m.name]
    trials = plan_manifest(grid, m)
    trials = _as_recorded(trials, directory / "trials")
    planned = {t.row for t in trials}
    row_keys = tuple(r.key for r in grid.rows if r.key in planned)
    cols = tuple(v for v in grid.values if any(t.value == v or v in t.values for t in trials))
    rows, _ = collect(trials, grid, directory / "trials")
    return Sweep(name, grid, m.profile, row_keys, cols, tuple(rows))


def _as_recorded(trials: list, records: Path) -> list:
    """The planned trials, each replaced by the folder's record of the same (row, value, seed, kind) where the plan's
    key has none and the record differs from it only by a documented default change (records.MOVED_DEFAULTS: the
    DomainBed oracle's learning rate was the sources' before 2026-11-29): still that cell's record, which the page
    describes (its build marker says which build). Any other difference: the plan's own key, read as not run."""
    from fda_ray.experiments.records import ROWS_FILE, finished, moved_by_a_documented_default

    missing = {t.key for t in trials if not (records / t.key / ROWS_FILE).is_file()}
    if not missing:
        return trials
    by_cell: dict[tuple, list] = {}
    for rec in finished(records):
        by_cell.setdefault((rec.trial.row, rec.trial.value, rec.trial.seed, rec.trial.kind), []).append(rec.trial)
    out = []
    for t in trials:
        found = [r for r in by_cell.get((t.row, t.value, t.seed, t.kind), []) if t.key in missing
                 and moved_by_a_documented_default(records / r.key, t)]
        out.append(found[0] if len(found) == 1 else t)
    return out


@lru_cache(maxsize=None)
def load_found(name: str, grid_name: str) -> Sweep:
    """docs/results/<name>: every finished trial recorded under its trials/ (whatever command ran it, every seed
    found; a directory without a summary.md, or one that later launches added seeds to), read as grid
    `grid_name`'s trials. The rows and columns are the grid's that have a finished trial."""
    from fda_ray.experiments.records import finished
    from fda_ray.experiments.records import collect
    from fda_ray.papers.grids import GRIDS

    grid = GRIDS[grid_name]
    records = RESULTS / name / "trials"
    trials = [rec.trial for rec in finished(records)]
    rows, _ = collect(trials, grid, records)
    if not rows:
        raise ValueError(f"dir={name!r} is invalid: no finished trial under docs/results/{name}/trials")
    row_keys = tuple(r.key for r in grid.rows if any(x["row"] == r.key for x in rows))
    values = tuple(v for v in grid.values if any(x["grid_value"] == v for x in rows))
    return Sweep(name, grid, "", row_keys, values, tuple(rows))


def _sweep(name: str, grid: str | None = None) -> Sweep:
    """load_sweep(name), or with a grid name every trial found there (load_found)."""
    return load_found(name, grid) if grid else load_sweep(name)


# ---------------------------------------------------------------- reading a sweep's rows

def _final(s: Sweep, metric: str, value: str | None = None,
           last: str | int = 1) -> dict[tuple[str, float], dict[int, float]]:
    final = tables.final(list(s.rows), metric, int(last))
    keep = None if value is None else {float(x) for x in str(value).split(",")}  # one value or several: "0,1"
    return {kv: x for kv, x in final.items() if keep is None or kv[1] in keep}


def _runs(s: Sweep, metric: str, rows: tuple[str, ...], value: str | None = None) -> dict[tuple, dict[int, float]]:
    runs = tables.runs(list(s.rows), metric)
    keep = None if value is None else {float(x) for x in str(value).split(",")}  # one value or several: "0.4,0.6"
    picked = {k: r for k, r in runs.items() if k[0] in rows and (keep is None or k[1] in keep)}
    if not picked:
        raise ValueError(f"{s.name!r} has no run of {', '.join(rows)}" + (f" at {value}" if value else ""))
    return picked


def _epoch(s: Sweep, run: tuple[str, float, int], round_: int) -> int:
    """A recorded round (from 0) of a Finetune_Offline run as its fine-tuning epoch, counted from 1: the rounds of
    phase "finetune" follow the Source Only rounds (recorded in some sweeps, not in others)."""
    k, v, sd = run
    first = [r["round"] for r in s.rows if r["row"] == k and r["grid_value"] == v and int(r["seed"]) == sd
             and r.get("phase") == "finetune"]
    if not first:
        raise ValueError(f"{s.name!r}: the run {k!r} at {v}, seed {sd}, has no fine-tuning epoch")
    return round_ - min(first) + 1


def _mean_of(x) -> float | None:
    """A logged metric as one number: a per-client or per-source list's mean (JSON text or a list), else itself."""
    if isinstance(x, str):
        x = json.loads(x)
    if x is None or (isinstance(x, list) and not x):
        return None
    return statistics.fmean(_mean_of(y) for y in x) if isinstance(x, list) else float(x)


def _last_rounds(s: Sweep) -> dict[tuple[str, float, int], dict]:
    """(row, grid value, seed) -> the trial's last recorded round (its row dict)."""
    out: dict[tuple[str, float, int], dict] = {}
    for r in s.rows:
        k = (r["row"], r["grid_value"], int(r["seed"]))
        if k not in out or r["round"] > out[k]["round"]:
            out[k] = r
    return out


def _one_run(s: Sweep, row: str, value: str, seed: str | None = None) -> dict[int, float]:
    """The cell's only run (seed=N: that seed's run)."""
    runs = [r for (k, v, sd), r in tables.runs(list(s.rows)).items()
            if k == row and v == float(value) and (seed is None or sd == int(seed))]
    if len(runs) != 1:
        raise ValueError(f"{s.name!r} has {len(runs)} runs of {row!r} at {value}; one is needed")
    return runs[0]


def _cell_rows(s: Sweep, row: str, value: str, seed: str | None) -> list[dict]:
    """The recorded rounds of one run (seed=N; without it, the cell's only seed), in round order."""
    rows = [r for r in s.rows if r["row"] == row and r["grid_value"] == float(value)]
    seeds = sorted({int(r["seed"]) for r in rows})
    if seed is None and len(seeds) != 1:
        raise ValueError(f"{s.name!r} has {len(seeds)} seeds of {row!r} at {value}; name one with seed=")
    pick = seeds[0] if seed is None else int(seed)
    out = sorted((r for r in rows if int(r["seed"]) == pick), key=lambda r: r["round"])
    if not out:
        raise ValueError(f"{s.name!r} has no run of {row!r} at {value}, seed {seed}")
    return out


def _as_list(v):
    """A logged list metric as a list (the parquet path stores it as JSON text)."""
    return json.loads(v) if isinstance(v, str) else v


# ---------------------------------------------------------------- spec words and the numbers' text

def _labelled(pairs: tuple[str, ...]) -> list[tuple[str, str]]:
    """ROW:LABEL words -> [(row, label)]."""
    bad = [p for p in pairs if ":" not in p]
    if bad:
        raise ValueError(f"{bad[0]!r} is invalid: a row is named ROW:LABEL")
    return [tuple(p.split(":", 1)) for p in pairs]


def _with_ci(values: list[float], digits: int) -> str:
    """"69.1 ± 0.8" (mean ± 95 % half-width) for 2+ seeds, "69.1 (one seed)" for one."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (one seed)"
    mean, half, _ = tables.mean_ci(values)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def _paired_text(d: list[float], what: str, spread: str | None, digits: str, generator: str) -> str:
    """Paired differences d as "+2.1 points (95 % interval -4.0 to +8.2; higher in 2 of 3)". An error with fewer than
    2 pairs, when the mean is not positive (the claim should be stated the other way round), or when spread=within
    (the interval's low end is <= 0) or spread=outside (it is above 0) says otherwise."""
    if len(d) < 2:
        raise ValueError(f"{generator}: {what} has {len(d)} pair(s); an interval needs 2 or more")
    mean, half, _ = tables.mean_ci(d)
    if not mean > 0:
        raise ValueError(f"{generator}: {what} is {mean:.2f} on average, not positive")
    if spread is not None:
        if spread not in ("within", "outside"):
            raise ValueError(f"spread={spread!r} is invalid: within or outside")
        if (mean - half > 0) != (spread == "outside"):
            raise ValueError(f"{generator}: {what} is no longer {spread} the seeds' spread "
                             f"(interval's low end {mean - half:+.2f})")
    n = int(digits)
    return (f"{mean:+.{n}f} points (95 % interval {mean - half:+.{n}f} to {mean + half:+.{n}f}; higher in "
            f"{sum(x > 0 for x in d)} of {len(d)})")


def _signed(x: float, digits: int = 2) -> str:
    """+0.11 / −4.48 (a typographic minus, as the pages print a gap to the paper)."""
    return f"{x:+.{digits}f}".replace("-", "\u2212")


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
