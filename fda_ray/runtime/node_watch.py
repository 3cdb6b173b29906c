"""A lost raylet is one line: the local Ray node this process started dies (killed, the out-of-memory killer) and the
command says so, with what it kept, instead of Ray's log dump and an exit from inside Ray's C++ core.

When the raylet of a Ray that `ray.init` started here ends, the core worker of this process terminates the process
at its next touch of the object store (`connection.cc: The connection to the plasma store is failed. Terminate the
process.`), and Ray's log monitor prints the raylet's last 20 log lines on stdout: no Python handler runs. So a
daemon thread waits for the raylet (the child process ray.init started) to end: `os.waitid` blocks without the GIL
and wakes the moment it ends, a signal included, without reaping it (elsewhere: `poll()` every POLL_S). When it ends
while Ray is still connected (not `ray.shutdown`), the thread prints one line on stderr and ends the process with
exit code 1, before Ray's core does. What the command keeps on disk is already there (a run
writes its rounds, a sweep its trials' checkpoints, as they finish); `set_kept` tells the line where.

A Ray this process joined (`--address`) has no raylet here to watch: its node's loss is Ray's to report (a sweep's
trials are retried on other nodes, fda_ray.experiments.stranded).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable

POLL_S = 0.05

_kept: Callable[[], str] | None = None
_watched: dict = {}  # "proc", "log" of the raylet watched; "said": its line was printed
_lock = threading.Lock()


def set_kept(describe: Callable[[], str] | None) -> None:
    """What the command has kept so far, for the line (e.g. 'the 70 finished rounds are in r.parquet')."""
    global _kept
    _kept = describe


def _ended(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        why = ": killed, by a user or the out-of-memory killer" if name == "SIGKILL" else ""
        return f"ended by {name}{why}"
    return f"exited with code {returncode}"


def line(pid: int, returncode: int, log: str | None = None) -> str:
    """The one line a lost raylet prints (`log`: the raylet's own log file, for its last words)."""
    kept = ""
    if _kept is not None:
        try:
            kept = f"; {_kept()}"
        except Exception:  # the line must be printed whatever the description does
            kept = ""
    return (f"error: the local Ray node under this command was lost (its raylet, pid {pid}, {_ended(returncode)}"
            + (f"; its log: {log}" if log else "") + f"); Ray cannot go on without it{kept}")


def _quiet_raylet_report(worker) -> None:
    """Ray's log monitor publishes a lost raylet's last 20 log lines to the driver, which prints them on stdout
    (worker.print_to_stdstream, from its error listener): the watch's line says it and names the log instead."""
    original = worker.print_to_stdstream
    if getattr(original, "_fda_ray", False):
        return

    def print_to_stdstream(data, *args, **kwargs):
        lines = data.get("lines") or [] if isinstance(data, dict) else []
        if isinstance(data, dict) and data.get("pid") == "raylet" and lines and \
                str(lines[0]).startswith("Raylet is terminated"):
            return None
        return original(data, *args, **kwargs)

    print_to_stdstream._fda_ray = True
    worker.print_to_stdstream = print_to_stdstream


def _raylet():
    """The raylet process ray.init started in this process (a Popen), or None (joined a cluster, or another Ray)."""
    try:
        from ray._private import ray_constants, worker

        node = worker._global_node
        if node is None or not getattr(node, "head", False):
            return None
        infos = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
        return infos[0].process if infos else None
    except Exception:  # another Ray layout: no watch, Ray's own report stays
        return None


def _peek(proc) -> int | None:
    """The raylet's return code if it has ended (Popen's way: -signal), else None; never reaps it."""
    if hasattr(os, "waitid"):
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped already: Popen knows
            return proc.poll()
        if info is None:
            return None
        return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status
    return proc.poll()


def _say(code: int) -> None:
    """Print the raylet's line, once, whichever thread sees the loss first."""
    with _lock:
        if _watched.get("said"):
            return
        _watched["said"] = True
        print(line(_watched["proc"].pid, code, _watched.get("log")), file=sys.stderr, flush=True)


def _connected() -> bool:
    """Whether this process is still connected to a Ray (a lost raylet leaves it connected; ray.shutdown does not)."""
    try:
        from ray._private import worker

        return bool(worker.global_worker.connected)
    except Exception:
        return False


def _lost(code: int) -> bool:
    """Whether a raylet that ended with `code` was lost rather than shut down: ray.shutdown disconnects this process,
    then ends its raylet with code 0. One that ended otherwise (a signal, an error) was lost, also when this process
    has disconnected since: a command's error handling may run ray.shutdown before the watch thread wakes."""
    return code != 0 or _connected()


def explain(e: BaseException) -> bool:
    """For an exception escaping a command (fda_ray.core.interrupts.CRASH_EXPLAINERS): when the watched raylet has
    ended, Ray's error is its loss (a bare 'Connection reset by peer' from ray.wait, an actor that died): the one
    line instead of the traceback. Returns whether it said so."""
    proc = _watched.get("proc")
    if proc is None:
        return False
    code = _peek(proc)
    if code is None or not _lost(code):  # running, or ended with its ray.shutdown: not this command's loss
        return False
    _say(code)
    return True


def start(exit: Callable[[int], None] = os._exit) -> threading.Thread | None:
    """Watch the raylet of the Ray started here (call right after ray.init). Returns the thread, or None."""
    proc = _raylet()
    if proc is None:
        return None
    from ray._private import worker

    try:
        log = os.path.join(worker._global_node.get_logs_dir_path(), "raylet.out")
    except Exception:
        log = None
    _quiet_raylet_report(worker)
    _watched.clear()
    _watched.update(proc=proc, log=log)
    from fda_ray.core import interrupts

    if explain not in interrupts.CRASH_EXPLAINERS:
        interrupts.CRASH_EXPLAINERS.append(explain)

    def ended() -> int:
        """Block until the raylet ends (without the GIL, woken by the kernel at once: Ray's core races to end
        this process when it notices), without reaping it (Popen still does); its return code, Popen's way."""
        if hasattr(os, "waitid"):
            try:
                info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                if info is not None:
                    killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
                    return -info.si_status if killed else info.si_status
            except ChildProcessError:  # reaped already (ray.shutdown): poll() says how it ended
                pass
        while proc.poll() is None:  # no waitid here (not Linux or macOS): poll
            threading.Event().wait(POLL_S)
        return proc.returncode

    def watch() -> None:
        code = ended()
        if not _lost(code):  # ray.shutdown: the raylet ends on purpose; nothing left to watch
            with _lock:
                if _watched.get("proc") is proc:
                    _watched.clear()
            return
        try:
            _say(code)
        finally:
            exit(1)

    t = threading.Thread(target=watch, name="fda-ray-raylet-watch", daemon=True)
    t.start()
    return t
