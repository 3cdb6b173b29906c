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


def checked_args(parser: object, invalid: object, argv: list[str]) -> object:
    """`argv` parsed by a benchmark's parser and passed through its own checks (`invalid(args)`: an error line or
    None): the arguments, or the exit code 2 after one error line (tests/test_lease_scripts.py calls the two halves
    apart, without running the benchmark)."""
    import sys

    parse = getattr(parser, "parse_or_exit_code", None)
    a = parse(argv) if parse is not None else parser.parse_args(argv)  # type: ignore[attr-defined]
    if isinstance(a, int):
        return a
    bad = invalid(a)  # type: ignore[operator]
    if bad:
        print(bad, file=sys.stderr)
        return 2
    return a
