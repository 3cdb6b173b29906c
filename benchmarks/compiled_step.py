"""A fused step eager and under torch.compile (and CUDA graphs on a GPU), side by side: does compiling pay?

    python -m benchmarks.compiled_step                              # this machine's CPU, 8 trials x 3 clients
    python -m benchmarks.compiled_step --device cuda --json out.json   # a GPU: adds torch.compile's CUDA graphs

The step is a fused cohort's (fda_ray.train.cohort.train_cohort): SimpleCNN's stacked forward over K = trials x
clients rows (fda_ray.train.models.SimpleCNN.forward_stacked, in both convolution layouts), each row's mean
cross-entropy, and the gradients with respect to every row's parameters. Variants: `eager` (what fda-ray runs),
`compiled` (torch.compile of the stacked forward, Inductor's default mode; the loss and the backward through
AOTAutograd) and, on a GPU, `cuda-graphs` (mode="reduce-overhead": the compiled step replayed as a CUDA graph, shapes
static). Per variant: the milliseconds a step takes (the median of --repeats timings of --steps steps, after two
warm-up steps; a GPU synchronised before each reading), the seconds the first call took (compiling, or loading
Inductor's cache where an earlier run compiled the same step), and the largest
relative difference of its gradients from eager's (float tolerance: the compiled kernels sum in other orders). The
JSON (--json FILE) names the machine and torch; tools.pages' compiled-step generator prints it.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from benchmarks import checked_args


def _step(forward: Callable, p: dict, x: torch.Tensor, y: torch.Tensor) -> tuple:
    """A fused step's arithmetic: (K, B, classes) logits, each row's mean loss, the gradients of their sum."""
    k, b = x.shape[:2]
    out = forward(p, x)
    loss = F.cross_entropy(out.reshape(k * b, -1), y.reshape(-1), reduction="none").view(k, b).mean(1)  # (K,)
    return torch.autograd.grad(loss.sum(), list(p.values()))


def _time(fn: Callable, steps: int, repeats: int, cuda: bool) -> float:
    for _ in range(2):
        fn()
    readings = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        if cuda:
            torch.cuda.synchronize()
        readings.append((time.perf_counter() - t0) / steps)
    return 1000 * statistics.median(readings)


def measure(trials: int, clients: int, batch: int, steps: int, repeats: int, device: str, threads: int
            ) -> dict[str, Any]:
    from fda_ray.train.models import SimpleCNN

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    k = trials * clients
    model = SimpleCNN(1, 28, 10)
    p = {n: v.detach().unsqueeze(0).repeat(k, *[1] * v.dim()).to(device).requires_grad_(True)
         for n, v in model.named_parameters()}  # (K, ...) each
    x = torch.randn(k, batch, 1, 28, 28, device=device)  # (K, B, 1, 28, 28)
    y = torch.randint(0, 10, (k, batch), device=device)  # (K, B)
    cuda = device.startswith("cuda")
    modes = {"eager": None, "compiled": "default", **({"cuda-graphs": "reduce-overhead"} if cuda else {})}
    layouts: dict[str, Any] = {}
    for layout in ("per_model", "grouped"):
        plain = lambda p, x, layout=layout: SimpleCNN.forward_stacked(p, x, layout=layout)  # noqa: E731
        reference = _step(plain, p, x, y)
        got: dict[str, Any] = {}
        for name, mode in modes.items():
            torch._dynamo.reset()  # each variant compiles afresh (its first call's seconds are its own)
            forward = plain if mode is None else torch.compile(plain, mode=mode)
            t0 = time.perf_counter()
            first = _step(forward, p, x, y)
            if cuda:
                torch.cuda.synchronize()
            first_s = time.perf_counter() - t0
            gap = max(float((a - b).abs().max() / a.abs().max().clamp_min(1e-12)) for a, b in zip(reference, first))
            got[name] = {"ms_per_step": _time(lambda: _step(forward, p, x, y), steps, repeats, cuda),
                         "first_call_seconds": first_s, "grad_rel_diff_max": gap}
        layouts[layout] = got
    return {"trials": trials, "clients": clients, "rows": k, "batch": batch, "steps": steps, "repeats": repeats,
            "device": device, "threads": threads, "layouts": layouts}


def table(r: dict[str, Any]) -> str:
    """The variants side by side (a function of the JSON, so a committed record prints the same table)."""
    lines = ["| layout | variant | ms per step | x eager | first call (s) | gradients' largest relative gap |",
             "|---|---|---:|---:|---:|---:|"]
    for layout, got in r["layouts"].items():
        eager = got["eager"]["ms_per_step"]
        for name, m in got.items():
            lines.append(f"| {layout} | {name} | {m['ms_per_step']:.1f} | {eager / m['ms_per_step']:.2f} | "
                         f"{m['first_call_seconds']:.1f} | {m['grad_rel_diff_max']:.1e} |")
    return "\n".join(lines)


def parser() -> Any:
    """The command line of `python -m benchmarks.compiled_step` (tests/test_lease_scripts.py parses the GPU
    lease's)."""
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.compiled_step", description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=typed("trials", int, "an integer"), default=8)
    p.add_argument("--clients", type=typed("clients", int, "an integer"), default=3, help="clients per trial")
    p.add_argument("--batch", type=typed("batch", int, "an integer"), default=64)
    p.add_argument("--steps", type=typed("steps", int, "an integer"), default=10)
    p.add_argument("--repeats", type=typed("repeats", int, "an integer"), default=3)
    p.add_argument("--threads", type=typed("threads", int, "an integer"), default=1)
    p.add_argument("--device", default="cpu", help="cpu, or cuda")
    p.add_argument("--json", default=None)
    return p


def invalid(a: Any, cuda: bool | None = None) -> str | None:
    """The error line for parsed arguments main refuses before it measures anything (None: none); `cuda`: whether
    this machine has a GPU (default: torch's answer; a check of a GPU machine's command line elsewhere passes True)."""
    from benchmarks import below_one

    bad = below_one(a, ("trials", "clients", "batch", "steps", "repeats", "threads"))
    if bad:
        return bad
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if a.device not in ("cpu", "cuda") or (a.device == "cuda" and not cuda):
        return f"error: device={a.device!r} is invalid: cpu, or cuda on a machine with a GPU"
    return None


def main(argv: list[str] | None = None) -> int:
    import json

    from benchmarks.sweep import machine

    args = sys.argv[1:] if argv is None else list(argv)
    a = checked_args(parser(), invalid, args)
    if isinstance(a, int):
        return a
    r = measure(a.trials, a.clients, a.batch, a.steps, a.repeats, a.device, a.threads)
    r.update(machine=machine(), torch=torch.__version__,
             command="python -m benchmarks.compiled_step " + " ".join(args))
    m = r["machine"]
    print(f"{r['rows']} rows ({a.trials} trials x {a.clients} clients), batch {a.batch}, device {a.device}, "
          f"{a.threads} thread(s); {m['cpus']} CPUs, {m['gpu'] or 'no GPU'}; torch {r['torch']}; {m['date']}\n")
    print(table(r))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
