"""The committed results folders' own summary.md files, kept as the sweep command writes them today.

A sweep or a search writes docs/results/<name>/summary.md when it ends (fda_ray.experiments.summary.summarize,
fda_ray.experiments.search.summarize). A folder written by an older summariser keeps that summariser's tables (before
2026-11-28: mean ± the standard deviation over seeds, where the pages print mean ± the 95 % confidence half-width), and
the pages link those files as "the table below, generated". This module renders a folder's tables again from its
records with today's summariser and keeps the rest of the file as the run wrote it (its command, its profile's note as
it was then, the builds line, the wall time, the figures, the failed trials):

    grid sweep  summarize(the rows of the trials its sweep.json planned, ...)   (tools.pages.records.load_sweep)
    search      summarize(selection.json's studies, reruns and references, ...)

`python -m tools.pages` rewrites the stale files and `--check` lists them (exit 1), as it does for the pages' blocks.
A folder without a sweep.json (one written before manifests and never given one) is not a sweep's and is left alone.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from tools.pages import records

# The first line of what the sweep (or the search) appends after the summariser's tables: the file's own part that
# the records cannot give again (the wall time of that launch, its interruption, its failures, its figures).
_KEPT = re.compile(r"^(## Failed trials|\*\*Interrupted\*\*|Recorded by |Wall time|!\[)")
_COMMAND = re.compile(r"^Command: `(?P<command>.*)`$", re.M)
_PROFILE = re.compile(r"^Profile `[^`]*`: .*$", re.M)  # the profile as it was when the run ran (a note changes later)


def _split(text: str, path: Path) -> tuple[str, str]:
    """(the summariser's part, the rest) of a summary.md's text."""
    lines = text.split("\n")
    cut = next((i for i, line in enumerate(lines) if _KEPT.match(line)), len(lines))
    head, rest = "\n".join(lines[:cut]), "\n".join(lines[cut:])
    if not _COMMAND.search(head):
        raise ValueError(f"summary.md={str(path)!r} is invalid: no 'Command:' line before its tables")
    return head, rest


def _join(head: str, rest: str) -> str:
    """The summariser's text (ending in one newline) and the kept part, one blank line between, as the sweep
    writes them."""
    return head.rstrip("\n") + "\n" + ("\n" + rest if rest else "")


def refreshed(directory: Path) -> str | None:
    """directory/summary.md as today's summariser writes its tables from the folder's records, the rest kept; None
    for a folder without a summary.md or a sweep.json."""
    from fda_ray.experiments.manifest import read

    path = directory / "summary.md"
    m = read(directory)
    if m is None or not path.is_file():
        return None
    text = path.read_text()
    head, rest = _split(text, path)
    command = _COMMAND.search(head)["command"]
    if m.kind == "search":
        new = _search_tables(directory, m.name, m.profile, command)
    else:
        from fda_ray.experiments.summary import summarize

        if directory.resolve() != (records.RESULTS / directory.name).resolve():
            raise ValueError(f"dir={str(directory)!r} is invalid: not a folder of {records.RESULTS}")
        sweep = records.load_sweep(directory.name)
        new, _ = summarize(list(sweep.rows), [], sweep.grid, sweep.profile, sweep.row_keys, sweep.values, command)
        rest = _predicted_again(rest, sweep)
    kept = _PROFILE.search(head)
    if kept is not None and _PROFILE.search(new) is not None:
        new = _PROFILE.sub(lambda _: kept.group(0), new, count=1)
    return _join(new, rest)


def _predicted_again(rest: str, sweep: records.Sweep) -> str:
    """The kept part's "rule the theory predicts" section rendered again from the records (fda_ray.experiments.
    figures.predicted_table): it is a table of the records, as the summariser's are (a shared Source Only trial's
    estimates at noise 0 were once counted under every noise level)."""
    from fda_ray.experiments.figures import PREDICTED_HEADER, predicted_table

    lines = rest.split("\n")
    if PREDICTED_HEADER not in lines:
        return rest
    header = lines.index(PREDICTED_HEADER)
    first_row = next(i for i in range(header, len(lines)) if lines[i].startswith("|"))
    end = next((i for i in range(first_row, len(lines)) if not lines[i].startswith("|")), len(lines))
    table = predicted_table(list(sweep.rows), sweep.grid, sweep.row_keys, sweep.values)  # (from its blank line)
    return "\n".join(lines[:header - 1] + table + lines[end:])


def _search_tables(directory: Path, name: str, profile: str, command: str) -> str:
    from fda_ray.experiments.search import load_search, summarize

    sel = json.loads((directory / "selection.json").read_text())
    references = {float(v): refs for v, refs in sel["references"].items()}
    return summarize(load_search(name), profile, sel["studies"], sel["reruns"], references, command,
                     sel["num_samples"], sel["scheduler"], sel["search_alg"])


def summary_files(root: Path | None = None) -> list[Path]:
    """The committed results folders that hold a summary.md."""
    return sorted(p.parent for p in (root or records.RESULTS).glob("*/summary.md"))


def stale(write: bool) -> list[Path]:
    """The summary.md files whose tables differ from today's summariser over their records; rewritten if `write`."""
    out = []
    for directory in summary_files():
        new = refreshed(directory)
        path = directory / "summary.md"
        if new is not None and new != path.read_text():
            out.append(path)
            if write:
                path.write_text(new)
    return out
