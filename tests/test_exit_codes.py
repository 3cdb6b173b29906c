"""Exit codes mean one thing (issue 63, class 7): 2 is bad input found before any work; a failure during the work is
1, with what was computed kept. A method's or recipe's own error once the rounds have begun (here a plug-in recipe
that raises in round 2) is one line naming the error and where it was raised, on every executor, with the finished
rounds kept: never exit 2, never a traceback, never Ray's "Unhandled error" dump of each failed call."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from test_plugins import _python, clean_plugins, write_tutorial  # noqa: F401  (clean_plugins: a fixture)


def _failing_tutorial(folder, error: str, at_round: int = 2) -> None:
    """The plug-in tutorial's module, its recipe raising `error` in round `at_round` (a bug in a user's recipe)."""
    write_tutorial(folder)
    path = folder / "my_fda.py"
    text = path.read_text()
    anchor = "    h = task.hparams\n"
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + f"    if task.round == {at_round}:\n        raise {error}('mu went "
                                                  "negative in my recipe')\n", 1))


def _args(folder) -> list[str]:
    return ["--import", "my_fda", "--method", "fedprox", "--dataset", "my-blobs", "--data-dir", str(folder / "data"),
            "--rounds", "4", "--num-sources", "2", "--samples-per-client", "200", "--test-samples", "200",
            "--parquet", str(folder / "rounds.parquet")]


@pytest.mark.parametrize("error", ["ValueError", "RuntimeError"])
def test_a_recipe_that_raises_mid_run_on_the_serial_executor_exits_1_keeping_its_rounds(
        tmp_path, monkeypatch, clean_plugins, capsys, error):  # noqa: F811
    from fda_ray.experiments import cli

    _failing_tutorial(tmp_path, error)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = cli.main([*_args(tmp_path), "--executor", "serial"])
    out, err = capsys.readouterr()
    assert code == 1  # a ValueError used to exit 2, as if the input were bad
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: run stopped in round 2: {error}: mu went negative in my recipe (my_fda.py:")
    assert line.endswith(f"2 finished rounds kept; the 2 finished rounds are in {tmp_path / 'rounds.parquet'}")
    assert [r["round"] for r in pq.read_table(tmp_path / "rounds.parquet").to_pylist()] == [0, 1]
    assert out.count("round ") == 2


def test_bad_input_found_before_the_rounds_is_still_exit_2(tmp_path, monkeypatch, clean_plugins, capsys):  # noqa: F811
    from fda_ray.experiments import cli

    _failing_tutorial(tmp_path, "RuntimeError")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main([*_args(tmp_path), "--executor", "serial", "--fedprox-mu", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: fedprox.mu=-1.0 is invalid: a number in [0.0, 10.0]"
    assert not (tmp_path / "rounds.parquet").exists()


@pytest.mark.slow  # a subprocess starting Ray and its client actors
def test_a_recipe_that_raises_in_ray_actors_is_one_line_without_rays_unhandled_error_dumps(tmp_path):
    _failing_tutorial(tmp_path, "RuntimeError")
    p = _python(["-m", "fda_ray", *_args(tmp_path), "--executor", "ray", "--client-retries", "1"], tmp_path)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "Unhandled error" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    (line,) = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith("error: run stopped in round 2: client "), line
    assert "failed round 2 2 times; last error: RuntimeError: mu went negative in my recipe (my_fda.py:" in line, line
    assert line.endswith(f"the 2 finished rounds are in {tmp_path / 'rounds.parquet'}"), line
    assert [r["round"] for r in pq.read_table(tmp_path / "rounds.parquet").to_pylist()] == [0, 1]


@pytest.mark.parametrize("module,meant", [("search", "python -m fda_ray.sweep --search NAME"),
                                          ("tune", "python -m fda_ray.sweep --grid NAME --backend tune"),
                                          ("results", "python -m fda_ray.collect DIR...")])
def test_a_python_api_module_run_as_a_program_names_the_program_meant(module, meant, tmp_path):
    """`python -m fda_ray.search --search beta` (a natural guess) used to define names and exit 0 having done
    nothing; it is one line naming the command, exit 2. (A subprocess: the guard is the module's __main__ branch.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run([sys.executable, "-m", f"fda_ray.{module}", "--search", "beta"], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=120)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"error: fda_ray.{module} is fda-ray's Python API (import fda_ray.{module}), not a program; the command is "
        f"`{meant}` (every program: `python -m fda_ray help`)"]


@pytest.mark.parametrize("module,line", [
    ("benchmarks.plain", "error: benchmarks.plain is the engine benchmark's plain loop (import benchmarks.plain: "
                         "run_plain), not a program; the command is `python -m benchmarks.engine --settings plain`"),
    ("datasets.csv_inputs", "error: datasets/csv_inputs.py is the preparation scripts' helper, not a program; the "
                            "programs are `python datasets/prepare_chexpert.py` and `python datasets/prepare_mimic.py` "
                            "(datasets/README.md)"),
])
def test_a_helper_module_beside_fda_ray_run_as_a_program_names_the_program_meant(module, line):
    """`python -m benchmarks.plain` and `python -m datasets.csv_inputs --bogus` defined names and exited 0 having
    done nothing; each is one line naming the program to run, exit 2. (A subprocess: the guard is the module's
    __main__ branch; the checkout's folders are found from its root.)"""
    import subprocess
    import sys
    from pathlib import Path

    p = subprocess.run([sys.executable, "-m", module, "--bogus"], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == [line]
