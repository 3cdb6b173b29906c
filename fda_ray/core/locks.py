"""One writer at a time for a sweep's or a search's output folder.

Two sweeps resumed into one --out at once would both run every pending trial (each sees the other's trials as
pending until they finish) and write one summary over the other's. `held(folder)` creates the folder's lock file
exclusively (O_CREAT | O_EXCL, atomic on local filesystems and on NFS v3+) naming its holder: the host, the process
id, when that process started and the command. A second writer is refused in one line naming the holder. A lock
whose holder is gone (same host, and no such process, or another process that reuses its id: its start time differs)
is stale: it is taken over with one warning line, by one sweep only when several try at once (`_remove_stale`). A
holder on another host cannot be checked from here: the line says which host, and that deleting the file releases it.

An object store's prefix (s3://, gs://) has no exclusive create of a file and no process to check: it takes a lease
instead (fda_ray.core.store_locks), the same one-line refusal.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from fda_ray.core import store_locks
from fda_ray.core.storage import StoragePath

LOCK_FILE = ".fda-ray.lock"


class LockedError(ValueError):
    """The folder has a live writer; the message is the one line a CLI prints."""


def _started(pid: int) -> float | None:
    """The process's start time in clock ticks since boot (Linux /proc), or None where unknown."""
    try:
        return float(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, started: float | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    now = _started(pid)
    return started is None or now is None or now == started


def holder(lock: Path) -> dict | None:
    """What the lock file says (None if it cannot be read: a writer cut off between create and write)."""
    try:
        data = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    # what acquire writes: a lock edited or damaged into other kinds is as unreadable as a cut-off one
    number = (int, float)
    if not (isinstance(data.get("pid"), int) and data["pid"] > 0 and isinstance(data.get("host"), str)
            and isinstance(data.get("time", 0), number) and isinstance(data.get("started"), (*number, type(None)))):
        return None
    return data


def _describe(h: dict) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h.get("time", 0)))
    return f"pid {h.get('pid')} on {h.get('host')}, since {when}: `{h.get('command', '?')}`"


STARTING_S = 10.0  # an unreadable lock younger than this is being written by a writer starting now


def _age(lock: Path) -> float:
    """Seconds since the lock file was written (0 if it is gone)."""
    try:
        return time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _remove_stale(lock: Path, judged: dict | None) -> bool:
    """Delete `lock` if it still holds what was judged stale (`judged`: its holder, None: unreadable). Two sweeps
    resumed at once after a crash both judge the same lock stale: without this check the slower one deleted the lock
    the faster one had just created in its place, and both ran. The check and the delete happen under an exclusive
    flock of a takeover file beside the lock (never deleted, so every taker locks the same file), so takers go one
    at a time; a writer that only creates the lock (O_EXCL) needs no flock, as it cannot replace an existing file.
    Returns whether this process removed it."""
    try:
        import fcntl
    except ImportError:  # (no flock: Windows) the takeover is as racy as before
        fcntl = None  # type: ignore[assignment]
    guard = os.open(lock.with_name(lock.name + ".takeover"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(guard, fcntl.LOCK_EX)  # released when the descriptor closes
        if holder(lock) != judged:
            return False  # another taker got there first: the lock now is theirs (or gone)
        if judged is None and _age(lock) < STARTING_S:  # (unreadable: gone, or another writer's, being written)
            return False
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        return True
    finally:
        os.close(guard)


def acquire(folder: Path, field: str, command: str) -> Path:
    """Take `folder`'s lock (module docstring); raises LockedError. Returns the lock file."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _started(os.getpid()), "time": time.time(),
          "command": command}
    for _ in range(3):  # (a stale lock removed under us by a third writer: try again)
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if lock.is_dir():  # (not a lock any process of ours made)
                raise LockedError(f"{field}={str(folder)!r} is invalid: its lock {lock} is a directory, not a file; "
                                  "remove it (rmdir) or choose another --out") from None
            h = holder(lock)
            if h is None:
                if _age(lock) < STARTING_S:  # being written right now
                    raise LockedError(f"{field}={str(folder)!r} is invalid: another process is starting to write "
                                      "there; wait for it or choose another --out") from None
            elif h.get("host") != me["host"]:
                raise LockedError(f"{field}={str(folder)!r} is invalid: a sweep on another host writes there "
                                  f"({_describe(h)}); if it is gone, delete {lock}") from None
            elif _alive(h["pid"], h.get("started")):
                raise LockedError(f"{field}={str(folder)!r} is invalid: another sweep writes there now "
                                  f"({_describe(h)}); wait for it to end or choose another --out") from None
            if _remove_stale(lock, h):
                print(f"warning: {lock}: the sweep that held it is gone ({_describe(h) if h else 'unreadable'}); "
                      "taken over", file=sys.stderr)
            continue  # create it again (exclusively: a sweep that took it first is then found alive)
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        return lock
    raise LockedError(f"{field}={str(folder)!r} is invalid: its lock {lock} keeps changing hands; is another sweep "
                      "starting there?")


def still_held(folder: "Path | StoragePath | None") -> bool:
    """Whether `folder`'s lock is still this process's: False once the folder was removed, moved or replaced while
    its sweep ran (the workers then write the rest of its records into a new folder of that name, and a summary
    of it would count the trials that stayed in the moved one as never run). An object store: False once another
    sweep took the lease over. True where this process took no lock (None)."""
    folder = _local(folder)
    if isinstance(folder, StoragePath):
        return store_locks.still_held(folder.uri)
    if folder is None:
        return True
    for attempt in range(2):  # (a read that failed for a moment, on NFS say, is tried once more)
        h = holder(folder / LOCK_FILE)
        if h is not None:
            return h.get("pid") == os.getpid() and h.get("host") == socket.gethostname()
        time.sleep(0.5 * (attempt == 0))
    return False


def release(lock: Path) -> None:
    """Remove the lock if it is still this process's."""
    h = holder(lock)
    if h is not None and h.get("pid") == os.getpid() and h.get("host") == socket.gethostname():
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def _local(folder: "Path | StoragePath | None") -> "Path | StoragePath | None":
    """A local StoragePath as its Path; an object store's stays a StoragePath."""
    if isinstance(folder, StoragePath) and folder.is_local:
        return folder.local
    return folder


@contextlib.contextmanager
def held(folder: "Path | StoragePath | None", field: str, command: str) -> Iterator[None]:
    """acquire ... release around a block; an object store's prefix (a StoragePath URI) takes a lease
    (fda_ray.core.store_locks); None locks nothing."""
    folder = _local(folder)
    if isinstance(folder, StoragePath):
        try:
            lease = store_locks.take(folder.uri, field, command)
        except store_locks.LeaseRefused as e:
            raise LockedError(str(e)) from None
        try:
            yield
        finally:
            store_locks.give_back(lease)
        return
    if folder is None:
        yield
        return
    lock = acquire(folder, field, command)
    try:
        yield
    finally:
        release(lock)
