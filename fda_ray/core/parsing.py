"""Command-line parsing shared by every entry point: argparse with one-line errors (exit code 2, no usage dump,
no traceback) and typed flag values whose error names the field, the value and what is allowed.
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
from typing import Any, Callable, NoReturn


# The words argparse reads as a negative number (a value), not a flag: its own pattern knows -1 and -.5 only, so
# `--noise -inf` (or -nan, -1e-5) was "expected one argument" and the option's own message was never shown.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2 (no usage dump).

    `command=`: the program's name in the table of fda-ray's programs (fda_ray.experiments.commands.COMMANDS), so
    that an unknown flag which another program has names that program (or this one's own way to do it)."""

    PROGRAMS = "fda_ray.experiments.commands"  # the programs' table: read by name, on the error path only (core
    # imports no program; as a registry's home, fda_ray.core.registry)

    def __init__(self, *args: Any, command: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command = command
        self._negative_number_matcher = NEGATIVE_NUMBER  # (argparse's attribute: no public way to set it)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            message += self._unknown_flag_hint(message.removeprefix("unrecognized arguments: ").split())
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)

    def _unknown_flag_hint(self, given: list[str]) -> str:
        """For the first unknown flag, in order: the closest of this program's own flags; the program's own way to
        do what the flag does in another program, or the other program that has it (the programs' table,
        fda_ray.experiments.commands.flag_hint); for a command that loads plug-ins, that a plug-in's family flags
        need its module."""
        from fda_ray.core.registry import did_you_mean, plugin_hint

        flags = [a.split("=")[0] for a in given if a.startswith("--")]
        if not flags:
            return ""
        known = [o for action in self._actions for o in action.option_strings]
        # (a stricter cutoff than for names: flags share long prefixes, --fedprox-mu is not --fedwca-mixup-mu)
        close = did_you_mean(flags[0], known, cutoff=0.8)
        if not close and self.command is not None:
            try:
                close = importlib.import_module(self.PROGRAMS).flag_hint(self.command, flags[0])
            except Exception:  # a hint, never a traceback in place of the one-line error
                close = ""
        return close or (plugin_hint() if "--import" in known else "")

    config_files = False  # with_config_files(): --config FILE and --print-config (fda_ray.core.config_files)
    file_keys: dict[str, str] = {}  # option name -> "config key 'x' in FILE", for the keys the flags do not override
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
                    argv, self.file_keys = expand(self, argv)
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
                print(self.error_line(e), file=sys.stderr)
                return 2
            print(dump(from_namespace(self, shown), ns.print_config), end="")
            return 0
        return ns

    def error_line(self, e: Exception) -> str:
        """`error: <the exception's first line>`, naming the config file's key where the file gave the field (a
        RunConfig check runs after the parse, so it knows the field, not where it came from)."""
        from fda_ray.core.config_files import blamed

        return f"error: {blamed(str(e).splitlines()[0], self.file_keys)}"


def first_paragraph(doc: str | None) -> str:
    """A module docstring's first paragraph as one line: a --help description (its first line alone stopped
    mid-sentence where the sentence wraps)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


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


def env_seconds(name: str, default: float, most: float = float("inf")) -> float:
    """A number of seconds from the environment variable `name` (unset: `default`), at most `most`; a ValueError
    naming the variable, its value and what is allowed otherwise."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0.0 <= value < float("inf")) or value > most:
        limit = f"from 0 to {most:g}" if most < float("inf") else "a finite number >= 0"
        raise ValueError(f"${name}={raw!r} is invalid: seconds, {limit}")
    return value
