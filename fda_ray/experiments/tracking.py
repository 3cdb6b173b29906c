"""Experiment tracking: every trial's per-round metrics in TensorBoard, MLflow or Weights & Biases.

    python -m fda_ray.sweep --grid noise                          # TensorBoard events under <out>/tensorboard/
    tensorboard --logdir sweeps/noise-quick/tensorboard
    python -m fda_ray.sweep --grid noise --track tensorboard,mlflow   # + MLflow (pip install 'fda-ray[mlflow]')
    python -m fda_ray.sweep --grid noise --track wandb            # Weights & Biases (pip install 'fda-ray[wandb]')
    python -m fda_ray.sweep --grid noise --track none

The sweep's process is the one tracker for both backends: it hears each trial start, each round's row (Ray Tune:
a Tune callback's on_trial_result; the local process pool: a queue its workers report to after every round) and
each trial settle, through the status (fda_ray.experiments.console.Progress), and hands them to the trackers. So
the same numbers reach the same places whichever backend ran them, and nothing is tracked twice when Tune retries.
Interruptions lose nothing and duplicate nothing: a ledger (<tracking folder>/tracked/<trial key>.json) keeps, per
tracker, the trial's run id and the last round that tracker holds. A trial resumed in a later launch reopens the same
run (MLflow's run id, W&B's id with resume="allow", TensorBoard's folder) and first logs the recorded rounds the
tracker lacks (from its state.pt: a launch cut off between a round's checkpoint and its report); a round the tracker
holds is never logged again (Tune retrying a trial). A run the tracker cannot reopen (another MLflow store now, a
removed folder) is a new run given every recorded round; a trial that starts again from round 0 (its record set
aside or removed) gets a new run. A trial that settled after its launch's trackers closed (it finished during the
Ctrl-C) has its run completed from its record when the next launch starts. --track none writes nothing; an object
store's sweeps keep a ledger per --out (tracked/<hash of the URI>/).

- tensorboard: one event file per trial under <out>/tensorboard/<trial key>/ (tensorboardX, which Ray brings):
  every numeric column of the round's row as a scalar at step = round; a list-valued column (beta_i per source) as
  one scalar per entry. On an object store (--out s3://...) the trackers' files go to ./tracking/<sweep>/ on the
  sweep's machine ($FDA_RAY_TRACKING_DIR/<sweep> when set), which the sweep says in one line.
- mlflow: one MLflow run per trial in the experiment "<grid>-<profile>", its fields as parameters, its rounds as
  metric steps; at the end FINISHED (a trial the scheduler stopped early too, tagged fda_ray.outcome=stopped),
  FAILED, or KILLED (the sweep was interrupted: its resume reopens the run); the tracking URI is
  $MLFLOW_TRACKING_URI or a SQLite store in <out>/mlflow.db (`mlflow ui --backend-store-uri sqlite:///<out>/mlflow.db`).
- wandb: one W&B run per trial in the project "fda-ray-<grid>-<profile>" (or $WANDB_PROJECT), grouped by it, its
  fields as config, its rounds as steps, exit code 0 when it finished or was stopped early (summary
  fda_ray.outcome); W&B's own settings apply ($WANDB_MODE=offline writes under <out>/wandb without a network; a
  resumed trial's second offline file has the same run id, and `wandb sync` joins them into one run).
Only the round's own columns are logged: Ray Tune's bookkeeping in a report (pid, time_this_iter_s, ...) and the
search's report count are not metrics of the trial.
A tracker that fails (a server that does not answer) says so in one warning line and is dropped; the sweep and its
records go on.
"""
from __future__ import annotations

import json
import math
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

TRACKERS = ("tensorboard", "mlflow", "wandb")
EXTRAS = {"mlflow": "mlflow", "wandb": "wandb"}  # pip install 'fda-ray[<extra>]'


class TrackingError(ValueError):
    """Bad --track: one line naming the value and what is allowed."""


def parse(text: str | None) -> list[str]:
    """--track's value: a comma list of TRACKERS, or "none"."""
    names = [x.strip() for x in (text or "").split(",") if x.strip()]
    if names == ["none"]:
        return []
    bad = [n for n in names if n not in TRACKERS]
    if bad or not names:
        raise TrackingError(f"track={text!r} is invalid: a comma-separated list of {', '.join(TRACKERS)}, or none")
    for n in names:
        if n in EXTRAS:
            try:
                __import__(EXTRAS[n])
            except ImportError:
                raise TrackingError(f"track={n!r} is invalid here: {EXTRAS[n]} is not installed (pip install "
                                    f"'fda-ray[{n}]')") from None
    return list(dict.fromkeys(names))


# What Ray Tune adds to a trial's report (ray.tune.result.AUTO_RESULT_KEYS and the few it sets besides) and the
# search's count of reports (ASHA's time attribute, fda_ray.experiments.tune.REPORTS_DONE): not the trial's metrics,
# and absent from the local backend's rows, so not logged (the same numbers reach the trackers on either backend)
NOT_METRICS = frozenset({
    "training_iteration", "time_total_s", "episodes_total", "timesteps_total", "node_ip", "hostname", "pid",
    "time_this_iter_s", "timestamp", "date", "time_since_restore", "timesteps_since_restore",
    "iterations_since_restore", "config", "checkpoint_dir_name", "done", "trial_id", "experiment_id",
    "experiment_tag", "should_checkpoint", "reports_done"})

# How a trial's run ends: "done" (every round), "stopped" (the scheduler stopped it early), "failed", or
# "interrupted" (the sweep was cut off; its resume reopens the run)
OUTCOMES = ("done", "stopped", "failed", "interrupted")


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a round's row worth a curve: finite numbers (not the round itself, not flags, not Tune's
    bookkeeping), and a list of numbers as one scalar per entry (beta_i/0, beta_i/1, ...)."""
    out: dict[str, float] = {}
    for k, v in row.items():
        if k in ("round", "seed") or k in NOT_METRICS or isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            if math.isfinite(v):
                out[k] = float(v)
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                        for x in v):
            out.update({f"{k}/{i}": float(x) for i, x in enumerate(v) if math.isfinite(x)})
    return out


class TensorBoard:
    name = "tensorboard"

    def __init__(self, logdir: Path) -> None:
        from tensorboardX import SummaryWriter

        self.logdir, self.writer_type, self.writers = logdir, SummaryWriter, {}

    def start(self, key: str, params: Mapping[str, Any], run_id: str | None) -> tuple[str | None, bool]:
        # a resumed trial writes a second event file into its folder: TensorBoard reads a folder's files as one run
        # (named apart by more than the second and host that name a file: a resume within the second kept one)
        reopened = any((self.logdir / key).glob("events.out.tfevents.*"))
        if key not in self.writers:
            self.writers[key] = self.writer_type(str(self.logdir / key), flush_secs=10,
                                                 filename_suffix=f".{os.getpid()}.{uuid.uuid4().hex[:8]}")
        return None, reopened

    def log(self, key: str, step: int, values: Mapping[str, float]) -> None:
        w = self.writers.get(key)
        if w is not None:
            for name, v in values.items():
                w.add_scalar(name, v, step)

    def end(self, key: str, outcome: str) -> None:
        w = self.writers.pop(key, None)
        if w is not None:
            w.close()


class MLflow:
    name = "mlflow"
    STATUS = {"done": "FINISHED", "stopped": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}

    def __init__(self, uri: str, experiment: str) -> None:
        from mlflow.tracking import MlflowClient

        from fda_ray.core.quiet import is_quiet

        if is_quiet():  # MLflow's SQLite store logs its schema migrations at INFO on the console (--verbose shows them;
            import logging  # set after the import, which configures MLflow's logger)

            for name in ("mlflow", "alembic"):
                logging.getLogger(name).setLevel(logging.WARNING)

        self.client = MlflowClient(tracking_uri=uri)
        got = self.client.get_experiment_by_name(experiment)
        self.experiment = got.experiment_id if got is not None else self.client.create_experiment(experiment)
        self.runs: dict[str, str] = {}

    def start(self, key: str, params: Mapping[str, Any], run_id: str | None) -> tuple[str | None, bool]:
        if key in self.runs:
            return self.runs[key], True
        if run_id is not None:  # the trial's run from a launch before: reopened (unless that store lost it)
            try:
                if self.client.get_run(run_id).info.experiment_id == self.experiment:
                    self.client.update_run(run_id, status="RUNNING")
                    self.runs[key] = run_id
                    return run_id, True
            except Exception:  # (another tracking URI now, or a deleted run: a new run, given every round)
                pass
        run = self.client.create_run(self.experiment, run_name=key, tags={"fda_ray.trial": key})
        self.runs[key] = run.info.run_id
        from fda_ray.experiments.records import dotted

        for k, v in dotted(params).items():
            self.client.log_param(run.info.run_id, k, str(v)[:500])
        return run.info.run_id, False

    def log(self, key: str, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        run = self.runs.get(key)
        if run is not None and values:
            import time

            now = int(time.time() * 1000)
            # MLflow names take "/" but not every character: beta_i/0 stays, as it does in TensorBoard
            self.client.log_batch(run, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def end(self, key: str, outcome: str) -> None:
        run = self.runs.pop(key, None)
        if run is not None:
            self.client.set_tag(run, "fda_ray.outcome", outcome)
            self.client.set_terminated(run, self.STATUS[outcome])


class WandB:
    name = "wandb"

    def __init__(self, project: str, group: str, directory: Path) -> None:
        import wandb

        self.wandb, self.project, self.group, self.dir, self.runs = wandb, project, group, directory, {}
        directory.mkdir(parents=True, exist_ok=True)

    def start(self, key: str, params: Mapping[str, Any], run_id: str | None) -> tuple[str | None, bool]:
        if key not in self.runs:
            # several trials run at once: each its own run object ("create_new"), none the global one; a resumed
            # trial continues its run (its id, resume="allow"; offline, a second file of that id, which `wandb
            # sync` joins: whether the project holds it cannot be asked here, so an id given counts as reopened)
            self.runs[key] = self.wandb.init(project=self.project, group=self.group, name=key, config=dict(params),
                                             dir=str(self.dir), reinit="create_new", id=run_id, resume="allow")
        return self.runs[key].id, run_id is not None

    def log(self, key: str, step: int, values: Mapping[str, float]) -> None:
        run = self.runs.get(key)
        if run is not None:
            run.log(dict(values), step=step)

    def end(self, key: str, outcome: str) -> None:
        run = self.runs.pop(key, None)
        if run is not None:
            run.summary["fda_ray.outcome"] = outcome
            run.finish(exit_code=0 if outcome in ("done", "stopped") else 1)


def record_params(out: Any, key: str) -> dict[str, Any]:
    """A trial's fields from its record (<out>/trials/<key>/trial.json: run_trial writes it before the first
    round); {} where it cannot be read."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.records import read_trial

    try:
        return dict(read_trial(storage_path(out) / "trials" / key).params)
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def recorded_rows(out: Any, key: str) -> tuple[list[Mapping[str, Any]], str | None]:
    """(a trial's recorded rows, how it settled: "done", "stopped" or None while it has not), read without touching
    its files: rows.json (finished), stopped.json (stopped early by the scheduler), else its state.pt (a running or
    cut-off trial's rounds so far); ([], None) where none can be read."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.records import STATE_FILE, _parsed_rows
    from fda_ray.experiments.search import STOPPED_FILE, read_stopped

    record = storage_path(out) / "trials" / key
    try:
        if (record / "rows.json").is_file():
            data, _ = _parsed_rows(record)
            return (list(data["rows"]), "done") if data is not None else ([], None)
        if (record / STOPPED_FILE).is_file():
            data, _ = read_stopped(record)
            if data is not None:
                return list(data["rows"]), ("done" if data.get("complete") else "stopped")
            return [], None
        state = (record / STATE_FILE).load_torch()
        return list(state["rows"]), None
    except Exception:  # (absent, cut short, another layout: nothing to log from it)
        return [], None


class Ledger:
    """Per trial and tracker: the run's id and the last round the tracker holds, in <base>/tracked/<key>.json
    (written after each round's logging: a crash between the two logs that round once more, never loses it)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.entries = folder, {}

    def get(self, key: str) -> dict[str, dict[str, Any]]:
        if key not in self.entries:
            try:
                got = json.loads((self.folder / f"{key}.json").read_text())
                self.entries[key] = got if isinstance(got, dict) else {}
            except (OSError, ValueError):
                self.entries[key] = {}
        return self.entries[key]

    def save(self, key: str) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".{key}.json.tmp"
            tmp.write_text(json.dumps(self.entries.get(key, {})))
            tmp.replace(self.folder / f"{key}.json")
        except OSError:  # (the trackers go on; a resume may then log a round twice)
            pass

    def unsettled(self) -> list[str]:
        """The trials some tracker's run of which did not end done or stopped."""
        keys = sorted(p.stem for p in self.folder.glob("*.json")) if self.folder.is_dir() else []
        return [k for k in keys if any(e.get("outcome") not in ("done", "stopped") for e in self.get(k).values()
                                       if isinstance(e, dict))]


class Tracking:
    """The trackers of a sweep, fed by the status's events (fda_ray.experiments.console.Progress observers)."""

    def __init__(self, names: Sequence[str], out: Any, name: str, params_of: Callable[[str], Mapping[str, Any]] | None = None,
                 warn: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
                 rows_of: Callable[[str], tuple[list[Mapping[str, Any]], str | None]] | None = None) -> None:
        self.params_of = params_of or (lambda key: record_params(out, key))
        self.rows_of = rows_of or (lambda key: recorded_rows(out, key))
        self.warn, self.trackers, self.opened = warn, [], set()
        # an object-store sweep (--out s3://...) tracks to a local folder (the trackers write files), said once
        if getattr(out, "is_local", True):
            base = Path(str(out))
        else:
            base = Path(os.environ.get("FDA_RAY_TRACKING_DIR", "tracking")) / name
            if names:
                warn(f"note: --out is an object store: {', '.join(names)} write to {base}/ on this machine "
                     "($FDA_RAY_TRACKING_DIR moves it; --track none turns tracking off)")
        # the ledger beside the trackers' files; an object store's sweeps share ./tracking/<grid>-<profile>, so theirs
        # is per --out (two sweeps of one grid into two prefixes have the same trial keys)
        import hashlib

        self.ledger = Ledger(base / "tracked" if getattr(out, "is_local", True) else
                             base / "tracked" / hashlib.sha1(str(out).encode()).hexdigest()[:12])
        for n in names:
            try:
                if n == "tensorboard":
                    self.trackers.append(TensorBoard(base / "tensorboard"))
                elif n == "mlflow":
                    # MLflow 3 keeps its file store for old data only: a SQLite file is its local store now
                    base.mkdir(parents=True, exist_ok=True)
                    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(base / 'mlflow.db').resolve()}"
                    self.trackers.append(MLflow(uri, name))
                elif n == "wandb":
                    project = os.environ.get("WANDB_PROJECT") or f"fda-ray-{name}"
                    self.trackers.append(WandB(project, name, base))
            except Exception as e:  # a tracker that cannot start: said once, the sweep goes on
                self.warn(f"warning: track={n!r} could not start ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                          "the sweep goes on without it")
        if self.trackers:
            self.complete_settled()

    def _each(self, what: Callable[[Any], None]) -> None:
        for tr in list(self.trackers):
            try:
                what(tr)
            except Exception as e:
                self.trackers.remove(tr)
                self.warn(f"warning: tracking to {type(tr).__name__} failed ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]}); the sweep goes on without it")

    def _entry(self, key: str, tracker: Any) -> dict[str, Any]:
        return self.ledger.get(key).setdefault(getattr(tracker, "name", type(tracker).__name__), {})

    def _open(self, key: str, fresh: bool = False) -> None:
        """Open (or reopen) the trial's run in each tracker. A run the tracker could not reopen (another MLflow
        store, a removed folder) holds none of the rounds the ledger counted: its count starts again, so every
        recorded round goes to it. `fresh`: the trial starts again from round 0 (its record was set aside or removed,
        and run anew): a new run, not the old run's numbers under the new ones."""
        self.opened.add(key)
        if not self.trackers:  # (--track none: no ledger either)
            return
        params = self.params_of(key)

        def start(tr: Any) -> None:
            e = self._entry(key, tr)
            if fresh and e.get("last", -1) >= 0:
                e.clear()
            e["id"], reopened = tr.start(key, params, e.get("id"))
            e["outcome"] = None
            if not reopened:
                e["last"] = -1
            e.setdefault("last", -1)
        self._each(start)
        self.ledger.save(key)

    def _log(self, key: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Each row's round to each tracker that does not hold it yet."""
        if not self.trackers:
            return

        def log(tr: Any) -> None:
            e = self._entry(key, tr)
            for row in rows:
                r = row.get("round")
                if isinstance(r, int) and r > e.get("last", -1):
                    tr.log(key, r, scalars(row))
                    e["last"] = r
        self._each(log)
        self.ledger.save(key)

    def _end(self, key: str, outcome: str) -> None:
        self.opened.discard(key)
        if not self.trackers:
            return

        def end(tr: Any) -> None:
            tr.end(key, outcome)
            self._entry(key, tr)["outcome"] = outcome
        self._each(end)
        self.ledger.save(key)

    def complete_settled(self) -> None:
        """Runs a launch before left open or unfinished whose trials have settled since (finished while that launch
        was being interrupted): reopened, given the recorded rounds they lack, and ended as the trial did."""
        for key in self.ledger.unsettled():
            rows, outcome = self.rows_of(key)
            if outcome is not None:
                self._open(key)
                self._log(key, rows)
                self._end(key, outcome)

    # Progress observer events. A trial's run opens at its first round, when its record names its fields (a
    # trial that fails before any round leaves no run behind).
    def started(self, key: str) -> None:
        pass

    def round(self, key: str, row: Mapping[str, Any]) -> None:
        if row.get("round") is None:
            return
        if key not in self.opened:
            first = int(row["round"])
            self._open(key, fresh=first == 0)  # (round 0: the trial runs from its start, whatever ran before)
            # A trial resumed from round r: the rounds before it that a tracker lacks (the launch before was cut
            # off between a round's checkpoint and its report, or this tracker was not on) from its checkpoint
            self._log(key, [r for r in self.rows_of(key)[0] if isinstance(r.get("round"), int) and r["round"] < first])
        self._log(key, [row])

    def settled(self, key: str, outcome: str) -> None:
        if outcome in ("done", "stopped"):  # every recorded round (some reports may not have reached the sweep)
            if key not in self.opened:
                self._open(key)
            self._log(key, self.rows_of(key)[0])
        if key in self.opened:
            self._end(key, outcome)

    def close(self) -> None:
        """The sweep ended: runs still open were interrupted (their trials resume into them)."""
        for key in list(self.opened):
            self._end(key, "interrupted")
