"""Generators for searches: the selections' reruns on fresh seeds (docs/results/<search>/selection.json names the
trials; the reference rows' trials lie beside them)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from tools.pages import records
from tools.pages.engine import GENERATORS
from tools.pages.records import _paired_text, _with_ci


def _finished(name: str) -> tuple:
    """The finished trials of docs/results/<name>/trials."""
    return _finished_in(records.RESULTS / name / "trials")


@lru_cache(maxsize=None)
def _finished_in(folder: Path) -> tuple:
    """A folder's finished trials, read once per process: a page names a search's cells dozens of times, and the
    records do not change while the pages are written."""
    from fda_ray.experiments.records import finished

    return tuple(finished(folder))


def _search_finals(name: str, keys: list[str]) -> dict[int, float]:
    """{seed: final test accuracy (%)} of the finished trials `keys` of docs/results/<name>/trials."""
    from fda_ray.papers.selection import final_value

    wanted = set(keys)
    out = {}
    for rec in _finished(name):
        if rec.path.name in wanted:
            v = final_value(rec.data["rows"], "accuracy")
            if v is not None:
                out[int(rec.trial.seed)] = 100 * v
    return out


def _search_cell(name: str, study_or_value: str, rule_or_row: str) -> dict[int, float]:
    """A search's rerun numbers by seed: a study's rule's selection ("fedgp @ noise 0.6" oracle: the trial keys
    selection.json lists), or a reference row at a value (0.6 fedda_auto: its trials under trials/)."""
    path = records.RESULTS / name / "selection.json"
    if not path.is_file():
        raise ValueError(f"{name!r} is not a search's directory: {str(path)!r} does not exist")
    selection = json.loads(path.read_text())
    if study_or_value in selection["studies"]:
        keys = selection["studies"][study_or_value].get("reruns", {}).get(rule_or_row)
        if keys is None:
            raise ValueError(f"{name!r}: study {study_or_value!r} has no rerun of rule {rule_or_row!r}")
    else:
        value = float(study_or_value)
        keys = [rec.path.name for rec in _finished(name)
                if rec.trial.row == rule_or_row and rec.trial.value is not None and float(rec.trial.value) == value]
    got = _search_finals(name, keys)
    if not got:
        raise ValueError(f"{name!r} has no finished rerun of {study_or_value!r} {rule_or_row!r}")
    return got


@GENERATORS.register("search-ci")
def search_ci(name: str, study_or_value: str, rule_or_row: str, digits: str = "2") -> str:
    """A search's number to report: the selected configuration's (or a reference row's) final test accuracy on the
    fresh seeds, mean ± 95 % half-width: `search-ci search-beta "fedgp @ noise 0.6" oracle`, or
    `search-ci search-beta 0.6 fedda_auto`."""
    return _with_ci(list(_search_cell(name, study_or_value, rule_or_row).values()), int(digits))


@GENERATORS.register("search-diff-ci")
def search_diff_ci(name: str, a_study_or_value: str, a: str, b_study_or_value: str, b: str,
                   digits: str = "1", spread: str | None = None) -> str:
    """Search cell A minus cell B (each as search-ci names it), paired by seed, with its 95 % interval."""
    x, y = _search_cell(name, a_study_or_value, a), _search_cell(name, b_study_or_value, b)
    d = [x[k] - y[k] for k in sorted(x) if k in y]  # paired by seed
    return _paired_text(d, f"in {name!r}, {a} minus {b}", spread, digits, "search-diff-ci")


@GENERATORS.register("search-points")
def search_points(name: str, study: str, status: str = "stopped", rounds: str | None = None, val: str | None = None,
                  digits: str = "2") -> str:
    """The searched value of a study's trials of one status (selection.json), ascending: those that reported
    `rounds` rows (its `rounds` entry: the last round's index) and ended at validation `val`, if given:
    `search-points search-aux-alpha-paper "fedavg_finetune_auxinfo_gp @ shirt held out (test_env 0)" rounds=11
    val=0.75` gives "1.64, 1.90, 1.91 and 1.97". A one-knob space's values (else the error says so)."""
    import math

    selection = json.loads((records.RESULTS / name / "selection.json").read_text())
    if study not in selection["studies"]:
        raise ValueError(f"search-points: {name!r} has no study {study!r}")
    picked = []
    for e in selection["studies"][study]["trials"]:
        if e["status"] != status or (rounds is not None and e.get("rounds") != int(rounds)) or \
                (val is not None and not math.isclose(e.get("val_accuracy") or -1.0, float(val))):
            continue
        if len(e["point"]) != 1:
            raise ValueError(f"search-points: {name!r} {study!r} searches {len(e['point'])} knobs; it lists one")
        picked.append(next(iter(e["point"].values())))
    if not picked:
        raise ValueError(f"search-points: {name!r} {study!r} has no {status} trial with rounds={rounds} val={val}")
    texts = [f"{v:.{int(digits)}f}" for v in sorted(picked)]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]
