"""Benchmark scripts of the repository (not part of the installed package): each prints a table (and JSON with
--json); none is a test. Run them from a checkout: `python -m benchmarks.<name>`."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: benchmarks/ and docs/results/ are in it


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a benchmark's child process: `python -m benchmarks.<name>` must import from the checkout
    whatever the working directory."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}
