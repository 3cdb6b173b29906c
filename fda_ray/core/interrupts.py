"""How a command ends when the world stops it: SIGTERM, a closed stdout, a write the disk refuses.

Every command-line program's `main` is wrapped by `cli_main`, so that

    SIGTERM          is handled like Ctrl-C: the same path runs (a run keeps its finished rounds, a sweep its
                     trials' records and its summary, with the one line that says how to resume); the exit code is
                     143 (128 + SIGTERM) where Ctrl-C's is 130. Inside a Ray Tune launch (`graceful`), whose own
                     SIGINT handler stops it gracefully, SIGTERM goes through that handler too. `ray.init` installs Ray's own
                     SIGTERM handler (sys.exit, then Ray's crash dump at exit): `rearm` puts ours back after it.
    a closed stdout  (`python -m fda_ray.sweep ... | head`): the rest of the output is dropped quietly (stdout is
                     pointed at /dev/null, so Python's exit flush cannot fail again) and the exit code is 141
                     (128 + SIGPIPE, what a shell reports for any program cut off this way). What the command wrote
                     to disk before stays.
    a refused write  (a full disk, a quota, a read-only mount, a name too long): one line naming the file and the
                     reason, exit code 1, no traceback. The command's own records stay as they were at the last
                     atomic write (fda_ray.core.storage), so a resume goes on from them.

Ctrl-C itself stays Python's KeyboardInterrupt; the commands catch it where they can keep what was computed.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

EXIT_WRITE, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_TERMINATED = 1, 130, 141, 143

# The errors of a write that the machine refused (not a bug of ours): told in one line, never as a traceback.
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG,
                errno.EISDIR, errno.ENOTDIR, errno.EFBIG, errno.EIO, errno.EEXIST, errno.ENOENT}

_state: dict[str, Any] = {"armed": False, "received": None}
# Callables that may explain an exception escaping a command in one line they print themselves (True: said, exit 1;
# an int: said, that exit code): the runtime's lost-raylet watch registers one (fda_ray.runtime.node_watch), since
# Ray's own error then is a bare "Connection reset by peer" from deep inside ray.wait (143 where the command's
# SIGTERM stopped the raylet too).
CRASH_EXPLAINERS: list[Callable[[BaseException], bool | int]] = []


def _explained(e: BaseException) -> int:
    """The exit code of an exception a CRASH_EXPLAINERS entry said in one line, or 0 (none did)."""
    for explain in list(CRASH_EXPLAINERS):
        said = explain(e)
        if said:
            return 1 if said is True else int(said)
    return 0


def received() -> str | None:
    """'SIGTERM' once this process was sent SIGTERM inside a `cli_main`, 'SIGPIPE' once its stdout was closed
    (stdout_closed), else None."""
    return _state["received"]


def stop_reason() -> str:
    """What stopped the run, for the messages that Ctrl-C, SIGTERM and a closed stdout share."""
    return {"SIGTERM": "SIGTERM", "SIGPIPE": "a closed stdout"}.get(received() or "", "Ctrl-C (SIGINT)")


def _as_ctrl_c(frame: Any) -> None:
    """Do what Ctrl-C does here: inside a Tune launch (`graceful`), run the SIGINT handler Tune installed (it stops
    the launch gracefully); elsewhere raise KeyboardInterrupt, also where SIGINT is ignored (a background job of a
    shell without job control starts with it ignored) or where an earlier Tune launch in this process left its
    handler behind."""
    handler = signal.getsignal(signal.SIGINT)
    if _state.get("graceful") and callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt(received())


@contextlib.contextmanager
def graceful() -> Iterator[None]:
    """Around a Ray Tune launch (tuner.fit): SIGTERM and a closed stdout stop it as Tune's own Ctrl-C handler does,
    which ends the launch and returns its results."""
    before = _state.get("graceful", False)
    _state["graceful"] = True
    try:
        yield
    finally:
        _state["graceful"] = before


def _on_sigterm(signum: int, frame: Any) -> None:
    _state["received"] = "SIGTERM"
    _as_ctrl_c(frame)


def stdout_closed() -> None:
    """Whoever reads stdout has gone (`| head`): drop the rest of the output and stop the command the way Ctrl-C
    does (_as_ctrl_c: Python's KeyboardInterrupt, or Tune's graceful stop), so what it computed is kept and its
    summary written."""
    _silence_stdout()
    if _state["received"] is None:
        _state["received"] = "SIGPIPE"
        _as_ctrl_c(None)


@contextlib.contextmanager
def printing() -> Iterator[None]:
    """Around a command's progress output: a closed stdout stops the command as stdout_closed says, rather than
    raising BrokenPipeError wherever the print happened to be (inside Tune's loop, inside a run's rounds)."""
    try:
        yield
    except BrokenPipeError:
        stdout_closed()


def rearm() -> None:
    """Put the SIGTERM handler back inside a `cli_main` (after `ray.init`, which installs Ray's own)."""
    if _state["armed"] and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


LINE_MAX = 1000  # a failure's line in notes, summaries and errors: a missing dataset's hint (its paths and the
# command that gets it) runs to 500 characters, and a cut at 300 ended it mid-command ("Get it with `bash /wo")


def cut_line(line: str, most: int = LINE_MAX) -> str:
    """`line` whole, or its first `most` characters ending in " ..." (said, so a cut is never read as the end)."""
    return line if len(line) <= most else line[:most - 4].rstrip() + " ..."


def error_line(e: BaseException, outside: str | None = None) -> str:
    """'ValueError: message (file.py:12)': an exception in one line, at the innermost frame it was raised from (a
    plug-in's own code, say), so that a user finds it without a traceback. With `outside` (a folder: fda-ray's
    package), the innermost frame outside it, where there is one: a plug-in's import that fda-ray refused (a name
    registered twice) is located at the plug-in's line that asked, not at fda-ray's check. importlib's own frames
    (`<frozen ...>`) are never the place; a SyntaxError's place is the line it names."""
    if isinstance(e, SyntaxError) and e.filename:  # (its traceback is importlib's; its own fields say where)
        return f"{type(e).__name__}: {e.msg} ({Path(e.filename).name}:{e.lineno})"
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")] \
        or traceback.extract_tb(e.__traceback__)
    if outside is not None:
        frames = [f for f in frames if not f.filename.startswith(outside)] or frames
    at = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}{at}"


def write_failure(e: BaseException) -> str | None:
    """One line for an OSError that is the machine refusing a write (module docstring), else None."""
    if not isinstance(e, OSError) or e.errno not in WRITE_ERRNOS:
        return None
    where = f" {e.filename}" if e.filename else ""
    return f"could not write{where}: {e.strerror or os.strerror(e.errno)} (errno {errno.errorcode.get(e.errno, e.errno)})"


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # (a replaced sys.stdout without a descriptor: nothing to do)
        pass


def cli_main(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a command's `main(argv) -> exit code` as the module docstring says."""

    @functools.wraps(main)
    def wrapped(*args: Any, **kwargs: Any) -> int:
        in_main = threading.current_thread() is threading.main_thread()
        before = signal.getsignal(signal.SIGTERM) if in_main else None
        outer = _state["armed"]
        if in_main:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _state.update(armed=True, received=None if not outer else _state["received"])
        try:
            code = main(*args, **kwargs)
        except BrokenPipeError:  # a print outside `printing` (a summary, a table)
            _silence_stdout()
            return EXIT_PIPE
        except KeyboardInterrupt:  # before the command could keep anything (it catches it where it can)
            print(f"interrupted by {stop_reason()} before the command could finish; what it wrote before stays",
                  file=sys.stderr)
            code = EXIT_INTERRUPTED
        except OSError as e:
            from fda_ray.core.storage import StoreError

            if isinstance(e, StoreError):  # an object store down or refusing: what it holds stays there
                print(f"error: {e}; what finished before is kept there (a sweep's trials): once the store answers, "
                      "run the same command again (a sweep with --resume)", file=sys.stderr)
                return EXIT_WRITE
            line = write_failure(e)
            if line is None:
                if code := _explained(e):
                    return code
                raise
            print(f"error: {line}; what finished before is kept (a sweep's trials, a run's --parquet rounds): "
                  "free the space or fix the path, then run the same command again (a sweep with --resume)",
                  file=sys.stderr)
            return EXIT_WRITE
        except Exception as e:
            if code := _explained(e):
                return code
            raise
        finally:
            if in_main:
                signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)
                _state["armed"] = outer
        if received() and code == EXIT_INTERRUPTED:
            code = EXIT_TERMINATED if received() == "SIGTERM" else EXIT_PIPE
        return code

    return wrapped
