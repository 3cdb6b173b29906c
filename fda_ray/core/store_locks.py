"""One writer at a time for a sweep's output on an object store (s3://, gs://, ...): a lease.

Two sweeps into one prefix at once (a `--resume` started again after a crash on a cluster, say) would both run
every pending trial and write one summary over the other's (fda_ray.core.locks says why, for local folders). An
object store has no exclusive create of a file and no process ids to check, so the lock there is a lease: the object
`<out>/.fda-ray.lock` names its holder (host, process id, command, a random token) and the holder rewrites it every
HEARTBEAT_S seconds while the sweep runs. A second sweep finds a lease heard from within STALE_S and is refused in one
line naming the holder; a lease not heard from for STALE_S (its sweep crashed, or its machine went away) is taken
over with one warning line; a holder that finds its lease taken (it was paused for longer than STALE_S) stops
summarising, as a local sweep whose folder was moved does (`still_held`).

S3 (AWS since 2024, MinIO, Ceph) creates the lease only if none exists (`If-None-Match: *`) and rewrites or deletes
it only if it is still the one read (`If-Match: <ETag>`), so of two sweeps starting at once exactly one gets it; this
needs boto3 (installed wherever Ray's AWS autoscaler runs; `pip install boto3`). Without boto3, and on other stores
(gs://: pyarrow cannot send preconditions), the lease is written, read back after a moment and kept only if it is
still this sweep's: two sweeps started within that moment of each other can both run, which the warning line says.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from typing import Any

from fda_ray.core.storage import StoragePath, s3_location

LOCK_FILE = ".fda-ray.lock"
HEARTBEAT_S = 30.0
STALE_S = 300.0  # ten heartbeats missed: the holder is gone (a sweep pauses far less between two)
SETTLE_S = 1.0  # the best-effort lease: how long to wait before reading it back


def _stale_s() -> float:
    """STALE_S, or $FDA_RAY_LEASE_STALE_S (tests, and a user who knows the old holder is gone): 1 s to 1 day."""
    raw = os.environ.get("FDA_RAY_LEASE_STALE_S", "")
    if not raw:
        return STALE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 1.0 <= value <= 86400.0:
        raise ValueError(f"FDA_RAY_LEASE_STALE_S={raw!r} is invalid: seconds from 1 to 86400")
    return value


class LeaseRefused(ValueError):
    """The prefix has a live writer; the message is the one line a CLI prints (fda_ray.core.locks.held raises it
    as its LockedError)."""


class _S3:
    """The lease object through boto3, with S3's preconditions. Each method returns the new ETag, or None where the
    precondition failed (another writer got there first)."""

    def __init__(self, uri: str) -> None:
        import boto3
        from botocore.config import Config

        bucket, prefix = s3_location(uri)  # (_backend takes this path only for such a URI)
        self.bucket, self.key = bucket, (prefix.rstrip("/") + "/" if prefix else "") + LOCK_FILE
        # short waits: a store that does not answer is said at once (fda_ray.core.storage says why)
        self.client = boto3.client("s3", config=Config(connect_timeout=10, read_timeout=30,
                                                       retries={"max_attempts": 3, "mode": "standard"}))

    @staticmethod
    def _refused(e: Exception) -> bool:
        code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
        return code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")

    def read(self) -> tuple[bytes, str, float] | None:
        """(body, ETag, seconds since it was written by the store's clock) or None if there is none."""
        try:
            r = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.NoSuchKey:
            return None
        body = r["Body"].read()
        return body, r["ETag"], max(0.0, time.time() - r["LastModified"].timestamp())

    def create(self, body: bytes) -> str | None:
        try:
            return self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, IfNoneMatch="*")["ETag"]
        except Exception as e:  # noqa: BLE001 (botocore's ClientError, without importing botocore here)
            if self._refused(e):
                return None
            raise

    def rewrite(self, body: bytes, etag: str) -> str | None:
        try:
            return self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, IfMatch=etag)["ETag"]
        except Exception as e:  # noqa: BLE001
            if self._refused(e) or "NoSuchKey" in str(e):
                return None
            raise

    def delete(self, etag: str) -> bool:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=etag)
            return True
        except Exception as e:  # noqa: BLE001
            if self._refused(e) or "NoSuchKey" in str(e):
                return False
            raise


class _BestEffort:
    """The lease object through fda_ray.core.storage, with no preconditions: each write is checked by reading the
    object back (module docstring). The "ETag" is the token the body holds."""

    def __init__(self, uri: str) -> None:
        self.path = StoragePath(uri) / LOCK_FILE

    def read(self) -> tuple[bytes, str, float] | None:
        try:
            body = self.path.read_bytes()
            age = max(0.0, time.time() - self.path.mtime())
        except FileNotFoundError:
            return None
        return body, _token(body), age

    def _mine(self, body: bytes) -> str | None:
        time.sleep(SETTLE_S)  # a writer that started within this moment has written by now: the last write wins
        now = self.read()
        return now[1] if now is not None and now[0] == body else None

    def create(self, body: bytes) -> str | None:
        if self.read() is not None:
            return None
        self.path.write_bytes(body)
        return self._mine(body)

    def rewrite(self, body: bytes, etag: str) -> str | None:
        now = self.read()
        if now is None or now[1] != etag:
            return None
        self.path.write_bytes(body)
        return _token(body)

    def delete(self, etag: str) -> bool:
        now = self.read()
        if now is None or now[1] != etag:
            return False
        self.path.unlink(missing_ok=True)
        return True


def _token(body: bytes) -> str:
    try:
        return str(json.loads(body).get("token", ""))
    except (ValueError, AttributeError):
        return ""


def _backend(uri: str) -> tuple[Any, bool]:
    """The lease's store and whether it is exclusive (S3 with boto3)."""
    if s3_location(uri) is not None:
        try:
            return _S3(uri), True
        except ImportError:
            pass
    return _BestEffort(uri), False


def _holder(body: bytes) -> dict | None:
    try:
        h = json.loads(body)
    except ValueError:
        return None
    return h if isinstance(h, dict) and isinstance(h.get("host"), str) and isinstance(h.get("pid"), int) else None


def _describe(h: dict | None, age: float) -> str:
    if h is None:
        return f"an unreadable lease, written {age:.0f} s ago"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h.get("since", 0)))
    return f"pid {h['pid']} on {h['host']}, since {since}, last heard {age:.0f} s ago: `{h.get('command', '?')}`"


class Lease:
    """This sweep's lease on `uri` (module docstring): take() ... release(), a heartbeat thread between."""

    def __init__(self, uri: str, field: str, command: str) -> None:
        self.uri, self.field = uri, field
        self.store, self.exclusive = _backend(uri)
        self.me = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(), "command": command,
                   "token": secrets.token_hex(8)}
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({**self.me, "time": time.time()}).encode()

    def take(self) -> None:
        stale_s = _stale_s()
        for _ in range(3):  # (a stale lease taken over under us by a third writer: look again)
            self.etag = self.store.create(self._body())
            if self.etag is not None:
                break
            now = self.store.read()
            if now is None:
                continue  # (released between the two calls)
            body, etag, age = now
            h = _holder(body)
            same_host_gone = h is not None and h["host"] == self.me["host"] and not _alive(h["pid"])
            if age < stale_s and not same_host_gone:
                raise LeaseRefused(f"{self.field}={self.uri!r} is invalid: another sweep writes there now "
                                   f"({_describe(h, age)}); wait for it to end, or, if it is gone, run again after "
                                   f"{stale_s - age:.0f} s (its lease is then taken over)")
            if self.store.delete(etag):
                print(f"warning: {self.uri}/{LOCK_FILE}: the sweep that held it is gone ({_describe(h, age)}); "
                      "taken over", file=sys.stderr)
        else:
            raise LeaseRefused(f"{self.field}={self.uri!r} is invalid: its lease {LOCK_FILE} keeps changing hands; "
                               "is another sweep starting there?")
        if not self.exclusive:
            print(f"note: {self.uri}: the lease against a second sweep into this prefix is best effort here (two "
                  f"started within {SETTLE_S:g} s of each other can both run): "
                  + ("S3 takes it exclusively with boto3 installed (pip install boto3)"
                     if self.uri.lower().startswith("s3://") else "this store takes no precondition"),
                  file=sys.stderr)
        self._thread = threading.Thread(target=self._beat, name="fda-ray-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                etag = self.store.rewrite(self._body(), self.etag)
            except Exception:  # noqa: BLE001 (a store that did not answer this once: the next beat tries again)
                continue
            if etag is None:  # taken over: this sweep was not heard from for STALE_S
                self.lost = True
                print(f"warning: {self.uri}/{LOCK_FILE}: another sweep took this prefix over (this one was not "
                      f"heard from for {_stale_s():.0f} s); this sweep writes no summary there", file=sys.stderr)
                return
            self.etag = etag

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_S + 60)
        if not self.lost and self.etag is not None:
            with contextlib.suppress(Exception):  # (a store down at the end: the lease goes stale by itself)
                self.store.delete(self.etag)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


_HELD: dict[str, Lease] = {}


def take(uri: str, field: str, command: str) -> Lease:
    """This process's lease on `uri`, its heartbeat running; raises LeaseRefused."""
    lease = Lease(uri, field, command)
    lease.take()
    _HELD[uri] = lease
    return lease


def give_back(lease: Lease) -> None:
    _HELD.pop(lease.uri, None)
    lease.release()


def holding(uri: str) -> bool:
    """Whether this process holds a lease on `uri` (the command does; the Python search() takes none)."""
    return uri in _HELD


def still_held(uri: str) -> bool:
    """False once another sweep took this process's lease on `uri` over; True where this process holds none (the
    Python search(), which takes no lock)."""
    lease = _HELD.get(uri)
    return lease is None or not lease.lost
