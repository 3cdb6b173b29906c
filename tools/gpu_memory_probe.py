"""One paper-profile trial in this process on the GPU: its peak CUDA memory (allocated and reserved by PyTorch's
allocator) and seconds, with the GPU clients side by side (FDA_RAY_CONCURRENT_CLIENTS=1, the default) or one after
the other (0). A run that stalls prints every thread's stack after --stall seconds and exits (faulthandler), so a
lease that finds a hang brings back where it was.

    python tools/gpu_memory_probe.py fashion-mnist fedgp --concurrent 1 --rounds 3 --set noise=0.4
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from fda_ray.core.parsing import OneLineParser, first_paragraph, typed

    # (a bad value or an unknown flag is one line, exit 2, as fda-ray's programs)
    p = OneLineParser(prog="python tools/gpu_memory_probe.py", description=first_paragraph(__doc__))
    p.add_argument("dataset")
    p.add_argument("method")
    p.add_argument("--concurrent", choices=("0", "1"), default="1")
    p.add_argument("--rounds", type=typed("rounds", int, "an integer"), default=3)
    p.add_argument("--stall", type=typed("stall", float, "a number of seconds"), default=50.0,
                   help="seconds before the stacks are printed and it exits")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="another RunConfig field")
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    os.environ["FDA_RAY_CONCURRENT_CLIENTS"] = a.concurrent  # read once a round: set before the run starts
    faulthandler.dump_traceback_later(a.stall, exit=True)
    import torch

    from fda_ray import RunConfig, run

    fields = {k: json.loads(v) for k, _, v in (s.partition("=") for s in a.set)}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    run(RunConfig(dataset=a.dataset, method=a.method, device=device, rounds=a.rounds, **fields))
    out = {"dataset": a.dataset, "method": a.method, "concurrent": a.concurrent, "rounds": a.rounds, **fields,
           "device": device, "seconds": round(time.perf_counter() - t0, 1)}
    if device == "cuda":
        out.update(allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
                   reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 3))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
