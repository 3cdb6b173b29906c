"""Sweep benchmark: one grid column through both backends (the local process pool and Ray Tune) on the device at hand.

    python -m benchmarks.sweep                                     # Table 10's noise-0.4 column, quick profile, 1 seed
    python -m benchmarks.sweep --profile paper --device cuda      # a GPU machine: the paper's column
    python -m benchmarks.sweep --json out.json -- --rounds 5      # flags after -- go to both sweeps

Each backend runs `python -m fda_ray.sweep` in a fresh process (its own Ray) into a temporary --out, measured from
outside and from its trial records:

    wall            the sweep process's seconds, Ray's start included; `x local` is over the local backend's
    trials at once  the most trials running at one time (each record's started_at / finished_at) and the mean
                    (the trials' seconds over the wall)
    GPU busy        the mean of nvidia-smi's utilization.gpu, sampled once a second while the sweep ran ("not
                    measured" without nvidia-smi)
    GPU memory      the most device memory in use (nvidia-smi's memory.used, every process on the GPU: CUDA contexts
                    and the allocators' caches included) at any sample: what a smaller GPU would have to hold
    a trial's GPU memory  the median over trials of what each trial's processes reserved at most (its record's
                    gpu_memory: PyTorch's allocators, the CUDA contexts aside)
    first round     per trial, the start-up phases up to its first row (fda_ray.runtime.startup): the median and the
                    slowest trial, and each phase's median

Five backends: `local`, `tune` (each trial's clients in the trial's own process), `tune-actors` (the clients as
Ray actors in the trial's placement group), and the fused ones (fda_ray.runtime.fusion, --fuse auto): `local-fused`
(a group per worker process) and `tune-fused` (a group per Tune trial). For the fused ones `trials at once` counts
the trials running at one time (a group's members run together). On a GPU (--device cuda) the local pool runs --workers trials at once
with --device cuda, `tune` runs its trials with --device cuda, and `tune-actors` at --gpus-per-client (the command
docs/ray-and-clusters.md gives); on the CPU `tune-actors` adds --executor ray. --local-args, --tune-args and
--actor-args replace a backend's own flags. The JSON output (--json FILE) names the machine, torch and Ray; the
committed ones are in docs/results/bench-sweep/. A backend that fails or is interrupted (Ctrl-C, a time limit's
SIGINT) ends the benchmark with exit code 1, the backends measured before it printed and written.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import checked_args
from fda_ray.runtime.startup import PHASES

BACKENDS = ("local", "tune", "tune-actors", "local-fused", "tune-fused")  # tune-actors: the clients as Ray actors


class GpuSampler:
    """nvidia-smi's utilization.gpu and memory.used once a second, and `nvidia-smi dmon -s u`'s `sm` column (the
    streaming multiprocessors' activity: utilization.gpu only says that some kernel ran), in threads, while a sweep
    runs (nothing without nvidia-smi)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.memory_mib: list[float] = []
        self.sm: list[float] = []
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> "GpuSampler":
        smi = shutil.which("nvidia-smi")
        if smi:
            for cmd, read in (([smi, "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-l",
                                "1"], self.add), ([smi, "dmon", "-s", "u", "-d", "1"], self.add_dmon)):
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                th = threading.Thread(target=self._read, args=(proc, read), daemon=True)
                th.start()
                self.procs.append(proc)
                self.threads.append(th)
        return self

    @staticmethod
    def _read(proc: subprocess.Popen, read: Any) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            read(line)

    def add_dmon(self, line: str) -> None:
        """One line of `nvidia-smi dmon -s u`: '# gpu sm mem enc dec ...' headers, then 'gpu sm mem ...' values."""
        parts = line.split()
        if not parts or parts[0].startswith("#") or len(parts) < 2:
            return
        try:
            self.sm.append(float(parts[1]))
        except ValueError:  # "-": not reported
            return

    def add(self, line: str) -> None:
        """One line of nvidia-smi's output: 'busy %, memory MiB' (a line per GPU; the run uses one)."""
        try:
            busy, memory = (float(v) for v in line.strip().split(","))
        except ValueError:  # a warning or a GPU without the field ([N/A])
            return
        self.samples.append(busy)
        self.memory_mib.append(memory)

    def __exit__(self, *exc: Any) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait()
        for th in self.threads:
            th.join(timeout=5)

    def busy(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None

    def sm_active(self) -> float | None:
        return statistics.fmean(self.sm) if self.sm else None

    def memory_peak_gib(self) -> float | None:
        return max(self.memory_mib) / 1024 if self.memory_mib else None


def at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one time."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    best = now = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def first_round_seconds(startup: dict[str, float]) -> float:
    """A trial's seconds from its start to its first row: its phases, kernel_load aside (it lies inside another)."""
    return sum(v for k, v in startup.items() if k != "kernel_load")


def read_trials(out: Path) -> list[dict[str, Any]]:
    """Each finished trial's start, end and start-up phases, from its record."""
    found = []
    for rows in sorted((out / "trials").glob("*/rows.json")):
        data = json.loads(rows.read_text())
        nodes = data.get("nodes") or []
        started = nodes[-1].get("started_at") if nodes else None
        if started is None or data.get("finished_at") is None:
            continue
        found.append({"key": rows.parent.name, "started_at": started, "finished_at": data["finished_at"],
                      "startup": data.get("startup") or {}, "gpu_memory": data.get("gpu_memory")})
    return found


def trial_gpu_memory_gib(record: dict[str, Any] | None) -> float | None:
    """One trial's GPU memory from its record's "gpu_memory" (fda_ray.experiments.trials.GpuMemory): the most its
    processes' allocators reserved, the trial's own process and its client actors together, in GiB (the CUDA
    contexts aside); None for a trial without GPU memory recorded."""
    if not record:
        return None
    return (record["process"]["peak_reserved"] + sum(a["peak_reserved"] for a in record.get("actors", []))) / 2**30


def _summary(stdout: str) -> dict[str, Any]:
    """The sweep's --json summary (the last JSON object it printed)."""
    at = stdout.rfind("\n{")
    at = at + 1 if at >= 0 else stdout.find("{")
    return json.JSONDecoder().raw_decode(stdout[at:])[0]


def sweep_command(backend: str, a: argparse.Namespace, flags: list[str], extra: list[str], out: Path) -> list[str]:
    """The `python -m fda_ray.sweep` command line (sys.executable first) one backend runs: `flags` are the
    backend's own (backend_flags), `extra` the ones after --. (tests/test_lease_scripts.py dry-runs it.)"""
    values = [] if a.values == "all" else ["--values", a.values]
    seeds = [] if a.seeds == 0 else ["--seeds", str(a.seeds)]
    return [sys.executable, "-m", "fda_ray.sweep", "--grid", a.grid, "--profile", a.profile, *values, *seeds,
            "--backend", backend.split("-")[0], "--out", str(out), "--json", "--no-figures", "--track", "none",
            *(["--methods", a.methods] if a.methods else []), *(["--data-dir", a.data_dir] if a.data_dir else []),
            *flags, *extra]


def run_backend(backend: str, a: argparse.Namespace, flags: list[str], extra: list[str], out: Path) -> dict[str, Any]:
    cmd = sweep_command(backend, a, flags, extra, out)
    t0 = time.perf_counter()
    with GpuSampler() as gpu:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{backend}: the sweep exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    summary = _summary(proc.stdout)
    trials = read_trials(out)
    spans = [(t["started_at"], t["finished_at"]) for t in trials]
    firsts = [first_round_seconds(t["startup"]) for t in trials]
    phases = {p: statistics.median([t["startup"].get(p, 0.0) for t in trials]) for p in PHASES
              if any(p in t["startup"] for t in trials)}
    busy = sum(e - s for s, e in spans)
    memory = [m for m in (trial_gpu_memory_gib(t["gpu_memory"]) for t in trials) if m is not None]
    return {"backend": backend, "command": " ".join(shlex.quote(x) for x in ["python", *cmd[1:]]).replace(
                str(out), "OUT"),
            "trials": len(trials), "wall_seconds": wall, "sweep_wall_seconds": summary.get("wall_seconds"),
            "trials_at_once_max": at_once(spans), "trials_at_once_mean": busy / wall if wall else None,
            "trial_seconds_median": statistics.median([e - s for s, e in spans]) if spans else None,
            "gpu_busy_percent": gpu.busy(), "gpu_sm_percent": gpu.sm_active(), "gpu_memory_peak_gib": gpu.memory_peak_gib(), "gpu_samples": len(gpu.samples),
            "trial_gpu_memory_gib_median": statistics.median(memory) if memory else None,
            "first_round_seconds_median": statistics.median(firsts) if firsts else None,
            "first_round_seconds_max": max(firsts) if firsts else None, "phases_median_seconds": phases}


class _kept:
    """--keep's folder, in place of a temporary one."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> str:
        Path(self.path).mkdir(parents=True, exist_ok=True)
        return self.path

    def __exit__(self, *exc: Any) -> None:
        pass


def machine() -> dict[str, Any]:
    import ray
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "cpus": cpus,
            "cpu": platform.processor() or platform.machine(), "gpu": gpu, "torch": torch.__version__,
            "ray": ray.__version__, "python": platform.python_version()}


def _num(v: Any, fmt: str) -> str:
    return "not measured" if v is None else format(v, fmt)


def x_local(result: dict[str, Any], backend: str) -> float | None:
    """A backend's wall time over the local backend's in one benchmark result (None without a local row)."""
    walls = {r["backend"]: r["wall_seconds"] for r in result["backends"]}
    return walls[backend] / walls["local"] if "local" in walls and backend in walls else None


def table(result: dict[str, Any]) -> str:
    """The benchmark's two tables (backends, then the median start-up phases; "-": a phase that backend does not
    have), as Markdown."""
    rows = result["backends"]
    lines = ["| backend | trials | wall (s) | x local | trials / min | trials at once (max / mean) | trial (s, median) | "
             "GPU busy (%) | SM active (%) | GPU memory (GiB, peak) | a trial's GPU memory (GiB, median) | first round "
             "(s, median / max) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        x = x_local(result, r["backend"])
        ratio = f"{x:.2f}" if x is not None else "-"
        lines.append(f"| {r['backend']} | {r['trials']} | {r['wall_seconds']:.1f} | {ratio} | "
                     f"{_num(60 * r['trials'] / r['wall_seconds'] if r['wall_seconds'] else None, '.1f')} | "
                     f"{r['trials_at_once_max']} / {_num(r['trials_at_once_mean'], '.1f')} | "
                     f"{_num(r['trial_seconds_median'], '.1f')} | {_num(r['gpu_busy_percent'], '.0f')} | "
                     f"{_num(r.get('gpu_sm_percent'), '.0f')} | "
                     f"{_num(r.get('gpu_memory_peak_gib'), '.1f')} | {_num(r.get('trial_gpu_memory_gib_median'), '.2f')} | "
                     f"{_num(r['first_round_seconds_median'], '.2f')} / {_num(r['first_round_seconds_max'], '.2f')} |")
    names = [p for p in PHASES if any(p in r["phases_median_seconds"] for r in rows)]
    lines += ["", "| start-up phase (median s) | " + " | ".join(r["backend"] for r in rows) + " |",
              "|---|" + "---:|" * len(rows)]
    for p in names:
        lines.append(f"| {p} | " + " | ".join(format(r["phases_median_seconds"][p], ".3f") if p in
                                              r["phases_median_seconds"] else "-" for r in rows) + " |")
    return "\n".join(lines)


def parser() -> Any:
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.sweep", description=__doc__.splitlines()[0],
                      epilog="Flags after -- go to both sweeps (e.g. -- --rounds 5).")
    p.add_argument("--grid", default="noise")
    p.add_argument("--profile", default="quick")
    p.add_argument("--values", default="0.4", help="the grid's values (comma-separated; all: every value)")
    p.add_argument("--methods", default=None, help="the rows (default all)")
    p.add_argument("--seeds", type=typed("seeds", int, "an integer"), default=1,
                   help="seeds per cell (0: the profile's)")
    p.add_argument("--backends", default="local,tune,tune-actors")
    p.add_argument("--device", default="cpu", help="cpu, or cuda: both backends train on the GPU")
    p.add_argument("--workers", type=typed("workers", int, "an integer"), default=None,
                   help="local: trials at once (default: the sweep's, CPUs / threads; 8 on a GPU)")
    p.add_argument("--gpus-per-client", type=typed("gpus_per_client", float, "a number"), default=0.1,
                   help="tune on a GPU: each client actor's share")
    p.add_argument("--local-args", default=None, help="the local backend's flags instead of the defaults")
    p.add_argument("--tune-args", default=None, help="the Tune backend's flags instead of the defaults")
    p.add_argument("--actor-args", default=None, help="the tune-actors backend's flags instead of the defaults")
    p.add_argument("--fuse", default="auto", help="the fused backends' --fuse (auto, or a group size)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", default=None, help="also write the result to this file")
    p.add_argument("--keep", default=None, help="keep each backend's sweep in this folder (KEEP/<backend>: its records, "
                                                "summary and results.parquet) instead of a temporary one")
    return p


def invalid(a: argparse.Namespace) -> str | None:
    """The error line for parsed arguments main refuses before it runs anything (None: none)."""
    backends = [b for b in a.backends.split(",") if b]
    if not backends or any(b not in BACKENDS for b in backends):
        return f"error: backends={a.backends!r} is invalid: comma-separated names from {', '.join(BACKENDS)}"
    if a.device not in ("cpu", "cuda"):
        return f"error: device={a.device!r} is invalid: cpu or cuda"
    from fda_ray.runtime.fusion import parse_fuse

    try:  # fda-ray sweep's own check: a bad --fuse was found only when the fused backend's sweep started
        parse_fuse(a.fuse)
    except ValueError as e:
        return f"error: {e}"
    return None


def backend_flags(a: argparse.Namespace, backend: str) -> list[str]:
    """A backend's own flags to fda_ray.sweep: its defaults for a.device, or --local-args, --tune-args or
    --actor-args in their place."""
    gpu = a.device == "cuda"
    defaults = {"local": ["--device", "cuda", "--workers", str(a.workers or 8)] if gpu else
                (["--workers", str(a.workers)] if a.workers else []),
                "tune": ["--device", "cuda"] if gpu else [],  # each trial's clients in its own process
                "tune-actors": ["--gpus-per-client", f"{a.gpus_per_client:g}"] if gpu else ["--executor", "ray"],
                # fused: the trials train vectorised (their numbers then are the vectorised ones: part of the key)
                "local-fused": ["--fuse", a.fuse, "--vectorise", "on", *(["--device", "cuda"] if gpu else []),
                                *(["--workers", str(a.workers)] if a.workers else [])],
                "tune-fused": ["--fuse", a.fuse, "--vectorise", "on", *(["--device", "cuda"] if gpu else [])]}
    given = {"local": a.local_args, "tune": a.tune_args, "tune-actors": a.actor_args, "local-fused": None,
             "tune-fused": None}
    return shlex.split(given[backend]) if given[backend] is not None else defaults[backend]


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """The benchmark's own flags and the ones after -- (they go to every backend's sweep)."""
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    mine = argv[:argv.index("--")] if "--" in argv else argv
    return mine, extra


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    mine, extra = split_argv(argv)
    a = checked_args(parser(), invalid, mine)
    if isinstance(a, int):
        return a
    backends = [b for b in a.backends.split(",") if b]
    result: dict[str, Any] = {"machine": machine(), "grid": a.grid, "profile": a.profile, "values": a.values,
                              "seeds": a.seeds, "extra": extra, "backends": []}
    with (tempfile.TemporaryDirectory() if a.keep is None else _kept(a.keep)) as d:
        for b in backends:
            flags = backend_flags(a, b)
            print(f"bench.sweep: {b} ...", file=sys.stderr, flush=True)
            try:
                result["backends"].append(run_backend(b, a, flags, extra, Path(d) / b))
            except RuntimeError as e:  # the backends measured so far are still printed and written
                failed = f"error: {e}"
                break
            except KeyboardInterrupt:  # Ctrl-C, or a time limit's SIGINT: the same
                failed = f"error: interrupted while {b} ran; the backends before it are kept"
                break
        else:
            failed = ""
    if not result["backends"]:
        print(failed, file=sys.stderr)
        return 1
    text = table(result)
    m = result["machine"]
    seeds = a.seeds or "the profile's"
    print(f"{a.grid} {a.profile} values {a.values}, {seeds} seed(s); {m['cpus']} CPUs, "
          f"{m['gpu'] or 'no GPU'}; torch {m['torch']}, Ray {m['ray']}; {m['date']}\n")
    print(text)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    if failed:
        print(failed, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
