"""A sweep's summary.md: the final target test accuracy per table row and grid value (mean and the 95 % confidence
half-width over seeds, Student's t, as `fda_ray.collect` prints it) beside the paper's number, gaps over GAP points
marked; AUC for binary tasks and the mean of the last LAST_ROUNDS rounds for the DomainBed grids; the failed trials;
and the builds that recorded the trials (builds_line). The sweep command writes it; the results pages reuse it.
"""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Sequence

from fda_ray.core.storage import StoragePath
from fda_ray.experiments.tables import final_accuracies, is_regression, mean_ci
from fda_ray.papers.grids import Grid

if TYPE_CHECKING:
    from fda_ray.experiments.manifest import Manifest

LAST_ROUNDS = 5  # Auto-weighted FDA's DomainBed metric: the mean accuracy of the last 5 rounds
GAP = 3.0  # points: a gap to the paper above this is marked and must be explained (docs/results)


def summarize(rows: list[dict], failures: list[dict], grid: Grid, profile: str, row_keys: Sequence[str],
              values: Sequence[float], command: str) -> tuple[str, dict]:
    """summary.md text and the same numbers as a dict: final accuracy (%) per row x value (and, for the
    DomainBed grids, the mean of the last 5 rounds, which Auto-weighted FDA reports there)."""
    cells: dict[str, dict[str, Any]] = {}
    # a regression task (the synthetic data of Auto-weighted FDA App. B) has no accuracy (NaN): its table is the loss
    regression = is_regression(rows)
    what = "Final target test loss (MSE, lower is better)" if regression else "Final target test accuracy (%)"
    lines = [f"# Sweep `{grid.name}` ({profile} profile)", "",
             f"{what}, ours / paper ({grid.paper_ref or 'no published numbers'}); "
             f"mean ± the 95 % confidence half-width over seeds (Student's t) where n > 1, as `python -m "
             f"fda_ray.collect` and the results pages print it; **!** marks a gap of more than {GAP:g} points.", "",
             *([f"Profile `{profile}`: {sentence(grid.profiles[profile].note)}{changed_by(command)}", ""]
               if grid.profiles[profile].note else []),
             f"Command: `{command}`", ""]
    binary = any(r.get("auc") is not None for r in rows)  # Healthcare FDA's tasks: AUC beside accuracy
    tables = [("accuracy", 1)] + ([("auc", 1)] if binary else []) + \
        ([("last5", LAST_ROUNDS)] if grid.variable == "test_env" and not binary else [])
    for name, k in tables:
        final = final_accuracies(rows, last=k, metric="auc" if name == "auc" else "loss" if regression else
                                 "accuracy", scale=1.0 if regression else 100.0)
        paper_table = grid.paper_auc if name == "auc" else grid.paper
        if name == "last5":
            what = "test loss" if regression else "test accuracy (%)"
            lines += ["", f"Mean target {what} of the last {k} rounds (Auto-weighted FDA's metric), ours / paper:", ""]
        elif name == "auc":
            lines += ["", "Final target test AUC (%), ours / paper:", ""]
        lines += ["| method | " + " | ".join(grid.value_label(v) for v in values) + " |",
                  "|" + "---|" * (len(values) + 1)]
        for key in row_keys:
            out = []
            for v in values:
                accs = list(final.get((key, v), {}).values())
                paper = paper_table.get(key, {}).get(v)
                cell = "-"
                if accs:
                    mean = statistics.fmean(accs)
                    half, sd = mean_ci(accs)[1:] if len(accs) > 1 else (0.0, 0.0)
                    cell = f"{mean:.2f} ± {half:.2f} (n={len(accs)})" if len(accs) > 1 else f"{mean:.2f}"
                    entry = {"mean": mean, "std": sd, "ci95": half, "n": len(accs), "paper": paper}
                    if name == "accuracy":
                        cells.setdefault(key, {})[f"{v:g}"] = entry
                    else:
                        cells[key][f"{v:g}"][name] = {"mean": mean, "std": sd, "ci95": half}
                if paper is not None:
                    cell += f" / {paper:.2f}" + (" **!**" if accs and abs(statistics.fmean(accs) - paper) > GAP else "")
                out.append(cell)
            lines.append(f"| {grid.row(key).label} | " + " | ".join(out) + " |")
    if failures:
        lines += ["", f"## Failed trials ({len(failures)})", ""]
        for f in failures:
            at = "all" if f["value"] is None else f"{f['value']:g}"
            lines.append(f"- {f['row']} {grid.variable}={at} seed={f['seed']} ({f['attempts']} attempts): {f['error']}")
    return "\n".join(lines) + "\n", {"grid": grid.name, "profile": profile, "cells": cells, "failures": failures,
                                    "metric": "loss" if regression else "accuracy"}


def sentence(text: str) -> str:
    """A note as a sentence: a grid file's note without a full stop ran into the next one ("a first look The
    command changed")."""
    text = text.rstrip()
    return text if not text or text[-1] in ".!?" else text + "."


def changed_by(command: str, manifest: Manifest | None = None) -> str:
    """" The command changed: rounds=4, seeds=2 (the tables are what ran)." where a sweep's or search's command set
    fields, seeds or rows beside its profile (whose note says what the profile alone runs: "50 rounds ... 3 seeds"
    beside a table of 4 rounds and 2 seeds misled); "" where it set none. From `manifest` (what the directory's
    sweep.json says ran: a Python search() call has no command line to read) or else the command line."""
    from fda_ray.experiments.arguments import manifest_from_command

    m = manifest
    if m is None:
        try:
            m = manifest_from_command(command)
        except Exception:  # (no command: a table redrawn by collect or the pages)
            return ""
    parts = [f"{k}={v}" for k, v in sorted(m.overrides.items())]
    parts += [f"seeds={m.seeds}"] if m.seeds else []
    parts += [f"methods={','.join(m.rows)}"] if m.rows else []
    return f" The command changed: {', '.join(parts)} (the tables are what ran)." if parts else ""


def builds_line(records: StoragePath, keys: set[str] | None = None) -> tuple[list[dict], str]:
    """The builds (fda_ray.core.build) that recorded the table's trials `keys` (None: every trial under `records`):
    ([{build fields, "trials"}], a summary.md paragraph naming each, and the trials whose build is unknown)."""
    from fda_ray.core.build import FIELDS, differences
    from fda_ray.experiments.records import recorded_builds

    found: list[dict] = []
    for env, names in recorded_builds(records).items():
        n = len(names) if keys is None else len(set(names) & keys)
        if n:
            found.append({**dict(zip(FIELDS, env)), "trials": n})
    # A field a record does not name cannot disagree (records made before it was recorded; a trial whose method
    # aggregates without the kernels names no aggregation): such builds are one, named by the fields they name.
    known: list[dict] = []
    for b in sorted((b for b in found if any(b[k] is not None for k in FIELDS)),
                    key=lambda b: -sum(b[k] is not None for k in FIELDS)):
        same = next((g for g in known if not differences(g, b)), None)
        if same is None:
            known.append(dict(b))
        else:
            same.update({k: b[k] for k in FIELDS if same[k] is None}, trials=same["trials"] + b["trials"])
    parts = [", ".join(f"{k} {b[k]}" for k in FIELDS if b[k] is not None) + f" ({b['trials']} trials)" for b in known]
    unknown = sum(b["trials"] for b in found if all(b[k] is None for k in FIELDS))
    text = "" if not found else "\nRecorded by " + ("; ".join(parts) if parts else "an unknown build") + (
        f"; {unknown} trials recorded before builds were kept: their build is unknown" if unknown and parts else "") + \
        (" (several builds: the table mixes their numbers)" if len(known) > 1 else "") + ".\n"
    return found, text
