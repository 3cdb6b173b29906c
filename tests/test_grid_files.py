"""Grids and searches defined in YAML/JSON files (fda_ray/papers/files.py): every built-in definition written out loads back
to the same definition and plans the same trials; a file grid runs as the same grid registered in Python would,
and collect reads it from the copy the sweep kept; a bad file is one line naming the key, the value and what is
allowed (exit code 2 on the command line)."""
from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest
import yaml

from fda_ray.experiments import sweep
from fda_ray.experiments.search import load_search
from fda_ray.experiments.trials import load_grid, plan
from fda_ray.papers.files import DefinitionFileError, dump, grid_from_dict, grid_to_dict, search_from_dict, search_to_dict
from fda_ray.papers.grids import GRIDS
from fda_ray.papers.searches import SEARCHES


def _reload(text: str, fmt: str):
    from fda_ray.core.config_files import yaml_load

    return yaml_load(text) if fmt == "yaml" else json.loads(text)


def test_a_grid_files_exponent_without_a_dot_or_sign_is_a_number(tmp_path):
    """YAML 1.1 (PyYAML) reads `1e-3` and `1.0e12` as strings: a profile's `lr_source: 1e-3` was refused as
    "'1e-3' is invalid: a finite number > 0". Grid files read floats as YAML 1.2 (and JSON) do."""
    text = dump(grid_to_dict(GRIDS["noise"])).replace("vectorise: 'on'", "vectorise: 'on', lr_source: 1e-3, "
                                                                         "lr_target: 2.5E-4")
    assert "lr_source: 1e-3" in text and yaml.safe_load(text)["profiles"]["quick"]["fields"]["lr_source"] == "1e-3"
    (tmp_path / "g.yaml").write_text(text)
    trials = plan(load_grid(str(tmp_path / "g.yaml")), "quick")
    assert trials and {(t.config().lr_source, t.config().lr_target) for t in trials} == {(1e-3, 2.5e-4)}


def test_a_definition_files_unquoted_on_off_is_the_fields_word_and_num_samples_may_be_one_number(tmp_path):
    """YAML 1.1 reads an unquoted off/on (no/yes) as a boolean: `vectorise: off` in a grid's fields and a choice's
    `values: [on, off]` were refused ("vectorise=False is invalid", "values[0]=True is invalid"). For a field that
    takes words they are its words; a bare `num_samples: 3` is that count for every profile."""
    text = dump(grid_to_dict(GRIDS["noise"])).replace("vectorise: 'on'", "vectorise: off")
    assert "vectorise: off" in text
    (tmp_path / "g.yaml").write_text(text)
    assert {t.config().vectorise for t in plan(load_grid(str(tmp_path / "g.yaml")), "quick")} == {"off"}
    d = search_to_dict(SEARCHES["beta"])
    d["num_samples"] = 3
    text = dump(d).replace("space:\n", "space:\n- {name: vectorise, kind: choice, values: [on, off]}\n")
    assert "values: [on, off]" in text and "num_samples: 3\n" in text
    (tmp_path / "s.yaml").write_text(text)
    s = load_search(str(tmp_path / "s.yaml"))
    assert s.space[0].values == ("on", "off") and s.num_samples == {p: 3 for p in s.profiles}
    # a field that takes a number still refuses a boolean, naming it
    d = search_to_dict(SEARCHES["beta"])
    d["fixed"] = {"rounds": True}
    (tmp_path / "b.yaml").write_text(dump(d))
    with pytest.raises(DefinitionFileError, match="rounds=True is invalid"):
        load_search(str(tmp_path / "b.yaml"))


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("name", list(GRIDS))
def test_every_built_in_grid_written_as_a_file_plans_the_same_trials(name, fmt):
    grid = GRIDS[name]
    again = grid_from_dict(_reload(dump(grid_to_dict(grid), fmt), fmt), f"{name}.{fmt}")
    assert grid_to_dict(again) == grid_to_dict(grid)
    for profile in grid.profiles:
        # the trials' keys hash their fields: equal keys are equal RunConfigs, trial for trial
        ours, theirs = plan(again, profile), plan(grid, profile)
        assert [t.key for t in ours] == [t.key for t in theirs] and len(ours) > 0


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("name", list(SEARCHES))
def test_every_built_in_search_written_as_a_file_is_the_same_search(name, fmt):
    from fda_ray.experiments.search import search_trials, studies

    s = SEARCHES[name]
    again = search_from_dict(_reload(dump(search_to_dict(s), fmt), fmt), f"{name}.{fmt}")
    assert search_to_dict(again) == search_to_dict(s)
    for profile in s.profiles:
        ours = [t.key for st in studies(again) for t in search_trials(again, profile, st, 3)]
        assert ours == [t.key for st in studies(s) for t in search_trials(s, profile, st, 3)]


def _tiny() -> dict:
    from test_sweep import make_tiny_grid

    d = grid_to_dict(make_tiny_grid())
    d["name"] = "tiny-file"
    return d


BAD = [
    (lambda d: d.update(colour="red"), "colour='red' is invalid: not a known key"),
    (lambda d: d.pop("rows"), "rows is missing"),
    (lambda d: d["rows"][0].update(method="fedgpp"), "rows[0].method='fedgpp' is invalid: one of"),
    (lambda d: d.update(dataset="imagenet"), "dataset='imagenet' is invalid: one of"),
    (lambda d: d.update(seeds="three"), "seeds='three' is invalid: an integer from 1 to 1000"),
    # a count that would plan for ever: capped as --seeds is (it hung, filling memory)
    (lambda d: d.update(seeds=10 ** 23), f"seeds={10 ** 23} is invalid: an integer from 1 to 1000"),
    (lambda d: d["profiles"]["quick"].update(seeds=10 ** 23), "profiles.quick.seeds="),
    # a value twice: its trials twice, at once, into one record
    (lambda d: d.update(values=[0.0, 0.8, 0.8]), "values=[0.0, 0.8, 0.8] is invalid: each value once"),
    # names that become folders: a key with '/' wrote records outside --out
    (lambda d: d["rows"][0].update(key="../../x"), "rows[0].key='../../x' is invalid: letters, digits, '_', '-' and"),
    (lambda d: d.update(name="../evil"), "name='../evil' is invalid: letters, digits"),
    (lambda d: d["profiles"].update({"..": {}}), "profiles key='..' is invalid: letters, digits"),
    (lambda d: d.update(values=[]), "values=[] is invalid: a list of at least one item"),
    (lambda d: d["profiles"]["quick"].update(values=[0.5]), "profile 'quick' runs noise=0.5, which is not one of"),
    (lambda d: d["profiles"]["quick"]["fields"].update(roundz=3), "field 'roundz' is not a RunConfig field"),
    (lambda d: d["profiles"]["quick"]["fields"].update(rounds=-1), "rounds=-1"),
    (lambda d: d.update(variable="noize"), "variable='noize' is invalid: a RunConfig field"),
    (lambda d: d.update(profiles={}), "profiles={} is invalid: name at least one profile"),
]


@pytest.mark.parametrize("change,needle", BAD, ids=[b[1].split(" ")[0] for b in BAD])
def test_a_bad_grid_file_is_one_line_naming_the_key(tmp_path, capsys, change, needle):
    d = _tiny()
    change(d)
    path = tmp_path / "g.yaml"
    path.write_text(dump(d))
    with pytest.raises(DefinitionFileError) as e:
        load_grid(str(path))
    assert needle in str(e.value) and str(e.value).startswith(f"grid file {str(path)!r}: ") and "\n" not in str(e.value)
    assert sweep.main(["--grid", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_a_bad_search_file_is_one_line(tmp_path, capsys):
    d = search_to_dict(SEARCHES["beta"])
    d["space"][0]["kind"] = "normal"
    (tmp_path / "k.yaml").write_text(dump(d))
    with pytest.raises(DefinitionFileError, match=r"space\[0\]: dim 'beta': kind='normal' is invalid"):
        load_search(str(tmp_path / "k.yaml"))
    d = search_to_dict(SEARCHES["beta"])
    d["rules"] = ["oracle"]
    (tmp_path / "s.json").write_text(dump(d, "json"))
    assert sweep.main(["--search", str(tmp_path / "s.json"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "the first rule is what the scheduler optimises" in err and err.count("\n") == 1
    with pytest.raises(DefinitionFileError, match="not YAML"):
        (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
        load_grid(str(tmp_path / "broken.yaml"))
    with pytest.raises(DefinitionFileError, match="no such file"):
        load_search(str(tmp_path / "absent.yaml"))
    with pytest.raises(DefinitionFileError, match="a grid file .* or one of the known grids"):
        load_grid("no-such-grid")


def test_a_search_file_caps_its_counts_and_checks_its_names(tmp_path, capsys):
    for change, needle in [(lambda d: d["num_samples"].update(quick=10 ** 20),
                            f"num_samples.quick={10 ** 20} is invalid: an integer from 1 to 10000"),
                           (lambda d: d.update(rerun_seeds=10 ** 20), "rerun_seeds="),
                           (lambda d: d.update(name="a/b"), "name='a/b' is invalid: letters, digits"),
                           (lambda d: d.update(values=[0.2, 0.2]), "values=[0.2, 0.2] is invalid: each value once")]:
        d = search_to_dict(SEARCHES["beta"])
        change(d)
        (tmp_path / "s.yaml").write_text(dump(d))
        with pytest.raises(DefinitionFileError, match=re.escape(needle)):
            load_search(str(tmp_path / "s.yaml"))


def test_a_grid_file_nested_too_deeply_is_one_line(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    assert sweep.main(["--grid", str(tmp_path / "deep.json"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: grid={str(tmp_path / 'deep.json')!r} is invalid: not JSON (nested too deeply)\n"


def test_print_grid_writes_the_built_in_definition(capsys):
    assert sweep.main(["--grid", "noise", "--print-grid"]) == 0
    assert grid_from_dict(yaml.safe_load(capsys.readouterr().out), "-") == GRIDS["noise"]
    assert sweep.main(["--search", "fssda-temperature", "--print-grid", "json"]) == 0
    assert search_to_dict(search_from_dict(json.loads(capsys.readouterr().out), "-")) == \
        search_to_dict(SEARCHES["fssda-temperature"])


@pytest.mark.slow  # two sweeps: the local backend starts a process for each (it imports torch)
def test_a_file_grid_runs_as_the_same_grid_in_python_and_collect_reads_its_kept_copy(
        fmnist_dir, tmp_path, capsys, monkeypatch, no_ray):
    from fda_ray.experiments.collect import collect_tables, to_markdown
    from test_sweep import make_tiny_grid

    d = _tiny()
    path = tmp_path / "tiny.yaml"
    path.write_text(dump(d))
    common = ["--backend", "local", "--workers", "1", "--methods", "target_only", "--values", "0.8",
              "--data-dir", str(fmnist_dir), "--no-figures"]
    assert sweep.main(["--grid", str(path), "--out", str(tmp_path / "file"), *common]) == 0
    grid = make_tiny_grid()
    monkeypatch.setitem(GRIDS, "tiny-file", type(grid)(**{**grid.__dict__, "name": "tiny-file"}))
    assert sweep.main(["--grid", "tiny-file", "--out", str(tmp_path / "python"), *common]) == 0
    capsys.readouterr()
    ran = [pq.read_table(tmp_path / d / "results.parquet").to_pylist() for d in ("file", "python")]
    assert len(ran[0]) == 3 and [r["accuracy"] for r in ran[0]] == [r["accuracy"] for r in ran[1]]  # same code path
    # results.parquet: the resolved config beyond the grid's fields, and the build that recorded each trial
    import torch

    rec = json.loads(next((tmp_path / "file" / "trials").iterdir()).joinpath("rows.json").read_text())
    assert all(r["lr_target"] == rec["config"]["lr_target"] and r["batch_target"] == rec["config"]["batch_target"]
               for r in ran[0])
    assert {r["build_torch"] for r in ran[0]} == {torch.__version__} and all(r["build_code"] for r in ran[0])
    assert yaml.safe_load((tmp_path / "file" / "grid.yaml").read_text()) == d
    # The file changes after the sweep: collect reads the grid the sweep ran (its kept copy), not the new file.
    path.write_text(dump({**d, "paper_ref": "edited later", "values": [0.1]}))
    monkeypatch.delitem(GRIDS, "tiny-file")
    (table,) = collect_tables([tmp_path / "file"])
    cell = table.cells[("target_only", 0.8)]
    assert cell.seeds == {0: pytest.approx(100 * ran[0][-1]["accuracy"])}
    assert table.paper_ref == "test numbers" and "tiny-file" in to_markdown([table])


def test_the_example_grid_file_is_valid_and_plans_its_trials():
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "grid-noise-small.yaml"
    grid = load_grid(str(path))
    assert [r.key for r in grid.rows] == ["fedgp_0.25", "fedgp_0.5", "fedgp_auto", "target_only"]
    assert len(plan(grid, "quick")) == 4 * 2 and len(plan(grid, "paper")) == 4 * 2 * 3
    assert {t.params["beta"] for t in plan(grid, "quick") if t.row.startswith("fedgp_0")} == {0.25, 0.5}
