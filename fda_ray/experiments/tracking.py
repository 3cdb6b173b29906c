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
A resumed trial's round before its first report is logged from its checkpoint (the launch before may have been cut
off between that round's checkpoint and its report).

- tensorboard: one event file per trial under <out>/tensorboard/<trial key>/ (tensorboardX, which Ray brings):
  every numeric column of the round's row as a scalar at step = round; a list-valued column (beta_i per source) as
  one scalar per entry. On an object store (--out s3://...) the trackers' files go to ./tracking/<sweep>/ on the
  sweep's machine ($FDA_RAY_TRACKING_DIR/<sweep> when set), which the sweep says in one line.
- mlflow: one MLflow run per trial in the experiment "<grid>-<profile>", its fields as parameters, its rounds as
  metric steps, FINISHED or FAILED at the end; the tracking URI is $MLFLOW_TRACKING_URI or a SQLite store in
  <out>/mlflow.db (`mlflow ui --backend-store-uri sqlite:///<out>/mlflow.db`).
- wandb: one W&B run per trial in the project "fda-ray-<grid>-<profile>" (or $WANDB_PROJECT), grouped by it, its
  fields as config, its rounds as steps; W&B's own settings apply ($WANDB_MODE=offline writes under <out>/wandb
  without a network).
A tracker that fails (a server that does not answer) says so in one warning line and is dropped; the sweep and its
records go on.
"""
from __future__ import annotations

import math
import os
import sys
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


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a round's row worth a curve: finite numbers (not the round itself, not flags), and a list of
    numbers as one scalar per entry (beta_i/0, beta_i/1, ...)."""
    out: dict[str, float] = {}
    for k, v in row.items():
        if k in ("round", "seed") or isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            if math.isfinite(v):
                out[k] = float(v)
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                        for x in v):
            out.update({f"{k}/{i}": float(x) for i, x in enumerate(v) if math.isfinite(x)})
    return out


class TensorBoard:
    def __init__(self, logdir: Path) -> None:
        from tensorboardX import SummaryWriter

        self.logdir, self.writer_type, self.writers = logdir, SummaryWriter, {}

    def start(self, key: str, params: Mapping[str, Any]) -> None:
        self.writers.setdefault(key, self.writer_type(str(self.logdir / key), flush_secs=10))

    def log(self, key: str, step: int, values: Mapping[str, float]) -> None:
        w = self.writers.get(key)
        if w is not None:
            for name, v in values.items():
                w.add_scalar(name, v, step)

    def end(self, key: str, ok: bool) -> None:
        w = self.writers.pop(key, None)
        if w is not None:
            w.close()

    def close(self) -> None:
        for key in list(self.writers):
            self.end(key, False)


class MLflow:
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

    def start(self, key: str, params: Mapping[str, Any]) -> None:
        if key in self.runs:
            return
        run = self.client.create_run(self.experiment, run_name=key, tags={"fda_ray.trial": key})
        self.runs[key] = run.info.run_id
        from fda_ray.experiments.records import dotted

        for k, v in dotted(params).items():
            self.client.log_param(run.info.run_id, k, str(v)[:500])

    def log(self, key: str, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        run = self.runs.get(key)
        if run is not None and values:
            import time

            now = int(time.time() * 1000)
            # MLflow names take "/" but not every character: beta_i/0 stays, as it does in TensorBoard
            self.client.log_batch(run, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def end(self, key: str, ok: bool) -> None:
        run = self.runs.pop(key, None)
        if run is not None:
            self.client.set_terminated(run, "FINISHED" if ok else "FAILED")

    def close(self) -> None:
        for key in list(self.runs):
            self.end(key, False)


class WandB:
    def __init__(self, project: str, group: str, directory: Path) -> None:
        import wandb

        self.wandb, self.project, self.group, self.dir, self.runs = wandb, project, group, directory, {}
        directory.mkdir(parents=True, exist_ok=True)

    def start(self, key: str, params: Mapping[str, Any]) -> None:
        if key in self.runs:
            return
        # several trials run at once: each its own run object ("create_new"), none the global one
        self.runs[key] = self.wandb.init(project=self.project, group=self.group, name=key, config=dict(params),
                                         dir=str(self.dir), reinit="create_new")

    def log(self, key: str, step: int, values: Mapping[str, float]) -> None:
        run = self.runs.get(key)
        if run is not None:
            run.log(dict(values), step=step)

    def end(self, key: str, ok: bool) -> None:
        run = self.runs.pop(key, None)
        if run is not None:
            run.finish(exit_code=0 if ok else 1)

    def close(self) -> None:
        for key in list(self.runs):
            self.end(key, False)


def record_params(out: Any, key: str) -> dict[str, Any]:
    """A trial's fields from its record (<out>/trials/<key>/trial.json: run_trial writes it before the first
    round); {} where it cannot be read."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.records import read_trial

    try:
        return dict(read_trial(storage_path(out) / "trials" / key).params)
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def checkpointed_row(out: Any, key: str, round_: int) -> Mapping[str, Any] | None:
    """Round `round_`'s row from a running trial's checkpoint (<out>/trials/<key>/state.pt), read without touching
    the file (the trial writes it, atomically); None where it cannot be read or holds no such round."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.records import STATE_FILE

    try:
        state = (storage_path(out) / "trials" / key / STATE_FILE).load_torch()
        return next((r for r in state["rows"] if isinstance(r, dict) and r.get("round") == round_), None)
    except Exception:  # (absent, cut short, another layout: the round is simply not logged twice)
        return None


class Tracking:
    """The trackers of a sweep, fed by the status's events (fda_ray.experiments.console.Progress observers)."""

    def __init__(self, names: Sequence[str], out: Any, name: str, params_of: Callable[[str], Mapping[str, Any]] | None = None,
                 warn: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
                 row_of: Callable[[str, int], Mapping[str, Any] | None] | None = None) -> None:
        self.params_of = params_of or (lambda key: record_params(out, key))
        self.row_of = row_of or (lambda key, r: checkpointed_row(out, key, r))
        self.warn, self.trackers, self.opened = warn, [], set()
        # an object-store sweep (--out s3://...) tracks to a local folder (the trackers write files), said once
        if getattr(out, "is_local", True):
            base = Path(str(out))
        else:
            base = Path(os.environ.get("FDA_RAY_TRACKING_DIR", "tracking")) / name
            if names:
                warn(f"note: --out is an object store: {', '.join(names)} write to {base}/ on this machine "
                     "($FDA_RAY_TRACKING_DIR moves it; --track none turns tracking off)")
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

    def _each(self, what: str, *args: Any) -> None:
        for tr in list(self.trackers):
            try:
                getattr(tr, what)(*args)
            except Exception as e:
                self.trackers.remove(tr)
                self.warn(f"warning: tracking to {type(tr).__name__} failed ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]}); the sweep goes on without it")

    # Progress observer events. A trial's run opens at its first round, when its record names its fields (a
    # trial that fails before any round leaves no run behind).
    def started(self, key: str) -> None:
        pass

    def round(self, key: str, row: Mapping[str, Any]) -> None:
        if row.get("round") is None:
            return
        if key not in self.opened:
            self.opened.add(key)
            self._each("start", key, self.params_of(key))
            # A trial resumed from round r: round r - 1 was checkpointed by the launch before, whose report of it
            # may have been cut off with that launch (Ctrl-C between the checkpoint and the report): logged again
            # from the checkpoint (the same values at the same step where it had arrived).
            first = int(row["round"])
            before = self.row_of(key, first - 1) if first > 0 else None
            if before is not None:
                self._each("log", key, first - 1, scalars(before))
        self._each("log", key, int(row["round"]), scalars(row))

    def settled(self, key: str, ok: bool) -> None:
        if key in self.opened:
            self.opened.discard(key)
            self._each("end", key, ok)

    def close(self) -> None:
        self._each("close")
