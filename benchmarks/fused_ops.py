"""Operators a trial-step dispatches, fused and unfused, and a round's time side by side (issue 62).

    python -m benchmarks.fused_ops                         # the README's main job's trials (quick noise grid)
    python -m benchmarks.fused_ops --trials 8 --json out.json

On a GPU every operator is at least one kernel launch (a few microseconds of host time each), so the number of
operators a step dispatches predicts a small network's launch-bound step time on a machine without a GPU. One
main round of T trials of the grid (FedGP, FedDA, their auto-weighted rows, at the grid's noise levels and seeds)
runs through fda_ray.train.cohort.run_jobs:

    unfused     each trial's round alone (its sources as one vectorised cohort, its target alone); "one trial" is
                their mean (the grid's rows differ: the auto-weighted rows' targets train at batch 4)
    fused       the T trials' rounds as one group (fda_ray.runtime.fusion): every source of every trial one cohort,
                every target another

The convolutions' own time in each (torch.profiler's self time of the ATen convolution operators, forward and
backward: the arithmetic fusing leaves as it is on a CPU, where every layout runs each row's convolutions) bounds what
fusing can save there: a fused round takes at least its convolutions' time, so its speed-up over the T rounds one
after another is at most their seconds over the fused round's convolution seconds ("bound").

Counted with torch.profiler (every event, nested ones included) and with
a TorchDispatchMode (the ATen operators below autograd: the kernels a device runs), per trial-step: a round's
operators divided by its source steps, and per trial. Each convolution layout is counted (`grouped`, the GPU's;
`per_model`, the CPU's: fda_ray.train.models.conv_layout). The round's seconds (unfused T rounds one after the other
against one fused round) are measured side by side in this process, best of --repeats.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import checked_args


def _trials(n: int, samples: int, data_dir: str | None, device: str = "cpu") -> list[Any]:
    from fda_ray.experiments.trials import plan
    from fda_ray.papers.grids import GRIDS

    over = {"samples_per_client": samples, "device": device, **({"data_dir": data_dir} if data_dir else {})}
    trials = [t for t in plan(GRIDS["noise"], "quick", overrides=over)
              if t.row in ("fedda", "fedgp", "fedda_auto", "fedgp_auto")]
    return trials[:n]


def _round_jobs(exps: list[Any]) -> list[list[Any]]:
    """Each experiment's jobs of its first main round (sources and target train), from its initial weights."""
    from fda_ray.train.cohort import Job

    out = []
    for exp in exps:
        state = exp.algorithm.init_state(exp.initial_weights())
        r = exp.cfg.warmup_rounds
        tasks = exp.algorithm.plan_round(r, state).tasks
        out.append([Job(exp.clients[t.client], t, (lambda t=t, s=state: {n: s[n] for n in t.inputs})) for t in tasks])
    return out


def _count(fn: Any) -> tuple[int, int]:
    """(profiler events, ATen operators below autograd) of one call of fn."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    events = len(prof.events())
    with Count():
        fn()
    return events, Count.n


def conv_seconds(fn: Any) -> float:
    """The seconds one call of fn spends in ATen's convolution operators (their self time: the kernels, forward and
    backward), by torch.profiler."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.self_cpu_time_total for e in prof.key_averages() if "convolution" in e.key) / 1e6


def measure(n_trials: int, samples: int, repeats: int, data_dir: str | None, device: str = "cpu") -> dict[str, Any]:
    import torch

    from fda_ray.runtime.experiment import build_experiment
    from fda_ray.train.cohort import run_jobs

    trials = _trials(n_trials, samples, data_dir, device)
    exps = [build_experiment(t.config().resolved()) for t in trials]
    steps = exps[0].clients[0].steps_per_epoch(exps[0].cfg.batch_source)  # a source's steps in a round
    result: dict[str, Any] = {"trials": [t.key for t in trials], "source_steps": steps, "device": device,
                              "clients_per_trial": len(exps[0].clients), "layouts": {}}
    for layout in ("grouped", "per_model"):
        os.environ["FDA_RAY_CONV_LAYOUT"] = layout
        jobs = _round_jobs(exps)
        each = [_count(lambda js=js: run_jobs(js, vectorise=True)) for js in jobs]  # every trial's round alone
        unfused = (statistics.fmean(e for e, _ in each), statistics.fmean(a for _, a in each))  # the mean trial
        fused = _count(lambda: run_jobs([j for js in jobs for j in js], vectorise=True))  # the T trials' round
        times: dict[str, list[float]] = {"unfused": [], "fused": []}
        # (each run ends with the results copied to the CPU: a GPU's work is done when it returns)
        for _ in range(repeats):
            t0 = time.perf_counter()
            for js in jobs:
                run_jobs(js, vectorise=True)
            times["unfused"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            run_jobs([j for js in jobs for j in js], vectorise=True)
            times["fused"].append(time.perf_counter() - t0)
        conv = {"unfused": sum(conv_seconds(lambda js=js: run_jobs(js, vectorise=True)) for js in jobs),
                "fused": conv_seconds(lambda: run_jobs([j for js in jobs for j in js], vectorise=True))}
        result["layouts"][layout] = {
            "conv_seconds_unfused": conv["unfused"], "conv_seconds_fused": conv["fused"],
            "unfused_events_per_step": unfused[0] / steps, "unfused_aten_per_step": unfused[1] / steps,
            "fused_events_per_step": fused[0] / steps, "fused_aten_per_step": fused[1] / steps,
            "round_seconds_unfused": min(times["unfused"]), "round_seconds_fused": min(times["fused"]),
            "round_seconds_unfused_all": times["unfused"], "round_seconds_fused_all": times["fused"]}
    os.environ.pop("FDA_RAY_CONV_LAYOUT", None)
    result["threads"] = torch.get_num_threads()
    return result


def table(r: dict[str, Any]) -> str:
    t = len(r["trials"])
    lines = [f"| layout | one trial's step: events / ATen ops | {t} trials fused, a step: events / ATen ops | "
             f"fused over one trial (ATen) | per trial fused (ATen) | round, {t} trials one after another (s) | "
             f"round, fused (s) | speed-up | convolutions in the fused round (s) | bound |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in r["layouts"].items():
        conv = m.get("conv_seconds_fused")  # (a result from before the column: -)
        lines.append(f"| {name} | {m['unfused_events_per_step']:.0f} / {m['unfused_aten_per_step']:.0f} | "
                     f"{m['fused_events_per_step']:.0f} / {m['fused_aten_per_step']:.0f} | "
                     f"{m['fused_aten_per_step'] / m['unfused_aten_per_step']:.2f}x | "
                     f"{m['fused_aten_per_step'] / t:.0f} | {m['round_seconds_unfused']:.2f} | "
                     f"{m['round_seconds_fused']:.2f} | "
                     f"{m['round_seconds_unfused'] / m['round_seconds_fused']:.2f}x | "
                     + (f"{conv:.2f} | {bound(m):.2f}x |" if conv else "- | - |"))
    return "\n".join(lines)


def bound(m: dict[str, Any]) -> float:
    """The most a fused round can gain over one layout's T rounds one after another, its convolutions' time left as
    it is (the module docstring): their seconds over the fused round's convolution seconds."""
    return m["round_seconds_unfused"] / m["conv_seconds_fused"]


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmarks.fused_ops` (tests/test_lease_scripts.py parses the GPU lease's);
    a bad value or an unknown flag is one line, exit 2 (fda_ray.core.parsing, as the other benchmarks)."""
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.fused_ops", description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=typed("trials", int, "an integer"), default=8,
                   help="trials fused (the grid's FDA rows, in plan order)")
    p.add_argument("--samples", type=typed("samples", int, "an integer"), default=6000,
                   help="samples per client (the main job's: 6000, 93 steps a round; a round's own operators spread "
                        "over its steps)")
    p.add_argument("--repeats", type=typed("repeats", int, "an integer"), default=3)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--device", default="cpu", help="cpu, or cuda: the trials' device")
    p.add_argument("--json", default=None)
    return p


def invalid(a: argparse.Namespace) -> str | None:
    """The error line for parsed arguments main refuses before it measures anything (None: none)."""
    for field, least in (("trials", 1), ("samples", 64), ("repeats", 1)):
        if getattr(a, field) < least:
            return f"error: {field}={getattr(a, field)!r} is invalid: an integer >= {least}"
    return None


def main(argv: list[str] | None = None) -> int:
    a = checked_args(parser(), invalid, sys.argv[1:] if argv is None else list(argv))
    if isinstance(a, int):
        return a
    import torch

    torch.set_num_threads(1)  # the trials' own setting (threads=1)
    r = measure(a.trials, a.samples, a.repeats, a.data_dir, a.device)
    import platform

    where = torch.cuda.get_device_name(0) if a.device.startswith("cuda") else \
        f"{platform.processor() or platform.machine()}, 1 thread"
    print(f"noise quick, {len(r['trials'])} trials x {r['clients_per_trial']} clients, {r['source_steps']} source "
          f"steps a round; torch {torch.__version__}, {where}\n")
    print(table(r))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        r["command"] = "python -m benchmarks.fused_ops " + " ".join(argv if argv is not None else sys.argv[1:])
        r["torch"] = torch.__version__
        Path(a.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
