"""Command-line parsing shared by every entry point: argparse with one-line errors (exit code 2, no usage dump,
no traceback) and typed flag values whose error names the field, the value and what is allowed.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)

    def parse_or_exit_code(self, argv: list[str] | None) -> argparse.Namespace | int:
        """The parsed namespace, or the exit code (--help: 0, bad input: 2) for a `main` to return."""
        try:
            return self.parse_args(argv)
        except SystemExit as e:
            return int(e.code or 0)


def typed(field: str, kind: type, allowed: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{field}={text!r} is invalid: {allowed}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{field}={text!r} is invalid: a finite number")
        return value

    parse.__name__ = kind.__name__
    return parse
