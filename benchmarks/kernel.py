"""Kernel benchmark: one FedGP aggregation (cosine projection, filter) per call, three implementations.

    python -m benchmarks.kernel [--device cpu|cuda] [--layouts simple-cnn,resnet18,transformer-100m]
                                   [--sources 4,9,16] [--json]

Implementations, on the same inputs (target (M,), sources (N, M) float32, the model's layer offsets):
    loop       a per-tensor Python loop like the authors' code: for every state-dict tensor and every source,
               one cosine_similarity and one accumulation
    reference  the vectorized PyTorch reference (fda_ray.algorithms.aggregation.fedgp with impl="reference")
    kernel     the fused kernel (two passes: per-layer statistics, then the combination)

Bandwidth: the kernel moves (2N + 3) * M * 4 bytes (it reads the N + 1 deltas twice and writes the result);
"copy GB/s" is torch's copy of a buffer of the same size on the same device (read + write counted), the
ceiling a memory-bound kernel can reach. A cell reads "-" where an implementation would need more memory
than --memory-gib allows (the reference holds float64 copies of the inputs).
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

LAYOUTS = ("simple-cnn", "resnet18", "transformer-100m")
IMPLS = ("loop", "reference", "kernel")


def layer_sizes(name: str) -> list[int]:
    """Sizes of the state-dict tensors FedGP projects (every non-scalar floating tensor)."""
    if name == "simple-cnn":
        from fda_ray.train.models import build_model

        state = build_model("simple_cnn", (1, 28, 28), 10).state_dict()
    elif name == "resnet18":
        import torchvision

        state = torchvision.models.resnet18(num_classes=10).state_dict()  # BatchNorm running stats included
    elif name == "transformer-100m":
        # A decoder-only transformer of ~108M parameters: 32000 x 1024 embedding, 6 blocks of width 1024.
        d, ff = 1024, 4096
        sizes = [32000 * d, 2048 * d]  # token and position embeddings
        for _ in range(6):
            sizes += [d, d, 3 * d * d, 3 * d, d * d, d, d, d, d * ff, ff, ff * d, d]
        return sizes + [d, d]
    else:
        raise ValueError(f"layout={name!r} is invalid: one of {', '.join(LAYOUTS)}")
    return [t.numel() for t in state.values() if t.is_floating_point() and t.dim() > 0]


def authors_loop(target: torch.Tensor, sources: torch.Tensor, offsets: list[int], beta: float,
                 weights: torch.Tensor) -> torch.Tensor:
    """FedGP as the authors' code does it: a Python loop over tensors and sources."""
    out = torch.empty_like(target)
    w = weights.tolist()
    for lo, hi in zip(offsets[:-1], offsets[1:]):
        t = target[lo:hi]
        acc = (1 - beta) * t
        for i in range(sources.shape[0]):
            s = sources[i, lo:hi]
            cos = torch.nn.functional.cosine_similarity(t, s, dim=0)
            if cos > 0:
                acc = acc + w[i] * beta * cos * s
        out[lo:hi] = acc
    return out


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn, device: str, budget_s: float = 1.5, max_reps: int = 20) -> float:
    fn()  # warm-up (and the kernel's build or cache load)
    _sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_case(layout: str, n: int, device: str, memory_gib: float, impls: tuple[str, ...]) -> dict:
    from fda_ray import kernels
    from fda_ray.algorithms.aggregation import fedgp

    sizes = layer_sizes(layout)
    m = sum(sizes)
    g = torch.Generator().manual_seed(0)
    target = torch.randn(m, generator=g).to(device)
    sources = torch.randn(n, m, generator=g).to(device)
    offsets = torch.tensor([0] + sizes, dtype=torch.int64).cumsum(0)
    weights = torch.full((n,), 1.0 / n, device=device)
    row: dict = {"layout": layout, "params": m, "layers": len(sizes), "sources": n, "device": device,
                 "implementation": kernels.implementation(device)}
    input_gib = (n + 1) * m * 4 / 2**30
    need = {"loop": input_gib * 1.2, "reference": input_gib * 5.5, "kernel": input_gib * 1.2}  # peak, inputs included
    calls = {
        "loop": lambda: authors_loop(target, sources, offsets.tolist(), 0.5, weights),
        "reference": lambda: fedgp(target, sources, offsets, beta=0.5, weights=weights, impl="reference"),
        "kernel": lambda: fedgp(target, sources, offsets, beta=0.5, weights=weights, impl="kernel"),
    }
    for impl in impls:
        row[f"{impl}_s"] = _time(calls[impl], device) if need[impl] <= memory_gib else None
    moved = (2 * n + 3) * m * 4
    row["kernel_gbps"] = moved / row["kernel_s"] / 1e9 if row.get("kernel_s") else None
    # The copy ceiling: copy a buffer of half the kernel's traffic (each byte is read once and written once).
    src = torch.empty(moved // 8, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    row["copy_gbps"] = 2 * src.numel() * 4 / _time(lambda: dst.copy_(src), device) / 1e9
    del src, dst
    if row["kernel_gbps"]:
        row["kernel_share_of_copy"] = row["kernel_gbps"] / row["copy_gbps"]
    for impl in ("loop", "reference"):
        if row.get(f"{impl}_s") and row.get("kernel_s"):
            row[f"speedup_vs_{impl}"] = row[f"{impl}_s"] / row["kernel_s"]
    return row


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    lines = ["| layout | params | layers | N | loop (ms) | reference (ms) | kernel (ms) | kernel vs loop (x) | "
             "kernel vs reference (x) | kernel GB/s | copy GB/s | share of copy |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ms = {k: (None if r.get(f"{k}_s") is None else 1e3 * r[f"{k}_s"]) for k in IMPLS}
        lines.append(
            f"| {r['layout']} | {r['params'] / 1e6:.2f}M | {r['layers']} | {r['sources']} | {_fmt(ms['loop'], '.2f')} | "
            f"{_fmt(ms['reference'], '.2f')} | {_fmt(ms['kernel'], '.3f')} | {_fmt(r.get('speedup_vs_loop'), '.1f')} | "
            f"{_fmt(r.get('speedup_vs_reference'), '.1f')} | {_fmt(r.get('kernel_gbps'), '.1f')} | "
            f"{_fmt(r['copy_gbps'], '.1f')} | {_fmt(100 * r['kernel_share_of_copy'] if r.get('kernel_share_of_copy') else None, '.0f')} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from fda_ray.core.parsing import OneLineParser, typed

    # (one line, exit 2, for a bad value or an unknown flag, as the other benchmarks)
    p = OneLineParser(prog="python -m benchmarks.kernel", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--sources", default="4,9,16")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--memory-gib", type=typed("memory_gib", float, "a number of GiB"), default=16.0,
                   help="skip an implementation that would need more")
    p.add_argument("--threads", type=typed("threads", int, "an integer"), default=None,
                   help="torch threads (CPU); default: torch's")
    p.add_argument("--json", action="store_true")
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    layouts = [s for s in a.layouts.split(",") if s]
    impls = tuple(s for s in a.impls.split(",") if s)
    try:
        sources = [int(s) for s in a.sources.split(",") if s]
    except ValueError:
        sources = []
    problems = []
    if not layouts or any(x not in LAYOUTS for x in layouts):
        problems.append(f"layouts={a.layouts!r} (one or more of {', '.join(LAYOUTS)})")
    if not sources or any(n < 1 for n in sources):
        problems.append(f"sources={a.sources!r} (comma-separated integers >= 1)")
    if not impls or any(x not in IMPLS for x in impls):
        problems.append(f"impls={a.impls!r} (one or more of {', '.join(IMPLS)})")
    if not (a.device == "cpu" or (a.device.startswith("cuda") and torch.cuda.is_available())):
        problems.append(f"device={a.device!r} (cpu, or cuda when a GPU is visible)")
    if problems:
        print("error: " + "; ".join(problems) + " is invalid", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = []
    for layout in layouts:
        for n in sources:
            rows.append(bench_case(layout, n, a.device, a.memory_gib, impls))
            if not a.json:
                print(f"{layout} N={n}: done", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"device: {a.device}, torch threads: {torch.get_num_threads()}, implementation: {rows[0]['implementation']}")
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
