"""Cohort benchmark: milliseconds per client-step of K clients' local epochs, one after the other and as one
vectorised cohort, beside the bound no per-client method can beat (one shared model at batch K x 64).

    python -m benchmarks.cohort [--clients 9] [--steps 40] [--threads 1,2] [--device cpu] [--json]

Each setting runs in a fresh process per thread count (torch's thread pool is set once per process). The
clients are simple CNNs on 28x28 inputs (the default Fashion-MNIST setup's sources: batch 64, Adam, lr 0.01);
the data are random, the arithmetic is the engine's:

    loop      fda_ray.train.client's "epoch" recipe for each client in turn (run_task)
    cohort    fda_ray.train.cohort.train_cohort: the K clients as one (K, M) computation
    bound     one SimpleCNN trained at batch K x 64 with torch.optim.Adam (shared weights: not K clients,
              only the cost of the same samples through one model)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from benchmarks import child_env


def measure(k: int, steps: int, threads: int, device: str, repeats: int = 3) -> dict:
    import copy

    import torch
    from torch.nn import functional as F

    from fda_ray.algorithms import ClientTask
    from fda_ray.train.client import Client, run_task
    from fda_ray.train.cohort import train_cohort
    from fda_ray.core.layout import ParamLayout
    from fda_ray.train.models import build_model

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model("simple_cnn", (1, 28, 28), 10).to(device)
    layout = ParamLayout.from_model(model)
    n = 64 * steps
    clients = [Client(i, {"train": (torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,)))}, copy.deepcopy(model),
                      layout, seed=0, device=device) for i in range(k)]
    start = layout.flatten_model(model)
    hp = {"lr": 0.01, "batch": 64}

    def loop() -> None:
        for c in clients:
            run_task(c, ClientTask(c.index, "epoch", 0, hp), {"global": start})

    def cohort() -> None:
        train_cohort([(c, ClientTask(c.index, "epoch", 0, hp), start) for c in clients])

    x = torch.randn(steps, k * 64, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (steps, k * 64), device=device)

    def bound() -> None:
        m = copy.deepcopy(model)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        for s in range(steps):
            loss = F.cross_entropy(m(x[s]), y[s])
            opt.zero_grad()
            loss.backward()
            opt.step()

    out = {"clients": k, "steps": steps, "threads": threads, "device": device}
    for name, fn in (("loop", loop), ("cohort", cohort), ("bound", bound)):
        fn()  # warm-up (first Adam, allocator)
        best = float("inf")
        for _ in range(repeats):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        out[f"{name}_ms_per_client_step"] = 1000 * best / (k * steps)
    return out


def main(argv: list[str] | None = None) -> int:
    from fda_ray.core.parsing import OneLineParser, first_paragraph, typed

    p = OneLineParser(prog="python -m benchmarks.cohort", description=first_paragraph(__doc__))
    p.add_argument("--clients", type=typed("clients", int, "an integer"), default=9)
    p.add_argument("--steps", type=typed("steps", int, "an integer"), default=40)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # internal: one thread count here
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    if a.clients < 1 or a.steps < 1:
        print(f"error: clients={a.clients}, steps={a.steps} are invalid: integers >= 1", file=sys.stderr)
        return 2
    from fda_ray.runtime import preflight
    from fda_ray.core.config import RunConfig

    try:
        RunConfig(device=a.device)
        preflight.device(a.device)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.one is not None:
        print("BENCH " + json.dumps(measure(a.clients, a.steps, a.one, a.device)), flush=True)
        return 0
    try:
        threads = [int(t) for t in a.threads.split(",") if t]
        assert threads and all(t >= 1 for t in threads)
    except (ValueError, AssertionError):
        print(f"error: threads={a.threads!r} is invalid: comma-separated integers >= 1", file=sys.stderr)
        return 2
    rows = []
    for t in threads:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.cohort", "--clients", str(a.clients), "--steps",
                               str(a.steps), "--device", a.device, "--one", str(t)], capture_output=True, text=True,
                              env=child_env())
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH ")), None)
        if proc.returncode != 0 or line is None:
            print(f"error: threads={t} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows.append(json.loads(line[len("BENCH "):]))
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| threads | loop ms/client-step | cohort ms/client-step | bound ms/client-step | cohort / loop | bound / loop |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lo, co, bo = (r[f"{n}_ms_per_client_step"] for n in ("loop", "cohort", "bound"))
        print(f"| {r['threads']} | {lo:.2f} | {co:.2f} | {bo:.2f} | {co / lo:.2f} | {bo / lo:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
