"""Experiment tracking (fda_ray.experiments.tracking), offline: TensorBoard event files, MLflow's local SQLite store and
W&B's offline mode each hold exactly the rounds they were given, read back from their files; a local sweep tracks
what its records hold; a tracker that fails is dropped with one warning line and the others go on."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from fda_ray.experiments import sweep
from fda_ray.experiments.tracking import Tracking, TrackingError, parse, scalars


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from a folder's TFRecord event files (length, crc, Event proto, crc)."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(folder.glob("events.out.tfevents.*")):
        data, pos = f.read_bytes(), 0
        while pos < len(data):
            (n,) = struct.unpack("<Q", data[pos:pos + 8])
            ev = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
            pos += 12 + n + 4
            for v in ev.summary.value:
                out.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return {tag: sorted(points, key=lambda p: p[0]) for tag, points in out.items()}  # (a resume's second file)


def wandb_records(path: Path) -> list:
    """The records of a W&B run file (":W&B" header, then LevelDB-style blocks of 32 KiB: crc, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:
            break
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or a record's last piece
            out.append(pb.Record.FromString(buf))
            buf = b""
    return out


ROUNDS = {"t1": [0.25, 0.5, 0.625], "t2": [0.125, 0.375, 0.75]}  # exact in float32: TensorBoard stores float32


def _feed(tracking: Tracking) -> None:
    for key in ROUNDS:
        tracking.started(key)
    for r in range(3):
        for key, acc in ROUNDS.items():
            tracking.round(key, {"round": r, "accuracy": acc[r], "beta_i": [0.5, 0.25], "phase": "main",
                                 "converged": False})
    tracking.settled("t1", "done")
    tracking.settled("t2", "failed")
    tracking.close()


def test_scalars_keep_numbers_and_split_lists():
    assert scalars({"round": 3, "accuracy": 0.5, "beta_i": [0.1, 0.2], "phase": "main", "ok": True,
                    "loss": float("nan")}) == {"accuracy": 0.5, "beta_i/0": 0.1, "beta_i/1": 0.2}


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_every_tracker_holds_the_rounds_it_was_given_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    warnings = []
    t = Tracking(["tensorboard", "mlflow", "wandb"], tmp_path, "g-quick", warn=warnings.append,
                 params_of=lambda key: {"method": "fedgp", "beta": 0.5, "params": {"fssda": {"kd_temperature": 2.0}}})
    _feed(t)
    assert warnings == []
    # TensorBoard: one folder per trial, the accuracy and each beta_i entry at step = round
    for key, acc in ROUNDS.items():
        tb = tensorboard_scalars(tmp_path / "tensorboard" / key)
        assert tb["accuracy"] == [(r, a) for r, a in enumerate(acc)]
        assert tb["beta_i/1"] == [(r, 0.25) for r in range(3)] and "converged" not in tb and "phase" not in tb
    # MLflow: a run per trial, its fields as parameters (nested ones dotted), the rounds as steps, the status
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("g-quick")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == set(ROUNDS)
    for key, acc in ROUNDS.items():
        hist = sorted((m.step, m.value) for m in client.get_metric_history(runs[key].info.run_id, "accuracy"))
        assert hist == [(r, a) for r, a in enumerate(acc)]
    assert runs["t1"].data.params["params.fssda.kd_temperature"] == "2.0"
    assert runs["t1"].info.status == "FINISHED" and runs["t2"].info.status == "FAILED"
    # W&B offline: a run per trial with its config, a history record per round, its exit code
    files = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2
    seen = {}
    for f in files:
        recs = wandb_records(f)
        run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
        hist = [{(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                for r in recs if r.WhichOneof("record_type") == "history"]
        exit_code = [r.exit.exit_code for r in recs if r.WhichOneof("record_type") == "exit"]
        assert json.loads({u.key: u.value_json for u in run.config.update}["beta"]) == 0.5
        assert run.project == "fda-ray-g-quick" and run.run_group == "g-quick"
        seen[run.display_name] = ([(h["_step"], h["accuracy"]) for h in hist], exit_code)
    assert seen == {"t1": ([(r, a) for r, a in enumerate(ROUNDS["t1"])], [0]),
                    "t2": ([(r, a) for r, a in enumerate(ROUNDS["t2"])], [1])}


def test_a_failing_tracker_is_dropped_with_one_warning_and_the_others_go_on(tmp_path):
    warnings = []
    t = Tracking(["tensorboard"], tmp_path, "g", warn=warnings.append, params_of=lambda key: {})

    class Broken:
        def start(self, key, params, run_id):
            return None, False

        def log(self, key, step, values):
            raise ConnectionError("no server at 127.0.0.1:9\nmore")

        def end(self, key, outcome):
            pass

    t.trackers.append(Broken())
    _feed(t)
    assert len(warnings) == 1 and "Broken failed (ConnectionError: no server at 127.0.0.1:9)" in warnings[0]
    assert tensorboard_scalars(tmp_path / "tensorboard" / "t1")["accuracy"] == [(r, a) for r, a in enumerate(ROUNDS["t1"])]


def test_a_resumed_trial_logs_the_rounds_before_its_first_report_from_its_checkpoint(tmp_path):
    """A launch cut off between a round's checkpoint and its report left that round out of the trackers (here a
    tracker that never saw the trial): the resumed trial's first report (round 2) brings rounds 0 and 1 back from its
    state.pt, once each."""
    import torch

    record = tmp_path / "trials" / "t1"
    record.mkdir(parents=True)
    torch.save({"rows": [{"round": r, "accuracy": ROUNDS["t1"][r]} for r in range(2)], "next_round": 2},
               record / "state.pt")
    t = Tracking(["tensorboard"], tmp_path, "g", params_of=lambda key: {})
    t.round("t1", {"round": 2, "accuracy": ROUNDS["t1"][2]})
    t.round("t2", {"round": 1, "accuracy": 0.5})  # resumed too, but no checkpoint to read: nothing before it
    t.settled("t1", "done")
    t.settled("t2", "done")
    t.close()
    assert tensorboard_scalars(tmp_path / "tensorboard" / "t1")["accuracy"] == list(enumerate(ROUNDS["t1"]))
    assert tensorboard_scalars(tmp_path / "tensorboard" / "t2")["accuracy"] == [(1, 0.5)]


def _offline(monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)


def _mlflow_runs(folder: Path, experiment: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return {r.info.run_name: (r.info.status, r.data.tags.get("fda_ray.outcome"),
                              sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "accuracy")))
            for r in runs} | {"count": len(runs)}


def _wandb_steps(folder: Path) -> dict[str, list]:
    """run id -> [(step, accuracy)] over all of its offline files (what `wandb sync` joins), and its exit codes."""
    out: dict[str, list] = {}
    for f in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        recs = wandb_records(f)
        rid = next(r.run.run_id for r in recs if r.WhichOneof("record_type") == "run")
        for r in recs:
            if r.WhichOneof("record_type") == "history":
                h = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                out.setdefault(rid, []).append((h["_step"], h["accuracy"]))
            elif r.WhichOneof("record_type") == "exit":
                out.setdefault(rid, []).append(("exit", r.exit.exit_code))
    return out


def test_an_interrupted_trial_resumes_into_its_own_runs_with_every_round_once(tmp_path, monkeypatch):
    """Launch 1 tracks rounds 0-1 of t1 and is cut off (its runs end KILLED / exit 1); its state.pt holds rounds 0-3
    (rounds 2 and 3 checkpointed, their reports lost). Launch 2 resumes t1 at round 4: each tracker then holds rounds
    0-4 exactly once, in one MLflow run (FINISHED) and one W&B run id, and TensorBoard's folder."""
    import torch

    _offline(monkeypatch)
    acc = [0.125, 0.25, 0.375, 0.5, 0.625]
    params = lambda key: {"method": "fedgp"}  # noqa: E731
    t = Tracking(["tensorboard", "mlflow", "wandb"], tmp_path, "g-quick", params_of=params)
    for r in range(2):
        t.round("t1", {"round": r, "accuracy": acc[r]})
    t.close()
    assert _mlflow_runs(tmp_path, "g-quick")["t1"][:2] == ("KILLED", "interrupted")
    record = tmp_path / "trials" / "t1"
    record.mkdir(parents=True)
    torch.save({"rows": [{"round": r, "accuracy": acc[r]} for r in range(4)], "next_round": 4}, record / "state.pt")
    t = Tracking(["tensorboard", "mlflow", "wandb"], tmp_path, "g-quick", params_of=params)
    t.round("t1", {"round": 4, "accuracy": acc[4]})
    t.round("t1", {"round": 3, "accuracy": acc[3]})  # a retry's report of a round the trackers hold: not again
    t.settled("t1", "done")
    t.close()
    want = list(enumerate(acc))
    assert tensorboard_scalars(tmp_path / "tensorboard" / "t1")["accuracy"] == want
    runs = _mlflow_runs(tmp_path, "g-quick")
    assert runs["count"] == 1 and runs["t1"] == ("FINISHED", "done", want)
    steps = _wandb_steps(tmp_path)
    assert len(steps) == 1  # one run id over both launches' files
    (got,) = steps.values()
    assert [x for x in got if x[0] != "exit"] == want and [x for x in got if x[0] == "exit"] == [("exit", 1), ("exit", 0)]


def test_a_trial_that_finished_during_the_interruption_is_completed_by_the_next_launch(tmp_path, monkeypatch):
    """t1 reported rounds 0-1, then finished (rows.json: rounds 0-2) while its sweep was being cut off: the trackers
    closed its runs as interrupted. The next launch (which does not run t1 again) completes them from the record;
    t2, stopped early by the scheduler, ends FINISHED with the outcome "stopped"; a failed t3 stays FAILED."""
    _offline(monkeypatch)
    acc = [0.25, 0.5, 0.75]
    t = Tracking(["tensorboard", "mlflow"], tmp_path, "g-quick", params_of=lambda key: {})
    for r in range(2):
        t.round("t1", {"round": r, "accuracy": acc[r]})
    t.round("t3", {"round": 0, "accuracy": 0.5})
    t.settled("t3", "failed")
    t.close()
    (tmp_path / "trials" / "t1").mkdir(parents=True)
    (tmp_path / "trials" / "t1" / "rows.json").write_text(json.dumps(
        {"rows": [{"round": r, "accuracy": a} for r, a in enumerate(acc)]}))
    Tracking(["tensorboard", "mlflow"], tmp_path, "g-quick", params_of=lambda key: {}).close()
    runs = _mlflow_runs(tmp_path, "g-quick")
    assert runs["t1"] == ("FINISHED", "done", list(enumerate(acc)))
    assert tensorboard_scalars(tmp_path / "tensorboard" / "t1")["accuracy"] == list(enumerate(acc))
    assert runs["t3"][:2] == ("FAILED", "failed")
    t = Tracking(["mlflow"], tmp_path, "g-quick", params_of=lambda key: {})
    t.round("t2", {"round": 0, "accuracy": 0.5})
    t.settled("t2", "stopped")
    t.close()
    assert _mlflow_runs(tmp_path, "g-quick")["t2"][:2] == ("FINISHED", "stopped")


def test_tunes_bookkeeping_is_not_logged_as_metrics():
    """A Tune report carries Ray's own fields (pid, time_this_iter_s, ...) and the search's report count beside the
    round's row; the local backend's rows have none of them, and neither do the trackers."""
    from ray.tune.result import AUTO_RESULT_KEYS

    from fda_ray.experiments.tracking import NOT_METRICS
    from fda_ray.experiments.tune import REPORTS_DONE

    assert set(AUTO_RESULT_KEYS) <= NOT_METRICS and REPORTS_DONE in NOT_METRICS
    report = {"round": 3, "accuracy": 0.5, "pid": 9517, "time_this_iter_s": 0.2, "training_iteration": 4,
              "timestamp": 1700000000, "iterations_since_restore": 4, REPORTS_DONE: 4}
    assert scalars(report) == {"accuracy": 0.5}


def test_bad_track_values_are_one_line(capsys):
    with pytest.raises(TrackingError, match=r"track='comet' is invalid: a comma-separated list of tensorboard, "
                                            r"mlflow, wandb, or none"):
        parse("comet")
    assert parse("none") == [] and parse("tensorboard,mlflow") == ["tensorboard", "mlflow"]
    assert sweep.main(["--grid", "noise", "--track", "comet", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "track='comet' is invalid" in err


@pytest.mark.slow  # a sweep: its local backend starts a process per worker (each imports torch)
def test_a_local_sweep_tracks_what_its_records_hold(fmnist_dir, tmp_path, capsys, monkeypatch, no_ray):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\ndataset: fashion-mnist\nvariable: noise\nvalues: [0.4]\nrows:\n"
                    "  - {key: fedgp_auto, method: fedgp_auto}\n  - {key: target_only, method: target_only}\n"
                    "profiles:\n  quick:\n    fields: {rounds: 2, warmup_rounds: 1, samples_per_client: 128, "
                    "test_samples: 100, num_sources: 2, target_labelled: 32}\n")
    out = tmp_path / "s"
    assert sweep.main(["--grid", str(grid), "--data-dir", str(fmnist_dir), "--out", str(out), "--backend", "local",
                       "--workers", "2", "--no-figures", "--track", "tensorboard,mlflow"]) == 0
    capsys.readouterr()
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("g-quick").experiment_id])}
    assert len(runs) == 2
    for rec in (out / "trials").iterdir():
        rows = json.loads((rec / "rows.json").read_text())["rows"]
        want = [(r["round"], r["accuracy"]) for r in rows if r.get("accuracy") is not None]
        got = sorted((m.step, m.value) for m in client.get_metric_history(runs[rec.name].info.run_id, "accuracy"))
        assert got == want and runs[rec.name].info.status == "FINISHED"
        tb = tensorboard_scalars(out / "tensorboard" / rec.name)["accuracy"]
        assert [s for s, _ in tb] == [r for r, _ in want]
        assert [v for _, v in tb] == pytest.approx([a for _, a in want], rel=1e-7)  # float32 in the event file
        assert runs[rec.name].data.params["method"] == json.loads((rec / "trial.json").read_text())["params"]["method"]


@pytest.mark.slow  # a sweep (the fast tier's 8 minutes)
def test_an_object_store_sweep_tracks_to_a_local_folder_and_says_where(tmp_path, monkeypatch):
    from fda_ray.core.storage import storage_path

    monkeypatch.setenv("FDA_RAY_TRACKING_DIR", str(tmp_path / "tr"))
    said = []
    t = Tracking(["tensorboard"], storage_path("s3://bucket/sweeps/x"), "g-quick", warn=said.append,
                 params_of=lambda key: {})
    _feed(t)
    assert said == [f"note: --out is an object store: tensorboard write to {tmp_path / 'tr' / 'g-quick'}/ on this "
                    "machine ($FDA_RAY_TRACKING_DIR moves it; --track none turns tracking off)"]
    assert tensorboard_scalars(tmp_path / "tr" / "g-quick" / "tensorboard" / "t1")["accuracy"][0] == (0, 0.25)


def test_mlflows_store_keeps_the_quiet_console_quiet(tmp_path, monkeypatch, capfd):
    """MLflow's SQLite store logs its table creation at INFO: on a quiet console (a sweep without --verbose) those
    lines are not shown; with --verbose (not quiet) they are."""
    from fda_ray.core.quiet import QUIET_ENV
    from fda_ray.experiments.tracking import MLflow

    monkeypatch.setenv(QUIET_ENV, "1")
    MLflow(f"sqlite:///{tmp_path / 'quiet.db'}", "x")
    assert "INFO mlflow" not in capfd.readouterr().err
    monkeypatch.setenv(QUIET_ENV, "0")
    import logging

    logging.getLogger("mlflow").setLevel(logging.INFO)  # (as MLflow's import sets it)
    MLflow(f"sqlite:///{tmp_path / 'verbose.db'}", "x")
    assert "INFO mlflow.store.db.utils: Creating initial MLflow database tables" in capfd.readouterr().err


def test_a_run_the_tracker_cannot_reopen_gets_every_round_and_a_rerun_from_scratch_a_new_run(tmp_path, monkeypatch):
    """The ledger counts what a tracker's run holds: a run that cannot be reopened (another MLflow store now) is a
    new run given every recorded round (it got the rounds after the count only); a trial run again from round 0 (its
    record set aside) opens a new run with the new numbers (they went nowhere: the old run was 'done')."""
    import torch

    _offline(monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'old.db'}")
    t = Tracking(["mlflow"], tmp_path, "g-quick", params_of=lambda key: {})
    for r in range(3):
        t.round("t1", {"round": r, "accuracy": 0.1})
    t.close()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the next launches track to <out>/mlflow.db
    record = tmp_path / "trials" / "t1"
    record.mkdir(parents=True)
    torch.save({"rows": [{"round": r, "accuracy": 0.1} for r in range(4)], "next_round": 4}, record / "state.pt")
    t = Tracking(["mlflow"], tmp_path, "g-quick", params_of=lambda key: {})
    t.round("t1", {"round": 4, "accuracy": 0.1})
    t.settled("t1", "done")
    t.close()
    assert _mlflow_runs(tmp_path, "g-quick")["t1"] == ("FINISHED", "done", [(r, 0.1) for r in range(5)])
    (record / "state.pt").unlink()  # set aside: the trial runs again from round 0, with other numbers
    t = Tracking(["mlflow"], tmp_path, "g-quick", params_of=lambda key: {})
    for r in range(2):
        t.round("t1", {"round": r, "accuracy": 0.9})
    t.settled("t1", "done")
    t.close()
    runs = _mlflow_runs(tmp_path, "g-quick")
    assert runs["count"] == 2  # the earlier run kept as it was, beside the new one
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    got = sorted(sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "accuracy"))
                 for r in client.search_runs([client.get_experiment_by_name("g-quick").experiment_id]))
    assert got == [[(r, 0.1) for r in range(5)], [(0, 0.9), (1, 0.9)]]


@pytest.mark.slow  # a sweep (the fast tier's 8 minutes)
def test_no_tracker_no_ledger_and_an_object_stores_ledger_is_its_outs(tmp_path, monkeypatch):
    """--track none writes nothing (it wrote an empty ledger file per trial, every round); two object-store sweeps
    of one grid into two prefixes keep apart ledgers (the second logged nothing: the first's counts said done)."""
    from fda_ray.core.storage import storage_path

    t = Tracking([], tmp_path, "g", params_of=lambda key: {})
    t.round("t1", {"round": 0, "accuracy": 0.5})
    t.settled("t1", "done")
    t.close()
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("FDA_RAY_TRACKING_DIR", str(tmp_path / "tr"))
    for prefix in ("a", "b"):
        t = Tracking(["tensorboard"], storage_path(f"s3://bucket/{prefix}"), "g-quick", warn=lambda s: None,
                     params_of=lambda key: {})
        t.round("t1", {"round": 0, "accuracy": 0.5})
        t.settled("t1", "done")
        t.close()
    ledgers = sorted(p.parent.name for p in (tmp_path / "tr" / "g-quick" / "tracked").glob("*/t1.json"))
    assert len(ledgers) == 2
