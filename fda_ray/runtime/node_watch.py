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

The thread alone loses a race: the raylet's sockets close as it dies, before the kernel reports its end, and a main
thread inside a Ray call at that moment is ended by Ray's core (exit code 1, nothing printed) before the watch thread
runs again. So a guard process (this file run as a script: the standard library only, its own session, so a Ctrl-C
at the terminal does not reach it) watches the raylet and this process through pidfds and is the one that prints:
this process hands it the line (`print`) and waits for its acknowledgement, keeps it told what the command has kept
(`kept`, after every change: `changed()`), and tells it when Ray ends on purpose (`quit`: ray.shutdown, the
interpreter's exit). When this process ends without either after the raylet ended other than cleanly, the guard
prints the line itself, with the raylet's status read from /proc (its zombie's exit code) and the last `kept`.
Where pidfds are missing (not Linux), the thread prints as before.

A Ray this process joined (`--address`) has no raylet here to watch: its node's loss is Ray's to report (a sweep's
trials are retried on other nodes, fda_ray.experiments.stranded).
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
from typing import Callable

POLL_S = 0.05
ACK_S = 3.0  # how long this process waits for the guard to print its line before printing it itself

_kept: Callable[[], str] | None = None
_watched: dict = {}  # "proc", "log" of the raylet watched; "guard": its guard process; "said": its line was printed
_lock = threading.Lock()


def set_kept(describe: Callable[[], str] | None) -> None:
    """What the command has kept so far, for the line (e.g. 'the 70 finished rounds are in r.parquet'); call
    `changed()` whenever what it describes changes, so that the guard knows it if this process is ended first."""
    global _kept
    _kept = describe
    changed()


def _kept_text() -> str:
    if _kept is None:
        return ""
    try:
        return _kept()
    except Exception:  # the line must be printed whatever the description does
        return ""


def changed() -> None:
    """Tell the guard what the command has kept now (see the module docstring); nothing without a guard."""
    if _watched.get("guard") is not None:
        _send(f"kept {_kept_text()}")


def _ended(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        why = ": killed, by a user or the out-of-memory killer" if name == "SIGKILL" else ""
        return f"ended by {name}{why}"
    return f"exited with code {returncode}"


def told_sigterm(log: str | None, same_group: bool) -> bool:
    """Whether the raylet ended because SIGTERM reached this command's process group (`timeout`, a batch system's
    stop, a terminal's kill of the job): the raylet shares the group (`same_group`) and its log's last words say it
    received SIGTERM. Then its end is the command's stop, not a lost node. (A SIGTERM sent to the raylet alone reads
    the same: the line then says what is true of both, that SIGTERM stopped the node.)"""
    if not same_group or not log:
        return False
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            return b"received SIGTERM" in f.read()
    except OSError:
        return False


def line(pid: int, returncode: int | None, log: str | None = None, kept: str | None = None,
         term: bool = False) -> str:
    """The one line a lost raylet prints (`log`: the raylet's own log file, for its last words; `kept`: what the
    command kept, by default `set_kept`'s description now; `returncode` None: its status could not be read; `term`:
    SIGTERM reached the command and its raylet together, told_sigterm: the interrupted line of a SIGTERM)."""
    kept = _kept_text() if kept is None else kept
    if term:
        return (f"interrupted by SIGTERM, which stopped this command's local Ray node too (raylet pid {pid})"
                + (f"; {kept}" if kept else ""))
    ended = "ended" if returncode is None else _ended(returncode)
    return (f"error: the local Ray node under this command was lost (its raylet, pid {pid}, {ended}"
            + (f"; its log: {log}" if log else "") + "); Ray cannot go on without it" + (f"; {kept}" if kept else ""))


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


def terminated() -> bool:
    """Whether the watched raylet ended with this command's SIGTERM (told_sigterm): its exit code is then 143."""
    return bool(_watched.get("term"))


def _say(code: int) -> None:
    """Print the raylet's line, once, whichever thread sees the loss first: through the guard, so that one process
    prints it whichever of the two Ray's core lets finish; by itself when there is no guard or it does not answer."""
    with _lock:
        if _watched.get("said"):
            return
        _watched["said"] = True
        _watched["term"] = told_sigterm(_watched.get("log"), bool(_watched.get("same_group")))
        text = line(_watched["proc"].pid, code, _watched.get("log"), term=_watched["term"])
        guard = _watched.get("guard")
        if guard is not None and _send(f"print {text}", locked=True) and _acknowledged(guard):
            return
        print(text, file=sys.stderr, flush=True)


# -- the guard, this process's side -----------------------------------------------------------------------------
def _send(message: str, locked: bool = False) -> bool:
    """One message to the guard (one line); False when it cannot be told (gone)."""
    guard = _watched.get("guard")
    if guard is None:
        return False
    data = (message.replace("\n", " ") + "\n").encode("utf-8", "replace")
    try:
        if locked:
            os.write(guard.stdin.fileno(), data)
        else:
            with _lock:
                os.write(guard.stdin.fileno(), data)
        return True
    except (OSError, ValueError):
        return False


def _acknowledged(guard, byte: bytes = b"k") -> bool:
    """Whether the guard answered `byte` within ACK_S: b"k", it printed the line; b"r", it is ready."""
    try:
        ready, _, _ = select.select([guard.stdout], [], [], ACK_S)
        return bool(ready) and os.read(guard.stdout.fileno(), 1) == byte
    except (OSError, ValueError):
        return False


def _start_guard(proc, log: str | None, same_group: bool = False):
    """The guard process for the raylet `proc` (a Popen), or None where pidfds are missing."""
    if not hasattr(os, "pidfd_open"):
        return None
    import subprocess

    try:  # -I -S: nothing but the standard library, whatever the environment sets
        guard = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), "--guard", str(os.getpid()),
                                  str(proc.pid), log or "", "group" if same_group else ""], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE,
                                 start_new_session=True)
    except OSError:
        return None
    if _acknowledged(guard, b"r"):  # watching both (a raylet lost from now on is its to tell)
        return guard
    _quit_guard(guard)
    return None


def _quit_guard(guard=None) -> None:
    """Ray ends on purpose (ray.shutdown, the interpreter's exit): the guard goes without a word."""
    guard = guard or _watched.get("guard")
    if guard is None:
        return
    try:
        os.write(guard.stdin.fileno(), b"quit\n")
        guard.stdin.close()
        guard.stdout.close()
    except (OSError, ValueError):
        pass
    try:
        guard.wait(ACK_S)  # reaped, so no zombie stays behind in a long-lived process (a notebook, pytest)
    except Exception:
        pass


def _at_exit() -> None:
    if not _watched.get("said"):
        _quit_guard()


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


def explain(e: BaseException) -> bool | int:
    """For an exception escaping a command (fda_ray.core.interrupts.CRASH_EXPLAINERS): when the watched raylet has
    ended, Ray's error is its loss (a bare 'Connection reset by peer' from ray.wait, an actor that died): the one
    line instead of the traceback. Returns False (not said), or the exit code: 143 where the command's SIGTERM
    stopped the raylet too (told_sigterm), else 1, as the watch thread's."""
    proc = _watched.get("proc")
    if proc is None:
        return False
    code = _peek(proc)
    if code is None or not _lost(code):  # running, or ended with its ray.shutdown: not this command's loss
        return False
    _say(code)
    from fda_ray.core.interrupts import EXIT_TERMINATED

    return EXIT_TERMINATED if terminated() else 1


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
    if _watched.get("guard") is not None and not _watched.get("said"):  # a Ray of this process before (shut down)
        _quit_guard()
    try:  # (SIGTERM to this command's process group reaches its raylet too: told_sigterm)
        same_group = os.getpgid(proc.pid) == os.getpgid(0)
    except OSError:
        same_group = False
    _watched.clear()
    _watched.update(proc=proc, log=log, same_group=same_group, guard=_start_guard(proc, log, same_group))
    changed()
    import atexit

    atexit.unregister(_at_exit)
    atexit.register(_at_exit)  # after ray.init's own: runs before Ray's shutdown ends the raylet
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
                    guard = _watched.get("guard")
                    _watched.clear()
                else:
                    guard = None
            if guard is not None:
                _quit_guard(guard)
            return
        try:
            _say(code)
        finally:
            from fda_ray.core.interrupts import EXIT_TERMINATED

            exit(EXIT_TERMINATED if terminated() else 1)

    t = threading.Thread(target=watch, name="fda-ray-raylet-watch", daemon=True)
    t.start()
    return t


# -- the guard, its own process ------------------------------------------------------------------------------------
def _status(pid: int) -> int | None:
    """The exit status of the ended process `pid` (Popen's way), read from its zombie's /proc entry (field 52,
    exit_code); None once it has been reaped or where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return os.waitstatus_to_exitcode(int(fields[49]))  # fields from the 3rd: the 52nd is [49]
    except (OSError, IndexError, ValueError):
        return None


def guard(parent: int, raylet: int, log: str | None, stdin=None, stdout=None, same_group: bool = False) -> int:
    """Watch `raylet` and `parent` (pids); obey `parent`'s messages on `stdin` (kept / print / quit lines), and print
    the raylet's line on stderr when the parent ends, unasked, after the raylet ended other than cleanly."""
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent's to answer; this one ends when it does
    try:
        parent_fd, raylet_fd = os.pidfd_open(parent), os.pidfd_open(raylet)
    except OSError:  # one of them already gone: nothing this guard can still tell apart
        return 0
    kept, code, raylet_ended, pending = "", None, False, b""
    stdout.write(b"r")
    stdout.flush()
    watched = [stdin, parent_fd, raylet_fd]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if raylet_fd in ready and not raylet_ended:
            raylet_ended, code = True, _status(raylet)  # now, while the parent has not reaped its zombie
            watched.remove(raylet_fd)
        if stdin in ready:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                watched.remove(stdin)  # the parent closed it or ended: its pidfd says which
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                verb, _, text = raw.decode("utf-8", "replace").partition(" ")
                if verb == "quit":
                    return 0
                if verb == "kept":
                    kept = text
                elif verb == "print":
                    print(text, file=sys.stderr, flush=True)
                    try:
                        stdout.write(b"k")
                        stdout.flush()
                    except OSError:
                        pass
                    return 0
        if parent_fd in ready:
            # ended with no word: ended by Ray's core after its raylet (the race in the module docstring) or by
            # itself, with its raylet running or stopped cleanly (nothing to say then)
            # (a raylet ends with code 0 on SIGTERM: the group's, told_sigterm, is this command's stop too; a
            # ray.shutdown's told this guard to quit before it)
            if raylet_ended and (code != 0 or told_sigterm(log, same_group)):
                try:
                    print(line(raylet, code, log or None, kept, term=told_sigterm(log, same_group)),
                          file=sys.stderr, flush=True)
                except OSError:
                    pass
            return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--guard"]:
    sys.exit(guard(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] or None,
                   same_group=sys.argv[5:6] == ["group"]))
