"""An unknown flag names what to do (issue 63): a close spelling of the program's own flag; else the program's own
way to do what the flag does in another (a run's --parquet for --out); else the other program that has the flag
(fda_ray.experiments.commands.flag_hint); else, where the program loads plug-ins, that a plug-in's flags need its
module. One line on stderr, exit code 2, the programs named in their `python -m` form (what the docs use)."""
from __future__ import annotations

import pytest

from fda_ray.core.parsing import OneLineParser
from fda_ray.experiments import commands

PLUGIN = "; a plug-in's names need its module: --import MODULE (docs/plugins.md)"
SWEEP = "`python -m fda_ray.sweep`, a grid sweep (--grid) or a hyper-parameter search (--search)"
OUT_ELSEWHERE = (f"; `--out` is a flag of {SWEEP}; also of `python -m fda_ray.collect` and "
                 "`python -m fda_ray.synthetic_grid`")
METHOD_ELSEWHERE = ("; `--method` is a flag of `python -m fda_ray`, one run (the default command); also of "
                    "`python -m fda_ray.diagnose`")


@pytest.mark.parametrize("name,argv,hint", [
    # the program's own equivalent, or the program meant (commands.EQUIVALENTS)
    ("run", ["--out", "x"], "--out x; a run's rounds go to --parquet FILE; a sweep's output folder is "
                            "`python -m fda_ray.sweep --out`"),
    ("run", ["--grid", "noise"], "--grid noise; `--grid` is a flag of `python -m fda_ray.sweep` (grid sweeps)"),
    ("run", ["--search", "fedgp"], "--search fedgp; `--search` is a flag of `python -m fda_ray.sweep` "
                                   "(hyper-parameter searches)"),
    ("diagnose", ["--grid", "noise"], "--grid noise; `--grid` is a flag of `python -m fda_ray.sweep` (grid sweeps)"),
    ("sweep", ["--parquet", "x.parquet", "--grid", "noise"],
     "--parquet x.parquet; a sweep writes its rounds to results.parquet in --out DIR"),
    # another program's flag: that program, with its one line
    ("collect", ["--method", "fedgp"], f"--method{METHOD_ELSEWHERE}"),  # (fedgp: a directory)
    ("synthetic-grid", ["--method=fedgp"], f"--method=fedgp{METHOD_ELSEWHERE}"),
    ("kernels", ["--out", "x"], f"--out x{OUT_ELSEWHERE}"),
    ("diagnose", ["--out", "x"], f"--out x{OUT_ELSEWHERE}"),
    ("collect", ["--seeds", "3"], f"--seeds; `--seeds` is a flag of {SWEEP}"),  # (3: a directory)
    # a close spelling of the program's own flag comes first
    ("run", ["--methd", "fedgp"], "--methd fedgp; did you mean '--method'?"),
    ("sweep", ["--gird", "noise"], "--gird noise; did you mean '--grid'?"),
    # no program has it: the plug-in hint where the program loads plug-ins, else nothing
    ("run", ["--zzz-flag", "1"], f"--zzz-flag 1{PLUGIN}"),
    ("sweep", ["--zzz-flag", "1"], f"--zzz-flag 1{PLUGIN}"),
    ("collect", ["--zzz-flag"], f"--zzz-flag{PLUGIN}"),
    ("kernels", ["--zzz-flag"], "--zzz-flag"),
    ("synthetic-grid", ["--zzz-flag"], "--zzz-flag"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v if v in commands.COMMANDS else "")
def test_an_unknown_flag_names_the_program_or_the_equivalent(name, argv, hint, capsys):
    assert commands.command(name)(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: unrecognized arguments: {hint}\n" and captured.out == ""


def test_the_fda_ray_command_gives_the_same_hints(capsys):
    """`fda-ray sweep ...` (python -m fda_ray sweep ...) runs the sweep's main: the same line, the same names."""
    assert commands.main(["sweep", "--parquet", "x.parquet", "--grid", "noise"]) == 2
    assert capsys.readouterr().err == ("error: unrecognized arguments: --parquet x.parquet; a sweep writes its "
                                       "rounds to results.parquet in --out DIR\n")
    assert commands.main(["--out", "x"]) == 2  # no command: a run
    assert "a run's rounds go to --parquet FILE" in capsys.readouterr().err
    assert commands.main(["help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m fda_ray [COMMAND]")


@pytest.mark.parametrize("name", list(commands.COMMANDS))
def test_every_program_parser_is_reachable_by_name(name):
    """commands.parser(name) builds the very command line the program's main parses: its prog is the documented
    `python -m` form and it knows its own name (the hint's lookup); the table of equivalents names real flags."""
    p = commands.parser(name)
    assert isinstance(p, OneLineParser) and p.command == name
    assert p.prog == f"python -m {commands.COMMANDS[name][1]}"
    assert "--help" in commands.flags(name) and commands.flags(name) is commands.flags(name)  # built once
    for (program, flag), line in commands.EQUIVALENTS.items():
        if program == name:
            assert program in commands.COMMANDS and flag not in commands.flags(name), (program, flag)
            assert commands.programs_with(flag), (program, flag)  # another program has it
            if "--parquet FILE" in line:
                assert "--parquet" in commands.flags(name)
            if "in --out DIR" in line:
                assert "--out" in commands.flags(name)
