"""python -m fda_ray.kernels [--build] [--check] [--cuda] [--json]

--build  compile (or load from the cache) the kernels for this machine: the C++ one, and the CUDA one when a
         GPU is present (or with --cuda, which compiles it even without a GPU: a compile check)
--check  which implementation each device uses, and why (the default)
"""
from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import torch

from fda_ray import kernels
from fda_ray.kernels import loader
from fda_ray.core.interrupts import cli_main

if TYPE_CHECKING:
    from fda_ray.core.parsing import OneLineParser


def parser() -> "OneLineParser":
    """The command line of `python -m fda_ray.kernels`."""
    from fda_ray.core.parsing import OneLineParser

    p = OneLineParser(prog="python -m fda_ray.kernels", command="kernels",
                      description="Build (or load from the cache) fda-ray's aggregation kernels for this machine, and "
                                  "say which implementation each device uses, and why.")
    p.add_argument("--build", action="store_true", help="compile the kernels now (first use would, otherwise)")
    p.add_argument("--check", action="store_true", help="print which implementation each device uses")
    p.add_argument("--cuda", action="store_true", help="with --build: compile the CUDA kernel even without a GPU")
    p.add_argument("--verbose", action="store_true", help="show the compiler's output and torch's notices")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    try:
        kernels.env_impl()  # $FDA_RAY_KERNELS with a typo: one line, exit 2 (a traceback from the check below)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not a.verbose:  # torch's notice that no CUDA runtime was found (a CPU-only machine): the report says it
        import logging

        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    report: dict[str, dict] = {}
    failed = False
    if a.build:
        kinds = ["cpu"] + (["cuda"] if a.cuda or torch.cuda.is_available() else [])
        for kind in kinds:
            t0 = time.perf_counter()
            try:
                loader.build(kind, verbose=a.verbose)
                report[f"build {kind}"] = {"ok": True, "seconds": round(time.perf_counter() - t0, 1),
                                           "cache": str(loader.cache_dir(kind))}
            except Exception as e:
                failed = True
                report[f"build {kind}"] = {"ok": False, "error": f"{type(e).__name__}: {e}".strip().splitlines()[-1]}
    if a.check or not a.build:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for dev in devices:
            report[f"device {dev}"] = {"implementation": kernels.implementation(dev), "default": kernels.default_impl()}
        report["status"] = {k: v for k, v in loader.status().items()}
        if not torch.cuda.is_available():
            report["device cuda"] = {"implementation": "none", "why": "no CUDA device visible to torch"}
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        for key, val in report.items():
            print(f"{key}: " + ", ".join(f"{k}={v}" for k, v in val.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
