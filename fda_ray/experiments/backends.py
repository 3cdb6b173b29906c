"""Where a sweep's or a search's pending trials run: `run_local` (a process pool, no Ray) or `run_tune` (Ray Tune,
one launch per phase, on a local Ray or a cluster), both writing each trial's record under `records/<key>/`
(fda_ray.experiments.trials), telling `Progress` (fda_ray.experiments.console) when a trial starts, reaches a round
and settles; and `write_parquet`, the results table both front ends write.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from fda_ray.core import interrupts
from fda_ray.core.storage import StoragePath, StoreError, asking, storage_path
from fda_ray.runtime import preflight
from fda_ray.experiments.console import (Progress, quiet_worker, rounds_of, stopped_line, trial_name,
                                         tune_errors_log, tune_errors_to)
from fda_ray.experiments.stranded import StrandedWatch, stranded_in, tune_parts as stranded_tune_parts
from fda_ray.experiments.records import Trial, is_done
from fda_ray.experiments.trials import run_trial


# ---------------------------------------------------------------- backends

def _phases(pending: list[Trial]) -> list[list[Trial]]:
    """Trials that start from another trial's weights run after it: a second phase."""
    first = [t for t in pending if t.weights_from is None]
    second = [t for t in pending if t.weights_from is not None]
    return [p for p in (first, second) if p]


def die_with_parent() -> bool:
    """Linux: this process is killed (SIGKILL) when its parent dies (prctl PR_SET_PDEATHSIG). A sweep stopped by
    `kill -9` (or the OOM killer) then leaves no pool worker behind that goes on training, and writing into a trial
    record that a resumed sweep runs again (its record keeps the last round's atomic state.pt). Returns whether it
    was set (False where prctl is missing)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


# In a pool worker: the queue each trial's rounds go to, for the status (set by _worker_init; None: not reported).
_ROUNDS: Any = None


def _worker_init(rounds: Any = None) -> None:
    """Pool workers leave Ctrl-C and SIGTERM to the sweep, which stops them (a worker dying mid-job would look
    like a failed trial: a batch system's SIGTERM reaches the whole process group), and die with the sweep.
    `rounds`: the pool's status queue (a multiprocessing queue, which reaches a process only at its start)."""
    import signal

    global _ROUNDS
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()
    warnings.simplefilter("ignore", preflight.RunWarning)  # the sweep printed the options its trials ignore, once
    quiet_worker()
    _ROUNDS = rounds


def _say(item: tuple) -> None:
    """Tell the sweep (key, a round's metrics) or (key, None: a fused member finished). Only the status display
    hears it: a queue that fails never fails the trial, whose record is what counts."""
    if _ROUNDS is None:
        return
    try:
        _ROUNDS.put(item)
    except Exception:  # (ValueError: closed; OSError: its pipe gone) the trial goes on unreported
        pass


def _local_job(trial: dict[str, Any], records: str) -> None:
    """One trial in a pool worker, telling the sweep after every round (the status and the trackers)."""
    from fda_ray.core import plugins
    from fda_ray.experiments.records import round_metrics

    plugins.load_in_worker("local worker process")  # the sweep's plug-ins: this process inherited $FDA_RAY_IMPORTS
    t = Trial.from_dict(trial)
    _say((t.key, {WORKER_PID: os.getpid()}))  # (a worker killed under it: the sweep charges its trial only)
    run_trial(t, storage_path(records), report=lambda row: _say((t.key, round_metrics(row))))


def _local_group_job(trials: list[dict[str, Any]], records: str) -> dict[str, str | None]:
    """One fused group (fda_ray.runtime.fusion) in a pool worker: each member's outcome (None, or its error's line)."""
    from fda_ray.core import plugins
    from fda_ray.experiments.records import round_metrics
    from fda_ray.experiments.trials import run_group

    plugins.load_in_worker("local worker process")
    members = [Trial.from_dict(t) for t in trials]
    for t in members:
        _say((t.key, {WORKER_PID: os.getpid()}))
    # (key, None): a member finished, said at once (the status would show it running until its group ends)
    outcome = run_group(members, storage_path(records), report=lambda key, row: _say((key, round_metrics(row))),
                        finished=lambda key: _say((key, None)))
    return {k: None if e is None else failure_line(e) for k, e in outcome.items()}


def failure_line(e: BaseException) -> str:
    """A failed trial's error in one line: a run's failure says what it is (RunFailed: the round, the error, where it
    was raised); another exception with its class name. Cut at interrupts.LINE_MAX characters."""
    from fda_ray.core.interrupts import cut_line
    from fda_ray.runtime.failures import RunFailed

    line = str(e) if isinstance(e, RunFailed) else f"{type(e).__name__}: {e}"
    return cut_line((line.strip().splitlines() or [type(e).__name__])[0])


# A trial whose pool process died under it (kill -9, the OOM killer, a crash in native code): its note's error.
POOL_DIED = ("its worker process died (killed by a signal: the out-of-memory killer, kill -9, or a crash); a new "
             "process pool takes over")
# A trial whose own worker was alive when another worker died: the broken pool stops it too, through no fault of its
# own, so it goes on in the new pool without an attempt counted (it was charged one, and a pool of W workers that
# lost one W times over failed every trial).
POOL_BYSTANDER = "another worker of the pool died"
WORKER_PID = "__worker_pid__"  # (key, {WORKER_PID: pid}): the worker that runs a trial, said when it starts


def _kill_workers(pool: Any) -> None:
    """Kill a pool's processes (SIGKILL: they ignore SIGTERM, which is all a broken pool sends them): a worker left
    running would go on writing a trial record that the sweep runs again or has stopped."""
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):  # (gone already, or closed)
            pass


def run_local(pending: list[Trial], records: StoragePath, workers: int, max_failures: int, progress: Progress,
              fuse: int = 1) -> list[dict]:
    """A process pool of serial runs (no Ray): each trial in a fresh process, `workers` at once. Returns the
    failures (a trial is retried max_failures times). KeyboardInterrupt propagates after the pool stops.
    fuse > 1: a worker runs up to `fuse` trials of one fusion key as one group (fda_ray.runtime.fusion), each keeping
    its record; a member that fails is retried like a trial of its own (alone, from its last round).
    A pool whose worker was killed (kill -9, the OOM killer) is broken for good: that worker's trial counts a failed
    attempt, and every running trial runs again in a new pool from its record's last round. A trial that could not
    write its record
    (a full disk, a quota, a read-only filesystem: no retry mends those) fails at once, and the trials not started
    are not started: the sweep ends with the resume command."""
    import multiprocessing as mp
    import queue
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from fda_ray.core import plugins

    failures: list[dict] = []
    attempts: dict[str, int] = {}
    todo = list(pending)
    failed: set[str] = set()
    ctx = mp.get_context("spawn")

    def start() -> tuple[Any, Any]:
        # The status queue is a plain queue of this context, handed to each worker at its start: no Manager, whose
        # server process (a spawn child: torch re-imported, ~0.5 GB) outlived a sweep killed with kill -9, and whose
        # loss failed every trial. A new pool gets a new queue (a worker killed mid-put may hold the old one's lock).
        rounds = ctx.Queue()
        return ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init, initargs=(rounds,)), rounds

    pool, rounds = start()
    progress.expect(pending)

    settled_early: set[str] = set()  # fused members that finished while their group went on
    unwritable: list[str] = []  # the first trial error that was the disk's (no retry, no new trial started)
    worker_of: dict[str, int] = {}  # trial key -> the pid of the worker running it (said by the worker)

    def drain() -> None:
        while True:
            try:
                key, r = rounds.get_nowait()
            except (queue.Empty, OSError, EOFError, ValueError):
                return
            if isinstance(r, dict) and WORKER_PID in r:
                worker_of[key] = r[WORKER_PID]
                continue
            if r is None:  # a fused member finished (its record whole): done now, not when its group ends
                t = next((t for g in running.values() for t in g if t.key == key), None)
                if t is not None and key not in settled_early and is_done(records / key):
                    settled_early.add(key)
                    settle(t, None)
                continue
            progress.at_round(key, r)

    from fda_ray.runtime.fusion import plan_groups

    # the fused groups, planned once (fda_ray.runtime.fusion.plan_groups); a member retried after a failure runs alone
    group_of = {g[0].key: g for g in plan_groups(pending, fuse) if len(g) > 1}
    in_group = {t.key for g in group_of.values() for t in g[1:]}

    def take(ready: list[Trial]) -> list[Trial]:
        first = ready.pop(0)
        group = [t for t in group_of.pop(first.key, [first]) if t in todo]
        for t in group[1:]:
            in_group.discard(t.key)
            if t in ready:
                ready.remove(t)
        return group

    def fail(t: Trial, error: str, tries: int) -> None:
        failed.add(t.key)
        failures.append({"trial": t.key, "row": t.row, "value": t.value, "seed": t.seed, "attempts": tries,
                         "error": error})
        progress.line(t, "FAILED")

    def settle(t: Trial, error: str | None, size: int = 1) -> None:
        if error is None:
            progress.line(t, "done")
            return
        if error == POOL_BYSTANDER:
            todo.insert(0, t)
            progress.note(f"note: {trial_name(t, progress.variable)} stopped: {error}; it goes on in the new pool from "
                          "its last round (no attempt counted)", stream=sys.stderr)
            return
        attempts[t.key] = attempts.get(t.key, 0) + 1
        if any(why in error for why in WRITE_REFUSALS):  # the disk, not the trial: retrying only fails again
            unwritable.append(error)
            fail(t, error, attempts[t.key])
            return
        if attempts[t.key] <= max_failures:
            todo.insert(0, t)
            where = f" (in a fused group of {size})" if size > 1 else ""  # as the Tune backend's note says it
            progress.note(f"note: {trial_name(t, progress.variable)}{where} failed: {error}; it runs again (attempt "
                          f"{attempts[t.key] + 1} of {max_failures + 1})", stream=sys.stderr)
            return
        fail(t, error, attempts[t.key])

    def outcome(f: Any, group: list[Trial]) -> bool:
        """Settle a finished future's trials; True if it says the pool is broken."""
        broken = False
        try:
            out = f.result()
        except plugins.WorkerImportError:  # a worker without the plug-ins: no retry mends it (one line, exit 1)
            raise
        except BrokenProcessPool:
            broken = True
            # the trials whose worker is known and alive did not die: only the dead worker's trial is charged
            pid = worker_of.get(group[0].key)
            proc = (getattr(pool, "_processes", None) or {}).get(pid) if pid is not None else None
            alive = proc is not None and proc.exitcode is None
            out = {t.key: POOL_BYSTANDER if alive else POOL_DIED for t in group}
        except Exception as e:  # a failing trial (or its group's process): retried, the others go on
            line = failure_line(e)
            out = {t.key: line for t in group}
        for t in group:
            if t.key not in settled_early:
                settle(t, out.get(t.key) if isinstance(out, dict) else None, len(group))
        return broken

    def renew() -> None:
        """A broken pool: settle its trials (the dead worker's one attempt; those of workers still alive none), kill
        what is left of it, and go on in a new pool (each trial from its record's last round)."""
        nonlocal pool, rounds
        drain()  # (which worker runs which trial: said when each started)
        # the pool marks all its futures failed at once; a result that came in first is still a result. Which
        # workers are alive is read before they are killed (a trial of a live worker is not charged an attempt).
        wait(list(running), timeout=30)
        for f, group in list(running.items()):
            if f.done():
                del running[f]
                outcome(f, group)
        _kill_workers(pool)
        for f, group in list(running.items()):
            del running[f]
            if f.done():
                outcome(f, group)
            else:  # (never seen: the broken pool failed every future it held)
                for t in group:
                    settle(t, POOL_DIED, len(group))
        drain()
        pool.shutdown(wait=False, cancel_futures=True)
        rounds.close()
        pool, rounds = start()

    running: dict = {}
    try:
        while todo or running:
            # a trial starts once the trial it starts from is done (or never, if that one failed)
            for t in [t for t in todo if t.weights_from in failed]:
                todo.remove(t)
                fail(t, f"not run: trial {t.weights_from} it starts from failed", 0)
            if unwritable:  # the disk refused a record: the trials not started stay so (resumed once it has room)
                for t in list(todo):
                    todo.remove(t)
                    fail(t, f"not run: a trial before it could not write its record ({unwritable[0]})", 0)
            ready = [t for t in todo if (t.weights_from is None or is_done(records / t.weights_from))
                     and t.key not in in_group]  # a group's later members start with its first
            broken = False
            while ready and len(running) < workers:
                group = take(ready)
                for t in group:
                    todo.remove(t)
                try:
                    if len(group) == 1:
                        running[pool.submit(_local_job, group[0].to_dict(), str(records))] = group
                    else:
                        running[pool.submit(_local_group_job, [t.to_dict() for t in group], str(records))] = group
                except BrokenProcessPool:  # broke before a future said so: this group never started
                    todo[0:0] = group
                    broken = True
                    break
                for t in group:
                    progress.started(t, rounds_of(t))
            if broken:
                renew()
                continue
            if not running:
                break
            finished, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            drain()
            if not finished:
                progress.draw()  # the clock moves on
            for f in finished:
                broken = outcome(f, running.pop(f)) or broken
            if broken:
                renew()
    except (KeyboardInterrupt, plugins.WorkerImportError):
        _kill_workers(pool)  # the trials' records keep their last finished round
        pool.shutdown(wait=False, cancel_futures=True)
        rounds.close()
        progress.close()
        raise
    pool.shutdown()
    rounds.close()
    progress.close()
    return failures


class TuneRestoreHint(logging.Filter):
    """Drops Tune's "Resume experiment with: Tuner.restore(...)" on an interrupted launch: a sweep resumes
    with --resume (its trial records), which its own summary names."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tuner.restore(" not in record.getMessage()


def _member_keys(trial: Any) -> list[str]:
    """The sweep trials a Tune trial (or its result: both hold its config) runs: itself, or a fused group's members."""
    run = trial.config["run"]
    return [d["key"] for d in run["group"]] if "group" in run else [run["trial"]["key"]]


def trial_dirname(trial: Any) -> str:
    """Tune's trial directories named like the trial records (Tune's default spells out the whole config)."""
    return f"{trial.config['run']['trial']['key']}-{trial.trial_id}"


def _attempts(result: Any) -> int:
    """How many times Tune ran a trial that failed for good (its error.txt has one "Failure #" per attempt)."""
    try:
        with result.filesystem.open_input_stream(f"{result.path}/error.txt") as f:
            return max(1, f.read().decode(errors="replace").count("Failure # "))
    except Exception:  # no error file where Tune keeps it: one attempt is all we know of
        return 1


def run_tune(pending: list[Trial], records: StoragePath, out: StoragePath, address: str | None, max_concurrent: int | None,
             max_failures: int, progress: Progress, scheduler: Any = None, metric: str | None = None,
             on_stopped: Any = None, pin_drivers: bool = False, fuse: int = 1, serve: int | None = None
             ) -> tuple[list[dict], bool]:
    """Ray Tune, one launch per phase. Returns (failures, interrupted).
    A search's study (fda_ray.experiments.search) passes a scheduler (ASHA) deciding on `metric`, which the trials report
    each round (rows without it are not reported), and on_stopped(record), called for a trial the scheduler
    stopped before it finished.
    fuse > 1 without a scheduler: trials of one fusion key run as fused groups of up to `fuse`
    (fda_ray.runtime.fusion), each group one Tune trial on one device that reports its members' rounds under their
    own names (fda_ray.experiments.tune.run_fused_group). With a scheduler (which stops single trials) each trial
    stays a Tune trial of its own and sends its clients' training to a fusion server on its node, which fuses the
    rounds waiting there (fda_ray.runtime.fusion_server), shared by up to `serve` trials (default `fuse`; 1: not
    served); a trial's bundle is then its driver's 1/serve share."""
    from ray import tune

    import fda_ray.experiments.tune as ft
    from fda_ray.core import plugins
    from fda_ray.runtime.driver import ensure_ray

    records, out = storage_path(records), storage_path(out)
    ft.keep_working_directory()
    ensure_ray(address, num_cpus=None)
    plugins.check_ray_workers("Tune trial process")  # a node whose workers cannot import a plug-in: before any trial
    tune_log = logging.getLogger("ray.tune.tune")
    if not any(isinstance(f, TuneRestoreHint) for f in tune_log.filters):
        tune_log.addFilter(TuneRestoreHint())
    by_key = {t.key: t for t in pending}
    progress.expect(pending)
    errors_log = tune_errors_log(out)
    settled_early: set[str] = set()  # fused members said done while their group went on

    def done(key: str) -> bool:
        """Whether a trial's record is finished; False while its object store does not answer (an exception in a
        Tune callback would end the launch in Tune's tracebacks: the sweep names the store in one line after it)."""
        try:
            return is_done(records / key)
        except StoreError:
            return False

    class Callback(tune.Callback):
        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            for key in _member_keys(trial):  # (a group run again: its members said done stay done)
                if key not in settled_early:
                    t = by_key[key]
                    progress.started(t, rounds_of(t))

        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            if "group" in trial.config["run"]:
                for key, row in (result.get("members") or {}).items():
                    if row.get(ft.MEMBER_FINISHED):  # done now, not when its group ends
                        if key not in settled_early and done(key):
                            settled_early.add(key)
                            progress.line(by_key[key], "done")
                        continue
                    progress.at_round(key, row)
                return
            progress.at_round(trial.config["run"]["trial"]["key"], result)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            if "group" in trial.config["run"]:
                for key in _member_keys(trial):
                    if key not in settled_early:
                        progress.line(by_key[key], "done" if done(key) else "FAILED")
                return
            key = trial.config["run"]["trial"]["key"]
            if on_stopped is not None and not is_done(records / key):
                complete = on_stopped(records / key)  # the scheduler ended it (maybe on its last round)
                stopped.add(key)
                progress.line(by_key[key], stopped_line(trial.last_result, complete))
                return
            progress.line(by_key[key], "done")

        def settles_launch(self, trial: Any, t: Trial) -> bool:
            """A trial's error that no retry mends, which ends the launch once the running trials finish (one line
            naming the trial): its client actors no live node holds any more (fda_ray.runtime.ray_executor says so:
            a retry would only wait), or its process cannot import a plug-in (a node that joined after the check)."""
            error = ft.last_error_line(ft.error_text(trial))
            if error.startswith("WorkerImportError: "):  # a trial process without the plug-ins (a node that joined
                # after the launch's check, fda_ray.core.plugins.check_ray_workers): retries cannot mend it
                if watch.fatal is None:
                    watch.fatal = error.removeprefix("WorkerImportError: ")
                    progress.note(f"note: {trial_name(t, progress.variable)} failed: {watch.fatal}; the running "
                                  "trials finish, then the sweep ends (no retry: the same import fails again)",
                                  stream=sys.stderr)
                return True
            reason = stranded_in(error)
            if reason is None:
                return False
            watch.adopt(reason)
            if t.key not in cut_off:  # once per trial (Tune's error and recover events both come)
                cut_off.add(t.key)
                progress.note(f"note: {trial_name(t, progress.variable)} cannot go on: {reason}; its last round is "
                              "kept, the running trials finish, then the sweep ends and reports the trials not run "
                              "(resume once the cluster has such a node)", stream=sys.stderr)
            return True

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            if "group" not in trial.config["run"]:
                self.settles_launch(trial, by_key[trial.config["run"]["trial"]["key"]])
            for key in _member_keys(trial):
                if key not in settled_early:
                    progress.line(by_key[key], "done" if done(key) else "FAILED")

        def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            # Tune runs a failing trial again (--max-failures) and says so only in its own traceback dump: one
            # line of ours names the trial and its error, which a sweep stopped before the retries end never states
            t = by_key[trial.config["run"]["trial"]["key"]]
            if self.settles_launch(trial, t):
                return
            attempt = f"attempt {trial.run_metadata.num_failures + 1} of {max_failures + 1}; traceback in {errors_log}"
            members = ft.member_errors(ft.error_text(trial)) if "group" in trial.config["run"] else {}
            n = len(_member_keys(trial))
            for key, line in members.items():  # a fused group: each failed member with its own error
                progress.note(f"note: {trial_name(by_key[key], progress.variable)} (in a fused group of {n}) failed: "
                              f"{line}; Tune runs the group again, its finished members kept ({attempt})",
                              stream=sys.stderr)
            if not members:
                progress.note(f"note: {trial_name(t, progress.variable)}{f' (a fused group of {n})' if n > 1 else ''} "
                              f"failed: {ft.last_error_line(ft.error_text(trial))}; Tune runs it again ({attempt})",
                              stream=sys.stderr)

    failures: list[dict] = []
    stopped: set[str] = set()  # trials the scheduler stopped early: settled, not interrupted
    cut_off: set[str] = set()  # running trials whose client actors no live node holds any more (said once each)
    stranded_reason: str | None = None  # set when a node loss left no live node that holds a trial

    def not_run(t: Trial, reason: str) -> None:
        # a trial that ran before its node was lost keeps its attempts (nodes.json) and its finished rounds: said so
        # (it was "0 attempts", "not run", beside a record of 5 rounds)
        from fda_ray.experiments.records import NODES_FILE, _attempts

        path = records / t.key / NODES_FILE
        attempts = (_attempts(path) or []) if path.is_file() else []
        kept = f"not run again ({len(attempts)} attempt(s) before; its finished rounds are kept)" if attempts \
            else "not run"
        failures.append({"trial": t.key, "row": t.row, "value": t.value, "seed": t.seed, "attempts": len(attempts),
                         "error": f"{kept}: {reason}", "stranded": True})
        progress.line(t, "FAILED (not run: no live node holds it)")

    def waiting_names(waiting: list) -> list[str]:
        """The sweep's trials that Tune trials still pending run (a fused group's members each)."""
        return sorted({trial_name(by_key[k], progress.variable) for w in waiting for k in _member_keys(w)})

    def on_stranded(reason: str, waiting: list) -> None:
        names = waiting_names(waiting)
        shown = "; ".join(names[:4]) + (f"; and {len(names) - 4} more" if len(names) > 4 else "")
        progress.note(f"note: {len(names)} trial(s) cannot start ({shown}): {reason}; the running trials finish, then the "
                      "sweep ends and reports the trials not run (resume once the cluster has such a node)",
                      stream=sys.stderr)

    def on_waiting(line: str, waiting: list) -> None:
        progress.note(f"note: {len(waiting_names(waiting))} trial(s) {line}; they start once it is free", stream=sys.stderr)

    from fda_ray.runtime import fusion_server
    from fda_ray.runtime.fusion import fusion_key, plan_groups

    # each phase in launches: its fused groups (one Tune trial each), then its trials that run alone, as before
    launches: list[tuple[list[Trial], list[list[Trial]]]] = []
    for phase in _phases(pending):
        groups = plan_groups(phase, fuse if scheduler is None else 1)
        fused = [g for g in groups if len(g) > 1]
        alone = [g[0] for g in groups if len(g) == 1]
        launches += [(p, f) for p, f in ((sum(fused, []), fused), (alone, [])) if p]
    # served: a scheduler's single trials, each sending its clients' training to a fusion server (started once)
    serve = fuse if serve is None else serve
    served = serve > 1 and scheduler is not None and all(fusion_key(t) is not None for t in pending)
    with fusion_server.serving(pending[0].config().resolved() if served else None) as servers:  # (stopped after)
        for phase, fused in launches:
            phase = [t for t in phase if t.weights_from is None or is_done(records / t.weights_from)]
            if not phase:
                continue
            if stranded_reason is not None:  # an earlier launch found no node for these bundles: do not wait again
                for t in phase:
                    not_run(t, stranded_reason)
                continue
            launch = ft.next_launch(out)
            if fused:
                space = [{"trial": g[0].to_dict(), ft.RECORD_KEY: str(records), "group": [t.to_dict() for t in g]}
                         for g in fused if any(t in phase for t in g)]
                group = ft.group_resources(phase[0].config().resolved(), ft.driver_placement(pin_drivers))
            else:
                space = [{"trial": t.to_dict(), ft.RECORD_KEY: str(records), **({"metric": metric} if metric else {}),
                          **({"served": servers} if servers else {})} for t in phase]
                # every trial of a sweep asks the same resources: one placement group, watched for a node loss
                group = (ft.served_resources(phase[0].config().resolved(), serve, ft.driver_placement(pin_drivers))
                         if servers else ft.resources(phase[0].config().resolved(), ft.driver_placement(pin_drivers)))
            served_cluster = fusion_server.served_watch(phase[0].config().resolved()) if servers and not fused else {}
            watch = StrandedWatch(group.bundles, **served_cluster)
            watch_callback, watch_stopper = stranded_tune_parts(watch, on_stranded, on_waiting)
            tuner = tune.Tuner(
                tune.with_resources(ft.trainable, group),
                param_space={"run": tune.grid_search(space)},
                # reuse_actors: a trial's process (torch imported, kernels loaded) runs the next trial too.
                tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent, reuse_actors=True,
                                            trial_dirname_creator=trial_dirname, scheduler=scheduler),
                # Tune's own storage beside the records, on the same storage: a path every node sees or a URI
                # (Tune on several nodes requires one; Ray builds the filesystem from the URI, as StoragePath does).
                run_config=tune.RunConfig(name=launch, storage_path=str(out / "tune"), verbose=0,
                                          failure_config=tune.FailureConfig(max_failures=max_failures),
                                          callbacks=[Callback(), watch_callback], stop=watch_stopper))
            # (Tune reads and writes its state on the store itself: a store that stops answering ends the fit in
            # pyarrow's bare OSError, named here as the store's, which the sweep turns into one line)
            with interrupts.graceful(), tune_errors_to(errors_log), \
                    contextlib.nullcontext() if out.is_local else asking(str(out / "tune"), "keep Tune's state in"):
                grid = tuner.fit()  # SIGTERM stops the launch as Tune's Ctrl-C does
            for result in grid:
                if result.error is not None:
                    grouped = "group" in result.config["run"]
                    members = ft.member_errors(str(result.error)) if grouped else {}
                    for key in _member_keys(result):
                        if grouped and is_done(records / key):
                            continue  # the group failed for another member
                        t = by_key[key]
                        failures.append({"trial": t.key, "row": t.row, "value": t.value, "seed": t.seed,
                                         "attempts": _attempts(result),
                                         "error": members.get(key) or ft.last_error_line(str(result.error)),
                                         "log": errors_log})
            failed = {f["trial"] for f in failures}
            if watch.fatal is not None:  # a trial process could not import a plug-in: the others not run, with why
                for t in phase:
                    if not is_done(records / t.key) and t.key not in failed | stopped:
                        failures.append({"trial": t.key, "row": t.row, "value": t.value, "seed": t.seed, "attempts": 0,
                                         "error": f"not run: {watch.fatal}"})
                failed = {f["trial"] for f in failures}
            if watch.reason is not None:  # the launch ended for want of a node: its trials not run fail, with why
                stranded_reason = watch.reason
                for t in phase:
                    if not is_done(records / t.key) and t.key not in failed | stopped:
                        not_run(t, stranded_reason)
                failed = {f["trial"] for f in failures}
            # Tune stops on SIGINT and returns: trials neither done nor failed mean the sweep was interrupted
            if any(not is_done(records / t.key) and t.key not in failed | stopped for t in phase):
                progress.close()
                return failures, True
    progress.close()
    return failures, False


# The strerror of the write failures a trial's error can carry (fda_ray.core.interrupts.WRITE_ERRNOS' commonest).
WRITE_REFUSALS = ("No space left on device", "Disk quota exceeded", "Read-only file system", "File too large")
# What PyTorch's errors say when a GPU's memory ran out (torch.OutOfMemoryError's message, a CUDA runtime error).
GPU_MEMORY_ERRORS = ("CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory")


def failure_advice(failures: list[dict], done: int, records: str, command: str) -> list[str]:
    """One line for each kind of failure that is not the method's (the disk, a node lost, a GPU's memory), naming
    what to do and the command that resumes: the finished trials are kept."""
    lines = []
    refused = [f for f in failures if any(why in f.get("error", "") for why in WRITE_REFUSALS)]
    if refused:  # the disk, not the method: say so once, with what to do
        why = next(w for w in WRITE_REFUSALS if w in refused[0]["error"])
        lines.append(f"error: {len(refused)} trial(s) could not write their records ({why}, under {records}); the "
                     f"{done} finished trials are kept: free the space, then resume with: {command} --resume")
    not_run = [f for f in failures if f.get("stranded") or stranded_in(f.get("error")) and f not in refused]
    if not_run:  # a node loss, not the method: say so once, naming the trials, with what to do
        why = stranded_in(not_run[0]["error"]) or not_run[0]["error"].removeprefix("not run: ")
        lines.append(f"error: {len(not_run)} trial(s) did not run ({_names(not_run)}): {why}; the {done} finished "
                     "trials are kept (a cut-off trial's last round too): bring back a node that holds a trial, then "
                     f"resume with: {command} --resume")
    oom = [f for f in failures if any(why in f.get("error", "") for why in GPU_MEMORY_ERRORS)]
    if oom:  # the trials beside each other on a GPU, not the method: fewer at once
        lines.append(f"error: {len(oom)} trial(s) ran out of GPU memory; the {done} finished trials are kept: run "
                     "fewer trials at once on a GPU (a lower --workers with the local backend; with Tune a larger "
                     f"--gpus-per-client or a lower --max-concurrent), then resume with: {command} --resume")
    said = {id(f) for f in refused + not_run + oom}
    rest = [f for f in failures if id(f) not in said]
    if rest:  # the method's or the trial's own errors: which trials, the first error, where the tracebacks are
        names = _names(rest)
        logs = sorted({f["log"] for f in rest if f.get("log")})
        lines.append(f"error: {len(rest)} trial(s) failed: {names} (first: {rest[0].get('error', 'an error')}); "
                     f"each one's error is in summary.md"
                     + (f", the tracebacks in {', '.join(logs)}" if logs else "")
                     + f"; the {done} finished trials are kept; resume with: {command} --resume")
    return lines


def _names(failures: list[dict], most: int = 4) -> str:
    return "; ".join(failed_name(f) for f in failures[:most]) + (
        f"; and {len(failures) - most} more" if len(failures) > most else "")


def failed_name(f: dict) -> str:
    """A failed trial as the progress lines name it: row, value, seed."""
    at = "every value" if f.get("value") is None else f"{f['value']:g}"
    return f"{f.get('row')} at {at}, seed {f.get('seed')}"


def write_parquet(rows: list[dict], path: StoragePath | Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(dict.fromkeys(k for r in rows for k in r))
    cols = {}
    for k in keys:
        vals = [r.get(k) for r in rows]
        # JSON text where one Parquet type cannot hold the column: mappings, or lists beside strings or numbers
        # (a metric that is a number in one trial and a list in another: FSSDA's one and two source domains)
        lists = any(isinstance(v, list) for v in vals)
        if any(isinstance(v, (dict, tuple)) for v in vals) or (
                lists and any(v is not None and not isinstance(v, list) for v in vals)):
            vals = [json.dumps(v) if v is not None else None for v in vals]
        cols[k] = vals
    buf = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pydict(cols), buf)
    storage_path(path).write_bytes(buf.getvalue().to_pybytes())  # atomic, locally or on an object store
