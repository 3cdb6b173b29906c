"""Nothing a user computed is lost when the world fails a run or a sweep: checkpoints that cannot be read back,
outputs that cannot be written, resumes that would change the sweep, signals and closed pipes. Each class is a
table of cases built from fixtures the tests make (damaged files, faked OSErrors at the write, lock files of live
and dead processes, subprocesses sent SIGTERM)."""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch

from conftest import TEST_THREADS, make_fmnist_dir
from fda_ray.core import interrupts, locks
from fda_ray.core.storage import StoragePath, atomic_local
from fda_ray.experiments import stranded, sweep
from fda_ray.experiments.stranded import StrandedWatch
from fda_ray.experiments.records import (ROWS_FILE, STATE_FILE, WEIGHTS_FILE, Trial, changed_settings, is_done,
                                         read_rows, rerun_for_weights, trial_key)
from fda_ray.experiments.trials import plan, run_trial
from fda_ray.runtime import preflight
from fda_ray.papers.grids import GRIDS, Grid, Row

ROOT = Path(__file__).resolve().parents[1]
TINY = {"dataset": "fashion-mnist", "method": "fedgp", "noise": 0.4, "num_sources": 2, "rounds": 2,
        "warmup_rounds": 1, "samples_per_client": 128, "test_samples": 100, "target_labelled": 32,
        "threads": TEST_THREADS}


def _trial(fmnist_dir: Path, seed: int = 0) -> Trial:
    params = {**TINY, "seed": seed, "data_dir": str(fmnist_dir)}
    return Trial(trial_key("fedgp", "noise", 0.4, seed, params), "fedgp", 0.4, seed, params)


# ---------------------------------------------------------------- 1. checkpoints that cannot be read back

def _tensor_file(_good: bytes, _other: bytes) -> bytes:
    buf = io.BytesIO()
    torch.save(torch.zeros(3), buf)
    return buf.getvalue()


def _edited(**fields):
    """The good state.pt with `fields` replaced (a server state entry: state_<name>): it loads, and does not fit."""
    def make(good: bytes, _other: bytes) -> bytes:
        state = torch.load(io.BytesIO(good), weights_only=True)
        for name, value in fields.items():
            if name.startswith("state_"):
                state["state"][name.removeprefix("state_")] = value
            else:
                state[name] = value
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()
    return make


CHECKPOINTS = [  # (case, the state.pt a cut-off trial finds, what the warning says)
    ("cut short", lambda good, other: good[: len(good) // 2], "unreadable"),
    ("garbage", lambda good, other: b"\x00not a torch file" * 64, "unreadable"),
    ("empty", lambda good, other: b"", "unreadable"),
    ("a tensor, not a state", _tensor_file, "not a resume state"),
    ("another trial's", lambda good, other: other, "it is the checkpoint of trial fedgp-noise0.4-seed1-"),
    # (they load, and would fail the trial in its first round on every resume)
    ("another model's weights", _edited(state_global=torch.zeros(3)),
     "its server state's 'global' is torch.float32 (3,), this run's model torch.float32 ("),
    ("a round past the run", _edited(next_round=99), "its next_round is 99, not a round of this run (0 to "),
    ("other clients", _edited(client_states=[{}]), "its client states are not those of this run's "),
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Two finished tiny trials (seeds 0 and 1), each with its last round's state.pt, and their rows."""
    root = tmp_path_factory.mktemp("ckpt")
    fm = make_fmnist_dir(root / "fm")
    records = root / "records"
    out = {}
    for seed in (0, 1):
        t = _trial(fm, seed)
        run_trial(t, records)
        out[seed] = (t, (records / t.key / STATE_FILE).read_bytes(), read_rows(records / t.key)["rows"])
    return fm, out


@pytest.mark.parametrize("case,damage,why", CHECKPOINTS, ids=[c[0] for c in CHECKPOINTS])
def test_a_checkpoint_that_cannot_be_used_starts_its_trial_again(case, damage, why, finished, tmp_path, capsys):
    """The trial was cut off (rows.json absent) and its state.pt is damaged or another trial's: one warning names the
    file and why, the file is kept as state.pt.damaged, and the trial runs from round 0 to the same numbers."""
    _, runs = finished
    t, good, rows = runs[0]
    record = tmp_path / t.key
    record.mkdir()
    (record / STATE_FILE).write_bytes(damage(good, runs[1][1]))
    run_trial(t, tmp_path)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(err) == 1 and str(record / STATE_FILE) in err[0] and why in err[0], err
    assert "starts again from round 0" in err[0]
    assert (record / (STATE_FILE + ".damaged")).read_bytes() == damage(good, runs[1][1])  # kept, not deleted
    again = read_rows(record)["rows"]
    assert [r["accuracy"] for r in again] == [r["accuracy"] for r in rows] and len(again) == len(rows)
    assert torch.load(record / STATE_FILE, weights_only=True)["trial"] == t.key  # the new one names its trial


def test_a_good_checkpoint_is_adopted_without_a_word(finished, tmp_path, capsys):
    """The control: the trial's own last state.pt resumes it (no round runs again: the rows come from it)."""
    _, runs = finished
    t, good, rows = runs[0]
    (tmp_path / t.key).mkdir()
    (tmp_path / t.key / STATE_FILE).write_bytes(good)
    run_trial(t, tmp_path)
    assert "warning" not in capsys.readouterr().err
    assert read_rows(tmp_path / t.key)["rows"] == rows and not (tmp_path / t.key / (STATE_FILE + ".damaged")).exists()


# ---------------------------------------------------------------- 2. outputs that cannot be written

@pytest.mark.parametrize("case,make,field_error", [
    ("a folder where --parquet goes", lambda d: (d / "out.parquet").mkdir(), "it is a directory"),
    ("a name over the filesystem's limit", lambda d: None, "over this filesystem's limit"),
    ("a file where a parent folder goes", lambda d: (d / "sub").write_text("x"), "is a file, not a directory"),
    ("a read-only existing file", lambda d: ((d / "out.parquet").write_text("x"), os.chmod(d / "out.parquet", 0o444)),
     "read-only"),
])
def test_an_output_file_that_cannot_be_written_fails_before_any_work(case, make, field_error, tmp_path):
    make(tmp_path)
    target = {"a name over the filesystem's limit": tmp_path / ("r" * 250 + ".parquet"),
              "a file where a parent folder goes": tmp_path / "sub" / "out.parquet"}.get(case, tmp_path / "out.parquet")
    if case == "a read-only existing file" and os.geteuid() == 0:
        pytest.skip("root writes read-only files")
    with pytest.raises(preflight.PreflightError) as e:
        preflight.output_file("parquet", target)
    assert str(e.value).startswith("parquet=") and field_error in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case,make,needle", [
    ("the records folder is a file", lambda d: (d / "trials").write_text("x"), "is a file, where this writes a folder"),
    ("summary.md is a folder", lambda d: (d / "summary.md").mkdir(), "is a folder, where this writes a file"),
    ("results.parquet is a folder", lambda d: (d / "results.parquet").mkdir(), "is a folder, where this writes a file"),
    ("--out is a file", None, "it is a file, not a directory"),
])
def test_a_sweep_output_of_the_wrong_kind_fails_before_any_work(case, make, needle, tmp_path, fmnist_dir, capsys):
    out = tmp_path / "out"
    if make is None:
        out.write_text("x")
    else:
        out.mkdir()
        make(out)
    code = sweep.main(["--grid", "noise", "--values", "0", "--methods", "target_only", "--data-dir", str(fmnist_dir),
                       "--out", str(out), "--backend", "local", "--resume", "auto"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: out=") and needle in err[0], err


def test_free_space_and_path_limits_are_checked_before_work(tmp_path):
    with pytest.raises(preflight.PreflightError, match=r"MiB free, and this needs about"):
        preflight.output_dir("out", tmp_path / "o", need=1 << 62)
    with pytest.raises(preflight.PreflightError, match=r"over this filesystem's limit of \d+"):
        preflight.output_dir("out", tmp_path / "o", below="trials/" + "k" * 300 + "/rows.json")
    assert preflight.output_dir("out", tmp_path / "o", below="trials/key/rows.json") == tmp_path / "o"


def test_a_symlinked_output_is_written_through(tmp_path):
    """The link stays a link; its target gets the new contents (atomically); no temporary file is left."""
    target = tmp_path / "real" / "table.bin"
    target.parent.mkdir()
    target.write_bytes(b"old")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    StoragePath(link).write_bytes(b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    from fda_ray.core.history import History

    h = History(config={"method": "fedgp"})
    h.rows = [{"round": 0, "accuracy": 0.5}]
    h.to_parquet(link)
    assert link.is_symlink() and pq.read_table(target).to_pylist()[0]["accuracy"] == 0.5
    assert sorted(p.name for p in target.parent.iterdir()) == ["table.bin"]


def test_a_target_name_near_the_limit_still_gets_a_temporary_file(tmp_path):
    """The temporary file's name is short and its own: a 255-byte target name (the limit) is written."""
    p = tmp_path / ("n" * 255)
    with atomic_local(p) as tmp:
        tmp.write_bytes(b"x")
        assert len(tmp.name) < 40
    assert p.read_bytes() == b"x"


def test_a_full_disk_names_the_file_that_could_not_be_written(tmp_path):
    """A full disk's write (torch.save or a JSON dump into the temporary file) raises an OSError with no file name:
    atomic_local names the file it was writing, so that the trial's note and the sweep's last line say where (before:
    'OSError: [Errno 28] No space left on device', no file). Another file's error stays as it was."""
    target = tmp_path / "trials" / "k" / "state.pt"
    with pytest.raises(OSError) as e:
        with atomic_local(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(target)
    assert interrupts.write_failure(e.value) == f"could not write {target}: No space left on device (errno ENOSPC)"
    with pytest.raises(PermissionError) as e:  # (the errno keeps its subclass)
        with atomic_local(target):
            raise PermissionError(errno.EACCES, "Permission denied")
    assert e.value.filename == str(target)
    with pytest.raises(FileNotFoundError) as e:
        with atomic_local(target):
            open(tmp_path / "missing")
    assert e.value.filename == str(tmp_path / "missing")
    assert list(target.parent.iterdir()) == []  # no temporary file left behind


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_a_refused_write_is_one_line_and_keeps_what_was_written(err, tmp_path, fmnist_dir, monkeypatch, capsys):
    """A run whose --parquet write is refused mid-run (a faked OSError at the third round's write): one line naming
    the file and the reason, exit code 1, no traceback; the file holds the rounds written before, whole."""
    from fda_ray.experiments import cli

    out = tmp_path / "rounds.parquet"
    real = pq.write_table
    calls = []

    def refusing(table, where, *a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(err, os.strerror(err), str(out))
        return real(table, where, *a, **k)

    monkeypatch.setattr(pq, "write_table", refusing)
    code = cli.main(["--data-dir", str(fmnist_dir), "--num-sources", "2", "--rounds", "3", "--warmup-rounds", "1",
                     "--samples-per-client", "128", "--target-labelled", "32", "--test-samples", "50",
                     "--executor", "serial", "--parquet", str(out)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 1 and "Traceback" not in captured.err
    assert lines[-1].startswith(f"error: could not write {out}: {os.strerror(err)}"), lines
    assert [r["round"] for r in pq.read_table(out).to_pylist()] == [0, 1]  # the two rounds written before
    assert [p.name for p in tmp_path.iterdir()] == ["rounds.parquet"]  # no temporary file left behind


# ---------------------------------------------------------------- 3. resumes that would change the sweep

SHARED = Grid(name="shared-fail", dataset="fashion-mnist", variable="noise", values=(0.0, 0.5),
              rows=(Row("source_only", "Source Only", "source_only"),
                    Row("finetune_offline", "Finetune_Offline", "finetune_offline")),
              seeds={}, profiles={"quick": {"num_sources": 2, "rounds": 2, "warmup_rounds": 1, "samples_per_client": 128,
                                            "test_samples": 100, "target_labelled": 32, "finetune_epochs": 2,
                                            "threads": TEST_THREADS}},
              share_source_only=True)


@pytest.mark.parametrize("case,damage", [
    ("kept no weights (a source_only-only sweep)", lambda p: p.unlink()),
    ("weights cut short", lambda p: p.write_bytes(p.read_bytes()[:100])),
    ("weights that are not a vector", lambda p: torch.save({"a": 1}, p)),
])
def test_a_dependency_without_usable_weights_runs_again(case, damage, tmp_path, fmnist_dir):
    """A grid extended with finetune_offline after its shared source_only trial finished without usable weights:
    the source_only trial runs again and saves them (its rows.json kept aside), so the extended sweep finishes."""
    trials = plan(SHARED, "quick", overrides={"data_dir": str(fmnist_dir)})
    src, tuned = trials[0], trials[1:]
    assert src.save_weights and all(t.weights_from == src.key for t in tuned)
    run_trial(src, tmp_path)
    before = (tmp_path / src.key / ROWS_FILE).read_bytes()
    damage(tmp_path / src.key / WEIGHTS_FILE)
    dry = rerun_for_weights(trials, tmp_path, move=False)
    assert list(dry) == [src.key] and is_done(tmp_path / src.key)  # a dry run moves nothing
    lines = rerun_for_weights(trials, tmp_path)
    assert list(lines) == [src.key] and f"which trial {tuned[0].key} starts from" in lines[src.key]
    assert not is_done(tmp_path / src.key)
    assert (tmp_path / src.key / (ROWS_FILE + ".before-rerun")).read_bytes() == before
    for t in trials:
        run_trial(t, tmp_path)
    assert all(is_done(tmp_path / t.key) for t in trials)
    assert (tmp_path / src.key / ROWS_FILE).read_bytes() != b"" and rerun_for_weights(trials, tmp_path) == {}
    assert json.loads((tmp_path / src.key / ROWS_FILE).read_text())["rows"] == json.loads(before)["rows"]


def _record(trials, records: Path) -> None:
    """Records as a sweep leaves them (trial.json of each trial), without running anything."""
    for t in trials:
        (records / t.key).mkdir(parents=True, exist_ok=True)
        (records / t.key / "trial.json").write_text(json.dumps(t.to_dict()))


@pytest.mark.parametrize("case,first,then,refused", [
    ("a changed --rounds", [], ["--rounds", "3"], "rounds 2 there, 3 here"),
    ("another --lr-target", [], ["--lr-target", "0.5"], "lr_target"),
    ("another --samples-per-client", ["--samples-per-client", "128"], ["--samples-per-client", "96"],
     "samples_per_client 128 there, 96 here"),
    ("the same settings", [], [], None),
    ("another chunk of values", ["--values", "0"], ["--values", "0.8"], None),
    ("more seeds", ["--seeds", "1"], ["--seeds", "2"], None),
])
def test_a_resume_with_other_settings_is_refused_unless_told(case, first, then, refused, tmp_path, fmnist_dir, capsys):
    base = ["--grid", "noise", "--methods", "target_only", "--data-dir", str(fmnist_dir), "--rounds", "2",
            "--backend", "local", "--no-figures"]
    out = tmp_path / "out"

    def argv(more):  # the later flag of a repeated one wins (argparse)
        return [*base, *(more or ["--values", "0"]), "--out", str(out)]

    trials = plan(GRIDS["noise"], "quick", rows=["target_only"], values=[0.0],
                  seeds=1 if "--seeds" not in first else int(first[1]),
                  overrides={"rounds": 2, "data_dir": str(fmnist_dir),
                             **({"samples_per_client": 128} if "--samples-per-client" in first else {})})
    _record(trials, out / "trials")
    assert sweep.main([*argv(then), "--resume", "--dry-run"]) == (2 if refused else 0)
    err = capsys.readouterr().err.strip().splitlines()
    if refused:
        assert len(err) == 1 and err[0].startswith("error: resume=True is invalid: trial target_only") and \
               refused in err[0] and "--new-settings" in err[0], err
        assert sweep.main([*argv(then), "--resume", "--dry-run", "--new-settings"]) == 0  # told: it goes on
    else:
        assert not any(line.startswith("error") for line in err), err
    assert changed_settings(trials, out / "trials") is None  # the records' own settings always pass


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.mark.parametrize("case,holder,taken", [
    ("a live sweep on this host", lambda p: {"pid": p.pid, "host": socket.gethostname(),
                                             "started": locks._started(p.pid)}, False),
    ("a sweep on another host", lambda p: {"pid": 1, "host": "elsewhere.example", "started": None}, False),
    ("a dead sweep", lambda p: {"pid": _dead_pid(), "host": socket.gethostname(), "started": None}, True),
    ("a reused process id", lambda p: {"pid": p.pid, "host": socket.gethostname(), "started": -1.0}, True),
    ("an unreadable old lock", lambda p: "garbage", True),
])
def test_one_writer_per_out(case, holder, taken, tmp_path, capsys):
    proc = _sleeper()
    try:
        lock = tmp_path / locks.LOCK_FILE
        h = holder(proc)
        lock.write_text(h if isinstance(h, str) else json.dumps({**h, "time": time.time(), "command": "sweep A"}))
        if isinstance(h, str):
            os.utime(lock, (time.time() - 60, time.time() - 60))
        if taken:
            with locks.held(tmp_path, "out", "sweep B"):
                assert locks.holder(lock)["pid"] == os.getpid()
            assert not lock.exists()  # released
            assert "taken over" in capsys.readouterr().err
        else:
            with pytest.raises(locks.LockedError) as e:
                locks.acquire(tmp_path, "out", "sweep B")
            assert str(e.value).startswith(f"out={str(tmp_path)!r} is invalid:") and "\n" not in str(e.value)
            assert f"pid {h['pid']} on {h['host']}" in str(e.value) and "sweep A" in str(e.value)
            assert json.loads(lock.read_text())["command"] == "sweep A"  # the holder's lock untouched
    finally:
        proc.kill()
        proc.wait()


def _take(folder: str, barrier: Any, out: Any) -> None:
    """A forked taker: waits for the other, then tries the lock; says whether it got it and still holds it."""
    barrier.wait()
    try:
        locks.acquire(Path(folder), "out", f"taker {os.getpid()}")
    except locks.LockedError:
        out.send("refused")
        return
    time.sleep(0.1)  # the other taker is done by now
    out.send("held" if locks.still_held(Path(folder)) else "lost")


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_a_stale_lock_is_taken_over_by_one_of_two_resumes_at_once(tmp_path, monkeypatch):
    """Two --resume runs after a crash judge the same stale lock at once: one takes it over, the other is refused
    (before: the slower one deleted the lock the faster one had just made, and both ran the same trials). Judging
    a holder is made slow (20 ms) so that both judge the stale lock before either replaces it."""
    import multiprocessing as mp

    alive = locks._alive
    monkeypatch.setattr(locks, "_alive", lambda pid, started: time.sleep(0.02) or alive(pid, started))
    ctx = mp.get_context("fork")  # (the patch travels with the fork)
    for i in range(15):
        folder = tmp_path / f"out{i}"
        folder.mkdir()
        (folder / locks.LOCK_FILE).write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(),
                                                          "started": None, "time": 0, "command": "crashed"}))
        barrier = ctx.Barrier(2)
        pipes = [ctx.Pipe(duplex=False) for _ in range(2)]
        procs = [ctx.Process(target=_take, args=(str(folder), barrier, w)) for _, w in pipes]
        for p in procs:
            p.start()
        said = sorted(r.recv() if r.poll(30) else "silent" for r, _ in pipes)
        for p in procs:
            p.join(10)
        assert said == ["held", "refused"], (i, said)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("what", [["--grid", "noise", "--values", "0", "--methods", "target_only"],
                                  ["--search", "beta", "--num-samples", "2", "--scheduler", "none"]], ids=["grid", "search"])
def test_a_second_sweep_into_one_out_is_refused_in_one_line(what, tmp_path, fmnist_dir, capsys):
    proc = _sleeper()
    try:
        out = tmp_path / "out"
        out.mkdir()
        (out / locks.LOCK_FILE).write_text(json.dumps({"pid": proc.pid, "host": socket.gethostname(), "time": 0,
                                                       "started": locks._started(proc.pid), "command": "first"}))
        code = sweep.main([*what, "--data-dir", str(fmnist_dir), "--out", str(out), "--backend", "local",
                           "--resume", "auto"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "another sweep writes there now" in err[0], err
        assert not (out / "trials").exists()  # nothing ran
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- 4. signals and closed pipes

def test_cli_main_maps_sigterm_and_a_closed_stdout_to_their_exit_codes(capsys):
    """The wrapper itself: SIGTERM becomes Ctrl-C's path with exit code 143, a closed stdout 141, a refused write 1
    with one line, and any other error passes through unchanged."""
    def sends(sig):
        @interrupts.cli_main
        def main():
            try:
                os.kill(os.getpid(), sig)
                time.sleep(5)
            except KeyboardInterrupt:
                print(f"interrupted: by {interrupts.stop_reason()}", file=sys.stderr)
                return interrupts.EXIT_INTERRUPTED
            return 0
        return main

    before = signal.getsignal(signal.SIGTERM)
    assert sends(signal.SIGTERM)() == 143 and "by SIGTERM" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # put back

    @interrupts.cli_main
    def pipe():
        with interrupts.printing():
            raise BrokenPipeError
        return 0  # (not reached: the closed stdout stops it as Ctrl-C would)

    with contextlib.redirect_stdout(io.StringIO()):
        assert pipe() in (interrupts.EXIT_PIPE,)

    @interrupts.cli_main
    def full():
        raise OSError(errno.ENOSPC, "No space left on device", "/x/summary.md")

    assert full() == 1 and "could not write /x/summary.md: No space left on device" in capsys.readouterr().err

    @interrupts.cli_main
    def bug():
        raise OSError(errno.ECONNREFUSED, "refused")

    with pytest.raises(OSError):
        bug()


def _spawn(args: list[str], **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(ROOT), start_new_session=True, **kw)


def _wait_for(pred, seconds: float = 240) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and not pred():
        time.sleep(0.05)
    assert pred(), "timed out"


RUN = ["--num-sources", "2", "--rounds", "400", "--warmup-rounds", "1", "--samples-per-client", "128",
       "--target-labelled", "32", "--test-samples", "50"]
CRASH = ("Traceback", "*** SIGTERM", "Stack trace", "core dumped", "Fatal Python error")


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["serial", "ray"])
def test_sigterm_to_a_run_keeps_its_rounds(executor, fmnist_dir, tmp_path):
    out = tmp_path / "r.parquet"
    proc = _spawn(["-m", "fda_ray", "--data-dir", str(fmnist_dir), *RUN, "--executor", executor, "--parquet", str(out)])
    _wait_for(lambda: out.is_file() and pq.read_metadata(out).num_rows >= 2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    kept = pq.read_table(out).to_pylist()
    lines = [line for line in err.splitlines() if line.startswith(("interrupted", "error"))]
    assert proc.returncode == 143 and not any(c in err for c in CRASH), err[-3000:]
    assert len(lines) == 1 and "stopped by SIGTERM" in lines[0] and f"finished rounds are in {out}" in lines[0]
    assert [r["round"] for r in kept] == list(range(len(kept))) and len(kept) >= 2


@pytest.mark.slow
def test_a_closed_stdout_ends_a_run_quietly_with_its_rounds_kept(fmnist_dir, tmp_path):
    out = tmp_path / "r.parquet"
    proc = _spawn(["-m", "fda_ray", "--data-dir", str(fmnist_dir), *RUN, "--executor", "serial", "--parquet", str(out)])
    first = proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert first.startswith("round   1/") and proc.returncode == 141 and not any(c in err for c in CRASH), err[-3000:]
    assert "stopped by a closed stdout" in err and pq.read_metadata(out).num_rows >= 1


_SWEEP_DRIVER = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]
from test_sweep import make_tiny_grid
from fda_ray.papers.grids import GRIDS
GRIDS["tiny-noise"] = make_tiny_grid(rounds=40)
from fda_ray.experiments import sweep
if __name__ == "__main__":  # the local backend's workers start by importing this file (spawn)
    sys.exit(sweep.main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend,how", [("local", "SIGTERM"), ("tune", "SIGTERM"), ("local", "closed stdout"),
                                         ("tune", "SIGTERM to the group")])
def test_a_stopped_sweep_keeps_its_trials_and_says_how_to_resume(backend, how, fmnist_dir, tmp_path):
    """SIGTERM (local backend: to the sweep's whole process group, as a batch system stops a job; Tune: to the
    sweep's process, as `kill` does, and to its group, as `timeout` and batch systems do) or a closed stdout: the
    finished trials' records and the summary are kept, one line names the --resume command, exit 143 (141), no
    crash dump. SIGTERM to the group of a Tune sweep on a Ray it started stops Ray's daemons too: the same line,
    from the raylet's watch (it said the node was lost, exit 1), and no summary (Ray is gone before it)."""
    script = tmp_path / "driver.py"
    script.write_text(_SWEEP_DRIVER.format(tests=str(ROOT / "tests"), root=str(ROOT)))
    out = tmp_path / "sweep"
    args = [str(script), "--grid", "tiny-noise", "--data-dir", str(fmnist_dir), "--out", str(out), "--backend",
            backend, "--no-figures", *(["--workers", "1"] if backend == "local" else ["--max-concurrent", "1"])]
    proc = _spawn(args)
    _wait_for(lambda: (out / "trials").is_dir() and any((d / STATE_FILE).is_file() for d in (out / "trials").iterdir()))
    if how.startswith("SIGTERM"):
        (os.killpg if backend == "local" or how.endswith("group") else os.kill)(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    else:
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=180)
    assert proc.returncode == (143 if how.startswith("SIGTERM") else 141), err[-3000:]
    assert not any(c in err for c in CRASH), err[-3000:]
    last = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(last) == 1 and last[0].endswith("--resume") and "resume with: python -m fda_ray.sweep" in last[0]
    assert not any(line.startswith("error:") for line in err.splitlines()), err[-3000:]
    if how.endswith("group"):
        assert last[0].startswith("interrupted by SIGTERM, which stopped this command's local Ray node too")
        assert any((d / STATE_FILE).is_file() for d in (out / "trials").iterdir())
        return
    assert "**Interrupted**" in (out / "summary.md").read_text()
    assert any((d / STATE_FILE).is_file() for d in (out / "trials").iterdir())  # the cut-off trial goes on later
    assert not (out / locks.LOCK_FILE).exists()  # released


# ---------------------------------------------------------------- 5. flags, damaged files

PROGRAMS = {  # module -> the arguments every call carries (a sweep plans without running; no data is there to load)
    "fda_ray.experiments.cli": ["--data-dir", "/nonexistent-data"],
    "fda_ray.experiments.sweep": ["--grid", "noise", "--dry-run", "--data-dir", "/nonexistent-data"],
    "fda_ray.experiments.collect": ["/nonexistent-sweep"],
    "fda_ray.experiments.diagnose": ["--data-dir", "/nonexistent-data"],
    "fda_ray.experiments.synthetic_grid": ["--out", "/nonexistent-dir/grid"],
}  # (python -m fda_ray.kernels has switches only)


def _parser_of(module) -> Any:
    """The parser a program's main builds (caught at its parse: main(["--help"]) with parse_args intercepted)."""
    from fda_ray.core.parsing import OneLineParser

    got = []

    def grab(self, *a, **k):
        got.append(self)
        raise SystemExit(0)

    real = OneLineParser.parse_args
    OneLineParser.parse_args = grab
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module.main(["--help"])
    finally:
        OneLineParser.parse_args = real
    return got[0]


@pytest.mark.slow
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_every_numeric_flag_of_every_program_refuses_an_out_of_range_value_in_one_line(program):
    """Every int or float flag of every command-line program, given -1000000 and nan: exit code 2, no traceback,
    one error line that names the flag (`<field>=<value> is invalid` or argparse's `argument --flag`)."""
    import importlib

    module = importlib.import_module(program)
    walked = 0
    for action in _parser_of(module)._actions:
        numeric = getattr(action.type, "__name__", "") in ("int", "float")  # int, float and parsing.typed(int or float)
        if not action.option_strings or action.nargs == 0 or not numeric:
            continue
        flag = max(action.option_strings, key=len)
        for bad in ("-1000000", "nan"):
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                try:
                    code = module.main([*PROGRAMS[program], flag, bad])
                except SystemExit as e:
                    code = e.code
            lines = [line for line in err.getvalue().splitlines() if line.startswith("error:")]
            assert code == 2 and "Traceback" not in err.getvalue() and len(lines) == 1, (flag, bad, err.getvalue())
            field = action.dest.removeprefix("param:").replace(":", ".")  # a family's parameter: fedwca.temp_b
            assert f"{field}=" in lines[0] or f"argument {flag}" in lines[0], (flag, bad, lines[0])
            walked += 1
    assert walked >= 2


@pytest.mark.slow  # a Python process per case (each imports torch; the first case crashed one)
@pytest.mark.parametrize("case,argv,needle", [
    ("threads far above any machine", ["-m", "fda_ray", "--threads", "100000"], "threads=100000 is invalid"),
    ("seeds that would plan for hours", ["-m", "fda_ray.sweep", "--grid", "noise", "--seeds", "100000000",
                                         "--dry-run"], "seeds=100000000 is invalid: an integer from 1 to 1000"),
    ("a search flag given to a grid sweep", ["-m", "fda_ray.sweep", "--grid", "noise", "--num-samples", "-3",
                                             "--dry-run"], "num_samples=-3 is invalid"),
    ("a scale that is not a number", ["-m", "fda_ray.collect", "docs/results/noniid-000", "--scale", "nan"],
     "scale=nan is invalid"),
    ("a negative seed of the synthetic grid", ["-m", "fda_ray.synthetic_grid", "--seed", "-1", "--out", "{tmp}/g"],
     "seed=-1 is invalid: an integer from 0 to 4294967295"),
])
def test_values_that_used_to_crash_or_hang_are_refused(case, argv, needle, tmp_path):
    """Found by walking the flags: torch.set_num_threads(100000) crashed the process (SIGSEGV); --seeds 10**8
    planned for hours; a grid sweep ignored a search flag's negative value; collect took --scale nan; the synthetic
    grid's negative --seed was numpy's traceback."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, cwd=str(ROOT),
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr[-2000:]


@pytest.mark.parametrize("dataset,damage", [
    ("fashion-mnist", lambda d: (d / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b\x08garbage")),
    ("fashion-mnist", lambda d: (d / "t10k-images-idx3-ubyte.gz").write_bytes(
        (d / "t10k-images-idx3-ubyte.gz").read_bytes()[:200])),
    ("fashion-mnist", lambda d: (d / "t10k-labels-idx1-ubyte.gz").write_bytes(b"")),
    ("mnist", lambda d: (d / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b\x08garbage")),
])
def test_a_damaged_dataset_file_is_named_with_how_to_get_it_again(dataset, damage, tmp_path):
    from fda_ray.data.base import DATASETS

    root = make_fmnist_dir(tmp_path / "fm")
    d = root
    if dataset == "mnist":  # the same four files in MNIST's layout
        d = tmp_path / "data" / "MNIST" / "raw"
        d.mkdir(parents=True)
        for f in root.iterdir():
            (d / f.name).write_bytes(f.read_bytes())
        root = tmp_path / "data"
    damage(d)
    with pytest.raises(ValueError) as e:
        DATASETS.get(dataset)(str(root))
    msg = str(e.value)
    assert "\n" not in msg and str(d) in msg and "is damaged" in msg and "to get it again" in msg, msg
    assert ("datasets/mnist.sh" if dataset == "mnist" else "datasets/fashion-mnist.sh") in msg


def _edit_table(case: str, path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines()
    if case == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    elif case == "latin-1":
        path.write_bytes("\n".join(lines[:4] + [lines[4].replace(",site_b,", ",sit\u00e9_b,")] + lines[5:]).encode("latin-1"))
    elif case == "no rows":
        path.write_text(lines[0] + "\n")
    elif case == "one domain":
        path.write_text("\n".join([lines[0]] + [line for line in lines[1:] if ",site_a," in line]) + "\n")
    elif case == "a training image as a test image":
        test_row = next(i for i, line in enumerate(lines) if ",site_c,test," in line)
        train_img = next(line for line in lines if ",site_a,train," in line).split(",")[0]
        lines[test_row] = ",".join([train_img] + lines[test_row].split(",")[1:])
        path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("case,needle", [
    ("bom", None),  # read as the same table (spreadsheet programs write the mark)
    ("latin-1", r"table.csv:5: column 'domain': byte 0xe9 is not UTF-8"),
    ("no rows", r"table.csv: no rows under the header"),
    ("one domain", r"table.csv: column 'domain' holds one domain \('site_a'\)"),
    ("a training image as a test image", r"table.csv:\d+: column 'path': image .* is a test image and a training "
                                         r"image \(.*table.csv:\d+\)"),
])
def test_a_medical_table_problem_names_the_table_the_row_and_the_column(case, needle, tmp_path):
    from fda_ray.data.base import DATASETS
    from fda_ray.data.medical_csv import TableError
    from test_medical_csv import generic_table

    path = generic_table(tmp_path)
    before = DATASETS.get("medical-csv")(data_dir=str(tmp_path)).env_names
    _edit_table(case, path)
    if needle is None:
        assert DATASETS.get("medical-csv")(data_dir=str(tmp_path)).env_names == before
        return
    with pytest.raises(TableError, match=needle) as e:
        DATASETS.get("medical-csv")(data_dir=str(tmp_path))
    assert "\n" not in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("case,env,argv,needle", [
    ("FDA_DATA_DIR points nowhere", {"FDA_DATA_DIR": "/nonexistent-fda-data"}, ["-m", "fda_ray", "--rounds", "1"],
     "error: $FDA_DATA_DIR='/nonexistent-fda-data' is invalid: no such directory"),
    ("FDA_DATA_DIR is a file", {"FDA_DATA_DIR": str(ROOT / "README.md")}, ["-m", "fda_ray", "--rounds", "1"],
     f"error: $FDA_DATA_DIR='{ROOT / 'README.md'}' is invalid: it is a file, not a directory"),
    ("RAY_ADDRESS malformed", {"RAY_ADDRESS": "garbage:xx"}, ["-m", "fda_ray", "--rounds", "1", "--executor", "ray"],
     "error: $RAY_ADDRESS='garbage:xx' is invalid: host:port, ray://host:port or auto"),
    ("RAY_ADDRESS nobody answers at", {"RAY_ADDRESS": "127.0.0.1:1"},
     ["-m", "fda_ray.sweep", "--grid", "noise", "--backend", "tune", "--out", "{tmp}/s"],
     "error: $RAY_ADDRESS='127.0.0.1:1' is invalid: no Ray cluster answers at 127.0.0.1:1"),
])
def test_environment_variables_are_checked_like_flags_and_named(case, env, argv, needle, tmp_path, fmnist_dir):
    """An environment variable that points nowhere or is malformed is an error naming it (not a field the user never
    set, and never ignored for another copy of the data)."""
    full = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    if "FDA_DATA_DIR" not in env:
        full.pop("FDA_DATA_DIR", None)
        argv = [*argv, "--data-dir", str(fmnist_dir)]
    p = subprocess.run([sys.executable, *[a.format(tmp=tmp_path) for a in argv]], capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path), env=full)
    lines = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith(needle), p.stderr[-2000:]


def test_rays_address_file_is_read_as_ray_reads_it_and_a_dead_clusters_is_named(tmp_path, monkeypatch):
    """The address a `ray start` leaves for ray.init(): absent -> None; a live listener -> joined; nobody there ->
    (file, address, False), so a run starts its own Ray instead of failing to join a cluster that is gone."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert preflight.left_by_ray_start() is None
    (tmp_path / "ray").mkdir()
    f = tmp_path / "ray" / "ray_current_cluster"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        f.write_text(f"127.0.0.1:{listener.getsockname()[1]}\n")
        assert preflight.left_by_ray_start() == (str(f), f"127.0.0.1:{listener.getsockname()[1]}", True)
    f.write_text("127.0.0.1:1")
    assert preflight.left_by_ray_start(timeout=1.0) == (str(f), "127.0.0.1:1", False)


@pytest.mark.slow
def test_a_run_beside_a_dead_clusters_address_file_starts_its_own_ray(tmp_path, fmnist_dir):
    """A `ray start` cluster that ended without `ray stop` leaves its address in Ray's folder, and a plain
    ray.init() then fails for it (CI once failed so): a run says so in one note and runs on a local Ray."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="fdaray-t-", dir="/tmp"))  # short: Ray's socket paths live under it
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")
        env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_tmp))
        env.pop("RAY_ADDRESS", None)
        p = subprocess.run([sys.executable, "-m", "fda_ray", "--data-dir", str(fmnist_dir), *RUN[:2], "--rounds", "1",
                            "--warmup-rounds", "0", *RUN[6:], "--executor", "ray"], capture_output=True, text=True,
                           timeout=300, cwd=str(tmp_path), env=env)
        notes = [line for line in p.stderr.splitlines() if line.startswith("note:") and "no longer answers" in line]
        assert p.returncode == 0 and len(notes) == 1 and "127.0.0.1:1" in notes[0], p.stderr[-3000:]
        assert "round 1" in p.stdout or "acc" in p.stdout, p.stdout[-2000:]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


# ---------------------------------------------------------------- 6. trials no live node can hold after a node loss

BIG, SMALL = {"CPU": 2.0}, {"CPU": 1.0}
ASK = [{"CPU": 2.0}]  # one trial's placement group


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _watch(nodes_over_time, wait_s=10.0, known=True, types=(), others=lambda: True):
    """A watch over a scripted cluster: nodes_over_time(t) -> the live nodes at clock t."""
    from fda_ray.runtime.resources import Cluster

    clock = _Clock()
    calls = []

    def cluster():
        calls.append(clock.t)
        return Cluster(tuple(nodes_over_time(clock.t)), tuple(types), known=known, source="the Ray cluster")

    return StrandedWatch(ASK, wait_s=wait_s, cluster=cluster, clock=clock, every_s=1.0,
                         holders=lambda: "{CPU: 0} of {CPU: 3}; held by job 02000000 (pid 7 on 10.0.0.1: hog.py): "
                                         "1 actor(s)", others=others), clock, calls


@pytest.mark.parametrize("case,nodes,known,types,statuses,expect_reason_at", [
    # the big node is lost at t=5: seen by the look at t=5, the pending trials fail 10 s later
    ("big node lost", lambda t: [BIG, SMALL] if t < 5 else [SMALL], True, (), ["PENDING"], 15.0),
    # it comes back at t=12, before the wait ends: nothing fails
    ("node back within the wait", lambda t: [BIG, SMALL] if t < 5 or t >= 12 else [SMALL], True, (), ["PENDING"], None),
    # an autoscaler can add a node that holds the trial: not stranded
    ("autoscaler type holds it", lambda t: [SMALL], True, (BIG,), ["PENDING"], None),
    # node types unknown (KubeRay): never judged
    ("unknown node types", lambda t: [SMALL], False, (), ["PENDING"], None),
    # nothing waits: nothing to judge, however small the cluster
    ("no pending trial", lambda t: [SMALL], True, (), ["RUNNING", "TERMINATED"], None),
])
def test_a_stranded_launch_is_named_once_after_the_wait(case, nodes, known, types, statuses, expect_reason_at):
    watch, clock, calls = _watch(nodes, known=known, types=types)
    found = []
    for step in range(0, 400):  # the controller's loop, every 0.1 s for 40 s
        clock.t = step / 10
        reason = watch.step(statuses)
        if reason is not None:
            found.append((clock.t, reason))
    if expect_reason_at is None:
        assert found == [] and watch.reason is None, case
    else:
        assert len(found) == 1 and found[0][0] == pytest.approx(expect_reason_at), (case, found)
        assert found[0][1].startswith("no live node can hold a trial (it asks {CPU: 2}; largest live node {CPU: 1})")
    if "PENDING" not in statuses:
        assert calls == []  # the cluster is not even asked
    else:  # read at most once a second, not every step, and never again once judged
        assert calls and all(b - a >= 1.0 - 1e-9 for a, b in zip(calls, calls[1:]))
        assert calls[-1] == (expect_reason_at if expect_reason_at is not None else 39.0)


@pytest.mark.parametrize("statuses,noted_at", [(["PENDING"], 10.0), (["PENDING", "RUNNING"], None),
                                               (["TERMINATED"], None)])
def test_trials_that_fit_yet_wait_with_none_running_get_one_note_after_the_wait(statuses, noted_at):
    """The cluster holds the trials (not stranded) but they wait, none of the launch's running (another job holds
    its CPUs): after the wait, one note of what they ask, what is free and what holds it; never while one of the
    launch's trials runs (then the others queue behind it, as planned)."""
    watch, clock, _ = _watch(lambda t: [BIG, SMALL])
    seen = []
    for step in range(300):
        clock.t = step / 10
        before = watch.waited
        assert watch.step(statuses) is None
        if watch.waited is not None and before is None:
            seen.append(clock.t)
    if noted_at is None:
        assert seen == [] and watch.waited is None
    else:
        assert seen == [pytest.approx(noted_at)] and watch.reason is None
        assert watch.waited == ("have waited 10 s for resources: each asks {CPU: 2}; free now {CPU: 0} of {CPU: 3}; "
                                "held by job 02000000 (pid 7 on 10.0.0.1: hog.py): 1 actor(s)")


def test_trials_that_wait_only_on_this_commands_own_are_not_noted():
    """A fused group's members (or Tune's trial processes) starting slowly hold the CPUs the next trials ask, with
    none yet RUNNING in Tune's eyes: the note said "8 trial(s) have waited 61 s for resources ... held by this
    command", a queue the plan made. Only another job's holding is worth it; Ray's tables are read once a wait."""
    looked = []

    def others():
        looked.append(clock.t)
        return False

    watch, clock, _ = _watch(lambda t: [BIG, SMALL], others=others)
    for step in range(300):
        clock.t = step / 10
        assert watch.step(["PENDING"]) is None
    assert watch.waited is None and looked == [pytest.approx(10.0), pytest.approx(20.0)]


def test_what_holds_a_cluster_is_read_from_rays_tables():
    from fda_ray.runtime.resources import holders_line

    jobs = [{"JobID": "01000000", "DriverPid": 11, "DriverIPAddress": "10.0.0.1", "IsDead": False,
             "Entrypoint": "python -m fda_ray.sweep --grid noise"},
            {"JobID": "02000000", "DriverPid": 22, "DriverIPAddress": "10.0.0.2", "IsDead": False,
             "Entrypoint": "python hog.py"},
            {"JobID": "03000000", "DriverPid": 33, "DriverIPAddress": "10.0.0.3", "IsDead": True, "Entrypoint": "x"}]
    actors = [{"JobID": "02000000", "State": "ALIVE"}, {"JobID": "02000000", "State": "ALIVE"},
              {"JobID": "02000000", "State": "DEAD"}, {"JobID": "03000000", "State": "ALIVE"},
              {"JobID": "01000000", "State": "ALIVE"}]
    groups = [{"placement_group_id": "aa" * 14 + "02000000", "state": "CREATED",
               "bundles": {"0": {"CPU": 1.0}, "1": {"CPU": 1.0, "GPU": 0.5}}},
              {"placement_group_id": "bb" * 14 + "02000000", "state": "REMOVED", "bundles": {"0": {"CPU": 8.0}}}]
    assert holders_line(jobs, actors, groups, own_job="01000000") == (
        "job 02000000 (pid 22 on 10.0.0.2: python hog.py): 2 actor(s), placement groups {CPU: 2, GPU: 0.5}; "
        "this command: 1 actor(s)")
    assert holders_line(jobs[2:], actors, [], own_job="01000000").startswith("nothing Ray's tables show")


@pytest.mark.parametrize("others", [True, False], ids=["another job holds resources", "only this command's actors"])
def test_a_runs_waiting_actors_are_noted_only_when_another_job_holds_what_they_ask(others, monkeypatch, capsys):
    """A run's client actors not started after the wait (fda_ray.runtime.ray_executor): the note names what holds the
    resources when another job does; when the only holder is the run's own actors (placed, still loading their
    data: free is 0 of what they ask, yet nobody else waits for), nothing is said (no false 'waited for resources')."""
    import ray

    from fda_ray.runtime import ray_executor, resources

    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 0.0})
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 1.0})
    monkeypatch.setattr(resources, "others_hold", lambda: others)
    monkeypatch.setattr(resources, "holders", lambda: "job 02000000 (pid 22 on 10.0.0.2: python hog.py): 1 actor(s)")
    executor = object.__new__(ray_executor.RayExecutor)  # (its note reads only what one actor asks)
    executor.cpus, executor.gpus = 1.0, 0.0
    executor._note_waiting(1, 2, 61.0)
    err = capsys.readouterr().err.strip().splitlines()
    if others:
        assert err == ["note: 1 of 2 client actors have waited 61 s for resources: each asks {CPU: 1}; free now "
                       "{CPU: 0} of {CPU: 1}; held by job 02000000 (pid 22 on 10.0.0.2: python hog.py): 1 actor(s); "
                       "they start once it is free (at most 300 s)"]
    else:
        assert err == []


@pytest.mark.parametrize("reserved", [True, False], ids=["a Tune trial's reserved bundles", "a single run"])
def test_client_actors_with_reserved_bundles_get_the_whole_start_time(reserved, monkeypatch):
    """A Tune trial's client actors have their placement group's bundles: their start is only loading (torch, the
    shards), which on a loaded node outlasts $FDA_RAY_NODE_WAIT_S; they wait the whole PLACEMENT_TIMEOUT_S (they
    failed after the 3 s wait of a test before). A single run's actors wait $FDA_RAY_NODE_WAIT_S, note, then the
    rest."""
    import ray

    from fda_ray.runtime import ray_executor

    monkeypatch.setenv(stranded.WAIT_ENV, "3")
    waits: list[float] = []

    def wait(refs, num_returns, timeout):
        waits.append(timeout)
        return ([], refs) if len(waits) == 1 and not reserved else (refs, [])

    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "get", lambda refs: [None for _ in refs])
    executor = object.__new__(ray_executor.RayExecutor)
    executor.placement_group = object() if reserved else None
    monkeypatch.setattr(executor, "_note_waiting", lambda *a: None, raising=False)
    executor._wait_ready(["ref"])
    if reserved:
        assert waits == [ray_executor.PLACEMENT_TIMEOUT_S]
    else:
        assert waits[0] == 3.0 and len(waits) == 2 and 290.0 < waits[1] <= ray_executor.PLACEMENT_TIMEOUT_S  # the rest


def test_a_stranded_launch_ends_only_when_its_running_trials_have_finished():
    watch, clock, _ = _watch(lambda t: [SMALL], wait_s=2.0)
    for step in range(60):
        clock.t = step / 10
        watch.step(["RUNNING", "PENDING"])
    assert watch.reason is not None and not watch.stop_all()  # a trial still runs on the small node's ...
    watch.step(["TERMINATED", "PENDING"])
    assert watch.stop_all()


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "soon"])
def test_a_bad_node_wait_is_one_line_naming_the_variable(raw, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv(stranded.WAIT_ENV, raw)
    code = sweep.main(["--grid", "noise", "--backend", "tune", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"error: ${stranded.WAIT_ENV}={raw!r} is invalid: seconds, a finite number >= 0"]
    assert not (tmp_path / "s").exists()


def test_a_lost_raylets_line_names_the_signal_the_log_and_what_was_kept():
    from fda_ray.runtime import node_watch

    node_watch.set_kept(lambda: "the 7 finished rounds are in r.parquet")
    try:
        assert node_watch.line(42, -9, "/x/raylet.out") == (
            "error: the local Ray node under this command was lost (its raylet, pid 42, ended by SIGKILL: killed, by a "
            "user or the out-of-memory killer; its log: /x/raylet.out); Ray cannot go on without it; the 7 finished "
            "rounds are in r.parquet")
        assert "ended by SIGSEGV);" in node_watch.line(42, -11)
        assert "exited with code 3);" in node_watch.line(42, 3)
        node_watch.set_kept(lambda: 1 / 0)  # a failing description never costs the line
        assert node_watch.line(42, -9).endswith("Ray cannot go on without it")
    finally:
        node_watch.set_kept(None)


def test_a_raylet_that_sigterm_reached_with_the_command_is_an_interruption_not_a_lost_node(tmp_path):
    """SIGTERM to the command's process group (timeout, a batch system) reaches the raylet of the Ray it started:
    the raylet's log says it received SIGTERM and it shares the group: the line is the interrupted one (exit 143);
    a raylet in another group, or one whose log does not say so, is still a lost node."""
    from fda_ray.runtime import node_watch

    log = tmp_path / "raylet.out"
    log.write_text("x" * 70000 + "\n[2026-11-29 04:24:29,005 I 1 1] (raylet) main.cc:1174: received SIGTERM. "
                   "Existing local drain request = None\n" + "y" * 1000 + "\n")
    assert node_watch.told_sigterm(str(log), True)
    assert not node_watch.told_sigterm(str(log), False)  # (a user's kill of the raylet alone)
    assert not node_watch.told_sigterm(str(tmp_path / "none.out"), True) and not node_watch.told_sigterm(None, True)
    (tmp_path / "killed.out").write_text("x" * 1000 + "\n")
    assert not node_watch.told_sigterm(str(tmp_path / "killed.out"), True)
    assert node_watch.line(42, 1, str(log), kept="resume with: x --resume", term=True) == (
        "interrupted by SIGTERM, which stopped this command's local Ray node too (raylet pid 42); resume with: x "
        "--resume")


_GUARDED = """
import os, subprocess, sys, time
sys.path.insert(0, {root!r})
from fda_ray.runtime import node_watch
log, group = (sys.argv[2], True) if len(sys.argv) > 2 else ("/x/raylet.out", False)
# stands in for the raylet ray.init starts (in this process's group); with a log, one that exits with code 0 on
# SIGTERM, as Ray's raylet does
raylet = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
                           "sys.exit(0)); print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE) if group \
    else subprocess.Popen(["sleep", "60"])
if group:
    raylet.stdout.readline()  # its handler is in place
node_watch._watched.update(proc=raylet, log=log, guard=node_watch._start_guard(raylet, log, group))
assert node_watch._watched["guard"] is not None
node_watch.set_kept(lambda: "the 3 finished rounds are in r.parquet")
print(raylet.pid, node_watch._watched["guard"].pid, flush=True)
mode = sys.argv[1]
if mode == "shutdown":  # Ray ended on purpose (ray.shutdown, the interpreter's exit), then its raylet
    node_watch._at_exit()
raylet.terminate() if group else raylet.kill()
os.waitid(os.P_PID, raylet.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: what Ray's core sees first
if mode == "said":
    node_watch._say(-9)
os._exit(1)  # mode "ended": as Ray's core ends a process whose raylet is gone, before any Python runs
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the guard needs pidfds (Linux)")
@pytest.mark.parametrize("mode", ["ended", "said", "shutdown", "ended by SIGTERM"])
def test_a_lost_raylets_line_is_printed_once_even_when_rays_core_ends_the_process_first(mode, tmp_path):
    """Ray's core ends a process whose raylet died (exit code 1, nothing printed) when its main thread is inside a
    Ray call, which can come before the watch thread runs: the guard process prints the line then, with what the
    command kept; when the process printed it (through the guard), it is printed once; a Ray shut down on purpose
    prints nothing; a raylet that the command's SIGTERM reached (its log says so, its group is the command's):
    the interrupted line."""
    script = tmp_path / "guarded.py"
    script.write_text(_GUARDED.format(root=str(ROOT)))
    log = tmp_path / "raylet.out"
    log.write_text("(raylet) main.cc:1174: received SIGTERM. Existing local drain request = None\n")
    extra = [str(log)] if mode.endswith("SIGTERM") else []
    proc = subprocess.run([sys.executable, str(script), mode.split()[0], *extra], capture_output=True, text=True,
                          timeout=60)
    raylet, guard = map(int, proc.stdout.split())
    assert proc.returncode == 1, proc.stderr  # (stderr read to its end: the guard, which holds it too, has ended)
    lines = proc.stderr.splitlines()
    if mode == "shutdown":
        assert lines == []
    elif mode.endswith("SIGTERM"):
        assert lines == [f"interrupted by SIGTERM, which stopped this command's local Ray node too (raylet pid "
                         f"{raylet}); the 3 finished rounds are in r.parquet"]
    else:
        assert lines == [f"error: the local Ray node under this command was lost (its raylet, pid {raylet}, ended by "
                         "SIGKILL: killed, by a user or the out-of-memory killer; its log: /x/raylet.out); Ray cannot "
                         "go on without it; the 3 finished rounds are in r.parquet"]
    def ended() -> bool:  # (its stderr closes as it exits, a moment before the kernel reports it ended)
        try:
            return "zombie" in Path(f"/proc/{guard}/status").read_text()
        except OSError:
            return True

    _wait_for(ended, 10)


def test_rays_own_dump_of_a_lost_raylet_is_left_out_and_nothing_else():
    from fda_ray.runtime import node_watch

    class FakeWorker:
        printed: list = []

        @staticmethod
        def print_to_stdstream(data, ignore_prefix):
            FakeWorker.printed.append(data["lines"][0])

    node_watch._quiet_raylet_report(FakeWorker)
    node_watch._quiet_raylet_report(FakeWorker)  # once only
    FakeWorker.print_to_stdstream({"lines": ["Raylet is terminated. Termination is unexpected. ..."], "pid": "raylet"},
                                  False)
    FakeWorker.print_to_stdstream({"lines": ["a worker's print"], "pid": 123}, False)
    FakeWorker.print_to_stdstream({"lines": ["Raylet is terminated. ..."], "pid": 123}, False)  # not the raylet's
    assert FakeWorker.printed == ["a worker's print", "Raylet is terminated. ..."]


def test_an_error_escaping_a_command_after_the_raylet_ended_is_its_one_line(monkeypatch, capsys):
    """Ray's own error when its raylet is gone can reach the command first (a bare 'Connection reset by peer' from
    ray.wait): the command prints the raylet's line instead of the traceback, once, whichever thread sees it first;
    while the raylet runs, the error goes on as it was."""
    from fda_ray.runtime import node_watch

    alive = subprocess.Popen(["sleep", "30"])
    gone = subprocess.Popen(["sh", "-c", "kill -9 $$"])
    shut = subprocess.Popen(["true"])  # a raylet ray.shutdown ended: code 0
    try:
        _wait_for(lambda: node_watch._peek(gone) is not None and node_watch._peek(shut) is not None, 30)
        assert node_watch._peek(gone) == -9 and gone.returncode is None  # seen, not reaped (Popen still can)
        monkeypatch.setattr(interrupts, "CRASH_EXPLAINERS", [node_watch.explain])

        @interrupts.cli_main
        def command() -> int:
            raise OSError(errno.ECONNRESET, "Connection reset by peer")

        # A raylet that ended with its ray.shutdown (no Ray connected now) is a later command's business no more: its
        # errors go on as they are (a run that diverged after an earlier command's Ray had ended said "node lost")
        monkeypatch.setattr(node_watch, "_watched", {"proc": shut, "log": "/x/raylet.out"})
        monkeypatch.setattr(node_watch, "_connected", lambda: False)
        with pytest.raises(OSError, match="Connection reset"):
            command()
        monkeypatch.setattr(node_watch, "_connected", lambda: True)  # the raylet lost under a connected Ray
        monkeypatch.setattr(node_watch, "_watched", {"proc": alive, "log": "/x/raylet.out"})
        with pytest.raises(OSError, match="Connection reset"):
            command()
        monkeypatch.setattr(node_watch, "_watched", {"proc": gone, "log": "/x/raylet.out"})
        assert command() == 1 and command() == 1
        err = capsys.readouterr().err.splitlines()
        assert err == [f"error: the local Ray node under this command was lost (its raylet, pid {gone.pid}, ended by "
                       "SIGKILL: killed, by a user or the out-of-memory killer; its log: /x/raylet.out); Ray cannot "
                       "go on without it"]
        assert gone.wait(5) == -9
        # A raylet killed, then this process disconnected by the command's own clean-up (ray.shutdown in a finally)
        # before the error reached the command: still its loss, said in one line
        monkeypatch.setattr(node_watch, "_connected", lambda: False)
        monkeypatch.setattr(node_watch, "_watched", {"proc": gone, "log": "/x/raylet.out"})
        assert command() == 1
        assert capsys.readouterr().err.startswith("error: the local Ray node under this command was lost (its raylet, "
                                                  f"pid {gone.pid}, ended by SIGKILL")
    finally:
        alive.kill()
        alive.wait()
        shut.wait()


@pytest.mark.slow
def test_a_run_whose_raylet_is_killed_ends_in_one_line_and_keeps_its_rounds(fmnist_dir, tmp_path):
    """The raylet of the run's own Ray killed mid-run (SIGKILL, as the out-of-memory killer does): one line on
    stderr naming it, exit 1, none of Ray's dump, the finished rounds on disk; the run's Ray daemons end with it and
    the lost node's agents by themselves, so no Ray process is left behind."""
    import ray  # noqa: F401  (psutil is Ray's own copy, importable once Ray is)
    import psutil

    out = tmp_path / "r.parquet"
    proc = _spawn(["-m", "fda_ray", "--data-dir", str(fmnist_dir), *RUN, "--executor", "ray", "--parquet", str(out)])
    _wait_for(lambda: out.is_file() and pq.read_metadata(out).num_rows >= 2)
    family = psutil.Process(proc.pid).children(recursive=True)
    own = [p for p in psutil.Process(proc.pid).children() if p.name() != "raylet"]  # gcs_server, dashboard, ...
    (raylet,) = [p for p in family if p.name() == "raylet"]
    raylet.kill()
    printed, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"error: the local Ray node under this command was lost (its raylet, pid {raylet.pid}, "
                               "ended by SIGKILL")
    kept = pq.read_metadata(out).num_rows
    assert lines[0].endswith(f"the {kept} finished rounds are in {out}") and kept >= 2
    assert not any(c in printed + err for c in (*CRASH, "[state-dump]", "Raylet is terminated"))
    def alive(p) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # it ended between the two questions (CI: NoSuchProcess from status())
            return False

    def gone(procs) -> bool:
        return not any(alive(p) for p in procs)

    # the daemons the run started (its own children) end with it; the lost raylet's agents notice it is gone and end
    # by themselves, about a minute later (they retry the cluster first)
    _wait_for(lambda: gone(own), 30)
    _wait_for(lambda: gone(family), 180)


# ---------------------------------------------------------------- 6. the kernel cache of several checkouts

_BUILD_FROM = """
import json, os, sys, time
from pathlib import Path
from typing import Any
sys.path.insert(0, {root!r})
from fda_ray.kernels import loader
csrc = Path(sys.argv[1])
loader.CSRC, loader.CPU_SOURCES = csrc, (csrc / "projection.cpp",)
t0 = time.perf_counter()
loader.build("cpu")
lib = next(loader.cache_dir("cpu").glob("*.so"))
print(json.dumps({{"dir": str(loader.cache_dir("cpu")), "so_mtime": lib.stat().st_mtime_ns,
                  "seconds": time.perf_counter() - t0}}))
"""


@pytest.mark.slow
def test_two_checkouts_share_one_kernel_build_and_other_kernels_get_their_own(tmp_path):
    """Checkout A builds; checkout B (the same sources at another path) loads A's build without compiling; A again
    still does not compile; a checkout whose kernel differs builds into a folder of its own (A's build stays)."""

    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler")
    src = ROOT / "fda_ray" / "kernels" / "csrc"
    checkouts = {}
    for name in ("a", "b", "changed"):
        checkouts[name] = tmp_path / name / "csrc"
        shutil.copytree(src, checkouts[name])
    cpp = checkouts["changed"] / "projection.cpp"
    cpp.write_text(cpp.read_text() + "\n// another version of the kernel\n")
    script = tmp_path / "build.py"
    script.write_text(_BUILD_FROM.format(root=str(ROOT)))
    env = dict(os.environ, FDA_RAY_KERNEL_CACHE=str(tmp_path / "cache"))

    def build(name):
        p = subprocess.run([sys.executable, str(script), str(checkouts[name])], capture_output=True, text=True,
                           timeout=600, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    a = build("a")
    b = build("b")
    again = build("a")
    other = build("changed")
    assert a["dir"] == b["dir"] == again["dir"] and a["so_mtime"] == b["so_mtime"] == again["so_mtime"]
    assert other["dir"] != a["dir"] and build("a")["so_mtime"] == a["so_mtime"]


def test_failures_get_one_line_each_kind_with_what_to_do():
    """A sweep's failed trials whose cause is the machine (a full disk, a lost node, a GPU's memory) get one line
    per kind naming what to do and the resuming command; the method's own failures one line listing them, with the
    first error, where the tracebacks are and the resuming command."""
    from fda_ray.experiments.backends import failure_advice

    oom = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.64 "
           "GiB of which 3.06 MiB is free.")
    failures = [{"trial": "a", "error": oom}, {"trial": "b", "error": "ValueError: target_labelled=5000 is invalid",
                                               "row": "fedgp", "value": 0.4, "seed": 2, "log": "/x/tune/errors.log"},
                {"trial": "c", "error": "RuntimeError: CUDA error: out of memory"},
                {"trial": "d", "error": "OSError: [Errno 28] No space left on device: '/x/rows.json'"},
                {"trial": "e", "error": "not run: its node 10.0.0.2 is gone", "stranded": True, "row": "fedda",
                 "value": 0.8, "seed": 1}]
    lines = failure_advice(failures, 7, "/x/trials", "python -m fda_ray.sweep --grid noise")
    assert lines == [
        "error: 1 trial(s) could not write their records (No space left on device, under /x/trials); the 7 finished "
        "trials are kept: free the space, then resume with: python -m fda_ray.sweep --grid noise --resume",
        "error: 1 trial(s) did not run (fedda at 0.8, seed 1): its node 10.0.0.2 is gone; the 7 finished trials are "
        "kept (a cut-off trial's last round too): bring back a node that holds a trial, then resume with: "
        "python -m fda_ray.sweep --grid noise --resume",
        "error: 2 trial(s) ran out of GPU memory; the 7 finished trials are kept: run fewer trials at once on a GPU "
        "(a lower --workers with the local backend; with Tune a larger --gpus-per-client or a lower "
        "--max-concurrent), then resume with: python -m fda_ray.sweep --grid noise --resume",
        "error: 1 trial(s) failed: fedgp at 0.4, seed 2 (first: ValueError: target_labelled=5000 is invalid); each "
        "one's error is in summary.md, the tracebacks in /x/tune/errors.log; the 7 finished trials are kept; resume "
        "with: python -m fda_ray.sweep --grid noise --resume"]
    many = [{"trial": k, "row": "fedda", "value": None, "seed": i, "error": f"RuntimeError: {k}"}
            for i, k in enumerate("pqrstu")]
    (line,) = failure_advice(many, 0, "/x/trials", "cmd")
    assert line.startswith("error: 6 trial(s) failed: fedda at every value, seed 0; fedda at every value, seed 1; ")
    assert "seed 3; and 2 more (first: RuntimeError: p); each one's error is in summary.md; the 0 finished" in line


def test_an_oserror_without_an_errno_keeps_its_kind_and_words(tmp_path):
    """atomic_local names the file a system error could not write; an OSError raised by hand (no errno) stays as it
    was (it became "[Errno None] ..." and lost its subclass)."""
    from fda_ray.core.storage import atomic_local

    class Refused(OSError):
        pass

    with pytest.raises(Refused) as e:
        with atomic_local(tmp_path / "f.json"):
            raise Refused("no room in the quota")
    assert str(e.value) == "no room in the quota" and not list(tmp_path.iterdir())
    with pytest.raises(OSError) as e:
        with atomic_local(tmp_path / "g.json"):
            raise OSError(28, "No space left on device")
    assert e.value.errno == 28 and e.value.filename == str(tmp_path / "g.json")
