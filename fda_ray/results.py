"""Sweep and search records as one pandas DataFrame: every round of every finished trial.

    import fda_ray.results
    df = fda_ray.results.load("docs/results/fmnist-noise", "docs/results/fmnist-noise-seeds-0.6")
    last = df[df["round"] == df.groupby("trial")["round"].transform("max")]  # each trial's final round
    last = last.drop_duplicates(["trial", "value"])  # (a trial in both folders: once)
    last[last.row == "fedgp"].groupby("value").accuracy.mean()

One row per (trial, round), read from each directory's `trials/<key>/trial.json` (what the trial is) and
`rows.json` (its resolved config, its rounds, the build that recorded it); a search's trial that ASHA stopped on
its last round (every round trained) from its `stopped.json`, as the search's selection counts it. Columns, in this
order:
- `directory` (the folder's name), `trial` (the record's key), `row` (the grid row or the search study's
  method), `value` (the grid value), `seed`, `kind` ("run", or "finetune" for a fine-tuning trial);
- the round's own columns as the run logged them: `round`, `phase`, `accuracy` (a fraction), `loss`, ... (a
  metric logged per client stays a list in one cell);
- the full resolved RunConfig, one column a field (`lr_source`, `batch_target`, `rounds`, ...); a field named
  like a column some round of the trial logs (FedWCA's `beta` and `alpha`) is `config_<name>` in all its rows;
- the build: `build_torch`, `build_torchvision`, `build_numpy`, `build_code` (fda-ray's number-changing code
  version), `build_python`, `build_ray`, `build_machine` (None in records made before builds were recorded);
- `trial_seconds`: the trial's own run time (a trial fused in a group or served by a fusion server: its own work
  and its jobs' share of the batches it trained in, not the wall time it waited through for the other trials'
  rounds, which its record keeps as `fused.wall_seconds`).
A trial shared by several grid values (the noise grid's Source Only, evaluated at every noise level) gives one set
of rows per value, `accuracy` and `noise` its accuracy and the noise level at that value, `trained_noise` the noise it
trained with. A sweep's results.parquet has these columns too (`seed` and `value` included), and the grid's
(`grid`, `grid_variable`, `grid_value`: the same number as `value`); `directory` is load's own. A trial recorded in several of the directories appears
once per directory (the `directory` column tells them
apart). A record that cannot be read (fda_ray.experiments.trials.record_damage) is left out with one warning line.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from fda_ray.experiments.records import BUILD_COLUMNS, Record, config_columns, finished, shared_value_row

if TYPE_CHECKING:
    import pandas

IDENTITY = ("directory", "trial", "row", "value", "seed", "kind")
BUILD = BUILD_COLUMNS


def trials_dir(directory: str | os.PathLike) -> Path:
    """DIR/trials, or DIR itself when it is the trials folder."""
    from fda_ray.core.storage import is_uri, sync_hint

    if is_uri(str(directory)):  # (Path would fold s3://b/x into s3:/b/x)
        raise FileNotFoundError(f"dir={str(directory)!r} is invalid: not a folder{sync_hint(directory)}")
    d = Path(directory)
    trials = d / "trials" if (d / "trials").is_dir() else d
    if not trials.is_dir():
        raise FileNotFoundError(f"dir={str(directory)!r} is invalid: neither it nor {str(d / 'trials')!r} is a "
                                "folder of trial records")
    return trials


def trial_rows(record: Record, directory: str) -> list[dict]:
    """One finished trial's rounds as flat dicts with the columns the module docstring lists."""
    trial, data = record.trial, record.data
    identity = {"directory": directory, "trial": record.path.name, "row": trial.row, "value": trial.value,
                "seed": trial.seed, "kind": trial.kind}
    columns = config_columns(data, clash=identity)  # the resolved config, then the build
    # A trial shared by several grid values (the noise grid's Source Only, evaluated at every noise level: its
    # trial.json has value None and the values in "values") gives one set of rows per value, its accuracy and loss
    # there, as the sweep's own results.parquet does (records.shared_value_row).
    shared = trial.value is None and trial.values
    per_value = [(v, i) for i, v in enumerate(trial.values)] if shared else [(identity["value"], None)]
    out = []
    for value, i in per_value:
        for r in data["rows"]:
            own = r if i is None else shared_value_row(r, i, value, data["config"])
            # (a shared row's noise is the level it was evaluated at, over the config's trained noise)
            out.append({**identity, "value": value, **own, **{k: v for k, v in columns.items() if k not in own},
                        "trial_seconds": data.get("seconds")})
    return out


def load(*directories: str | os.PathLike) -> "pandas.DataFrame":
    """Every round of every finished trial under the sweep or search directories, as one DataFrame."""
    import pandas

    if not directories:
        raise ValueError("directories=() is invalid: name one or more sweep or search directories")
    rows: list[dict] = []
    for directory in directories:
        name = Path(directory).name if Path(directory).name != "trials" else Path(directory).parent.name
        records = sorted([*finished(trials_dir(directory), where=str(directory)),  # a damaged record: a warning line
                          *stopped_complete(trials_dir(directory))], key=lambda r: r.path.name)
        for rec in records:
            rows += trial_rows(rec, name)
    return pandas.DataFrame(rows)


def stopped_complete(trials: Path) -> list[Record]:
    """A search's trials that ASHA stopped at a rung that fell on their last round: every round trained, so finished
    (the search's selection and results.parquet count them so), though their rows are in stopped.json, not rows.json.
    Their config is the one stopped.json names (for an older one, the trial's resolved today); their run time was not
    recorded (None)."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.records import ROWS_FILE, _parsed_trial
    from fda_ray.experiments.search import STOPPED_FILE, read_stopped

    out = []
    for rec in sorted(trials.iterdir(), key=lambda p: p.name):
        if (rec / ROWS_FILE).is_file() or not (rec / STOPPED_FILE).is_file():
            continue
        stopped, _ = read_stopped(storage_path(rec))  # (a damaged one: left out, as a damaged rows.json is)
        trial, _ = _parsed_trial(rec)
        if stopped is None or trial is None or not stopped.get("complete"):
            continue
        config = stopped.get("config")  # what it ran with (stopped.json written before 2026-11-29 lacks it)
        if config is None:
            try:
                config = trial.config().resolved().to_dict()
            except ValueError:  # (its data needed to resolve, and absent here)
                config = dict(trial.params)
        out.append(Record(rec, trial, {"config": config, "rows": stopped["rows"], "seconds": None,
                                       "environment": stopped.get("environment")}))
    return out


if __name__ == "__main__":  # a library module run as a program (`python -m fda_ray.results`): say which program is meant
    import sys

    from fda_ray.experiments.commands import not_a_program

    sys.exit(not_a_program("fda_ray.results", "python -m fda_ray.collect DIR..."))
