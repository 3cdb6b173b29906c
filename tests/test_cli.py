"""`python -m fda_ray`: the flags generated from RunConfig, JSON output, progress lines, one-line errors with
exit code 2, and the public `fda_ray.run()` function that no module shadows."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import dataclasses
import re
import importlib
import pkgutil

import pytest

import fda_ray
from fda_ray.experiments.cli import config_from_args, main, parser
from fda_ray.core.config import RunConfig

TINY = ["--num-sources", "2", "--rounds", "1", "--warmup-rounds", "1", "--samples-per-client", "96",
        "--test-samples", "50", "--target-labelled", "32", "--threads", "1", "--executor", "serial"]


def test_json_output_holds_config_and_rounds(fmnist_dir, capsys):
    rc = main(["--dataset", "fashion-mnist", "--data-dir", str(fmnist_dir), "--method", "fedgp", "--noise", "0.4",
               "--json", *TINY])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["method"] == "fedgp" and out["config"]["noise"] == 0.4
    assert out["config"]["lr_target"] == 0.005  # resolved from the paper defaults
    assert [r["round"] for r in out["rounds"]] == [0, 1]
    assert out["final_accuracy"] == out["rounds"][-1]["accuracy"]


def test_progress_lines_and_final_accuracy(fmnist_dir, capsys, tmp_path):
    rc = main(["--data-dir", str(fmnist_dir), "--method", "fedda_auto", "--parquet", str(tmp_path / "r.parquet"), *TINY,
               "--target-labelled", "48"])
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("round   1/2 [warmup] acc")
    assert "beta" in lines[1] and lines[-1].startswith("final target accuracy")
    assert "(mean of the last 2 rounds " in lines[-1]  # a 2-round run: the mean of the rounds it has
    import pyarrow.parquet as pq

    from fda_ray.core.build import code_version

    rows = pq.read_table(tmp_path / "r.parquet").to_pylist()  # the build that computed them, as a sweep's has it
    assert [r["round"] for r in rows] == [0, 1]
    assert {r["build_code"] for r in rows} == {code_version()} and rows[-1]["build_aggregation"] in ("cpp", "reference")
    assert rows[-1]["build_torch"] == __import__("torch").__version__


def test_a_config_field_a_round_also_logs_is_config_name_in_the_parquet(tmp_path):
    """FedWCA logs beta and alpha per round (lists), and its config has a scalar beta: the config's is config_beta in
    every row, as in a sweep's results.parquet (the mixed column stopped `--parquet` runs in their third round)."""
    import pyarrow.parquet as pq

    from fda_ray.core.history import History

    h = History(config={"method": "fedwca", "beta": 0.5, "seed": 0},
                rows=[{"round": 0, "accuracy": 0.1, "loss": 1.0},
                      {"round": 1, "accuracy": 0.2, "loss": 0.9, "beta": [[0.9, 0.1]], "alpha": [[1.0, 0.0]]}])
    rows = pq.read_table(h.to_parquet(tmp_path / "w.parquet")).to_pylist()
    assert [r["config_beta"] for r in rows] == [0.5, 0.5] and [r["beta"] for r in rows] == [None, [[0.9, 0.1]]]
    assert rows[0]["seed"] == 0 and "config_seed" not in rows[0]


def test_a_parquet_that_cannot_be_written_is_a_failure_of_the_work_not_bad_input(fmnist_dir, capsys, tmp_path,
                                                                                     monkeypatch):
    from fda_ray.core.history import History

    def refuse(self, path):
        raise ValueError("pyarrow cannot store this")

    monkeypatch.setattr(History, "to_parquet", refuse)
    rc = main(["--data-dir", str(fmnist_dir), "--parquet", str(tmp_path / "r.parquet"), *TINY])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert err[0] == (f"error: --parquet {tmp_path / 'r.parquet'} could not be written after round 1 (ValueError: "
                      "pyarrow cannot store this); it holds the 0 rounds before")


def test_a_regression_run_reports_its_test_loss_not_a_nan_accuracy(capsys):
    """The synthetic task (Auto-weighted FDA App. B) is a regression: its console says the test loss (MSE), with no
    accuracy column of NaN."""
    assert main(["--dataset", "synthetic", "--rounds", "2", "--warmup-rounds", "1", "--threads", "1",
                 "--executor", "serial"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and not any("nan" in x for x in lines), lines
    assert lines[0].startswith("round   1/3 [warmup] loss ")
    assert lines[-1].startswith("final target test loss ") and "(mean of the last 3 rounds " in lines[-1]


@pytest.mark.parametrize("args,needle", [
    (["--method", "fedfoo"], "method='fedfoo' is invalid: known methods: source_only"),
    (["--noise", "-1"], "noise=-1.0 is invalid"),
    (["--beta", "2"], "beta=2.0 is invalid"),
    (["--projection", "orthogonal"], "projection='orthogonal' is invalid"),
    (["--dataset", "mnst"], "dataset='mnst' is invalid: known datasets"),
])
def test_bad_input_one_line_exit_2(fmnist_dir, capsys, args, needle):
    rc = main(["--data-dir", str(fmnist_dir), *TINY, *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and err.count("\n") == 1


def test_missing_dataset_names_searched_paths(tmp_path, monkeypatch, capsys):
    from fda_ray.data import standard

    monkeypatch.setattr(standard, "FMNIST_SYSTEM_DIR", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FDA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    rc = main(["--data-dir", str(tmp_path / "empty"), *TINY])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(tmp_path / "empty") in err and "apt-get install -y dataset-fashion-mnist" in err


@pytest.mark.parametrize("module", ["fda_ray", "fda_ray.diagnose", "fda_ray.sweep"])
def test_module_entry_points_exit_2_without_traceback(fmnist_dir, module):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    extra = ["--grid", "noise", "--dry-run"] if module == "fda_ray.sweep" else []
    p = subprocess.run([sys.executable, "-m", module, *extra, "--projection", "nope", "--data-dir", str(fmnist_dir)],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "projection='nope' is invalid" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_every_config_field_is_a_flag_with_its_help():
    p = parser()
    flags = {a.dest: a for a in p._actions}
    for f in dataclasses.fields(RunConfig):
        if f.name == "params":  # a flag per field of each family's Params instead
            from fda_ray.algorithms import family_params

            for fam, cls in family_params().items():
                for pf in dataclasses.fields(cls):
                    # The FDA family's parameters are flags under their own names (--beta), the others' prefixed
                    dest = pf.name if cls.keywords else f"param:{fam}:{pf.name}"
                    assert dest in flags, f"{fam}.{pf.name} has no flag"
                    assert pf.metadata["help"].split()[0] in flags[dest].help
                    assert all(c in flags[dest].help for c in pf.metadata.get("choices") or ())
            assert [cls.family for cls in family_params().values() if cls.keywords] == ["fda"]
            continue
        assert f.name in flags, f"RunConfig.{f.name} has no flag"
        assert f.metadata["help"].split()[0] in flags[f.name].help
        if "choices" in f.metadata:
            assert all(c in flags[f.name].help for c in f.metadata["choices"])
    # Parsing nothing gives the dataclass's defaults; every field can be set
    assert config_from_args(p.parse_args([])) == RunConfig()
    a = p.parse_args(["--lr-source", "0.02", "--lr-target", "0.001", "--batch-source", "32", "--batch-target", "8",
                      "--auto-lr-factor", "0.5", "--finetune-epochs", "3", "--eval-noise", "0.2", "0.4",
                      "--no-log-estimates", "--no-filter", "--threads", "2", "--baseline-protocol", "loop"])
    cfg = config_from_args(a)
    assert (cfg.lr_source, cfg.lr_target, cfg.batch_source, cfg.batch_target, cfg.auto_lr_factor) == (0.02, 0.001, 32, 8, 0.5)
    assert (cfg.finetune_epochs, cfg.eval_noise, cfg.log_estimates, cfg.filter, cfg.threads) == (3, (0.2, 0.4), False, False, 2)
    assert cfg.baseline_protocol == "loop"


@pytest.mark.parametrize("args,needle", [
    (["--rounds", "many"], "rounds='many' is invalid: an integer"),
    (["--lr-target", "inf"], "lr_target='inf' is invalid: a finite number"),
    (["--baseline-protocol", "mine"], "baseline_protocol='mine' is invalid: one of authors, loop"),
    (["--threads", "0"], "threads=0 is invalid"),
])
def test_generated_flags_give_one_line_errors(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


def test_no_module_shadows_the_run_function():
    """`import fda_ray.<anything>` must leave `fda_ray.run` the function (a module named run would replace it)."""
    for info in pkgutil.walk_packages(fda_ray.__path__, "fda_ray."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
    from fda_ray.runtime.engine import run

    assert fda_ray.run is run and callable(fda_ray.run)


def test_a_diverging_run_stops_with_one_line_and_keeps_its_rounds(fmnist_dir, capsys, tmp_path):
    """A non-finite value stops the run (exit 1) with one line naming the round and where it appeared, instead
    of printing an accuracy; the finished rounds go to --parquet."""
    import pyarrow.parquet as pq

    # issue 14's example: noise 1e38 overflows the test images themselves: the first evaluation is NaN
    rc = main(["--data-dir", str(fmnist_dir), "--method", "fedgp", "--noise", "1e38", *TINY])
    captured = capsys.readouterr()
    assert rc == 1 and "final target accuracy" not in captured.out and "Traceback" not in captured.err
    # (torch prints a one-time "No CUDA runtime" warning when the kernel first loads in a process)
    assert [x for x in captured.err.strip().splitlines() if "cpp_extension" not in x] == [
        "error: run stopped in round 0: the evaluated model's test loss is nan (non-finite weights or outputs); "
        "try a lower learning rate; 0 finished rounds kept"]
    # a target that diverges in the first main round: the rule refuses its delta, the warm-up round is kept
    out = tmp_path / "kept.parquet"
    rc = main(["--data-dir", str(fmnist_dir), "--method", "fedgp", "--lr-target", "1e30", "--parquet", str(out), *TINY])
    err = "\n".join(x for x in capsys.readouterr().err.strip().splitlines() if "cpp_extension" not in x)
    assert rc == 1 and len(err.splitlines()) == 1
    # the estimators (run first, for the logged estimates) or the rule refuse the target's delta
    assert re.search(r"run stopped in round 1: (estimate|fedgp): non-finite values \(NaN or inf\) in target", err)
    assert "1 finished rounds kept" in err
    assert [r["phase"] for r in pq.read_table(out).to_pylist()] == ["warmup"]


def test_the_command_line_uses_the_whole_machine_unless_told_otherwise():
    """`python -m fda_ray` without --executor: Ray actors pooled to the cores on a machine with 2 or more (the
    serial executor's numbers: tests/test_ray.py); one core, one client, a GPU driver or --executor keep serial."""
    from fda_ray.experiments.cli import whole_machine

    cfg = RunConfig(num_sources=3)
    assert whole_machine(cfg, [], cores=2).executor == "ray"
    assert whole_machine(cfg, [], cores=1).executor == "serial"
    assert whole_machine(cfg, ["--executor", "serial"], cores=8).executor == "serial"
    assert whole_machine(cfg, ["--executor=serial"], cores=8).executor == "serial"
    assert whole_machine(cfg.replace(device="cuda"), [], cores=8).executor == "serial"
    assert whole_machine(cfg, [], cores=2).replace(executor="serial") == cfg  # nothing else changes


@pytest.mark.slow
def test_the_whole_machine_default_gives_the_serial_numbers(fmnist_dir, capsys, no_ray):
    """The default (Ray actors pooled to the machine's cores) and --executor serial, through the command line."""
    args = ["--data-dir", str(fmnist_dir), "--method", "fedgp", "--noise", "0.4", "--json", *TINY[:-2]]
    assert main(args) == 0
    pooled = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    import ray

    ray.shutdown()
    assert main(args + ["--executor", "serial"]) == 0
    serial = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert pooled["config"]["executor"] == "ray" and serial["config"]["executor"] == "serial"
    assert [r["accuracy"] for r in pooled["rounds"]] == [r["accuracy"] for r in serial["rounds"]]
    assert [r["loss"] for r in pooled["rounds"]] == [r["loss"] for r in serial["rounds"]]


# ---------------------------------------------------------------- one entry point: fda-ray COMMAND

def test_every_command_is_its_documented_python_m_program(capsys):
    """`fda-ray COMMAND` (and `python -m fda_ray COMMAND`) runs the very main function of `python -m <module>`; the
    table is the one list of the programs, and pyproject installs it as the `fda-ray` script."""
    import importlib
    import tomllib
    from pathlib import Path

    from fda_ray.experiments import commands

    for name, (home, module, _) in commands.COMMANDS.items():
        forward = importlib.import_module(module + ".__main__" if module in ("fda_ray", "fda_ray.kernels") else module)
        expected = commands.main if module == "fda_ray" else commands.command(name)  # python -m fda_ray: every command
        assert getattr(forward, "main") is expected, name
        assert importlib.import_module(home).main is commands.command(name)
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"fda-ray": "fda_ray.experiments.commands:main"}
    assert commands.main(["help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in commands.COMMANDS)
    assert commands.main(["swep", "--grid", "noise"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("error: command='swep' is invalid: one of run, sweep, collect, diagnose, synthetic-grid, "
                           "kernels; did you mean 'sweep'?")
    # a command's own checks, through the entry point: the same line and exit code as python -m fda_ray.sweep
    assert commands.main(["sweep", "--grid", "nois"]) == 2
    assert "error: grid='nois' is invalid" in capsys.readouterr().err
    assert commands.main(["--method", "fedgpp"]) == 2  # no command: a run
    assert "error: method='fedgpp' is invalid" in capsys.readouterr().err


def test_auto_weighting_runs_on_a_target_that_gives_two_steps_and_refuses_one(fmnist_dir, capsys):
    """The target keeps its last partial batch: 5 labelled samples at batch 4 are 2 steps, enough for the auto-beta
    estimators (they were refused, as if 2 full batches were needed); 4 at batch 4 are one step, one line."""
    base = ["--data-dir", str(fmnist_dir), "--method", "fedda_auto", *TINY, "--batch-target", "4"]
    assert main(base + ["--target-labelled", "5"]) == 0
    capsys.readouterr()
    assert main(base + ["--target-labelled", "4"]) == 2
    assert capsys.readouterr().err == ("error: batch_target=4 is invalid: auto-weighting needs >= 2 target steps a "
                                       "round, and the target's 4 labelled training samples give 1; a batch_target "
                                       "below 4, or more labelled target samples\n")


@pytest.mark.slow  # a run in a subprocess, on Ray actors (the whole-machine default on 2 or more cores)
def test_a_runs_console_is_quiet_unless_verbose(fmnist_dir):
    """A run's stderr holds fda-ray's own lines, not Ray's INFO and WARNING lines or torch's no-CUDA notice from the
    driver and its client actors (a sweep hid them; a run printed them); --verbose shows Ray's."""
    argv = [sys.executable, "-m", "fda_ray", *TINY, "--data-dir", str(fmnist_dir), "--executor", "ray"]
    quiet = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=fmnist_dir.parent)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    noise = ("Started a local Ray instance", "No CUDA runtime is found", "INFO worker.py", "WARNING ")
    assert not any(n in quiet.stderr for n in noise), quiet.stderr
    loud = subprocess.run(argv + ["--verbose"], capture_output=True, text=True, timeout=600, cwd=fmnist_dir.parent)
    assert loud.returncode == 0 and "Started a local Ray instance" in loud.stderr


def test_every_commands_help_reads_whole():
    """Each `fda-ray` command's --help opens with whole sentences and explains every option (a description cut at
    the docstring's first line stopped mid-sentence; synthetic-grid's options had no text)."""
    import importlib

    from fda_ray.experiments.commands import COMMANDS

    for name, (module, _, _) in COMMANDS.items():
        p = importlib.import_module(module).parser()
        assert (p.description or "").rstrip()[-1:] in (".", "?", ")"), (name, p.description)
        bare = [a.option_strings[0] for a in p._actions if a.option_strings and not a.help]
        assert not bare, (name, bare)


def test_the_kernels_check_hides_torchs_no_cuda_notice_unless_verbose(capsys):
    """`python -m fda_ray.kernels --check` on a CPU-only machine opened with torch's "No CUDA runtime is found"
    warning, which its own report already says (device cuda: none)."""
    import logging

    from fda_ray.kernels.__main__ import main

    log = logging.getLogger("torch.utils.cpp_extension")
    before = log.level
    try:
        log.setLevel(logging.NOTSET)
        assert main(["--check", "--verbose"]) == 0 and log.level == logging.NOTSET
        assert main(["--check"]) == 0 and log.level == logging.ERROR
        assert "device cpu: implementation=" in capsys.readouterr().out
    finally:
        log.setLevel(before)


def test_a_typo_in_the_kernels_variable_is_one_line_naming_it(monkeypatch, capsys, tiny):
    """$FDA_RAY_KERNELS=bogus: a single run blamed the model (its fit check runs the forward, which reads the
    variable) and `kernels --check` printed a traceback."""
    from fda_ray.kernels.__main__ import main as kernels_main
    from fda_ray.runtime.engine import run

    monkeypatch.setenv("FDA_RAY_KERNELS", "bogus")
    line = "FDA_RAY_KERNELS='bogus' is invalid: kernel or reference (or unset: kernel)"
    assert kernels_main(["--check"]) == 2 and capsys.readouterr().err.strip() == f"error: {line}"
    with pytest.raises(ValueError) as e:
        run(tiny(method="source_only", rounds=1))
    assert str(e.value) == line
