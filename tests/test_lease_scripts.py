"""The GPU lease scripts' command lines against the programs they call, on the CPU.

A lease of a GPU machine is short (minutes, one try) and tools/gpu-sweep-check.sh and tools/gpu-sweep-chunk.sh run
there unseen: a flag a program renamed, a backend, grid or profile name it no longer knows, a test file gone or
without GPU tests, would waste the lease. This test reads every `lease_step NAME LIMIT COMMAND...` of both scripts
(continuation lines joined, the `for` loop's variable expanded over its list, the chunk script's "$@" replaced by the
example flags in its header) and checks each command as far as this machine can without a GPU and without training:
the program's own parser takes the flags, a benchmark's own checks of its arguments pass, every fda_ray.sweep command
(the ones benchmarks.sweep builds for each backend too) dry-runs to a plan for a GPU node (--plan-for, which checks
nothing of this machine), benchmarks.served's trials plan, and pytest collects GPU tests from each file the lease
names. The step names are asserted, so that a rewrite of a script cannot leave this test checking nothing.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
CHECK = TOOLS / "gpu-sweep-check.sh"
CHUNK = TOOLS / "gpu-sweep-chunk.sh"
SETUP = TOOLS / "gpu-lease-setup.sh"
GPU_NODE = "CPU=16,GPU=1"  # the lease's machine (one H200, 16 CPUs), as --plan-for spells it

# Every step each script runs, most wanted first (a step added, renamed or dropped must be reflected here: the
# new one gets its check below, and a parser that found nothing fails here instead of passing vacuously).
CHECK_STEPS = ["kernels", "pytest-gpu", "fused-ops", "compiled-step", "grid-fused", "column-tune-fused", "column-tune",
               "column-tune-actors", "served", "noise-paper"]
CHUNK_STEPS = ["kernels", "sweep"]
SHELL_OPERATORS = {"&&", "||", ";", "|", "&", ">", ">>", "<", "2>&1"}


@dataclass(frozen=True)
class Step:
    script: str
    name: str
    argv: tuple[str, ...]


def _logical_lines(text: str) -> list[str]:
    """The script's lines with backslash continuations joined (as bash reads them)."""
    return text.replace("\\\n", " ").splitlines()


def _expand(token: str, env: dict[str, str]) -> str:
    """$VAR and ${VAR} in one shell word; a variable this test does not know fails loudly (a new one in a command
    needs a value here, not a silent '$X' that no program would ever see)."""
    def value(m: re.Match[str]) -> str:
        assert m[1] in env, f"a lease command uses ${m[1]}, which this test gives no value: {token!r}"
        return env[m[1]]

    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", value, token)


def lease_steps(script: Path, env: dict[str, str], args: list[str] | None = None) -> list[Step]:
    """Every `lease_step NAME LIMIT COMMAND...` of a lease script, in order, with its variables expanded, a `for V
    in A B C; do ... done` loop's steps once per value, and "$@" replaced by `args`."""
    steps: list[Step] = []
    loop: tuple[str, list[str]] | None = None
    for line in _logical_lines(script.read_text()):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.fullmatch(r"for (\w+) in ([^;]+); do", s)
        if m:
            loop = (m[1], m[2].split())
            continue
        if s == "done":
            loop = None
            continue
        m = re.search(r"(?:^|\s)lease_step\s", s)
        if not m:
            continue
        words = shlex.split(s[m.start():])
        assert not SHELL_OPERATORS & set(words), f"{script.name}: a lease_step line this test cannot read: {s!r}"
        _, name, limit, *command = words
        # the step's limit is lease_cap's (gpu-lease-setup.sh): a literal one ignores what is left of $BUDGET, and a
        # step that outlives the lease loses results.tgz, every step's output
        assert re.fullmatch(r"\$\(lease_cap \d+\)", limit), f"{script.name}: {name}'s limit is {limit!r}"
        var, values = loop if loop else ("", [""])
        for v in values:
            e = {**env, var: v} if var else env
            argv: list[str] = []
            for w in command:
                if w == "$@":
                    assert args is not None, f"{script.name}: {name} passes \"$@\", and no example flags were given"
                    argv += args
                else:
                    argv.append(_expand(w, e))
            steps.append(Step(script.name, _expand(name, e), tuple(argv)))
    return steps


def chunk_example_flags() -> list[str]:
    """The SWEEP-FLAGS of gpu-sweep-chunk.sh's header example (`#   e.g. ... bash tools/gpu-sweep-chunk.sh FLAGS`):
    the command a lease is told to run."""
    m = re.search(r"^#\s+e\.g\..*\bbash tools/gpu-sweep-chunk\.sh (.+)$", CHUNK.read_text(), re.M)
    assert m, "gpu-sweep-chunk.sh's header has no `e.g. ... bash tools/gpu-sweep-chunk.sh FLAGS` example"
    return shlex.split(m[1])


def all_steps(out: str) -> dict[tuple[str, str], Step]:
    """Both scripts' steps under a results folder `out` (the scripts' $OUT; $R is $OUT/r), by (script, name)."""
    r = str(Path(out) / "r")
    name = re.search(r"NAME=\$\{NAME:-([\w.-]+)\}", CHUNK.read_text())
    assert name, "gpu-sweep-chunk.sh no longer sets NAME's default as NAME=${NAME:-...}"
    steps = [*lease_steps(CHECK, {"OUT": out, "R": r}),
             *lease_steps(CHUNK, {"OUT": out, "R": r, "NAME": name[1]}, chunk_example_flags())]
    by_key = {(s.script, s.name): s for s in steps}
    assert len(by_key) == len(steps), f"two steps of one script share a name: {[s.name for s in steps]}"
    return by_key


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Step]:
    return all_steps(str(tmp_path_factory.mktemp("lease")))


# ---------------------------------------------------------------- the scripts themselves

def test_the_lease_scripts_are_valid_bash() -> None:
    for script in (CHECK, CHUNK, SETUP):  # one at a time: `bash -n A B` reads only A (B is its argument)
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"


def test_the_lease_functions_the_scripts_call_are_defined_in_the_setup() -> None:
    defined = set(re.findall(r"^(lease_\w+)\(\) \{", SETUP.read_text(), re.M))
    for script in (CHECK, CHUNK):
        text = script.read_text()
        assert ". tools/gpu-lease-setup.sh" in text, f"{script.name} no longer sources tools/gpu-lease-setup.sh"
        called = set(re.findall(r"\b(lease_\w+)\b", text))
        assert called and called <= defined, f"{script.name} calls {sorted(called - defined)}, not in the setup"


def test_the_scripts_steps_are_the_expected_ones(steps: dict[tuple[str, str], Step]) -> None:
    assert [n for s, n in steps if s == CHECK.name] == CHECK_STEPS
    assert [n for s, n in steps if s == CHUNK.name] == CHUNK_STEPS
    # the chunk's example flags reached its sweep in place of "$@" (a sweep without them would plan another grid)
    flags = chunk_example_flags()
    assert "--grid" in flags and list(steps[CHUNK.name, "sweep"].argv[3:3 + len(flags)]) == flags


def test_every_step_runs_a_program_this_test_checks(steps: dict[tuple[str, str], Step]) -> None:
    for step in steps.values():
        assert step.argv[:2] == ("python", "-m") and step.argv[2] in CHECKS, \
            f"{step.script} {step.name}: {' '.join(step.argv)} is not a `python -m` program this test checks"


# ---------------------------------------------------------------- each program's own checks

def _parse(p: Any, args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> Any:
    """The program's parser on the step's flags; its one-line error (exit code 2) as the test's failure."""
    try:
        return p.parse_args(args)
    except SystemExit as e:
        pytest.fail(f"{what}: the program's parser refuses {args} (exit {e.code}): {capsys.readouterr().err.strip()}")


def _dry_run(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> int:
    """fda_ray.sweep's --dry-run of `args` planned for the lease's GPU node (no training, nothing of this
    machine checked); the number of trials it planned."""
    from fda_ray.experiments import sweep

    capsys.readouterr()
    code = sweep.main([*args, "--dry-run", "--plan-for", GPU_NODE])
    cap = capsys.readouterr()
    assert code == 0, f"{what}: python -m fda_ray.sweep {shlex.join(args)} --dry-run --plan-for {GPU_NODE} " \
                      f"exits {code}: {cap.err.strip()[-1500:]}"
    m = re.search(r"^(\d+) trials$", cap.out, re.M)
    assert m and int(m[1]) >= 1, f"{what}: the dry run planned no trials:\n{cap.out[-1500:]}"
    return int(m[1])


def check_kernels(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> None:
    from fda_ray.kernels.__main__ import parser

    a = _parse(parser(), args, capsys, what)
    assert a.build, f"{what}: the kernels step must build them (--build)"


def check_pytest(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> None:
    """Each test file the step names exists and the step selects the `gpu` marker (that pytest collects a gpu test
    from each file, in a subprocess: test_the_pytest_steps_collect_gpu_tests, slow tier)."""
    files = [a for a in args if a.endswith(".py")]
    assert files, f"{what}: names no test file"
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"{what}: no such test file(s): {missing}"
    assert "gpu" in args[args.index("-m") + 1], f"{what}: does not select the gpu marker (-m gpu)"


def collect_gpu_tests(args: list[str], what: str) -> None:
    """pytest collects at least one `gpu` test from each file the step names (the step's own flags, -m gpu among
    them, plus --collect-only: nothing runs)."""
    files = [a for a in args if a.endswith(".py")]
    done = subprocess.run([sys.executable, "-m", "pytest", *args, "--collect-only"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{what}: collection failed ({done.returncode}):\n{done.stdout[-2000:]}" \
                                 f"{done.stderr[-1000:]}"
    counts: dict[str, int] = {}
    for line in done.stdout.splitlines():  # -q: node ids (path::test); -qq (the repo's addopts add a -q): path: N
        if "::" in line:
            path = line.split("::")[0]
            counts[path] = counts.get(path, 0) + 1
        elif m := re.fullmatch(r"(\S+\.py): (\d+)", line.strip()):
            counts[m[1]] = counts.get(m[1], 0) + int(m[2])
    empty = [f for f in files if counts.get(f, 0) < 1]
    assert not empty, f"{what}: no test marked gpu in {empty} (collected: {counts})"


def check_fused_ops(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> None:
    from benchmarks import fused_ops

    a = _parse(fused_ops.parser(), args, capsys, what)
    assert fused_ops.invalid(a) is None, f"{what}: {fused_ops.invalid(a)}"


def check_compiled_step(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> None:
    from benchmarks import compiled_step

    a = _parse(compiled_step.parser(), args, capsys, what)
    bad = compiled_step.invalid(a, cuda=True)  # the lease's machine has a GPU
    assert bad is None, f"{what}: {bad}"


def check_bench_sweep(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> None:
    """The benchmark's own checks (backend names, device), then the sweep each backend would run, dry-run."""
    from benchmarks import sweep as bench

    mine, extra = bench.split_argv(args)
    a = _parse(bench.parser(), mine, capsys, what)
    bad = bench.invalid(a)
    assert bad is None, f"{what}: {bad}"
    out = Path(a.json).parent if a.json else ROOT
    for b in [b for b in a.backends.split(",") if b]:
        cmd = bench.sweep_command(b, a, bench.backend_flags(a, b), extra, out / f"bench-{b}")
        assert cmd[1:3] == ["-m", "fda_ray.sweep"], cmd
        _dry_run(cmd[3:], capsys, f"{what} (backend {b})")


def check_served(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> None:
    from benchmarks import served

    a = _parse(served.parser(), args, capsys, what)
    bad = served.invalid(a)
    assert bad is None, f"{what}: {bad}"
    trials = served.plan_trials(a)  # the grid, profile, methods and values named: planning trains nothing
    assert trials, f"{what}: plans no trials"
    # each trial's settings as a run reads them (RunConfig checks its fields): on the device the step names
    assert {t.config().device for t in trials} == {a.device}, f"{what}: the trials' device is not {a.device}"


def check_sweep(args: list[str], capsys: pytest.CaptureFixture[str], what: str) -> None:
    _dry_run(args, capsys, what)


@pytest.mark.slow  # a pytest subprocess that imports the suite's modules: about 9 s
def test_the_pytest_steps_collect_gpu_tests(steps: dict[tuple[str, str], Step]) -> None:
    runs = [step for step in steps.values() if step.argv[2] == "pytest"]
    assert runs, "the lease scripts run no GPU tests"
    for step in runs:
        collect_gpu_tests(list(step.argv[3:]), f"{step.script} {step.name}")


CHECKS: dict[str, Callable[[list[str], pytest.CaptureFixture[str], str], None]] = {
    "fda_ray.kernels": check_kernels, "pytest": check_pytest, "benchmarks.fused_ops": check_fused_ops,
    "benchmarks.compiled_step": check_compiled_step, "benchmarks.sweep": check_bench_sweep,
    "benchmarks.served": check_served, "fda_ray.sweep": check_sweep}


@pytest.mark.parametrize("script,name", [(CHECK.name, n) for n in CHECK_STEPS] + [(CHUNK.name, n) for n in CHUNK_STEPS])
def test_a_lease_steps_command_is_accepted_by_its_program(script: str, name: str,
                                                          steps: dict[tuple[str, str], Step],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert (script, name) in steps, f"{script} has no step {name}"
    step = steps[script, name]
    module = step.argv[2]
    assert module in CHECKS, f"{script} {name}: no check for python -m {module}"
    CHECKS[module](list(step.argv[3:]), capsys, f"{script} {name}")
