"""The round loop, the same for every algorithm and executor (docs/design.md, "The flow of one trial"):

    plan = algorithm.plan_round(r, state)          None ends the run
    results = executor.collect(executor.submit(state, plan.tasks))
    state, metrics = algorithm.aggregate(r, state, results)
    while algorithm.plan_step(r, step, state) gives more tasks: run them, algorithm.aggregate_step(...)
    (round r + 1 is planned and submitted here: a parallel executor trains while the driver evaluates)
    row = {round, phase, metrics, algorithm.evaluate(r, state, evaluator), timings}
    callbacks: progress(row), checkpoint({"next_round", "state", "rows", "client_states"})

Every draw is seeded by (seed, round, client, purpose), so a resumed run gives the numbers of an
uninterrupted one, and every executor the numbers of the serial one.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import torch

from fda_ray.core.contract import ClientResult
from fda_ray.train.evaluation import Evaluator
from fda_ray.runtime.executors import Executor
from fda_ray.runtime.experiment import Experiment
from fda_ray.core.interrupts import error_line
from fda_ray.runtime.failures import ClientFailure, RunFailed, RunInterrupted
from fda_ray.runtime.startup import Startup
from fda_ray.core.history import History


def clone_state(state: dict[str, torch.Tensor], device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """A copy of the server state (on `device` if given: checkpoints are kept on the CPU, so a run trained on a
    GPU resumes, or is read, on a machine without one)."""
    return {k: v.to(device, copy=True) if device is not None else v.clone() for k, v in state.items()}


def on_device(res: ClientResult, device: torch.device) -> ClientResult:
    """A client's result with its tensors on the driver's device. Clients send CPU tensors (they travel through
    Ray's object store); the server half aggregates where the server state lives, the GPU when --device cuda
    (the CUDA projection kernel), so each round's deltas cross to the device once, here."""
    if all(t.device == device for t in res.tensors.values()):
        return res
    return replace(res, tensors={k: t.to(device) for k, t in res.tensors.items()})


def plain(value: Any) -> Any:
    """`value` with numpy scalars as Python numbers, in dicts and lists too. A round's row goes into the trial's
    checkpoint, which --resume and a search's stopped trials load with torch.load(weights_only=True): that
    refuses numpy scalars (an algorithm's metric computed with numpy would make its trials unresumable)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value.item() if isinstance(value, np.generic) else value


def logged(method: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """A round's logged numbers as `aggregate` returned them, with a 0-d tensor (`t.norm()` without float()) as
    its Python number, in lists too: left a tensor it would be stored as the string "tensor(0.73)" in a sweep's
    records, or fail --json and --parquet after the run. A tensor of more numbers is refused in one line naming the
    method and the key (ValueError: the round stops, as for the server step's other refusals)."""
    def number(key: str, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if v.ndim == 0:
                return v.item()
            raise ValueError(f"method {method!r} logged {key}= a tensor of shape {tuple(v.shape)}: the logged values "
                             "of aggregate are numbers (float(t) of a 0-d tensor), or lists of them")
        if isinstance(v, list):
            return [number(key, x) for x in v]
        if isinstance(v, tuple):
            return tuple(number(key, x) for x in v)
        return v

    return {k: number(k, v) for k, v in metrics.items()}


def run_rounds(exp: Experiment, executor: Executor, progress: Callable[[dict], None] | None = None,
               resume: dict | None = None, checkpoint: Callable[[dict], None] | None = None,
               startup: Startup | None = None) -> History:
    """Every round of one run, from round 0 or from `resume`.

    checkpoint(state) is called after every round with what `resume` needs to go on from there:
    {"next_round", "state" (the server state), "rows", "client_states"} ("client_states" may be None in a
    `resume`: the clients keep the states they have). If a client fails for good (ClientFailure), or the
    algorithm refuses a round's numbers (ValueError: a diverged client), raises RunFailed carrying the
    finished rounds' History; Ctrl-C (KeyboardInterrupt, or SIGTERM inside a command: fda_ray.core.interrupts)
    raises RunInterrupted, carrying them too.
    `startup` (fda_ray.runtime.startup): the phases so far; the first round's are added, and the History keeps
    them all (History.startup).
    """
    hist = History(config=exp.cfg.to_dict())
    startup = startup if startup is not None else Startup()
    hist.startup = startup.seconds
    t0 = time.perf_counter()
    try:
        return _rounds(exp, executor, hist, progress, resume, checkpoint, startup)
    except KeyboardInterrupt:
        hist.seconds = time.perf_counter() - t0
        from fda_ray.core.interrupts import stop_reason

        raise RunInterrupted(f"stopped by {stop_reason()} after {len(hist.rows)} finished rounds", hist) from None
    except _Callers as e:  # the caller's own callbacks raised: theirs, as raised (diagnose stops a run this way)
        raise e.error from e.error.__cause__
    except Exception as e:
        if isinstance(e, RunFailed) or _infrastructure(e):
            raise
        # A method's, recipe's or rule's own error once the rounds have begun (a plug-in's, say): a failure
        # during the work, with the finished rounds kept (the command lines exit 1), not bad input.
        hist.seconds = time.perf_counter() - t0
        r = hist.rows[-1]["round"] + 1 if hist.rows else int(resume["next_round"]) if resume is not None else 0
        raise RunFailed(f"run stopped in round {r}: {error_line(e)}; {len(hist.rows)} finished rounds kept",
                        hist) from e


def _refusal(e: ValueError) -> str:
    """A server step's ValueError in one line: fda-ray's own refusals (a rule or an estimator meeting a diverged
    client's non-finite numbers) as they are worded; a plug-in's with its class and where it was raised, as any other
    error of a method (error_line)."""
    import traceback
    from pathlib import Path

    frames = traceback.extract_tb(e.__traceback__)
    package = Path(__file__).resolve().parents[1]  # fda_ray/
    ours = bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(package)
    return str(e) if ours else error_line(e)


class _Callers(Exception):
    """An exception that run_rounds' caller's callbacks (progress, checkpoint) raised, carried out of the loop as it
    was raised: only the method's own errors become a RunFailed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _call(callback: Callable[[dict], None], arg: dict) -> None:
    try:
        callback(arg)
    except Exception as e:
        raise _Callers(e) from e


def _infrastructure(e: BaseException) -> bool:
    """Errors that are the machine's or Ray's, not the method's: they keep their own type for the handlers that
    explain them (a refused write: fda_ray.core.interrupts.write_failure; a lost raylet or node: node_watch)."""
    from fda_ray.core.interrupts import write_failure

    return write_failure(e) is not None or isinstance(e, ConnectionError) or \
        type(e).__module__.split(".")[0] == "ray"


def _rounds(exp: Experiment, executor: Executor, hist: History, progress: Callable[[dict], None] | None,
            resume: dict | None, checkpoint: Callable[[dict], None] | None, startup: Startup) -> History:
    """run_rounds' loop; it fills `hist` as rounds finish."""
    from fda_ray.kernels import loader

    algo = exp.algorithm
    first, kernels_before = True, loader.seconds()
    t0 = time.perf_counter()
    r = 0
    initial = exp.initial_weights()  # (M,) on the driver's device (cfg.device)
    device = initial.device
    state = algo.init_state(initial)
    if resume is not None:
        r = int(resume["next_round"])
        # "flat": a checkpoint written before the algorithm contract (the FDA family's global model)
        state = (clone_state(resume["state"], device) if "state" in resume
                 else {"global": resume["flat"].to(device, copy=True)})
        hist.rows = [dict(row) for row in resume["rows"] if row["round"] < r]
        if resume.get("client_states") is not None:
            executor.restore_states([dict(st) for st in resume["client_states"]])
    hist.final_weights = algo.final_weights(state)
    evaluator = Evaluator(exp, executor.client_state)

    def stop(why: str) -> RunFailed:
        hist.seconds = time.perf_counter() - t0
        return RunFailed(f"run stopped in round {r}: {why}; {len(hist.rows)} finished rounds kept", hist)

    plan = algo.plan_round(r, state)
    pending = executor.submit(state, plan.tasks) if plan is not None else None
    tr = time.perf_counter()
    while plan is not None:
        try:
            results = {res.client: on_device(res, device) for res in executor.collect(pending)}
        except ClientFailure as e:
            raise stop(str(e)) from e
        t_collected = time.perf_counter()
        try:  # the rules and estimators refuse non-finite deltas or estimates (a diverged client)
            state, metrics = algo.aggregate(r, state, results)
            metrics = logged(exp.cfg.method, metrics)
        except ValueError as e:
            raise stop(_refusal(e)) from e
        # Later steps of the same round, each needing the state the step before it made (Healthcare FDA's online
        # fine-tuning: the target fine-tunes this round's FedAvg); their clients' times count in the round's.
        step, seconds = 1, [res.seconds for res in results.values()]
        while (follow := algo.plan_step(r, step, state)) is not None:
            t_wait = time.perf_counter()
            try:
                more = {res.client: on_device(res, device)
                        for res in executor.collect(executor.submit(state, follow.tasks))}
            except ClientFailure as e:
                raise stop(str(e)) from e
            t_collected += time.perf_counter() - t_wait  # waiting for clients is not the driver's own work
            try:
                state, extra = algo.aggregate_step(r, step, state, more)
                extra = logged(exp.cfg.method, extra)
            except ValueError as e:
                raise stop(_refusal(e)) from e
            metrics.update(extra)
            seconds += [res.seconds for res in more.values()]
            for i, res in more.items():  # a client's seconds in the round: all of its steps
                results[i] = replace(res, seconds=res.seconds + (results[i].seconds if i in results else 0.0))
            step += 1
        next_plan = algo.plan_round(r + 1, state)
        if next_plan is not None:  # the clients start the next round while this one is evaluated
            pending = executor.submit(state, next_plan.tasks)
        t_eval = time.perf_counter()
        row = {"round": r, "phase": plan.phase, **metrics, **algo.evaluate(r, state, evaluator)}
        if first:  # the start-up's last phases: the first round's parts (fda_ray.runtime.startup)
            first = False
            startup.add("first_collect", t_collected - tr)  # (with the waits of later steps)
            startup.add("first_aggregation", t_eval - t_collected)
            startup.add("first_evaluation", time.perf_counter() - t_eval)
            startup.add("kernel_load", loader.seconds() - kernels_before)
        if not math.isfinite(row["loss"]):
            raise stop(f"the evaluated model's test loss is {row['loss']} (non-finite weights or outputs); try a "
                       "lower learning rate")
        if results:
            row["client_seconds_max"] = max(res.seconds for res in results.values())  # the slowest client
            row["client_seconds_sum"] = sum(seconds)
        row["client_seconds_i"] = [results[i].seconds if i in results else 0.0 for i in range(len(exp.clients))]
        # The driver's own work: aggregation, planning, submission and evaluation.
        row["driver_seconds"] = time.perf_counter() - t_collected
        now = time.perf_counter()
        row["seconds"] = now - tr
        tr = now
        row = plain(row)  # what progress, the History and the checkpoint see alike
        hist.rows.append(row)
        hist.final_weights = algo.final_weights(state)
        if progress:
            _call(progress, row)
        if checkpoint:
            _call(checkpoint, {"next_round": r + 1, "state": clone_state(state, "cpu"),
                               "rows": [dict(x) for x in hist.rows], "client_states": executor.client_states()})
        plan, r = next_plan, r + 1
    hist.seconds = time.perf_counter() - t0
    return hist
