"""Sweeps end to end on a tiny grid, with both backends: Parquet rows, summary, figures, resume (of a finished
sweep and of one killed midway), an interrupted sweep, a trial that keeps failing, the Tuner API, and one-line
errors for bad grids and values."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import ray

from fda_ray.experiments import summary, sweep
from conftest import sigint_as_in_a_terminal
from fda_ray.papers.grids import GRIDS, Grid, Row

TINY = {"num_sources": 3, "rounds": 2, "warmup_rounds": 1, "samples_per_client": 128, "test_samples": 100,
        "target_labelled": 32}
ROWS = (Row("fedgp_auto", "FedGP_Auto", "fedgp_auto"), Row("target_only", "Target Only", "target_only"))


def make_tiny_grid(**overrides) -> Grid:
    profile = {**TINY, **overrides}
    return Grid(name="tiny-noise", dataset="fashion-mnist", variable="noise", values=(0.0, 0.8), rows=ROWS,
                seeds={}, profiles={"quick": profile, "paper": dict(profile)},
                paper={"fedgp_auto": {0.0: 76.22}}, paper_ref="test numbers")


@pytest.fixture
def tiny_grid(monkeypatch):
    grid = make_tiny_grid()
    monkeypatch.setitem(GRIDS, grid.name, grid)
    return grid


def _args(fmnist_dir, out, *more):
    return ["--grid", "tiny-noise", "--data-dir", str(fmnist_dir), "--out", str(out), *more]


def _summary(printed: str) -> dict:
    return json.loads(printed[printed.index("{"):])


def _plain(fmnist_dir, method, noise, **kw):
    from fda_ray.core.config import RunConfig
    from fda_ray.runtime.engine import run

    return run(RunConfig(dataset="fashion-mnist", method=method, noise=noise, seed=0, data_dir=str(fmnist_dir),
                         **{**TINY, **kw}))


def test_a_store_that_stops_answering_mid_sweep_ends_in_one_line_with_the_resume_command(
        tiny_grid, fmnist_dir, s3_bucket, monkeypatch, capsys):
    """The store went down while the trials ran (here: as the backend returns): the sweep ended in pyarrow's
    traceback. It ends in one line naming the store and the resume command, exit 1."""
    def trials_run_then_the_store_goes_down(*a, **kw):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{s.getsockname()[1]}")
        return []

    monkeypatch.setattr(sweep, "run_local", trials_run_then_the_store_goes_down)
    out = s3_bucket + "/sweeps/down"
    assert sweep.main(_args(fmnist_dir, out, "--backend", "local", "--workers", "1", "--no-figures",
                            "--track", "none")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: the store could not look up {out}/trials/"), err
    assert err[0].endswith(f"--out {out} --backend local --workers 1 --no-figures --track none --resume"), err


@pytest.mark.slow
def test_sweep_end_to_end_and_resume(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    out = tmp_path / "sweep"
    assert sweep.main(_args(fmnist_dir, out, "--json")) == 0
    summary = _summary(capsys.readouterr().out)
    table = pq.read_table(out / "results.parquet").to_pylist()
    # 2 rows x 2 noise values x 1 seed, 3 rounds each (1 warm-up + 2), the trial's fields as columns.
    assert len(table) == 4 * 3
    assert {(r["row"], r["noise"]) for r in table} == {(m, v) for m in ("fedgp_auto", "target_only") for v in (0.0, 0.8)}
    assert sorted({r["round"] for r in table}) == [0, 1, 2]
    assert all(r["grid_value"] == r["noise"] and r["samples_per_client"] == 128 for r in table)
    finals = {(r["row"], r["noise"]): r["accuracy"] for r in table if r["round"] == 2}
    assert summary["cells"]["fedgp_auto"]["0"]["mean"] == pytest.approx(100 * finals[("fedgp_auto", 0.0)])
    assert summary["cells"]["fedgp_auto"]["0"]["paper"] == 76.22 and summary["failures"] == []
    assert summary["trials_done"] == summary["trials"] == 4 and summary["interrupted"] is False
    text = (out / "summary.md").read_text()
    assert f"{100 * finals[('fedgp_auto', 0.0)]:.2f} / 76.22" in text and "Wall time" in text
    assert "Command: `python -m fda_ray.sweep --grid tiny-noise" in text
    # Figures, PNG and PDF: accuracy against noise, beta_i per round for the auto row only, the estimates.
    assert "![final target accuracy](accuracy.png)" in text and "(beta_fedgp_auto.png)" in text
    assert not (out / "beta_target_only.png").exists()
    for name in ("accuracy", "beta_fedgp_auto", "estimates"):
        assert (out / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Every round of a method that trains both sides logged the estimators and the rule they predict;
    # target_only trains no source, so it logs none by default.
    from fda_ray.algorithms.fda.diagnostics import STATIC_RULES
    from fda_ray.experiments.figures import predicted_rules

    pred = {(r["row"], r["noise"], r["round"]): r.get("predicted_rule") for r in table}
    assert all(pred[("fedgp_auto", v, k)] in STATIC_RULES for v in (0.0, 0.8) for k in (1, 2))
    assert all(pred[("target_only", v, k)] is None for v in (0.0, 0.8) for k in (0, 1, 2))
    counts = predicted_rules(table)
    assert set(counts) == {"fedgp_auto"} and all(sum(counts["fedgp_auto"][v].values()) == 2 for v in (0.0, 0.8))
    assert "(estimates.png)" in text and "## The rule the theory predicts" in text
    # The trials equal plain runs of the same configs (same process layout: one thread each).
    assert finals[("target_only", 0.8)] == _plain(fmnist_dir, "target_only", 0.8).final_accuracy
    # A second run into the same directory needs --resume; resuming a finished sweep redoes nothing.
    assert sweep.main(_args(fmnist_dir, out)) == 2
    assert "pass --resume" in capsys.readouterr().err
    before = (out / "results.parquet").stat().st_mtime_ns
    assert sweep.main(_args(fmnist_dir, out, "--resume", "--json")) == 0
    assert _summary(capsys.readouterr().out)["trials_run"] == 0
    again = pq.read_table(out / "results.parquet").to_pylist()
    assert len(again) == len(table) and (out / "results.parquet").stat().st_mtime_ns > before
    assert {(r["row"], r["noise"], r["round"]): r["accuracy"] for r in again} == \
           {(r["row"], r["noise"], r["round"]): r["accuracy"] for r in table}


@pytest.mark.slow
def test_a_sweeps_next_trial_reuses_the_client_actors_and_gives_the_same_numbers(tiny_grid, fmnist_dir, tmp_path,
                                                                                capsys, no_ray):
    """Tune runs a sweep's next trial in the same trainable process and placement group (reuse_actors): a trial of
    the same shape loads its clients into the actors the previous one left, instead of starting new processes.
    The numbers are a plain run's (executor ray equals serial), reused actors or not."""
    out = tmp_path / "reuse"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    code = sweep.main(_args(fmnist_dir, out, "--executor", "ray", "--methods", "target_only", "--max-concurrent", "1",
                            "--json"))
    assert code == 0, capsys.readouterr().err[-2000:]
    attempts = {p.parent.name: json.loads(p.read_text())[-1] for p in (out / "trials").glob("*/nodes.json")}
    assert len(attempts) == 2
    assert sorted(a["reused_actors"] for a in attempts.values()) == [False, True]
    rows = pq.read_table(out / "results.parquet").to_pylist()
    for noise in (0.0, 0.8):
        got = [r["accuracy"] for r in rows if r["noise"] == noise]
        assert got == [r["accuracy"] for r in _plain(fmnist_dir, "target_only", noise).rows], noise
    reused = next(k for k, a in attempts.items() if a["reused_actors"])
    startup = json.loads((out / "trials" / reused / "rows.json").read_text())["startup"]
    assert startup["actors_spawn"] < 0.5  # no process was started


@pytest.mark.slow  # a sweep (the fast tier's 8 minutes)
def test_local_backend_equals_plain_runs_and_restricts_the_grid(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """--backend local (a process pool, no Ray) with --methods/--values/--rounds: only those trials, and each
    equals a plain run of its config."""
    out = tmp_path / "local"
    args = _args(fmnist_dir, out, "--backend", "local", "--workers", "2", "--methods", "target_only",
                 "--values", "0.8", "--rounds", "3", "--json")
    assert sweep.main(args) == 0
    summary = _summary(capsys.readouterr().out)
    assert summary["trials"] == 1 and not ray.is_initialized()
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert {(r["row"], r["noise"], r["rounds"]) for r in rows} == {("target_only", 0.8, 3)}
    plain = _plain(fmnist_dir, "target_only", 0.8, rounds=3)
    assert [r["accuracy"] for r in rows] == [r["accuracy"] for r in plain.rows]
    # a record that is done is never run again, whatever the backend
    assert sweep.main(_args(fmnist_dir, out, "--methods", "target_only", "--values", "0.8", "--rounds", "3",
                            "--resume", "--json")) == 0
    assert _summary(capsys.readouterr().out)["trials_run"] == 0
    # what the sweep is, beside its records: its readers plan the same trials from it, without its command line
    from fda_ray.experiments import manifest as mf
    from fda_ray.experiments.trials import plan

    m = mf.read(out)
    assert (m.kind, m.name, m.profile, m.rows, m.values, m.overrides["rounds"]) == (
        "grid", tiny_grid.name, "quick", ("target_only",), (0.8,), 3)
    assert m.command.startswith("python -m fda_ray.sweep --grid " + tiny_grid.name)
    planned = plan(tiny_grid, m.profile, rows=list(m.rows), values=list(m.values), seeds=m.seeds,
                   overrides=dict(m.overrides))
    assert [t.key for t in planned] == [r.name for r in (out / "trials").iterdir() if r.is_dir()]
    # a second chunk (another value) into the same folder: sweep.json names both chunks' values, so its readers
    # plan both chunks' trials (it named only the last chunk's, and the results pages lost the first's)
    assert sweep.main(_args(fmnist_dir, out, "--backend", "local", "--workers", "1", "--methods", "target_only",
                            "--values", "0.0", "--rounds", "3", "--resume", "--json")) == 0
    assert _summary(capsys.readouterr().out)["trials_run"] == 1
    m = mf.read(out)
    # (both of the grid's values: None, every value, as a chunk without --values writes it)
    assert (m.rows, m.values, m.seeds) == (("target_only",), None, None) and "--values 0.0" in m.command
    planned = plan(tiny_grid, m.profile, rows=list(m.rows), values=None, seeds=m.seeds, overrides=dict(m.overrides))
    assert sorted(t.key for t in planned) == sorted(r.name for r in (out / "trials").iterdir() if r.is_dir())
    assert len(planned) == 2
    # ... and the second chunk's summary, results.parquet and figures show both chunks' trials (they showed only the
    # last chunk's, so a chunk run into a results folder wrote over its table)
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert {(r["row"], r["noise"]) for r in rows} == {("target_only", 0.0), ("target_only", 0.8)}
    text = (out / "summary.md").read_text()
    assert "| Target Only | " in text and "noise 0 |" in text.replace("noise 0.0", "noise 0") and "0.8" in text
    assert "the tables also hold the 1 finished trials of this folder's earlier chunks" in text


@pytest.mark.parametrize("args,field", [(["--grid", "nope"], "grid='nope'"),
                                        (["--grid", "noise", "--profile", "huge"], "profile='huge'"),
                                        (["--grid", "noise", "--seeds", "0"], "seeds=0"),
                                        (["--grid", "noise", "--max-concurrent", "0"], "max_concurrent=0"),
                                        # the local backend's count, which Tune would ignore
                                        (["--grid", "noise", "--workers", "16"], "workers=16")])
def test_bad_sweep_arguments_give_one_line(args, field, capsys):
    assert sweep.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field} is invalid")


def test_the_parser_is_the_commands_and_says_its_first_line():
    """The parser lives in fda_ray.experiments.arguments (the readers of an old directory's command line share it):
    --help's description is still the command's docstring's first line."""
    from fda_ray.experiments import arguments

    assert sweep.parser is arguments.parser and sweep.SweepError is arguments.SweepError
    assert arguments.parser().description == arguments.DESCRIPTION == sweep.__doc__.splitlines()[0]


def test_bad_grid_value_gives_one_line(tiny_grid, fmnist_dir, tmp_path, capsys, monkeypatch):
    bad = Grid(name="bad", dataset="fashion-mnist", variable="beta", values=(1.5,),
               rows=(Row("fedda", "FedDA", "fedda"),), seeds={}, profiles={"quick": dict(TINY)})
    monkeypatch.setitem(GRIDS, "bad", bad)
    assert sweep.main(["--grid", "bad", "--data-dir", str(fmnist_dir), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: beta=1.5 is invalid")


def test_search_space_rejects_unknown_fields():
    import fda_ray.experiments.tune as ft

    with pytest.raises(ValueError, match=r"search space field 'lr' is invalid: RunConfig fields are"):
        ft.search_space(method="fedgp", lr=0.1)


def test_a_served_tuner_trial_asks_its_drivers_share_and_a_bad_fuse_is_one_line():
    """with_resources(served=...): one bundle, the driver's 1/fuse share of its threads (the server trains its
    clients); fuse must be a whole number >= 1."""
    import fda_ray.experiments.tune as ft
    from fda_ray.core.config import RunConfig

    cfg = RunConfig(method="fedgp", vectorise="on", threads=2)
    served = ft.with_resources(cfg, served={"node": ["fda-fusion:node:0"]}, fuse=4)
    assert served._resources.bundles == [{"CPU": 0.5}]
    assert ft.with_resources(cfg)._resources.bundles != [{"CPU": 0.5}]  # (a trial of its own asks its clients too)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=rf"fuse={bad!r} is invalid: an integer >= 1"):
            ft.with_resources(cfg, served={"node": ["x"]}, fuse=bad)
    # a served trial whose sampled config cannot fuse fails in one line (it would train its clients in a driver's
    # share of a CPU), before any data or Ray
    with pytest.raises(ValueError, match=r"vectorise='off' is invalid for a trial on fusion servers"):
        ft.trainable({"method": "fedgp", "vectorise": "off", "threads": 1}, served={"node": ["x"]})


@pytest.mark.slow
def test_programmatic_tuner(fmnist_dir, tmp_path, no_ray, monkeypatch):
    """The README's Tune API path: a Tuner over RunConfig fields; each trial's last round equals a plain run. The
    data_dir is relative to the working directory, as a plug-in's ./data is: trials run there, not in Tune's trial
    folders."""
    from ray import tune

    import fda_ray.experiments.tune as ft
    from fda_ray.core.config import RunConfig
    from fda_ray.runtime.engine import run

    monkeypatch.delenv("RAY_CHDIR_TO_TRIAL_DIR", raising=False)
    monkeypatch.chdir(fmnist_dir.parent)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    space = ft.search_space(dataset="fashion-mnist", data_dir=fmnist_dir.name, threads=1,
                            method=tune.grid_search(["fedda", "target_only"]), noise=0.4, **TINY)
    keep_last = tune.CheckpointConfig(num_to_keep=1)  # (as the docs' snippet: one checkpoint a trial, not a round's)
    results = tune.Tuner(ft.with_resources(space), param_space=space,
                         run_config=tune.RunConfig(storage_path=str(tmp_path), name="api", verbose=0,
                                                   checkpoint_config=keep_last)).fit()
    assert len(results) == 2 and not results.errors
    for r in results:
        assert len(list(Path(r.path).glob("checkpoint_*"))) == 1 and (r.checkpoint is not None)
    for r in results:
        assert r.metrics["round"] == 2
        cfg = RunConfig(**{k: v for k, v in r.config.items()})
        assert r.metrics["accuracy"] == pytest.approx(run(cfg).final_accuracy)


@pytest.mark.slow
def test_programmatic_tuner_on_fusion_servers_gives_each_trial_its_numbers_alone(fmnist_dir, tmp_path, no_ray):
    """The Tune API with fusion servers: each Tuner trial stays a Tune trial of its own, its clients' training runs
    on the node's server (which ran batches of the trials' rounds), and each trial's last round equals its plain run
    (served == alone within the cohort's tolerance: accuracy within 2 test samples of 100)."""
    from ray import tune

    import fda_ray.experiments.tune as ft
    from fda_ray.core.config import RunConfig
    from fda_ray.runtime import fusion_server
    from fda_ray.runtime.engine import run

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    space = ft.search_space(dataset="fashion-mnist", data_dir=str(fmnist_dir), threads=1, vectorise="on",
                            method=tune.grid_search(["fedgp", "fedda"]), noise=0.4, **TINY)
    with ft.fusion_servers(space) as served:
        assert sum(len(v) for v in served.values()) == 1  # one node: one server
        results = tune.Tuner(ft.with_resources(space, served=served, fuse=4), param_space=space,
                             run_config=tune.RunConfig(storage_path=str(tmp_path), name="served", verbose=0)).fit()
        (name,) = [n for ns in served.values() for n in ns]
        stats = ray.get(ray.get_actor(name, namespace=fusion_server.NAMESPACE).stats.remote())
    assert len(results) == 2 and not results.errors
    # every round of both trials trained there (3 rounds each, their sources at least), in batches of one or both
    assert 3 <= stats["batches"] <= 2 * 3 and sum(stats["jobs"]) >= 2 * 3 * TINY["num_sources"]
    for r in results:
        assert r.metrics["round"] == 2
        cfg = RunConfig(**{k: v for k, v in r.config.items()})
        assert abs(r.metrics["accuracy"] - run(cfg).final_accuracy) <= 0.02
    with pytest.raises(ValueError, match=r"vectorise='off' is invalid for fusion servers"):
        with ft.fusion_servers({**space, "vectorise": "off"}):
            pass


def test_the_error_line_of_a_tune_trace_is_its_last():
    from fda_ray.experiments.tune import last_error_line

    trace = "Failure # 1 (occurred at 2026-11-28)\nTraceback (most recent call last):\n  File \"x.py\", line 1\n" \
            "RuntimeError: Expected all tensors to be on the same device\n\n"
    assert last_error_line(trace) == "RuntimeError: Expected all tensors to be on the same device"
    assert last_error_line(None) == last_error_line("  \n") == "an error"
    from fda_ray.core.interrupts import LINE_MAX

    assert last_error_line("x" * LINE_MAX) == "x" * LINE_MAX
    assert len(last_error_line("x" * (LINE_MAX + 1))) == LINE_MAX and last_error_line("x" * 2000).endswith(" ...")


@pytest.mark.slow
def test_trial_that_keeps_failing_is_reported_while_others_finish(fmnist_dir, tmp_path, capsys, monkeypatch, no_ray):
    # 5000 labelled target samples cannot be drawn from a 128-sample target: the run fails each attempt.
    grid = Grid(name="tiny-size", dataset="fashion-mnist", variable="target_labelled", values=(32, 5000),
                rows=(Row("target_only", "Target Only", "target_only"),), seeds={},
                profiles={"quick": {k: v for k, v in TINY.items() if k != "target_labelled"}})
    monkeypatch.setitem(GRIDS, grid.name, grid)
    out = tmp_path / "fail"
    args = ["--grid", "tiny-size", "--data-dir", str(fmnist_dir), "--out", str(out), "--max-failures", "1", "--json"]
    assert sweep.main(args) == 1  # not every trial finished
    captured = capsys.readouterr()
    summary = _summary(captured.out)
    # the retry is said in one line of ours, naming the trial and its error (Tune's own dump is its logger's)
    retry = [x for x in captured.err.splitlines() if x.startswith("note: target_only target_labelled=5000 seed 0 failed: ")]
    assert len(retry) == 1 and "target_labelled=5000 is invalid" in retry[0]
    assert retry[0].endswith(f"(attempt 2 of 2; traceback in {out / 'tune' / 'errors.log'})"), retry[0]
    # the sweep's last line lists the failed trial, where its traceback is, and the resume command
    assert captured.err.strip().splitlines()[-1].startswith("error: 1 trial(s) failed: target_only at 5000, seed 0 ")
    assert [(f["value"], f["row"]) for f in summary["failures"]] == [(5000, "target_only")]
    assert "target_labelled=5000 is invalid" in summary["failures"][0]["error"]
    assert summary["failures"][0]["attempts"] == 2  # the first try and one retry (--max-failures 1)
    assert summary["cells"]["target_only"]["32"]["n"] == 1 and "5000" not in summary["cells"]["target_only"]
    text = (out / "summary.md").read_text()
    assert "## Failed trials (1)" in text and "target_labelled=5000" in text
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert {r["target_labelled"] for r in rows} == {32} and len(rows) == 3


_DRIVER = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]
from test_sweep import make_tiny_grid
from fda_ray.papers.grids import GRIDS
GRIDS["tiny-noise"] = make_tiny_grid(rounds={rounds})
from fda_ray.experiments import sweep
if __name__ == "__main__":  # the local backend's workers start by importing this file (spawn)
    sys.exit(sweep.main(sys.argv[1:]))
"""


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the sweep and everything it started (its local Ray included): a power cut, not a Ctrl-C."""
    doomed = [pid for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()) if _sid(pid) == proc.pid]
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    deadline = time.time() + 30
    while time.time() < deadline and any(os.path.exists(f"/proc/{pid}") and _sid(pid) == proc.pid for pid in doomed):
        time.sleep(0.05)


def _cut_off(records: Path) -> list[Path]:
    """Trial records with a round saved but no final rows: trials stopped mid-run."""
    if not records.is_dir():
        return []
    return [d for d in records.iterdir() if (d / "state.pt").is_file() and not (d / "rows.json").is_file()]


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


@pytest.mark.slow
def test_resume_after_the_sweep_is_killed(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """Kill the whole sweep (driver, Tune, local Ray) once a trial has finished; --resume keeps the finished
    trials as they are and completes the rest, with the numbers an uninterrupted run gives."""
    out = tmp_path / "killed"
    script = tmp_path / "driver.py"
    rounds = 8  # long enough that the second trial is mid-run when the kill comes
    script.write_text(_DRIVER.format(tests=str(Path(__file__).parent), root=str(Path(__file__).parents[1]), rounds=rounds))
    proc = subprocess.Popen([sys.executable, str(script), *_args(fmnist_dir, out, "--max-concurrent", "1")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            cwd=str(Path(__file__).parents[1]))
    lines = []
    deadline = time.time() + 600
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("[1/4] done") or time.time() > deadline:
                break
        while time.time() < deadline and not _cut_off(out / "trials"):  # the next trial is mid-run: kill now
            time.sleep(0.05)
    finally:
        _kill_session(proc)
    assert any(line.startswith("[1/4] done") for line in lines), "".join(lines[-30:])
    assert not (out / "results.parquet").exists()  # killed before the sweep's end
    records = out / "trials"
    finished = {d.name: (d / "rows.json").read_bytes() for d in records.iterdir() if (d / "rows.json").is_file()}
    cut_off = _cut_off(records)
    assert len(finished) >= 1 and len(cut_off) == 1
    import torch

    reached = torch.load(cut_off[0] / "state.pt", weights_only=True)["next_round"]
    assert 1 <= reached <= rounds  # it goes on from there

    GRIDS["tiny-noise"] = make_tiny_grid(rounds=rounds)  # the grid the killed sweep ran
    assert sweep.main(_args(fmnist_dir, out, "--resume", "--json")) == 0
    summary = _summary(capsys.readouterr().out)
    assert summary["failures"] == [] and summary["resumed"] is True
    assert summary["trials_run"] == 4 - len(finished)
    for name, before in finished.items():  # finished trials were not run again
        assert (records / name / "rows.json").read_bytes() == before
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert sorted((r["method"], r["noise"], r["round"]) for r in rows) == \
           sorted((m, v, k) for m in ("fedgp_auto", "target_only") for v in (0.0, 0.8) for k in range(rounds + 1))
    for method, noise in {(r["method"], r["noise"]) for r in rows}:
        got = [r["accuracy"] for r in sorted(rows, key=lambda r: r["round"]) if (r["method"], r["noise"]) == (method, noise)]
        assert got == [row["accuracy"] for row in _plain(fmnist_dir, method, noise, rounds=rounds).rows]


@pytest.mark.slow
def test_interrupted_sweep_says_so_and_resumes(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """Ctrl-C (SIGINT to the process group) of a local-backend sweep: exit code 130, a summary that says it
    was interrupted and names the --resume command; --resume then finishes with every finished trial kept."""
    out = tmp_path / "int"
    script = tmp_path / "driver.py"
    rounds = 12
    script.write_text(_DRIVER.format(tests=str(Path(__file__).parent), root=str(Path(__file__).parents[1]), rounds=rounds))
    proc = subprocess.Popen([sys.executable, str(script), *_args(fmnist_dir, out, "--backend", "local", "--workers", "1")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=str(Path(__file__).parents[1]), preexec_fn=sigint_as_in_a_terminal)
    deadline = time.time() + 300
    while time.time() < deadline and not (out / "trials").is_dir():
        time.sleep(0.05)
    while time.time() < deadline and not any((d / "rows.json").is_file() for d in (out / "trials").iterdir()):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "--resume" in stderr.strip().splitlines()[-1]
    text = (out / "summary.md").read_text()
    assert "**Interrupted**" in text and "--resume" in text
    done = {d.name for d in (out / "trials").iterdir() if (d / "rows.json").is_file()}
    assert 1 <= len(done) < 4
    GRIDS["tiny-noise"] = make_tiny_grid(rounds=rounds)
    assert sweep.main(_args(fmnist_dir, out, "--backend", "local", "--resume", "--json")) == 0
    summary = _summary(capsys.readouterr().out)
    assert summary["trials_run"] == 4 - len(done) and summary["trials_done"] == 4


def test_tunes_restore_hint_is_dropped():
    """An interrupted Tune launch logs "Resume experiment with: Tuner.restore(...)"; the sweep resumes with
    --resume instead, so that line is filtered out of the ray.tune.tune logger (other lines pass)."""
    import logging

    from fda_ray.experiments.backends import TuneRestoreHint

    f = TuneRestoreHint()
    hint = logging.LogRecord("ray.tune.tune", logging.WARNING, "", 0, "Experiment has been interrupted, but the most "
                             "recent state was saved.\nResume experiment with: Tuner.restore(path=\"x\", trainable=...)",
                             None, None)
    other = logging.LogRecord("ray.tune.tune", logging.WARNING, "", 0, "Trials did not complete: %s", ("t",), None)
    assert f.filter(hint) is False and f.filter(other) is True


def test_summary_says_how_the_profile_differs_from_the_paper():
    from fda_ray.papers.grids import Profile

    grid = Grid(name="g", dataset="fashion-mnist", variable="noise", values=(0.4,), rows=ROWS, seeds={},
                profiles={"quick": Profile({"rounds": 3}, note="3 rounds, not 50."), "paper": {}},
                paper={"fedgp_auto": {0.4: 71.53}}, paper_ref="test numbers")
    rows = [{"row": "fedgp_auto", "trial": "t", "grid_value": 0.4, "seed": 0, "round": 3, "accuracy": 0.7}]
    quick, _ = summary.summarize(rows, [], grid, "quick", ["fedgp_auto"], [0.4], "cmd")
    paper, _ = summary.summarize(rows, [], grid, "paper", ["fedgp_auto"], [0.4], "cmd")
    assert "Profile `quick`: 3 rounds, not 50.\n" in quick and "Profile" not in paper
    assert "| FedGP_Auto | 70.00 / 71.53 |" in quick


@pytest.mark.slow
def test_pool_workers_die_with_a_killed_sweep(tmp_path):
    """A sweep killed outright (SIGKILL: no cleanup runs) takes its local pool's workers with it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    pidfile = tmp_path / "child.pid"
    code = ("import multiprocessing as mp, time, sys\n"
            "from fda_ray.experiments.backends import die_with_parent\n"
            "def child(path):\n"
            "    assert die_with_parent()\n"
            "    open(path, 'w').write(str(__import__('os').getpid()))\n"
            "    time.sleep(60)\n"
            "if __name__ == '__main__':\n"
            "    p = mp.get_context('spawn').Process(target=child, args=(sys.argv[1],)); p.start(); time.sleep(60)\n")
    script = tmp_path / "parent.py"
    script.write_text(code)
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
    parent = subprocess.Popen([sys.executable, str(script), str(pidfile)], cwd=repo, env=env)
    deadline = time.time() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    child = int(pidfile.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):  # gone within seconds (SIGTERM on the parent's death)
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the pool worker outlived the killed sweep")


def _pool_workers(parent: int) -> list[int]:
    """The local backend's pool processes under `parent` (spawn children; not the resource tracker)."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmd:
            found.append(pid)
    return found


def _kill_a_worker(when) -> tuple:
    """A thread that SIGKILLs this process's first pool worker once when(workers) holds (the OOM killer's way):
    (the thread, started; {"workers": how many there were})."""
    import threading

    seen: dict = {}

    def killer() -> None:
        deadline = time.time() + 300
        while time.time() < deadline:
            workers = _pool_workers(os.getpid())
            if when(workers):
                seen["workers"] = len(workers)
                os.kill(workers[0], signal.SIGKILL)
                return
            time.sleep(0.05)

    watch = threading.Thread(target=killer, daemon=True)
    watch.start()
    return watch, seen


@pytest.mark.slow  # the local backend's worker processes, one of them killed
def test_a_killed_pool_worker_is_replaced_and_its_trial_runs_again(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """kill -9 of a local-backend pool worker mid-trial (the OOM killer's way): its trial fails one attempt, with a
    note saying the process died, and runs again in a new pool from its last round; the sweep ends as an
    uninterrupted one (before: the retry went to the broken pool, a BrokenProcessPool traceback, exit 1, no
    summary). The sweep's only spawned processes are its workers: no multiprocessing Manager (a ~0.5 GB process
    that outlived a sweep killed with kill -9)."""
    out = tmp_path / "k"
    # (kill once a round is saved: the trial goes on)
    watch, seen = _kill_a_worker(lambda workers: workers and any((out / "trials").glob("*/state.pt")))
    code = sweep.main(_args(fmnist_dir, out, "--backend", "local", "--workers", "1", "--methods", "target_only",
                            "--values", "0.8", "--rounds", "8", "--no-figures"))
    watch.join(10)
    err = capsys.readouterr().err
    assert seen.get("workers") == 1, seen  # one worker, and nothing else spawned
    assert code == 0 and "Traceback" not in err and "BrokenProcessPool" not in err, err[-3000:]
    notes = [x for x in err.splitlines() if x.startswith("note: ")]
    assert len(notes) == 1 and "failed: its worker process died" in notes[0] and "(attempt 2 of 3)" in notes[0], notes
    rows = sorted(pq.read_table(out / "results.parquet").to_pylist(), key=lambda r: r["round"])
    assert [r["round"] for r in rows] == list(range(9))
    assert [r["accuracy"] for r in rows] == [r["accuracy"] for r in _plain(fmnist_dir, "target_only", 0.8, rounds=8).rows]
    assert _pool_workers(os.getpid()) == []


@pytest.mark.slow  # the local backend's worker processes, one of them killed
def test_only_the_killed_workers_trial_is_charged_an_attempt(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """The pool breaks for every trial when one worker dies: the trial of the worker still alive was charged a
    failed attempt too (a pool of W workers that lost one W times over failed every trial). It goes on in the new
    pool from its last round with no attempt counted; both end with a plain run's numbers."""
    out = tmp_path / "k2"
    # (kill once both trials are mid-run)
    watch, seen = _kill_a_worker(lambda workers: len(workers) == 2 and len(list((out / "trials").glob("*/state.pt"))) == 2)
    # 120 rounds: the other trial is still running when the pool breaks (at 40 it once finished first on a quiet
    # machine, and there was no trial to spare)
    code = sweep.main(_args(fmnist_dir, out, "--backend", "local", "--workers", "2", "--methods", "target_only",
                            "--rounds", "120", "--no-figures"))
    watch.join(10)
    err = capsys.readouterr().err
    assert seen.get("workers") == 2, seen
    assert code == 0 and "Traceback" not in err, err[-3000:]
    notes = [x for x in err.splitlines() if x.startswith("note: ")]
    died = [x for x in notes if "failed: its worker process died" in x]
    spared = [x for x in notes if "stopped: another worker of the pool died" in x]
    assert len(died) == 1 and "(attempt 2 of 3)" in died[0], notes
    assert len(spared) == 1 and spared[0].endswith("(no attempt counted)") and len(notes) == 2, notes
    rows = pq.read_table(out / "results.parquet").to_pylist()
    for value in (0.0, 0.8):
        mine = sorted((r for r in rows if r["value"] == value), key=lambda r: r["round"])
        plain = _plain(fmnist_dir, "target_only", value, rounds=120).rows
        assert [r["accuracy"] for r in mine] == [r["accuracy"] for r in plain], value
    assert _pool_workers(os.getpid()) == []


@pytest.mark.slow  # the local backend's worker processes
def test_a_refused_record_write_is_not_retried_and_stops_new_trials(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """A trial that cannot write its record (the disk full, a quota, a file-size limit: here RLIMIT_FSIZE, which the
    pool workers inherit, refuses the checkpoint) fails at once, with a note naming the file: a retry only fails
    again (before: every trial started and retried 3 times, and the lines named no file). The trials not started are
    not started; the sweep ends with one line saying to free the space and resume (exit 1)."""
    import resource

    out = tmp_path / "full"
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    sigxfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (ignored: the write fails with EFBIG instead)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, limits[1]))  # a model's state.pt is larger
    try:
        code = sweep.main(_args(fmnist_dir, out, "--backend", "local", "--workers", "1", "--methods", "target_only",
                                "--rounds", "2", "--no-figures"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, sigxfsz)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 1 and "Traceback" not in err, err[-3000:]
    assert not [x for x in lines if x.startswith("note: ")], lines  # no retry
    (last,) = [x for x in lines if x.startswith("error: ")]
    assert last.startswith("error: 2 trial(s) could not write their records (File too large, under ") and \
        "free the space, then resume with: " in last and last.endswith(" --resume"), last
    failed = (out / "summary.md").read_text().split("## Failed trials (2)")[1]
    assert "File too large: '" + str(out / "trials") in failed and "state.pt'" in failed, failed  # the file named
    assert "not run: a trial before it could not write its record" in failed, failed
    assert len(list((out / "trials").glob("*/nodes.json"))) <= 1  # (the second trial never started)


def test_parquet_takes_a_metric_that_is_a_number_in_one_trial_and_a_list_in_another(tmp_path):
    """FSSDA's source loss: one number with one source domain, a list with two; Parquet's columns hold one
    type, so such a column is written as JSON text (readable back to the same values)."""
    from fda_ray.experiments.backends import write_parquet

    rows = [{"row": "a", "loss": 0.5, "acc": [0.1]}, {"row": "b", "loss": [0.25, 0.75], "acc": [0.2, 0.3]},
            {"row": "c", "loss": None, "acc": None}]
    write_parquet(rows, tmp_path / "r.parquet")
    back = pq.read_table(tmp_path / "r.parquet").to_pylist()
    assert [json.loads(r["loss"]) if r["loss"] is not None else None for r in back] == [0.5, [0.25, 0.75], None]
    assert [r["acc"] for r in back] == [[0.1], [0.2, 0.3], None]  # lists only: a list column


@pytest.mark.slow  # a sweep (the fast tier's 8 minutes)
def test_a_damaged_record_makes_its_trial_pending_again_and_is_kept(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """A rows.json cut short (a crash, a full disk): --resume sets it aside as rows.json.damaged with one warning
    line naming the trial, runs that trial again and summarises the others; --dry-run only says so."""
    out = tmp_path / "s"
    base = ("--backend", "local", "--workers", "1", "--methods", "target_only", "--rounds", "2")
    assert sweep.main(_args(fmnist_dir, out, *base, "--json")) == 0
    capsys.readouterr()
    first = {(r["noise"], r["round"]): r["accuracy"] for r in pq.read_table(out / "results.parquet").to_pylist()}
    keys = sorted(p.name for p in (out / "trials").iterdir())
    assert len(keys) == 2  # target_only at noise 0 and 0.8
    bad = out / "trials" / keys[0] / "rows.json"
    cut = bad.read_bytes()[:100]
    bad.write_bytes(cut)
    assert sweep.main(_args(fmnist_dir, out, *base, "--resume", "--dry-run")) == 0
    printed = capsys.readouterr()
    warnings = [line for line in printed.err.splitlines() if line.startswith("warning: trial")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: trial {keys[0]}: its rows.json is damaged (not JSON")
    assert warnings[0].endswith("a resume without --dry-run keeps it as rows.json.damaged and runs the trial again")
    assert f"{keys[0]}: Target Only, target_only [to run (damaged record)]" in printed.out
    assert f"{keys[1]}: Target Only, target_only [done]" in printed.out
    assert bad.read_bytes() == cut  # a dry run moves nothing
    assert sweep.main(_args(fmnist_dir, out, *base, "--resume", "--json")) == 0
    printed = capsys.readouterr()
    warnings = [line for line in printed.err.splitlines() if line.startswith("warning: trial")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: trial {keys[0]}: its rows.json is damaged (not JSON")
    assert warnings[0].endswith("kept as rows.json.damaged, the trial is pending again")
    assert _summary(printed.out)["trials_run"] == 1
    assert (bad.parent / "rows.json.damaged").read_bytes() == cut  # nothing the user had is lost
    again = {(r["noise"], r["round"]): r["accuracy"] for r in pq.read_table(out / "results.parquet").to_pylist()}
    assert again == first  # the trial ran again, by the same code on the same seeds: the same numbers


def test_set_aside_damaged_keeps_every_damaged_copy_and_leaves_whole_records(tmp_path):
    from fda_ray.experiments.records import is_done, record_damage, set_aside_damaged

    records = tmp_path / "trials"
    texts = {"good": json.dumps({"config": {}, "rows": [{"round": 0}]}), "cut": '{"config": {}, "ro',
             "odd": json.dumps({"config": {}}), "bytes": b"\xff\xfe"}
    for key, text in texts.items():
        (records / key).mkdir(parents=True)
        (records / key / "rows.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    (records / "cut" / "rows.json.damaged").write_text("an earlier damaged copy")
    assert record_damage(records / "good") is None and record_damage(records / "odd") == "no list of rows"
    lines = set_aside_damaged(records)
    assert sorted(lines) == ["bytes", "cut", "odd"]
    assert "(not UTF-8 text)" in lines["bytes"] and "kept as rows.json.damaged.1," in lines["cut"]
    assert (records / "cut" / "rows.json.damaged").read_text() == "an earlier damaged copy"
    assert (records / "cut" / "rows.json.damaged.1").read_text() == texts["cut"]
    assert is_done(records / "good") and not any(is_done(records / k) for k in ("cut", "odd", "bytes"))
    assert set_aside_damaged(records) == {}  # nothing left to set aside


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_resume_auto_starts_a_sweep_then_continues_it(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    """--resume auto, a launcher's one command: the first run starts (no records yet), a rerun continues; the
    summary's command names neither --resume nor its value."""
    out = tmp_path / "auto"
    base = ("--backend", "local", "--workers", "1", "--methods", "target_only", "--values", "0.8", "--rounds", "1",
            "--resume", "auto", "--json")
    assert sweep.main(_args(fmnist_dir, out, *base)) == 0
    first = _summary(capsys.readouterr().out)
    assert first["trials_run"] == 1 and first["resumed"] is False
    assert sweep.main(_args(fmnist_dir, out, *base)) == 0
    again = _summary(capsys.readouterr().out)
    assert again["trials_run"] == 0 and again["resumed"] is True
    text = (out / "summary.md").read_text()
    command = text.split("Command: ")[1].splitlines()[0]
    assert "--resume" not in command and " auto" not in command
    assert sweep.main(_args(fmnist_dir, out, "--resume", "maybe")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "resume='maybe' is invalid: --resume, --resume auto" in err


def test_dry_run_checks_the_device_and_the_data_of_this_machine(tmp_path, capsys):
    """--dry-run plans for this machine, so it checks what the trials need from it as the run does (one line, exit
    code 2): the local backend's device here; on Ray the nodes hold the devices (a head without a GPU plans a GPU
    sweep for its --address cluster: its dry run refused it for the head's own device), so the plan refuses a GPU
    no node has. With --plan-for it plans for other nodes and checks nothing here."""
    import torch

    if not torch.cuda.is_available():  # (a GPU machine has the device)
        assert sweep.main(["--grid", "noise", "--device", "cuda", "--dry-run", "--backend", "local"]) == 2
        assert capsys.readouterr().err.strip() == ("error: device='cuda' is invalid: this machine has no CUDA GPU "
                                                   "(torch.cuda.is_available() is False); use --device cpu")
        assert sweep.main(["--grid", "noise", "--device", "cuda", "--dry-run"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            "error: gpus_per_client=0.0, device='cuda' is invalid: a trial asks driver {CPU: 1, GPU: 0.125}; no node "
            "has a GPU; use --device cpu")
    assert sweep.main(["--grid", "noise", "--data-dir", str(tmp_path / "none"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Fashion-MNIST not found in data_dir=") and "searched:" in err
    assert sweep.main(["--grid", "noise", "--device", "cuda", "--data-dir", str(tmp_path / "none"), "--dry-run",
                       "--plan-for", "CPU=16,GPU=1"]) == 0
    capsys.readouterr()


def test_summary_cells_print_the_interval_collect_prints():
    """One statistic everywhere a user reads a cell: summary.md prints mean ± the 95 % confidence half-width
    (Student's t), as collect and the results pages do, and says so."""
    from fda_ray.experiments.tables import mean_ci
    from fda_ray.papers.grids import GRIDS

    grid = GRIDS["noise"]
    rows = [{"row": "fedgp", "grid_value": 0.4, "trial": f"t{s}", "seed": s, "round": 0, "accuracy": a}
            for s, a in enumerate((0.60, 0.64, 0.65))]
    text, numbers = summary.summarize(rows, [], grid, "quick", ["fedgp"], [0.4], "python -m fda_ray.sweep")
    mean, half, sd = mean_ci([60.0, 64.0, 65.0])
    assert f"| FedGP_0.5 | {mean:.2f} ± {half:.2f} (n=3)" in text and half > sd  # t_{0.975, 2} / sqrt(3) > 1
    assert "mean ± the 95 % confidence half-width over seeds (Student's t)" in text
    cell = numbers["cells"]["fedgp"]["0.4"]
    assert cell["ci95"] == pytest.approx(half, rel=1e-12) and cell["std"] == pytest.approx(sd, rel=1e-12)


def test_comma_lists_take_spaces_after_the_commas(capsys):
    """--methods "fedgp, fedda" plans what "fedgp,fedda" does (it was refused: methods=' fedda' ... did you mean
    'fedda'?)."""
    plans = []
    for methods in ("fedgp,fedda", "fedgp, fedda", " fedgp ,fedda "):
        assert sweep.main(["--grid", "noise", "--methods", methods, "--values", "0.4, 0.8", "--dry-run"]) == 0
        plans.append(capsys.readouterr().out)
    assert plans[0] == plans[1] == plans[2] and "fedda-noise0.8" in plans[0]


@pytest.mark.slow
def test_a_regression_grid_reports_its_test_loss_not_an_accuracy_of_nan(tmp_path, capsys):
    """A grid on the synthetic data (a regression: accuracy NaN): summary.md and collect tabulate the test loss."""
    from fda_ray.experiments import collect

    (tmp_path / "g.yaml").write_text(
        "name: short\ndataset: synthetic\nvariable: noise\nvalues: [0.0]\nseeds: 1\n"
        "rows:\n- {key: fedgp_auto, label: FedGP_Auto, method: fedgp_auto}\n"
        "profiles:\n  quick:\n    fields: {rounds: 3, samples_per_client: 200, test_samples: 200}\n  paper: {}\n")
    out = tmp_path / "s"
    assert sweep.main(["--grid", str(tmp_path / "g.yaml"), "--profile", "quick", "--backend", "local", "--workers", "1",
                       "--out", str(out), "--no-figures"]) == 0
    text = (out / "summary.md").read_text()
    record = (out / "trials" / next(p.name for p in (out / "trials").iterdir()) / "rows.json").read_text()

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")
    # strict JSON (a bare NaN accuracy in every row was refused by JavaScript's and jq --strict's parsers)
    loss = json.loads(record, parse_constant=refuse)
    assert all(r["accuracy"] == "NaN" for r in loss["rows"])  # (read back as NaN: records.nonfinite_back)
    last = loss["rows"][-1]["loss"]
    assert "Final target test loss (MSE, lower is better)" in text and "nan" not in text.lower()
    assert f"| FedGP_Auto | {last:.2f} |" in text
    capsys.readouterr()
    assert collect.main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert "loss, final round" in printed and f"{last:.1f} (n=1)" in printed and "nan" not in printed


def test_a_summarys_profile_note_says_what_the_command_changed():
    """The profile's note says what the profile alone runs ("50 rounds ... 3 seeds"); beside a table of a command
    that set --rounds, --seeds or --methods it says so (the note alone described another run than the table's)."""
    from fda_ray.experiments.summary import changed_by, summarize

    command = ("python -m fda_ray.sweep --grid noise --methods fedgp,fedda_auto --values 0.4 --seeds 2 --rounds 4 "
               "--warmup-rounds 1")
    assert changed_by(command) == (" The command changed: rounds=4, warmup_rounds=1, seeds=2, "
                                   "methods=fedgp,fedda_auto (the tables are what ran).")
    assert changed_by("python -m fda_ray.sweep --grid noise --values 0.4") == "" and changed_by("") == ""
    text, _ = summarize([], [], GRIDS["noise"], "quick", ["fedgp"], [0.4], command)
    profile = next(line for line in text.splitlines() if line.startswith("Profile `quick`: "))
    assert profile.endswith(changed_by(command).strip()) and GRIDS["noise"].profiles["quick"].note in profile


def test_the_tune_trainable_reads_repeaters_index_as_the_seed():
    """Ray Tune's Repeater (set_index=True) puts __trial_index__ in each repeat's config, for seeds: the trial's seed
    is its config's seed plus it (it failed every trial as an unknown field; with set_index=False the repeats were
    copies of seed 0)."""
    import fda_ray.experiments.tune as ft
    from ray.tune.search.repeater import TRIAL_INDEX

    assert ft.TRIAL_INDEX == TRIAL_INDEX
    assert [ft.config_from_params({"method": "fedgp", TRIAL_INDEX: i}).seed for i in range(3)] == [0, 1, 2]
    assert ft.config_from_params({"method": "fedgp", "seed": 10, TRIAL_INDEX: 2}).seed == 12
    with pytest.raises(ValueError, match=r"^__trial_index__=-1 is invalid: a repeat's index"):
        ft.config_from_params({"method": "fedgp", TRIAL_INDEX: -1})


def test_a_tune_checkpoint_of_another_runs_shape_is_refused_in_one_line(tiny, tmp_path, monkeypatch):
    """A Tuner trial restored from a checkpoint that cannot resume its config (PBT's exploit with a mutated
    num_sources: the donor's 3 client states were paired with 4 clients, the target's state given to a source) fails
    in one line naming why, as a sweep's trial sets such a state.pt aside."""
    import torch
    from ray import tune

    import fda_ray.experiments.tune as ft
    from fda_ray.runtime.engine import run_rounds, start_run

    donor = tiny(method="fedgp", num_sources=2, rounds=1, warmup_rounds=0)
    states = []
    exp, executor, startup = start_run(donor)
    run_rounds(exp, executor, checkpoint=states.append, startup=startup)
    executor.shutdown()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.save(states[-1], ckpt / ft.STATE_FILE)
    monkeypatch.setattr(tune, "get_checkpoint", lambda: tune.Checkpoint.from_directory(str(ckpt)))
    monkeypatch.setattr(tune, "report", lambda *a, **kw: pytest.fail("the misfit checkpoint ran a round"))
    params = {k: v for k, v in tiny(method="fedgp", num_sources=3, rounds=2, warmup_rounds=0).to_dict().items()}
    with pytest.raises(ValueError, match=r"^checkpoint='.*ckpt' is invalid for this trial's config: its client "
                                         r"states are not those of this run's 4 clients"):
        ft.trainable(params)


def test_the_tune_apis_resources_refuse_a_trial_no_node_can_hold(no_ray):
    """ft.with_resources refuses, in one line, a placement group no node of the running Ray can ever hold (a Tuner
    waited for it in silence, PENDING, with Ray's repeated warning only); what fits is returned as before; before
    ray.init nothing is judged (the Tuner may join a cluster: pin_drivers' fda_driver is never on this machine)."""
    import ray

    import fda_ray.experiments.tune as ft
    from fda_ray.core.config import RunConfig
    from fda_ray.runtime.preflight import PreflightError

    huge = RunConfig(executor="ray", clients_per_actor=1, num_sources=2000)  # 2001 actors of a CPU each, packed
    assert len(ft.with_resources(huge)._resources.bundles) == 2002  # (not judged before ray.init)
    assert ft.with_resources(RunConfig(), pin_drivers=True)._resources.bundles[0]["fda_driver"] == 1.0
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with pytest.raises(PreflightError, match=r"^gpus_per_client=0\.0, clients_per_actor=1 is invalid: a trial asks "
                                             r"driver \{CPU: 1\} \+ 2001 x \{CPU: 1\} \(PACK\); no node set of "):
        ft.with_resources(huge)
    assert ft.with_resources(RunConfig())._resources.bundles == [{"CPU": 1.0}]


def test_an_out_folder_moved_while_the_sweep_ran_is_not_summarised(tiny_grid, fmnist_dir, tmp_path, capsys,
                                                                   monkeypatch):
    """--out moved away mid-sweep (its finished records with it; the workers write the rest into a new folder of
    that name): one error line and exit 1, no summary over a part of the records (it printed "[6/6] done", a table
    of smaller n and exit 0)."""
    import shutil

    from fda_ray.experiments import sweep as sweep_mod

    out = tmp_path / "s"

    def moved(pending, records, *a, **kw):
        shutil.move(str(out), str(tmp_path / "elsewhere"))
        records.mkdir(parents=True)  # (a worker's next record makes the folder again)
        return []

    monkeypatch.setattr(sweep_mod, "run_local", moved)
    assert sweep.main(_args(fmnist_dir, out, "--backend", "local", "--workers", "1", "--methods", "target_only",
                            "--values", "0.8", "--rounds", "1")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: out={str(out)!r} was removed, moved or replaced while the "
                                               "sweep ran (its lock file is gone)") and err[0].endswith("--resume")
    assert not (out / "summary.md").exists() and not (out / "results.parquet").exists()


@pytest.mark.parametrize("flag", [["--scheduler", "asha"], ["--num-samples", "5"], ["--search-alg=optuna"],
                                  ["--rerun-seeds", "2"], ["--sched", "asha"], ["--num-sampl=3"]])
def test_a_searchs_own_flags_on_a_grid_sweep_are_one_line(flag, capsys):
    """A grid sweep given --scheduler, --num-samples, --search-alg or --rerun-seeds (a search's) says so in one line
    (it ran every trial and ignored them)."""
    assert sweep.main(["--grid", "noise", *flag, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    name = {"--sched": "scheduler", "--num-sampl": "num_samples"}.get(flag[0].split("=")[0],
                                                                      flag[0].split("=")[0][2:].replace("-", "_"))
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {name}=") and \
        err.endswith("is invalid with --grid: it is a search's (--search NAME); a grid sweep runs every trial of its "
                     "plan")


def test_a_method_name_selects_the_rows_its_profile_runs_and_a_row_key_its_row():
    """--methods fedgp on the quick noise grid, whose profile leaves FedGP_1 out (its summary says "no FedGP_1"),
    ran FedGP_1 too; the row key fedgp_beta1 still names it, and the paper profile runs both rows of fedgp."""
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    def rows(profile: str, methods: list[str]) -> set[str]:
        return {t.row for t in plan(GRIDS["noise"], profile, rows=methods, values=[0.4], seeds=1)}

    assert rows("quick", ["fedgp"]) == {"fedgp"}
    assert rows("quick", ["fedgp_beta1"]) == {"fedgp_beta1"}
    assert rows("quick", ["fedgp", "fedgp_beta1"]) == {"fedgp", "fedgp_beta1"}
    assert rows("paper", ["fedgp"]) == {"fedgp", "fedgp_beta1"}


def test_a_profile_note_without_a_full_stop_ends_its_sentence():
    from fda_ray.experiments.summary import sentence

    assert sentence("a first look") == "a first look." and sentence("done.") == "done." and sentence("") == ""
    assert sentence("why? ") == "why?"


@pytest.mark.parametrize("name,value,allowed", [
    ("FDA_RAY_CONV_LAYOUT", "bogus", "one of grouped, per_model"),
    ("FDA_RAY_KERNELS", "refrence", "kernel or reference (or unset: kernel)"),
])
def test_a_bad_trial_environment_variable_is_refused_before_any_work(name, value, allowed, tmp_path, monkeypatch,
                                                                     capsys):
    """A variable the trials read (the fused convolutions' layout, the aggregation kernels) with a bad value: one
    line naming it, exit 2, before any work (before: every trial failed in round 0 and was retried, exit 1; a typo
    in $FDA_RAY_KERNELS ran the kernel in silence)."""
    monkeypatch.setenv(name, value)
    assert sweep.main(["--grid", "noise", "--values", "0", "--methods", "target_only", "--backend", "local",
                       "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {name}={value!r} is invalid: {allowed}"], err
    assert not (tmp_path / "o").exists()
    from fda_ray import kernels

    monkeypatch.setenv("FDA_RAY_KERNELS", "Reference")
    assert kernels.default_impl() == "reference"
    monkeypatch.setenv("FDA_RAY_KERNELS", "off")
    assert kernels.default_impl() == "reference"
    monkeypatch.delenv("FDA_RAY_KERNELS")
    assert kernels.default_impl() == "kernel"


def test_more_workers_than_cores_is_planned_as_the_trials_and_warned(tmp_path, capsys):
    """--workers 100000 on a 4-trial grid said "100000 trial(s) at once" and nothing of the cores it shares."""
    from fda_ray.runtime import resources

    cpus = int(resources.this_machine().total("CPU"))
    argv = ["--grid", "noise", "--methods", "fedgp", "--values", "0.4,0.8", "--seeds", "2", "--dry-run",
            "--backend", "local", "--out", str(tmp_path / "o")]
    assert sweep.main(argv + ["--workers", "100000"]) == 0
    out = capsys.readouterr().out
    assert "plan: 4 trial(s) at once (backend local" in out
    if cpus < 4:  # (4 trials at once on fewer cores)
        assert (f"warning: workers=100000 runs 4 trials at once, 4 CPUs (1 thread(s) a trial) of the {cpus} this "
                "machine has: the trials share cores and each runs slower") in out
    else:
        assert "warning" not in out
    assert sweep.main(argv + ["--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "plan: 1 trial(s) at once" in out and "warning" not in out


def test_more_workers_than_trials_on_few_cores_warns_of_the_workers_that_run(tmp_path, capsys):
    """--workers 4 for 1 trial on a 2-core machine runs 1 process: no warning of 4 CPUs asked."""
    argv = ["--grid", "noise", "--methods", "fedgp", "--values", "0.4", "--seeds", "1", "--dry-run", "--backend",
            "local", "--workers", "4", "--out", str(tmp_path / "o")]
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert "plan: 1 trial(s) at once" in out and "warning" not in out
