"""The `fda-ray` command: one entry point, every program of fda-ray a subcommand of it.

    fda-ray --method fedgp --noise 0.4          one run (the default command: `fda-ray run ...` is the same)
    fda-ray sweep --grid noise                  a grid sweep or a search (fda_ray.experiments.sweep)
    fda-ray collect DIR...                      tables over sweep and search directories
    fda-ray diagnose ...                        the estimators' and rules' diagnostics
    fda-ray synthetic-grid ...                  the synthetic grid of the theory's predictions
    fda-ray kernels --check                     the projection kernels: build, check

`pip install` puts `fda-ray` on the PATH ([project.scripts]); `python -m fda_ray ...` is the same command, and each
program's own `python -m fda_ray.<program>` (the documented commands) runs the same main function. The table below
is the one list of the programs: each is a module with `main(argv) -> exit code`, imported only when it runs.
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable

from fda_ray.core.registry import did_you_mean

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


def usage() -> str:
    lines = ["usage: fda-ray [COMMAND] [ARGS...]   (python -m fda_ray is the same; no COMMAND: a run)", "", "commands:"]
    lines += [f"  {name:<15} {line}" for name, (_, _, line) in COMMANDS.items()]
    lines += ["", "fda-ray COMMAND --help: the command's own options"]
    return "\n".join(lines)


def command(name: str) -> Callable[[list[str] | None], int]:
    """The main function of a command, by name."""
    return getattr(importlib.import_module(COMMANDS[name][0]), "main")


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
