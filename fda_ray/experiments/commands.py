"""The `fda-ray` command: one entry point, every program of fda-ray a subcommand of it.

    fda-ray --method fedgp --noise 0.4          one run (the default command: `fda-ray run ...` is the same)
    fda-ray sweep --grid noise                  a grid sweep or a search (fda_ray.experiments.sweep)
    fda-ray collect DIR...                      tables over sweep and search directories
    fda-ray diagnose ...                        the estimators' and rules' diagnostics
    fda-ray synthetic-grid ...                  the synthetic grid of the theory's predictions
    fda-ray kernels --check                     the projection kernels: build, check

`pip install` puts `fda-ray` on the PATH ([project.scripts]); `python -m fda_ray ...` is the same command, and each
program's own `python -m fda_ray.<program>` (the documented commands) runs the same main function. The table below
is the one list of the programs: each is a module with `main(argv) -> exit code` and `parser()` (its command line),
imported only when it runs. A flag one program lacks and another has is named with the other program
(`flag_hint`: the programs' parsers are built then, on the error path only).
"""
from __future__ import annotations

import functools
import importlib
import sys
from typing import TYPE_CHECKING, Callable

from fda_ray.core.registry import did_you_mean

if TYPE_CHECKING:
    from fda_ray.core.parsing import OneLineParser

# name -> (module with main(argv), its python -m module, one line)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("fda_ray.experiments.cli", "fda_ray", "one run (the default command)"),
    "sweep": ("fda_ray.experiments.sweep", "fda_ray.sweep", "a grid sweep (--grid) or a hyper-parameter search (--search)"),
    "collect": ("fda_ray.experiments.collect", "fda_ray.collect", "tables over sweep and search directories"),
    "diagnose": ("fda_ray.experiments.diagnose", "fda_ray.diagnose", "the estimators' and rules' diagnostics on a run's data"),
    "synthetic-grid": ("fda_ray.experiments.synthetic_grid", "fda_ray.synthetic_grid",
                       "the synthetic grid: predicted against measured best rules"),
    "kernels": ("fda_ray.kernels.__main__", "fda_ray.kernels", "the projection kernels: --build, --check"),
}


# (program, flag it lacks) -> the program's own way to do what the flag does elsewhere, or the program meant
_SWEEP_FLAGS = {"--grid": "`--grid` is a flag of `python -m fda_ray.sweep` (grid sweeps)",
                "--search": "`--search` is a flag of `python -m fda_ray.sweep` (hyper-parameter searches)"}
EQUIVALENTS: dict[tuple[str, str], str] = {
    ("run", "--out"): "a run's rounds go to --parquet FILE; a sweep's output folder is `python -m fda_ray.sweep --out`",
    ("sweep", "--parquet"): "a sweep writes its rounds to results.parquet in --out DIR",
    **{(name, flag): line for name in ("run", "diagnose") for flag, line in _SWEEP_FLAGS.items()},
}


def usage() -> str:
    lines = ["usage: python -m fda_ray [COMMAND] [ARGS...]   (fda-ray is the same; no COMMAND: a run)", "",
             "commands:"]
    lines += [f"  {name:<15} {line}" for name, (_, _, line) in COMMANDS.items()]
    lines += ["", "python -m fda_ray COMMAND --help: the command's own options"]
    return "\n".join(lines)


def command(name: str) -> Callable[[list[str] | None], int]:
    """The main function of a command, by name."""
    return getattr(importlib.import_module(COMMANDS[name][0]), "main")


def parser(name: str) -> "OneLineParser":
    """A command's parser, by name: a new one, as its main builds it (with the plug-ins loaded so far)."""
    return getattr(importlib.import_module(COMMANDS[name][0]), "parser")()


@functools.cache
def flags(name: str) -> frozenset[str]:
    """A command's flags (its parser's option strings), built once per process."""
    return frozenset(o for action in parser(name)._actions for o in action.option_strings)


def programs_with(flag: str, but: str | None = None) -> list[str]:
    """The commands other than `but` that accept `flag`, in the table's order."""
    return [name for name in COMMANDS if name != but and flag in flags(name)]


def flag_hint(name: str, flag: str) -> str:
    """"; <what to do>" for a flag that command `name` lacks: this command's own way to do what the flag does in
    another (EQUIVALENTS), else the other command that has it, with its one line; "" when none has it."""
    if (name, flag) in EQUIVALENTS:
        return f"; {EQUIVALENTS[name, flag]}"
    others = programs_with(flag, but=name)
    if not others:
        return ""
    first, *rest = others
    hint = f"; `{flag}` is a flag of `python -m {COMMANDS[first][1]}`, {COMMANDS[first][2]}"
    if rest:
        named = [f"`python -m {COMMANDS[n][1]}`" for n in rest]
        hint += f"; also of {' and '.join([', '.join(named[:-1]), named[-1]] if len(named) > 1 else named)}"
    return hint


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return command(argv[0])(argv[1:])
    if argv and argv[0] in ("help", "commands"):
        print(usage())
        return 0
    if argv and not argv[0].startswith("-"):  # not a flag of a run: a misspelt command
        print(f"error: command={argv[0]!r} is invalid: one of {', '.join(COMMANDS)}"
              f"{did_you_mean(argv[0], COMMANDS)}", file=sys.stderr)
        return 2
    return command("run")(argv)


if __name__ == "__main__":
    sys.exit(main())


def not_a_program(module: str, meant: str) -> int:
    """`python -m <module>` of a module that is a Python API, not a program: one line naming the program meant, exit
    2 (without it, Python runs the module, which defines names and exits 0 having done nothing)."""
    print(f"error: {module} is fda-ray's Python API (import {module}), not a program; the command is `{meant}` "
          f"(every program: `python -m fda_ray help`)", file=sys.stderr)
    return 2
