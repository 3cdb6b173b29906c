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
        if message.startswith("unrecognized arguments: "):
            message += self._unknown_flag_hint(message.removeprefix("unrecognized arguments: ").split())
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)

    def _unknown_flag_hint(self, given: list[str]) -> str:
        """The known flag closest to the first unknown one; else, for a command that loads plug-ins, that a plug-in's
        family flags need its module."""
        from fda_ray.core.registry import did_you_mean, plugin_hint

        flags = [a.split("=")[0] for a in given if a.startswith("--")]
        known = [o for action in self._actions for o in action.option_strings]
        # (a stricter cutoff than for names: flags share long prefixes, --fedprox-mu is not --fedwca-mixup-mu)
        close = did_you_mean(flags[0], known, cutoff=0.8) if flags else ""
        return close or (plugin_hint() if "--import" in known and flags else "")

    config_files = False  # with_config_files(): --config FILE and --print-config (fda_ray.core.config_files)
    parsed_argv: list[str] = []  # what the last parse_or_exit_code parsed: a --config file's flags, then argv's
    # --print-config prints the namespace this returns (the run's command line fills in the per-dataset defaults)
    resolve_for_print: Callable[[argparse.Namespace], argparse.Namespace] | None = None

    def with_config_files(self) -> "OneLineParser":
        from fda_ray.core.config_files import add_config_options

        add_config_options(self)
        self.config_files = True
        return self

    def parse_or_exit_code(self, argv: list[str] | None) -> argparse.Namespace | int:
        """The parsed namespace, or the exit code (--help and --print-config: 0, bad input: 2) for a `main` to
        return. With config files, `--config FILE` is read first and the command line's flags override it."""
        argv = list(sys.argv[1:] if argv is None else argv)
        try:
            if self.config_files:
                from fda_ray.core.config_files import ConfigFileError, dump, expand, from_namespace

                try:
                    argv = expand(self, argv)
                except ConfigFileError as e:
                    self.error(str(e))
            self.parsed_argv = argv
            ns = self.parse_args(argv)
        except SystemExit as e:
            return int(e.code or 0)
        if self.config_files and ns.print_config:
            try:
                shown = self.resolve_for_print(ns) if self.resolve_for_print else ns
            except ValueError as e:
                print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
                return 2
            print(dump(from_namespace(self, shown), ns.print_config), end="")
            return 0
        return ns


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
