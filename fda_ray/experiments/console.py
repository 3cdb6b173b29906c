"""What a sweep or a search shows while it runs: a quiet console and a progress status.

Quiet by default (`quiet(verbose=False)`): Ray's and Tune's own boxes, hints and INFO lines (the token-auth
notice, "Started a local Ray instance", Tune's experiment box and TensorBoard hint, tensorboardX's dropped
hyper-parameters) are not shown, nor the CPU-only torch notice that no CUDA runtime was found; Ray's errors, the
sweep's own warnings (options its trials ignore, a GPU fallback) and every failure stay. `--verbose` shows
everything, as Ray and Tune print it.

`Progress` follows the trials: started, each running trial's round, finished, failed or stopped early. On a
terminal it is one status block redrawn in place (trials running / done / failed, each running trial's round,
elapsed, the time left); elsewhere (a log file, CI) it prints a plain line per settled trial. The time left is
weighted by each row's measured cost: a trial still to run is expected to take as long as the finished trials of
its row took (the mean over all finished trials while its row has none), a running one that minus what it has
run, and the sum is shared by the trials that run at once. A sweep runs its cheap rows first (Target Only trains
no source), so the mean over finished trials alone (what this replaced) was far too low early on.
"""
from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from typing import Any, Mapping, TextIO

from fda_ray.core.interrupts import printing
from fda_ray.core.quiet import QUIET_ENV, is_quiet, quiet_worker  # (the console's names for them too)
from fda_ray.runtime import node_watch
from fda_ray.runtime.startup import from_report, slow_phases

# What hears every Progress's events besides the console (fda_ray.experiments.tracking.Tracking): set by the
# sweep's or search's front end for its run, so the backends and a search's several launches need no new argument.
OBSERVERS: list[Any] = []



def counted(n: int, noun: str) -> str:
    """"1 trial", "66 trials": a count as a reader says it (a sweep of one trial said "1 trials")."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

def quiet(verbose: bool) -> None:
    """Before Ray starts: quiet unless `verbose` (see the module docstring)."""
    if verbose:
        os.environ[QUIET_ENV] = "0"
        return
    os.environ[QUIET_ENV] = "1"
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's legacy output obeys verbose=0: no box, no hints
    logging.getLogger("ray").setLevel(logging.ERROR)
    for name in ("mlflow", "alembic"):  # the trackers' own INFO lines (creating the tables, ...)
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("WANDB_SILENT", "true")
    quiet_worker()


def ray_logging_level() -> int:
    """ray.init's logging_level: ERROR when quiet (ray.init resets the "ray" logger to it)."""
    return logging.ERROR if is_quiet() else logging.INFO


# The loggers whose ERROR records are Tune's traceback dumps of a failing trial ("Trial task failed for trial
# ...", "Trials did not complete"): written to the sweep's log file (tune_errors_to), on the console only --verbose.
TUNE_LOGGERS = ("ray.tune", "ray.air", "ray.train")


class tune_errors_to:
    """Within the block, Tune's own error records (tracebacks of failing trials) go to the file `path` (appended);
    when quiet they stay off the console, where fda-ray's one line per failure names the file instead."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._saved: list[tuple[logging.Logger, bool]] = []
        self._handler: logging.Handler | None = None

    def __enter__(self) -> "tune_errors_to":
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._handler = logging.FileHandler(self.path, delay=True)  # created at the first record
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in TUNE_LOGGERS:
            log = logging.getLogger(name)
            self._saved.append((log, log.propagate))
            log.addHandler(self._handler)
            if is_quiet():
                log.propagate = False  # not to the "ray" logger's console handler
        return self

    def __exit__(self, *exc: Any) -> None:
        for log, propagate in self._saved:
            log.removeHandler(self._handler)
            log.propagate = propagate
        self._saved.clear()
        if self._handler is not None:
            self._handler.close()


def tune_errors_log(out: Any) -> str:
    """Where a Tune launch's own error records go (tune_errors_to): beside Tune's folder under --out (a
    StoragePath), or, for an --out on an object store, a local file named after it."""
    if out.is_local:
        return str(out.local / "tune" / "errors.log")
    import hashlib
    import tempfile

    # the leaf and a digest of the whole URI: s3://a/x and s3://b/x wrote one file (two sweeps at once mixed theirs)
    digest = hashlib.sha256(out.uri.encode()).hexdigest()[:8]
    return os.path.join(tempfile.gettempdir(), f"fda-ray-{out.name}-{digest}-tune-errors.log")


def stopped_line(last: Mapping[str, Any] | None, complete: bool) -> str:
    """What the progress says of a trial the scheduler stopped: "stopped early (after 10 rounds)", which the records
    hold as rounds 0-9 (stopped_after 9); "done (stopped on its last round)" when a rung fell on its last report
    (every round trained)."""
    if complete:
        return "done (stopped on its last round)"
    r = (last or {}).get("round")
    return f"stopped early (after {r + 1} round{'s' if r else ''})" if isinstance(r, int) else "stopped early"


def fmt_s(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def trial_name(t: Any, variable: str) -> str:
    at = "all" if t.value is None else f"{t.value:g}"
    return f"{t.row} {variable}={at} seed {t.seed}"


def fit(lines: list[str], columns: int, rows: int) -> list[str]:
    """The status block cut to a terminal of `columns` x `rows`: each line at most columns - 1 characters (the
    last column would wrap on some terminals), at most rows - 1 lines (the head, the first running trials, and
    "... and N more running")."""
    width, height = max(10, columns - 1), max(2, rows - 1)
    if len(lines) > height:
        lines = lines[:height - 1] + [f"  ... and {len(lines) - (height - 1)} more running"]
    return [ln if len(ln) <= width else ln[:width - 3] + "..." for ln in lines]


def rounds_of(t: Any) -> int | None:
    """The rounds a trial's rows will number (warm-up and main; a fine-tuning trial's epochs), for the status.
    `t`: an fda_ray.experiments.records.Trial."""
    try:
        cfg = t.config().resolved()
    except (ValueError, TypeError):
        return None
    if t.kind == "finetune":
        return getattr(cfg, "finetune_epochs", None)
    return (cfg.rounds or 0) + (getattr(cfg, "warmup_rounds", 0) or 0) or None


class Progress:
    """The trials' progress (see the module docstring). `live`: redraw a block in place (default: when the
    stream is a terminal)."""

    def __init__(self, total: int, variable: str, stream: TextIO | None = None, live: bool | None = None,
                 clock: Any = time.time) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock
        self.t0, self.total, self.variable = clock(), total, variable
        self.done = self.failed = self.stopped = 0
        self.running: dict[str, dict[str, Any]] = {}  # key -> {trial, start, round, rounds}
        self.costs: dict[str, list[float]] = {}  # row -> the finished trials' seconds
        self.queued: dict[str, int] = {}  # row -> trials not started yet (set by expect)
        self.parallel = 1
        self._drawn = 0  # lines of the block on screen
        self.observers = list(OBSERVERS)

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks (which hold this) into its experiment state: the stream (a terminal, pytest's
        # capture, a notebook's) and the trackers stay behind; a copy brought back writes to stdout, tracks nothing
        state = dict(self.__dict__)
        state.update(stream=None, observers=[], clock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.stream, self.clock = sys.stdout, time.time

    def _tell(self, event: str, *args: Any) -> None:
        for o in self.observers:
            getattr(o, event)(*args)

    # -- events ----------------------------------------------------------------------------------------------
    def expect(self, trials: list[Any]) -> None:
        """The trials still to run, for the weighted time left (their rows)."""
        for t in trials:
            self.queued[t.row] = self.queued.get(t.row, 0) + 1

    def started(self, t: Any, rounds: int | None = None) -> None:
        if t.key in self.running:  # a retry, or Tune restarting it
            self.running[t.key]["start"] = self.clock()
            return
        self.running[t.key] = {"trial": t, "start": self.clock(), "round": None, "rounds": rounds}
        self._tell("started", t.key)
        if self.queued.get(t.row, 0) > 0:
            self.queued[t.row] -= 1
        self.parallel = max(self.parallel, len(self.running))
        self.draw()

    def at_round(self, key: str, row: Mapping[str, Any]) -> None:
        """A trial reported a round: `row`, the round's row (its "round" and metrics)."""
        if key in self.running and row.get("round") is not None:
            self.running[key]["round"] = int(row["round"])
            self._tell("round", key, row)
            slow = slow_phases(from_report(row))  # the first report carries the trial's start-up phases
            if slow:
                self.note(f"note: {trial_name(self.running[key]['trial'], self.variable)}: slow start-up: "
                          f"{'; '.join(slow)}")
            self.draw()

    def note(self, text: str, stream: TextIO | None = None) -> None:
        """One line above the live block (which is drawn again below it); `stream`: another than the block's (a
        problem's line on stderr, so that stdout stays the progress and the summary)."""
        with printing():
            self._clear()
            print(text, file=stream or self.stream, flush=True)
        self.draw()

    def line(self, t: Any, what: str) -> None:
        """A trial settled: `what` is "done" (or "done (...)"), "FAILED" or "stopped early (...)"."""
        entry = self.running.pop(t.key, None)
        done = what == "done" or what.startswith("done ")
        if entry is not None:  # (the trackers' outcome: fda_ray.experiments.tracking.OUTCOMES)
            self._tell("settled", t.key, "done" if done else "stopped" if what.startswith("stopped") else "failed")
        if entry is None and self.queued.get(t.row, 0) > 0:  # settled without a start event (not run)
            self.queued[t.row] -= 1
        if done:
            self.done += 1
            if entry is not None:
                self.costs.setdefault(t.row, []).append(self.clock() - entry["start"])
        elif what.startswith("stopped"):
            self.stopped += 1
        else:
            self.failed += 1
        node_watch.changed()  # a lost raylet's line counts the finished trials' records (fda_ray.runtime.node_watch)
        settled = self.done + self.failed + self.stopped
        text = (f"[{settled}/{self.total}] {what}: {trial_name(t, self.variable)}; elapsed "
                f"{fmt_s(self.clock() - self.t0)}, left {self.left_text()}")
        with printing():
            self._clear()
            print(text, file=self.stream, flush=True)
        self.draw()

    # -- the estimate ----------------------------------------------------------------------------------------
    def cost(self, row: str) -> float | None:
        if self.costs.get(row):
            return statistics.fmean(self.costs[row])
        every = [c for cs in self.costs.values() for c in cs]
        return statistics.fmean(every) if every else None

    def left(self) -> float | None:
        """Seconds left: the trials to run at their row's measured cost, the running ones less what they have run,
        shared by the trials that run at once; None before any trial has finished."""
        if not any(self.costs.values()):
            return None
        now = self.clock()
        work = sum(n * self.cost(row) for row, n in self.queued.items() if n > 0)
        work += sum(max(0.0, self.cost(e["trial"].row) - (now - e["start"])) for e in self.running.values())
        return work / max(1, self.parallel)

    def left_text(self) -> str:
        left = self.left()
        if left is None:
            return "unknown until a trial finishes" if self.done + self.failed + self.stopped < self.total else "0m00s"
        return f"~{fmt_s(left)}"

    # -- the block -------------------------------------------------------------------------------------------
    def block(self) -> list[str]:
        head = (f"{len(self.running)} running, {self.done} done, {self.failed} failed"
                + (f", {self.stopped} stopped early" if self.stopped else "")
                + f" of {self.total}; elapsed {fmt_s(self.clock() - self.t0)}, left {self.left_text()}")
        lines = [head]
        for key, e in sorted(self.running.items(), key=lambda kv: kv[1]["start"]):
            r = e["round"]
            # rows number rounds from 0 (the warm-up's first): shown as rounds done, "round 3/52"
            at = "starting" if r is None else f"round {r + 1}" + (f"/{e['rounds']}" if e["rounds"] else "")
            lines.append(f"  {trial_name(e['trial'], self.variable)}: {at}")
        return lines

    def _clear(self) -> None:
        if self.live and self._drawn:
            # up to the block's first line, then clear to the end of the screen
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def terminal_size(self) -> tuple[int, int]:
        """(columns, lines) of the terminal the block is drawn on; a stream that is no terminal (a test's, a
        notebook's) has no size to keep to."""
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, OSError, ValueError):
            return 10_000, 10_000
        return size.columns, size.lines

    def draw(self) -> None:
        """Redraw the block in place (a terminal only), never wider or taller than the terminal: a line wider
        than it would wrap and the block's cursor-up would then clear too few lines (and leave the old block
        behind); a block taller than it would scroll the same way."""
        if not self.live:
            return
        lines = fit(self.block(), *self.terminal_size())
        with printing():
            self._clear()
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        self._drawn = len(lines)

    def close(self) -> None:
        """Leave the terminal clean (the summary prints next)."""
        with printing():
            self._clear()
