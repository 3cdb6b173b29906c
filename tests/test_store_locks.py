"""One writer at a time on an object store's prefix: the lease (fda_ray.core.store_locks) on a local S3 server.

Two sweeps into one s3:// prefix both ran every trial and wrote one summary over the other's (a held-out probe);
a local folder refused the second in one line. These check the lease's promises: a second writer refused in one line
naming the holder, exactly one of two writers starting at once, a holder gone (stale, or a dead process on this host)
taken over with a warning, a holder taken over that knows it, and the best-effort lease where S3's preconditions are
not available."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import boto3
import pytest

from fda_ray.core import locks, store_locks
from fda_ray.core.storage import StoragePath
from fda_ray.experiments import sweep
from fda_ray.papers.grids import GRIDS
from test_sweep import make_tiny_grid


def _keys(uri: str) -> list[str]:
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    # (not pyarrow's directory markers, "prefix/": its delete_file leaves one for the parent)
    return [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
            if not o["Key"].endswith("/")]


def test_a_second_writer_is_refused_in_one_line_and_the_lease_goes_with_its_holder(s3_bucket):
    uri = f"{s3_bucket}/sweeps/a"
    with locks.held(StoragePath(uri), "out", "python -m fda_ray.sweep --out A"):
        assert _keys(uri) == ["sweeps/a/.fda-ray.lock"]
        held = json.loads(StoragePath(uri + "/.fda-ray.lock").read_text())
        assert (held["host"], held["pid"], held["command"]) == (socket.gethostname(), __import__("os").getpid(),
                                                                 "python -m fda_ray.sweep --out A")
        with pytest.raises(locks.LockedError) as e:
            with locks.held(StoragePath(uri), "out", "B"):
                pass
        line = str(e.value)
        assert line.startswith(f"out={uri!r} is invalid: another sweep writes there now (pid ") and "\n" not in line
        assert "`python -m fda_ray.sweep --out A`" in line and "run again after" in line
        assert locks.still_held(StoragePath(uri)) and store_locks.holding(uri)
        with locks.held(StoragePath(f"{s3_bucket}/sweeps/b"), "out", "C"):  # another prefix: its own lease
            pass
    assert _keys(uri) == [] and not store_locks.holding(uri)
    with locks.held(StoragePath(uri), "out", "B"):  # released: the next one takes it
        pass


def test_of_two_writers_starting_at_once_exactly_one_gets_the_lease(s3_bucket):
    uri = f"{s3_bucket}/sweeps/race"
    leases = [store_locks.Lease(uri, "out", f"sweep {i}") for i in range(6)]
    outcome: list[str] = []
    start = threading.Barrier(len(leases))

    def take(lease: store_locks.Lease) -> None:
        start.wait()
        try:
            lease.take()
            outcome.append("took")
        except store_locks.LeaseRefused:
            outcome.append("refused")

    threads = [threading.Thread(target=take, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcome) == ["refused"] * 5 + ["took"]
    for lease in leases:
        lease.release()
    assert _keys(uri) == []


def test_a_lease_not_heard_from_is_taken_over_and_its_holder_knows(s3_bucket, monkeypatch, capsys):
    """A sweep paused (or gone) for longer than the stale time loses its lease to the next one; its own heartbeat
    then finds the lease not its own, and the sweep writes no summary over the other's."""
    uri = f"{s3_bucket}/sweeps/stale"
    monkeypatch.setenv("FDA_RAY_LEASE_STALE_S", "1")
    monkeypatch.setattr(store_locks, "HEARTBEAT_S", 3600.0)  # the first holder never beats: it seems gone
    first = store_locks.take(uri, "out", "first")
    time.sleep(1.5)
    second = store_locks.take(uri, "out", "second")
    assert "the sweep that held it is gone (pid " in capsys.readouterr().err
    assert json.loads(StoragePath(uri + "/.fda-ray.lock").read_text())["command"] == "second"
    assert first.store.rewrite(first._body(), first.etag) is None  # what first's next heartbeat finds
    monkeypatch.setattr(store_locks, "HEARTBEAT_S", 0.05)
    first._stop.set()
    first._thread.join()
    first._stop.clear()
    t = threading.Thread(target=first._beat)
    t.start()
    t.join(timeout=10)
    assert first.lost and "another sweep took this prefix over" in capsys.readouterr().err
    store_locks.give_back(first)  # (the lost lease is not deleted: it is the second's)
    assert json.loads(StoragePath(uri + "/.fda-ray.lock").read_text())["command"] == "second"
    store_locks.give_back(second)
    assert _keys(uri) == []


def test_a_dead_process_on_this_host_leaves_its_lease_at_once(s3_bucket, capsys):
    uri = f"{s3_bucket}/sweeps/dead"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    StoragePath(uri + "/.fda-ray.lock").write_text(json.dumps(
        {"host": socket.gethostname(), "pid": int(gone.stdout), "since": time.time(), "command": "killed",
         "token": "x", "time": time.time()}))
    with locks.held(StoragePath(uri), "out", "next"):
        assert "`killed`); taken over" in capsys.readouterr().err


def test_without_s3s_preconditions_the_lease_is_best_effort_and_says_so(s3_bucket, monkeypatch, capsys):
    """No boto3 (or gs://, which pyarrow reaches without preconditions): the lease is written, read back after a
    moment and kept if it is still this sweep's; a live one refuses the next writer all the same."""
    monkeypatch.setattr(store_locks, "_backend", lambda uri: (store_locks._BestEffort(uri), False))
    monkeypatch.setattr(store_locks, "SETTLE_S", 0.05)
    uri = f"{s3_bucket}/sweeps/plain"
    with locks.held(StoragePath(uri), "out", "A"):
        assert "is best effort here" in capsys.readouterr().err
        with pytest.raises(locks.LockedError, match="another sweep writes there now"):
            with locks.held(StoragePath(uri), "out", "B"):
                pass
    assert _keys(uri) == []


def test_a_sweep_into_a_prefix_another_sweep_holds_is_refused_before_it_runs(s3_bucket, fmnist_dir, monkeypatch,
                                                                            capsys):
    grid = make_tiny_grid(rounds=1)
    monkeypatch.setitem(GRIDS, grid.name, grid)
    uri = f"{s3_bucket}/sweeps/tiny"
    with locks.held(StoragePath(uri), "out", "the other sweep"):
        code = sweep.main(["--grid", grid.name, "--data-dir", str(fmnist_dir), "--out", uri, "--backend", "local",
                           "--no-figures"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "another sweep writes there now" in err, err
    assert not any("/trials/" in k and k.endswith("rows.json") for k in _keys(uri))


def test_the_stale_time_from_the_environment_is_checked(monkeypatch):
    monkeypatch.setenv("FDA_RAY_LEASE_STALE_S", "0")
    with pytest.raises(ValueError, match=r"^FDA_RAY_LEASE_STALE_S='0' is invalid: seconds from 1 to 86400$"):
        store_locks.Lease("s3://b/x", "out", "c").take()
