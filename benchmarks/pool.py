"""ReLU + 2x2 max-pooling through the C++ kernel beside PyTorch's own ops, per layer and in a whole training step.

    python -m benchmarks.pool                               # this machine's CPU, 1 thread (as a trial runs)
    python -m benchmarks.pool --json docs/results/bench-pool/cpu-pool.json

Rows:
    layer    F.max_pool2d(torch.relu(x), 2) (`reference`) against fda_ray.kernels.pool's kernel, on the simple CNN's
             two maps at --batch: 28 x 28 inputs (6 x 24 x 24, 16 x 8 x 8) and 32 x 32 (6 x 28 x 28, 16 x 10 x 10);
             the forward pass alone, and forward and backward
    step     a whole training step of the simple CNN (forward, cross-entropy, backward, Adam), as a client trains
             alone; a fused cohort's step (SimpleCNN.forward_stacked over --rows rows, the CPU's per-model
             layout), the trunk the fused trials of issue 62 run; and SHOT's LeNet (FedWCA's model: conv - max-pool
             - ReLU, through max_pool2x2)
Per row: the milliseconds (the median of --repeats timings of --steps calls, after two warm-up calls), the ratio,
and whether the two gave the same numbers bit for bit (for the steps: the weights after every timed step).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

MAPS = {"28x28 first": (6, 24, 24), "28x28 second": (16, 8, 8), "32x32 first": (6, 28, 28),
        "32x32 second": (16, 10, 10)}


def _ms(fn: Callable[[], Any], steps: int, repeats: int) -> float:
    for _ in range(2):
        fn()
    readings = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        readings.append((time.perf_counter() - t0) / steps)
    return 1000 * statistics.median(readings)


def _layer(shape: tuple[int, ...], batch: int, steps: int, repeats: int) -> dict[str, Any]:
    from fda_ray import kernels
    from fda_ray.kernels.pool import relu_max_pool2x2

    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, *shape, generator=g).requires_grad_()
    grad = torch.randn(batch, shape[0], shape[1] // 2, shape[2] // 2, generator=g)
    row: dict[str, Any] = {"shape": [batch, *shape]}
    outs = {}
    for impl in ("reference", "kernel"):
        kernels.set_default_impl(impl)
        try:
            with torch.no_grad():
                row[f"{impl}_forward_ms"] = _ms(lambda: relu_max_pool2x2(x), steps, repeats)
            row[f"{impl}_ms"] = _ms(lambda: torch.autograd.grad(relu_max_pool2x2(x), x, grad), steps, repeats)
            out = relu_max_pool2x2(x)
            outs[impl] = (out.detach(), torch.autograd.grad(out, x, grad)[0])
        finally:
            kernels.set_default_impl(None)
    row["identical"] = all(torch.equal(a, b) for a, b in zip(outs["reference"], outs["kernel"]))
    return row


def _steps(kind: str, batch: int, rows: int, steps: int, repeats: int) -> dict[str, Any]:
    """A training step of the simple CNN with each implementation: ms per step and the weights compared."""
    from fda_ray import kernels
    from fda_ray.train.models import SimpleCNN, shot_lenet

    g = torch.Generator().manual_seed(0)
    k = rows if kind == "fused" else 1
    x = torch.rand(k, batch, 1, 28, 28, generator=g)
    x[..., :6, :] = 0.0  # a blank band, as Fashion-MNIST's background: ties in both poolings
    y = torch.randint(0, 10, (k, batch), generator=g)
    got: dict[str, Any] = {"kind": kind, "rows": k, "batch": batch}
    weights = {}
    for impl in ("reference", "kernel"):
        kernels.set_default_impl(impl)
        try:
            torch.manual_seed(0)
            model = shot_lenet((1, 28, 28), 10) if kind == "lenet" else SimpleCNN(1, 28, 10)
            if kind == "fused":
                params = {n: v.detach().unsqueeze(0).repeat(k, *[1] * v.dim()).requires_grad_()
                          for n, v in model.named_parameters()}
                opt = torch.optim.Adam(params.values(), lr=1e-3)

                def step() -> None:
                    out = SimpleCNN.forward_stacked(params, x, layout="per_model")  # (K, B, 10)
                    loss = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(k, batch).mean(1)
                    opt.zero_grad(set_to_none=True)
                    loss.sum().backward()
                    opt.step()
                tensors = lambda: list(params.values())  # noqa: E731
            else:
                opt = torch.optim.Adam(model.parameters(), lr=1e-3)

                def step() -> None:
                    torch.manual_seed(1)  # the LeNet's dropout draws the same masks under either implementation
                    loss = F.cross_entropy(model(x[0]), y[0])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                tensors = lambda: list(model.state_dict().values())  # noqa: E731
            got[f"{impl}_ms"] = _ms(step, steps, repeats)
            weights[impl] = [t.detach().clone() for t in tensors()]
        finally:
            kernels.set_default_impl(None)
    got["identical"] = all(torch.equal(a, b) for a, b in zip(weights["reference"], weights["kernel"]))
    return got


def measure(batch: int, rows: int, steps: int, repeats: int, threads: int) -> dict[str, Any]:
    from fda_ray.kernels import implementation

    torch.set_num_threads(threads)
    if implementation("cpu", "kernel") != "cpp":
        from fda_ray.kernels import loader

        raise RuntimeError(f"the C++ kernel is not available here: {loader.status().get('cpu')}")
    layers = {name: _layer(shape, batch, steps, repeats) for name, shape in MAPS.items()}
    training = [_steps(kind, batch, rows, steps, repeats) for kind in ("plain", "fused", "lenet")]
    return {"batch": batch, "rows": rows, "steps": steps, "repeats": repeats, "threads": threads,
            "layers": layers, "training": training}


def table(r: dict[str, Any]) -> str:
    """Both implementations side by side (a function of the JSON: a committed record prints the same table)."""
    lines = ["| what | shape | PyTorch's ops (ms) | kernel (ms) | x faster | same numbers |",
             "|---|---|---:|---:|---:|---|"]
    for name, row in r["layers"].items():
        shape = " x ".join(map(str, row["shape"]))
        for part, key in (("forward", "_forward_ms"), ("forward + backward", "_ms")):
            ref, ker = row["reference" + key], row["kernel" + key]
            lines.append(f"| pooling {name}, {part} | {shape} | {ref:.3f} | {ker:.3f} | {ref / ker:.1f} | "
                         f"{'bit for bit' if row['identical'] else 'NO'} |")
    for row in r["training"]:
        what = {"plain": "training step, simple CNN", "lenet": "training step, SHOT's LeNet (max_pool2x2)",
                "fused": f"training step, simple CNN, {row['rows']} rows stacked (per-model layout)"}[row["kind"]]
        ref, ker = row["reference_ms"], row["kernel_ms"]
        lines.append(f"| {what} | {row['rows']} x {row['batch']} x 1 x 28 x 28 | {ref:.2f} | {ker:.2f} | "
                     f"{ref / ker:.2f} | {'bit for bit' if row['identical'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import json

    from benchmarks import below_one
    from benchmarks.sweep import machine
    from fda_ray.core.parsing import OneLineParser, typed

    p = OneLineParser(prog="python -m benchmarks.pool", description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=typed("batch", int, "an integer"), default=64)
    p.add_argument("--rows", type=typed("rows", int, "an integer"), default=24,
                   help="rows of the fused step (8 trials x 3 clients)")
    p.add_argument("--steps", type=typed("steps", int, "an integer"), default=20)
    p.add_argument("--repeats", type=typed("repeats", int, "an integer"), default=5)
    p.add_argument("--threads", type=typed("threads", int, "an integer"), default=1)
    p.add_argument("--json", default=None)
    args = sys.argv[1:] if argv is None else list(argv)
    a = p.parse_or_exit_code(args)
    if isinstance(a, int):
        return a
    bad = below_one(a, ("batch", "rows", "steps", "repeats", "threads"))
    if bad:
        print(bad, file=sys.stderr)
        return 2
    try:
        r = measure(a.batch, a.rows, a.steps, a.repeats, a.threads)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    r.update(machine=machine(), torch=torch.__version__, command="python -m benchmarks.pool " + " ".join(args))
    m = r["machine"]
    print(f"batch {a.batch}, {a.threads} thread(s); {m['cpus']} CPUs ({m['cpu']}); torch {r['torch']}; {m['date']}\n")
    print(table(r))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
