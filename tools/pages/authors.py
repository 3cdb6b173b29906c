"""Generators for runs of the authors' own scripts (tools/authors_fedgp.py): docs/results/<name>/ holds, per run,
the script's `server_results_<iter>.json` (the global model's test accuracy after each main round, a fraction)
and the runner's `run_<iter>.json` (commit, build, wall time). Rounds are the script's: round 1 is the first
round after its 2 FedAvg warm-up rounds (fda-ray's round 3)."""
from __future__ import annotations

import fnmatch
import json

from tools.pages import records
from tools.pages.engine import GENERATORS


def _accuracies(name: str, pattern: str) -> dict[str, list[float]]:
    """{iter: [accuracy % after main round 1, 2, ...]} for the runs whose iter matches the glob `pattern`."""
    folder = records.RESULTS / name
    if not folder.is_dir():
        raise ValueError(f"authors: {str(folder)!r} does not exist")
    runs = {}
    for path in sorted(folder.glob("server_results_*.json")):
        it = path.stem[len("server_results_"):]
        if fnmatch.fnmatchcase(it, pattern):
            runs[it] = [100 * a for a in json.loads(path.read_text())["test"]["acc"]]
    if not runs:
        raise ValueError(f"authors: no run of {name!r} matches {pattern!r}")
    return runs


def _pick(acc: list[float], what: str, round: str | None, it: str) -> float:
    if what == "final":
        return acc[-1]
    if what == "peak":
        return max(acc)
    if what == "at" and round is not None:
        if not 1 <= int(round) <= len(acc):
            raise ValueError(f"authors: run {it!r} has rounds 1-{len(acc)}, not {round}")
        return acc[int(round) - 1]
    raise ValueError(f"what={what!r} is invalid: final, peak, or at with round=N")


@GENERATORS.register("authors-run")
def authors_run(name: str, it: str, what: str = "final", round: str | None = None, digits: str = "1") -> str:
    """One run's test accuracy (%): what=final (after its last round), peak, or at (round=N, the script's main
    rounds counted from 1)."""
    acc = _accuracies(name, it)
    if it not in acc:
        raise ValueError(f"authors: {name!r} has no run named {it!r}")
    return f"{_pick(acc[it], what, round, it):.{int(digits)}f}"


@GENERATORS.register("authors-ci")
def authors_ci(name: str, pattern: str, what: str = "final", round: str | None = None, digits: str = "1") -> str:
    """The runs matching `pattern` (a glob over their iter names, one run per seed): mean ± 95 % half-width of
    what/round (as authors-run), then "(n = K)"."""
    acc = _accuracies(name, pattern)
    values = [_pick(a, what, round, it) for it, a in acc.items()]
    return f"{records._with_ci(values, int(digits))} (n = {len(values)})"


@GENERATORS.register("authors-list")
def authors_list(name: str, pattern: str, what: str = "final", round: str | None = None, digits: str = "1") -> str:
    """The matching runs' values, in the order of their names: "62.7, 60.1, 64.0"."""
    acc = _accuracies(name, pattern)
    return ", ".join(f"{_pick(a, what, round, it):.{int(digits)}f}" for it, a in acc.items())


@GENERATORS.register("authors-build")
def authors_build(name: str, pattern: str = "*") -> str:
    """Who recorded the matching runs: "jackyzyb/AutoFedGP 7b10ca9, torch 2.15.0+cu132, NumPy 2.4.6"; an error
    when they disagree (one sentence would then describe two builds)."""
    folder = records.RESULTS / name
    seen = set()
    for path in sorted(folder.glob("run_*.json")):
        if fnmatch.fnmatchcase(path.stem[len("run_"):], pattern):
            r = json.loads(path.read_text())
            env = r["environment"]
            seen.add(f"{r['repository']} {(r['commit'] or 'unknown commit')[:7]}, torch {env['torch']}, "
                     f"NumPy {env['numpy']}")
    if len(seen) != 1:
        raise ValueError(f"authors-build: {name!r} {pattern!r} has {len(seen)} builds: {sorted(seen)}")
    return seen.pop()
