"""fda_ray.core.storage: a local directory and an S3 bucket (a local S3 server) answer the same calls the same
way; writes are atomic (no temporary file left, a failed write keeps the old contents); a StoragePath crosses
processes as its URI."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import boto3
import pytest
import torch

from fda_ray.core.storage import StoragePath, StoreError, asking, is_uri, storage_path
from fda_ray.experiments.backends import write_parquet


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return StoragePath(tmp_path / "out")
    return StoragePath(request.getfixturevalue("s3_bucket") + "/sweeps/out")


def test_the_same_calls_answer_the_same_way_locally_and_on_s3(root):
    assert not root.exists() and not (root / "a.json").is_file()
    root.mkdir(parents=True, exist_ok=True)
    (root / "trials" / "t1").mkdir()
    (root / "trials" / "t1" / "rows.json").write_text(json.dumps({"x": 1}))
    (root / "trials" / "t2" / "trial.json").write_text("{}")
    (root / "tune" / "launch-1" / "r.json").write_text("{}")
    (root / "tune" / "launch-2" / "r.json").write_text("{}")
    assert json.loads((root / "trials" / "t1" / "rows.json").read_text()) == {"x": 1}
    assert (root / "trials" / "t1" / "rows.json").is_file() and (root / "trials").exists()
    assert (root / "trials").is_dir() and not (root / "trials" / "t1" / "rows.json").is_dir()
    assert [p.name for p in (root / "trials").iterdir()] == ["t1", "t2"]
    assert [p.name for p in (root / "tune").glob("launch-*")] == ["launch-1", "launch-2"]
    assert [p.parent.name for p in (root / "trials").glob("t*/trial.json")] == ["t2"]
    assert list((root / "nothing").iterdir()) == [] and list((root / "nothing").glob("*")) == []
    # names as pathlib spells them
    f = root / "trials" / "t1" / "rows.json"
    assert (f.name, f.stem, f.suffix, f.parent.name, f.with_suffix(".md").name) == \
           ("rows.json", "rows", ".json", "t1", "rows.md")
    # when a file was written (an Optuna search orders its trials by it)
    import time

    first = (root / "trials" / "t1" / "rows.json").mtime()
    assert abs(first - time.time()) < 120
    time.sleep(1.1)
    (root / "trials" / "t2" / "trial.json").write_text("{}")
    assert (root / "trials" / "t2" / "trial.json").mtime() > first
    # torch objects (a trial's state.pt): tensors only, read back equal
    state = {"next_round": 3, "global": torch.arange(5.0)}
    (root / "state.pt").save_torch(state)
    back = (root / "state.pt").load_torch()
    assert back["next_round"] == 3 and torch.equal(back["global"], state["global"])
    # replace (the old tmp-then-rename idiom) and unlink
    (root / "x.tmp").write_text("new")
    (root / "x.tmp").replace(root / "x")
    assert (root / "x").read_text() == "new" and not (root / "x.tmp").exists()
    (root / "x").unlink()
    assert not (root / "x").exists()
    (root / "x").unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError):
        (root / "x").read_bytes()


def test_local_writes_are_atomic_and_leave_no_temporary_file(tmp_path, monkeypatch):
    p = StoragePath(tmp_path / "rows.json")
    p.write_text("old")
    import os

    def broken_replace(src, dst):  # the process dies between writing the temporary file and the rename
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        p.write_text("new")
    monkeypatch.undo()
    assert p.read_text() == "old"  # a reader never sees half of the new file
    p.write_text("new")
    assert p.read_text() == "new"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["rows.json"]  # no temporary file left


def test_a_record_is_on_disk_before_the_rename_makes_it_the_file(tmp_path, monkeypatch):
    """fsync of the temporary file, then the rename: after a power cut the name holds the old bytes or the new."""
    import os

    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.fstat(fd).st_size)), real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", Path(b).name)), real_replace(a, b)))
    StoragePath(tmp_path / "rows.json").write_text("0123456789")
    assert calls == [("fsync", 10), ("replace", "rows.json")]  # the whole text synced, then renamed


def test_a_storage_path_travels_as_its_uri(tmp_path):
    for where in (StoragePath(tmp_path / "a"), StoragePath("s3://bucket/prefix/")):
        back = pickle.loads(pickle.dumps(where))
        assert back == where and back.uri == where.uri and hash(back) == hash(where)
    assert StoragePath("s3://bucket/prefix/").uri == "s3://bucket/prefix"
    assert storage_path(StoragePath("s3://b/p")) == StoragePath("s3://b/p")
    assert StoragePath(f"file://{tmp_path}").is_local and StoragePath("~/x").uri.startswith("/")
    assert is_uri("gs://b/p") and not is_uri("/x/y") and not is_uri("file:///x")
    assert StoragePath("s3://bucket/a/b").parent == StoragePath("s3://bucket/a")
    assert StoragePath("s3://bucket").parent == StoragePath("s3://bucket")
    with pytest.raises(TypeError, match="not a local path"):
        open(StoragePath("s3://bucket/x"))  # a URI is never opened as a file name by accident


def test_parquet_and_json_land_in_the_bucket_as_objects(s3_bucket):
    import pyarrow.parquet as pq
    import io

    out = StoragePath(s3_bucket + "/sweeps/p")
    write_parquet([{"row": "fedgp", "accuracy": 0.5}, {"row": "fedda", "accuracy": 0.25}], out / "results.parquet")
    bucket = s3_bucket[len("s3://"):]
    keys = sorted(o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["sweeps/p/results.parquet"]  # one object, no temporary object left behind
    table = pq.read_table(io.BytesIO((out / "results.parquet").read_bytes())).to_pylist()
    assert table == [{"row": "fedgp", "accuracy": 0.5}, {"row": "fedda", "accuracy": 0.25}]


def test_a_stores_client_gives_up_in_seconds_not_minutes():
    """pyarrow's defaults: GCS retried for about 15 minutes (a gs:// --out without Google credentials said nothing
    for 16 minutes, Ctrl-C unheard), S3 waited about 100 s on an endpoint that never answers. The clients get time
    limits (a URI's own options, the region here, are kept)."""
    import datetime

    from fda_ray.core import storage

    s3 = storage._cached_filesystem("s3://bucket/p?region=eu-west-1", None, None).__reduce__()[1][0]
    assert (s3["connect_timeout"], s3["request_timeout"], s3["region"]) == (
        storage.S3_CONNECT_TIMEOUT_S, storage.S3_REQUEST_TIMEOUT_S, "eu-west-1")
    gcs = storage._cached_filesystem("gs://bucket/p", None, None).__reduce__()[1][0]
    assert gcs["retry_time_limit"] == datetime.timedelta(seconds=storage.GCS_RETRY_S)


@pytest.mark.parametrize("out,why", [
    ("s3://", "it names no bucket; s3://BUCKET/PREFIX"),
    ("S3://bucket/x", "write the scheme in lower case: s3://bucket/x"),
    ("s3://bucket/my sweep", "' ' in a URI's path"),
    ("s3://bucket/h#x", "'#' in a URI's path"),
    ("gs://bucket/ñ", "'ñ' in a URI's path"),
])
def test_an_out_uri_a_store_or_tune_cannot_take_is_refused_before_any_work(out, why):
    """`s3://` wrote to a local folder ./s3:; `S3://` was refused with credentials advice; a space or a non-ASCII
    letter passed, then Tune could not parse the URI after the sweep began; a '#' sent Tune's state elsewhere."""
    from fda_ray.runtime.preflight import PreflightError, output_dir

    with pytest.raises(PreflightError) as e:
        output_dir("out", out)
    assert str(e.value).startswith(f"out={out!r} is invalid: ") and why in str(e.value), str(e.value)


def _refused_endpoint(monkeypatch) -> None:
    """The store's endpoint taken down: a loopback port nobody listens on (clients are cached per endpoint)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")


@pytest.mark.slow  # (5-26 s: the fast tier stays within 8 minutes on 2 cores)
def test_a_store_that_stops_answering_is_a_store_error_naming_the_uri(s3_bucket, monkeypatch):
    """pyarrow raises a bare OSError (no errno) for a store that does not answer, which a sweep could not tell
    from a bug: it ended in a traceback. Every call names the object and keeps the store's own reason, the error
    survives pickling (a worker's error crosses to the sweep; a class with its own __init__ broke the process pool,
    read as the worker dying), and a missing object is still FileNotFoundError (the store answered)."""
    rec = StoragePath(s3_bucket + "/sweeps/x/rows.json")
    rec.write_text("{}")
    with pytest.raises(FileNotFoundError):
        (rec.parent / "absent.json").read_text()
    _refused_endpoint(monkeypatch)
    calls = {"look up": rec.exists, "read": rec.read_text, "write": lambda: rec.write_text("{}"),
             "list": lambda: list(rec.parent.iterdir())}
    for action, call in calls.items():
        with pytest.raises(StoreError) as e:
            call()
        where = rec.parent if action == "list" else rec
        assert (e.value.uri, e.value.action) == (where.uri, action)
        assert str(e.value).startswith(f"the store could not {action} {where.uri} (") and e.value.reason, str(e.value)
        back = pickle.loads(pickle.dumps(e.value))
        assert (type(back), str(back), back.uri, back.action, back.reason) == (
            StoreError, str(e.value), e.value.uri, action, e.value.reason)
    rec.unlink(missing_ok=True)  # (missing_ok: nothing to say)


def test_asking_names_a_bare_oserror_as_the_stores_and_lets_the_rest_through():
    """How Tune's own calls on the store (its state under tune/) are named: a bare OSError becomes a StoreError with
    the message's first line; a missing file and other exceptions pass unchanged."""
    with pytest.raises(StoreError) as e:
        with asking("s3://b/tune", "keep Tune's state in"):
            raise OSError("When listing objects under key 'tune/': NETWORK_CONNECTION\nsecond line")
    assert str(e.value) == "the store could not keep Tune's state in s3://b/tune (When listing objects under key " \
                           "'tune/': NETWORK_CONNECTION)"
    for passing in (FileNotFoundError("x"), ValueError("y")):
        with pytest.raises(type(passing)) as e:
            with asking("s3://b/x", "read"):
                raise passing
        assert e.value is passing
