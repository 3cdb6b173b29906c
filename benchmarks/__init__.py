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


def below_one(args: object, fields: tuple[str, ...]) -> str | None:
    """The error line for the first of `fields` (whole-number arguments) below 1, or None when all are >= 1."""
    for field in fields:
        if getattr(args, field) < 1:
            return f"error: {field}={getattr(args, field)} is invalid: an integer >= 1"
    return None
