"""--config FILE and --print-config (fda_ray.core.config_files) for `python -m fda_ray` and the sweep: a file says
what the flags say, the command line overrides it, --print-config round-trips, a run from a file gives the
numbers of the same run from flags, and a bad file is one line with exit code 2."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from fda_ray.experiments import cli, sweep
from fda_ray.experiments.cli import config_from_args

TINY = {"num_sources": 2, "rounds": 1, "warmup_rounds": 1, "samples_per_client": 96, "test_samples": 50,
        "target_labelled": 32, "threads": 1, "executor": "serial"}


def _flags(mapping: dict) -> list[str]:
    return [x for k, v in mapping.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def _parse(argv):
    a = cli.parser().parse_or_exit_code(argv)
    assert not isinstance(a, int), a
    return a


def test_print_config_round_trips_and_resolves_the_per_dataset_defaults(tmp_path, capsys):
    argv = ["--method", "fedgp", "--noise", "0.4", "--no-filter", "--eval-noise", "0.2", "0.4"]
    assert cli.main(argv + ["--print-config"]) == 0
    text = capsys.readouterr().out
    printed = yaml.safe_load(text)
    resolved = cli.whole_machine(config_from_args(_parse(argv)), argv).resolved()  # (the executor the run picks)
    assert printed["lr_target"] == resolved.lr_target == 0.005 and printed["warmup_rounds"] == resolved.warmup_rounds
    assert printed["filter"] is False and printed["eval_noise"] == [0.2, 0.4]
    (tmp_path / "run.yaml").write_text(text)
    assert cli.main(["--config", str(tmp_path / "run.yaml"), "--print-config"]) == 0
    assert capsys.readouterr().out == text  # the file it printed, read back, prints itself
    again = config_from_args(_parse(["--config", str(tmp_path / "run.yaml")])).resolved()
    assert again == resolved
    assert cli.main(argv + ["--print-config", "json"]) == 0
    (tmp_path / "run.json").write_text(capsys.readouterr().out)
    assert config_from_args(_parse(["--config", str(tmp_path / "run.json")])).resolved() == resolved


@pytest.mark.parametrize("argv, key, value", [
    (["--method", "ditto"], "ditto_lam", 1.0),
    (["--method", "fedwca", "--dataset", "fmnist-5"], "fedwca_temp_a", 0.01),
    (["--method", "ditto", "--ditto-lam", "0.3"], "ditto_lam", 0.3),
])
def test_print_config_shows_the_method_familys_parameters(tmp_path, capsys, argv, key, value):
    """--print-config writes the method family's own parameters with the values the run uses (they were left out
    unless given), and the file reads back as the same run."""
    assert cli.main(argv + ["--print-config"]) == 0
    text = capsys.readouterr().out
    assert yaml.safe_load(text)[key] == value
    (tmp_path / "run.yaml").write_text(text)
    again = config_from_args(_parse(["--config", str(tmp_path / "run.yaml")])).resolved()
    # (the run's executor, as the command picks it: the printed file names it)
    assert again == cli.whole_machine(config_from_args(_parse(argv)), argv).resolved()


def test_the_command_line_overrides_the_file_and_switches_read_true_and_false(tmp_path):
    (tmp_path / "r.yaml").write_text("method: fedda\nrounds: 7\nfilter: false\nbeta: 0.25\njson: true\n")
    a = _parse(["--config", str(tmp_path / "r.yaml"), "--rounds", "3"])
    assert (a.method, a.rounds, a.filter, a.beta, a.json) == ("fedda", 3, False, 0.25, True)
    a = _parse([f"--config={tmp_path / 'r.yaml'}", "--filter"])
    assert a.filter is True and a.rounds == 7
    (tmp_path / "n.yaml").write_text("lr-target: 0.001\nrounds: null\n")  # dashes as the flag; null: the default
    a = _parse(["--config", str(tmp_path / "n.yaml")])
    assert a.lr_target == 0.001 and a.rounds == cli.parser().get_default("rounds")


def test_an_unquoted_off_or_on_in_yaml_is_the_word_for_an_option_that_takes_one(tmp_path):
    """YAML reads `vectorise: off` and `fuse: off` as false: for an option that takes a word they are off/on, as
    written (they were the text 'False', refused as invalid)."""
    (tmp_path / "r.yaml").write_text("vectorise: off\n")
    assert _parse(["--config", str(tmp_path / "r.yaml")]).vectorise == "off"
    (tmp_path / "r.yaml").write_text("vectorise: on\n")
    assert _parse(["--config", str(tmp_path / "r.yaml")]).vectorise == "on"
    (tmp_path / "s.yaml").write_text("fuse: off\nvectorise: yes\n")
    a = sweep.parser().parse_or_exit_code(["--config", str(tmp_path / "s.yaml")])
    assert not isinstance(a, int) and (a.fuse, a.vectorise) == ("off", "on")
    # an option with a type of its own still reads the boolean itself: a sweep's `resume: true` / `false`
    for text, want in (("resume: true\n", True), ("resume: false\n", False)):
        (tmp_path / "r.yaml").write_text(text)
        a = sweep.parser().parse_or_exit_code(["--config", str(tmp_path / "r.yaml")])
        assert not isinstance(a, int) and a.resume is want


def test_a_flag_of_its_own_that_starts_with_no_has_a_key(tmp_path, capsys):
    """--no-figures is an option of its own (not the negative of a --figures switch): `no_figures: true` sets it,
    and --print-config writes it (the key was refused as 'not an option')."""
    (tmp_path / "s.yaml").write_text("no_figures: true\n")
    a = sweep.parser().parse_or_exit_code(["--config", str(tmp_path / "s.yaml")])
    assert not isinstance(a, int) and a.no_figures is True
    assert sweep.main(["--grid", "noise", "--no-figures", "--print-config", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["no_figures"] is True
    (tmp_path / "r.yaml").write_text("filter: false\n")  # a switch's negative is still its own key's false
    assert _parse(["--config", str(tmp_path / "r.yaml")]).filter is False
    (tmp_path / "r.yaml").write_text("no_filter: true\n")
    assert cli.main(["--config", str(tmp_path / "r.yaml")]) == 2
    assert "config key 'no_filter'" in capsys.readouterr().err


def test_a_sweeps_printed_config_reads_back_as_the_same_parse(tmp_path, capsys):
    """--print-config of a grid sweep (resume: false among its keys), fed back through --config, parses the same,
    with the output folder and seeds the sweep uses written out, and the sweep takes it: a search's keys (scheduler:
    asha, the default) are not in it (a grid sweep refused its own printed file)."""
    argv = ["--grid", "noise", "--fuse", "auto", "--vectorise", "on", "--values", "0.4"]
    assert sweep.main(argv + ["--print-config"]) == 0
    printed = capsys.readouterr().out
    assert not {"scheduler", "search_alg", "num_samples", "rerun_seeds", "search"} & set(yaml.safe_load(printed))
    (tmp_path / "s.yaml").write_text(printed)
    again = sweep.parser().parse_or_exit_code(["--config", str(tmp_path / "s.yaml")])
    first = sweep.parser().parse_or_exit_code(argv)
    assert not isinstance(again, int) and not isinstance(first, int)
    assert (again.out, again.seeds, first.out, first.seeds) == ("sweeps/noise-quick", 3, None, None)
    assert {k: v for k, v in vars(again).items() if k not in ("config", "out", "seeds")} == {
        k: v for k, v in vars(first).items() if k not in ("config", "out", "seeds")}
    assert sweep.main(["--config", str(tmp_path / "s.yaml"), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    assert "24 trials\n" in capsys.readouterr().out  # noise 0.4's column: 8 rows x 3 seeds, as argv plans


def test_a_grid_whose_columns_run_different_seeds_keeps_the_default_in_its_printed_config(capsys):
    """The paper noise grid runs more seeds in some columns: one number in the file would change the plan."""
    from fda_ray.papers.grids import GRIDS

    prof = GRIDS["noise"].profiles["paper"]
    assert prof.seeds is None and len({GRIDS["noise"].seeds_for(v) for v in GRIDS["noise"].values}) > 1
    assert sweep.main(["--grid", "noise", "--profile", "paper", "--print-config", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["seeds"] is None and printed["out"] == "sweeps/noise-paper"
    assert sweep.main(["--grid", "noise", "--profile", "nope", "--print-config"]) == 2
    assert "profile='nope' is invalid for grid 'noise'" in capsys.readouterr().err


def test_a_run_from_a_file_gives_the_numbers_of_the_same_flags(fmnist_dir, tmp_path, capsys):
    settings = {"dataset": "fashion-mnist", "data_dir": str(fmnist_dir), "method": "fedgp", "noise": 0.4, **TINY}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(settings))
    assert cli.main(["--config", str(tmp_path / "run.yaml"), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert cli.main([*_flags(settings), "--json"]) == 0
    from_flags = json.loads(capsys.readouterr().out)
    numbers = [[(r["round"], r["accuracy"], r["loss"]) for r in out["rounds"]] for out in (from_file, from_flags)]
    assert numbers[0] == numbers[1]  # the same code path twice: the same numbers, exactly
    assert from_file["config"] == from_flags["config"]


@pytest.mark.parametrize("text,name,needle", [
    ("lr: 0.1\n", "a.yaml", "config key 'lr' in {path} is invalid: not an option of python -m fda_ray"),
    ("rounds: abc\n", "a.yaml", "rounds='abc' is invalid: an integer (config key 'rounds' in {path})"),
    ("print_config: xml\n", "a.yaml", "config key 'print_config' in {path} is invalid: not an option"),
    ("executor: [serial]\n", "a.yaml", "config key 'executor' in {path} is invalid: a list (['serial']); one value"),
    ("- rounds\n", "a.yaml", "config={path!r} is invalid: a mapping of option names to values"),
    ("rounds: [1\n", "a.yaml", "config={path!r} is invalid: not YAML"),
    ("{rounds: 1}", "a.json", "config={path!r} is invalid: not JSON"),
    ("filter: maybe\n", "a.yaml", "config key 'filter' in {path} is invalid: 'maybe'; true or false"),
    ("method: nope\n", "a.yaml", "method='nope' is invalid"),
])
def test_a_bad_file_is_one_line_and_exit_code_2(tmp_path, capsys, text, name, needle):
    """(A value its option's type refuses names the file and the key.)"""
    path = tmp_path / name
    path.write_text(text)
    assert cli.main(["--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle.format(path=str(path)) in err[0], err


def test_a_missing_file_and_two_files_are_one_line_errors(tmp_path, capsys):
    assert cli.main(["--config", str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"error: config={str(tmp_path / 'none.yaml')!r} is invalid: no such file"
    (tmp_path / "a.yaml").write_text("rounds: 1\n")
    assert sweep.main(["--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "a.yaml")]) == 2
    assert "one --config a command" in capsys.readouterr().err


@pytest.mark.slow  # a sweep: the local backend starts a process for it (it imports torch)
def test_a_sweep_from_a_file_records_the_flags_it_ran_with(fmnist_dir, tmp_path, capsys, monkeypatch, no_ray):
    from test_sweep import make_tiny_grid
    from fda_ray.papers.grids import GRIDS

    grid = make_tiny_grid()
    monkeypatch.setitem(GRIDS, grid.name, grid)
    out = tmp_path / "s"
    cfg = {"grid": grid.name, "backend": "local", "workers": 1, "methods": ["target_only"], "values": [0.8],
           "rounds": 2, "data_dir": str(fmnist_dir), "out": str(out)}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(cfg))
    assert sweep.main(["--config", str(tmp_path / "sweep.yaml"), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["grid"] == grid.name and printed["methods"] == "target_only" and printed["rounds"] == 2
    assert sweep.main(["--config", str(tmp_path / "sweep.yaml")]) == 0
    capsys.readouterr()
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert {(r["row"], r["noise"], r["rounds"]) for r in rows} == {("target_only", 0.8, 2)}
    command = next(x for x in (out / "summary.md").read_text().splitlines() if x.startswith("Command: "))
    assert "--config" not in command and "--methods target_only" in command and "--values 0.8" in command
    # the recorded command replays without the file: --resume with its flags finds every trial done
    flags = command[len("Command: `python -m fda_ray.sweep "):-1].split()
    assert sweep.main([*flags, "--resume", "--json"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[printed.index("{"):])
    assert summary["trials"] == 1 and summary["trials_run"] == 0


def test_a_sweeps_bad_value_names_the_file_and_the_key(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("seeds: three\n")
    assert sweep.main(["--grid", "noise", "--config", str(tmp_path / "s.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: config key 'seeds' in {tmp_path / 's.yaml'} is invalid: 'three'; an integer", err


def test_a_familys_true_false_parameter_prints_and_reads_back_the_same(tmp_path, capsys):
    """A family's switch (FedWCA's labelset; a plug-in's boolean=True field takes the same flag) is a bool from its
    word, so --print-config's file prints itself again (it came back as the string 'true') and a grid's `false`
    and the flag's `false` are one value."""
    argv = ["--method", "fedwca", "--dataset", "fmnist-5"]
    assert cli.main(argv + ["--print-config"]) == 0
    first = capsys.readouterr().out
    (tmp_path / "w.yaml").write_text(first)
    assert cli.main(["--config", str(tmp_path / "w.yaml"), "--print-config"]) == 0
    again = capsys.readouterr().out
    assert yaml.safe_load(again)["fedwca_labelset"] is True
    assert [x for x in again.splitlines() if "labelset" in x] == [x for x in first.splitlines() if "labelset" in x]
    assert config_from_args(_parse(argv + ["--fedwca-labelset", "False"])).params["fedwca"]["labelset"] is False
    assert cli.main(argv + ["--fedwca-labelset", "maybe"]) == 2
    assert "fedwca.labelset='maybe' is invalid: true or false" in capsys.readouterr().err


def test_environment_indices_print_as_integers_and_read_back(tmp_path, capsys):
    """--source-envs takes integers and --print-config writes them so (it wrote [0.0]); a file from before, with
    [0.0], still reads as environment 0, and a fractional index is refused in one line."""
    argv = ["--dataset", "colored-fmnist", "--test-env", "2", "--source-envs", "0", "1"]
    assert cli.main(argv + ["--print-config"]) == 0
    text = capsys.readouterr().out
    assert "source_envs: [0, 1]" in text.splitlines()
    (tmp_path / "old.yaml").write_text(text.replace("source_envs: [0, 1]", "source_envs: [0.0, 1.0]"))
    assert config_from_args(_parse(["--config", str(tmp_path / "old.yaml")])).source_envs == (0, 1)
    assert cli.main(argv[:4] + ["--source-envs", "0.5"]) == 2
    assert "source_envs='0.5' is invalid: integers" in capsys.readouterr().err


def test_a_value_refused_after_the_parse_names_the_file_and_the_key(tmp_path, capsys):
    """RunConfig's own checks (beta in [0, 1], a family parameter's range) run after the parse; their line names the
    config file's key where the file gave the value, and not where the command line overrides it."""
    (tmp_path / "run.yaml").write_text("method: fedgp\nbeta: 3\n")
    assert cli.main(["--config", str(tmp_path / "run.yaml")]) == 2
    assert capsys.readouterr().err.strip() == ("error: beta=3.0 is invalid: a number in [0, 1] "
                                               f"(config key 'beta' in {tmp_path / 'run.yaml'})")
    assert cli.main(["--config", str(tmp_path / "run.yaml"), "--beta", "2"]) == 2
    assert capsys.readouterr().err.strip() == "error: beta=2.0 is invalid: a number in [0, 1]"
    (tmp_path / "ditto.yaml").write_text("method: ditto\nditto_lam: -1\n")
    assert cli.main(["--config", str(tmp_path / "ditto.yaml"), "--print-config"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"(config key 'ditto_lam' in {tmp_path / 'ditto.yaml'})")
    (tmp_path / "sweep.yaml").write_text("beta: 3\n")
    assert sweep.main(["--search", "beta", "--config", str(tmp_path / "sweep.yaml"), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"(config key 'beta' in {tmp_path / 'sweep.yaml'})")


def test_a_file_nested_too_deeply_is_one_line_not_a_recursion_traceback(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (tmp_path / "deep.yaml").write_text("eval_noise: " + "[" * 5000 + "]" * 5000 + "\n")
    for name, kind in (("deep.json", "JSON"), ("deep.yaml", "YAML")):
        assert cli.main(["--config", str(tmp_path / name), "--print-config"]) == 2
        assert capsys.readouterr().err == \
            f"error: config={str(tmp_path / name)!r} is invalid: not {kind} (nested too deeply)\n"


@pytest.mark.parametrize("argv,line", [
    (["--config", "--print-config"], "error: config is invalid: --config needs a file"),  # (not the next flag)
    (["--config=", "--print-config"], "error: config='' is invalid: --config needs a file"),  # (not '.')
    (["--config", "/dev/null"], "error: config='/dev/null' is invalid: not a regular file (a device, a pipe or a "
                                "socket)"),  # (not "no such file": it is there)
])
def test_config_without_a_file_says_so(argv, line, capsys):
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == line + "\n"


def test_negative_infinity_after_a_flag_is_its_value(capsys):
    """argparse takes '-inf' for a flag ("expected one argument"): every fda-ray parser reads it as the value."""
    for argv in (["--noise", "-inf"], ["--lr-source", "-Infinity"], ["--eval-noise", "0.1", "-nan"]):
        assert cli.main([*argv, "--print-config"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"={argv[-1]!r} is invalid: a finite number" in err, err


def test_print_config_shows_the_executor_the_run_uses(capsys):
    """Without --executor, `python -m fda_ray` uses the whole machine (whole_machine: ray on 2 or more cores):
    --print-config shows that executor (it showed serial, and the file fed back kept the run in one process); an
    --executor given is shown as given."""
    from fda_ray.core.config import RunConfig

    assert cli.main(["--print-config"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)["executor"]
    assert shown == cli.whole_machine(RunConfig(), []).executor
    assert cli.whole_machine(RunConfig(), [], cores=4).executor == "ray"
    assert cli.whole_machine(RunConfig(), ["--executor", "serial"], cores=4).executor == "serial"
    assert cli.main(["--print-config", "--executor", "serial"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["executor"] == "serial"


def test_a_config_value_that_starts_with_a_dash_is_the_keys_value(tmp_path):
    """A file's value that looks like a flag (data_dir: "-x") is its key's value (argparse took it for a flag:
    "argument --data-dir: expected one argument", without the file's key)."""
    (tmp_path / "run.yaml").write_text('data_dir: "-x"\nnoise: -0.0\n')
    a = _parse(["--config", str(tmp_path / "run.yaml")])
    assert a.data_dir == "-x" and a.noise == 0.0
