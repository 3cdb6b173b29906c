"""Whether this command's processes are quiet: the console's setting (fda_ray.experiments.console.quiet), carried to
every process of the run by the environment (Ray's workers inherit it), and what a worker process hides when it is.
Here, in the core, so that the runtime's own processes (a fusion server, fda_ray.runtime.fusion_server) read it
without the experiments' console."""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable

QUIET_ENV = "FDA_RAY_QUIET"  # set for the run's processes (Ray workers inherit it): 1 = quiet


def is_quiet() -> bool:
    return os.environ.get(QUIET_ENV) == "1"


def quiet_worker() -> None:
    """In a trial's process (or a fusion server's), when quiet: torch's notice that no CUDA runtime was found
    (printed on a CPU-only machine when the kernels compile, after the summary when a worker prints late) is not
    shown, nor Python's "Exception ignored in ...: SystemExit" when Ray ends the process (its SIGTERM handler raises
    SystemExit, which lands in whatever callback runs then, a WeakSet's during garbage collection: the process was
    ending anyway; Ray forwards the lines to the sweep's console)."""
    if is_quiet():
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
        if not getattr(sys.unraisablehook, "_fda_ray", False):
            sys.unraisablehook = _ending_quietly(sys.unraisablehook)


def _ending_quietly(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    def unraisable(info: Any) -> None:
        if isinstance(info.exc_value, (SystemExit, KeyboardInterrupt)):  # the process is being ended: no news
            return
        hook(info)  # any other error that could not be raised is still printed

    unraisable._fda_ray = True  # type: ignore[attr-defined]
    return unraisable
