"""Damaged or wrong-kind files handed to the programs around the simulator: the synthetic grid's --replot
(its grid.json), the projection benchmark (--cluster-json, --records and the records in it), the pages tool (a
page) and the planner's `ray up` bootstrap config. Each is one line naming the file and what is wrong (exit 2
before any work), never a traceback; the bootstrap config, which fda-ray only reads to plan ahead, is one warning
line and no node types."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import projection as pj
from fda_ray.experiments import synthetic_grid as sg
from fda_ray.runtime.preflight import RunWarning, autoscaler_node_types
from tools import pages

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"  # a binary file's first bytes


def _one_error_line(err: str) -> str:
    """stderr's only line (asserted to be the only one, and no traceback)."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------- python -m fda_ray.synthetic_grid --replot

def _grid_result() -> dict:
    """A 2 (sizes) x 1 (sources) grid's result as the writer makes it (summarize_grid of made-up trials)."""
    cell = {"d2": [0.25], "sigma2": [1.0], "tau2d2": [0.1], "delta": {r: [float(i)] for i, r in enumerate(sg.RULES)},
            "test_mse": {r: [1.0 + i] for i, r in enumerate((*sg.RULES, "fedda_auto", "fedgp_auto"))}}
    return sg.summarize_grid([[cell], [cell]], sg.GridConfig(sources=(3,), sizes=(100, 10), trials=1))


def test_a_grid_json_as_written_is_replotted(tmp_path, capsys):
    (tmp_path / "grid.json").write_text(json.dumps(_grid_result()))
    assert sg.main(["--replot", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "predicted.png").read_bytes()[:8] == PNG[:8]
    assert sg.replot_damage(_grid_result()) is None


@pytest.mark.parametrize("content,why", [
    (b"", "an empty file, not JSON"),
    (PNG, "a binary file, not text"),
    (b"[1, 2]", "a JSON object (a mapping of keys to values) expected, it holds a list"),
    (b'{"cells": []}', "it has no 'config' mapping (the grid's sources and sizes)"),
    (b'{"config": {"sources": [3], "sizes": "100"}, "cells": []}', "its config has no 'sizes' list of numbers"),
    (b'{"config": {"sources": [3], "sizes": [100, 10]}}', "it has no 'cells' list"),
    (b'{"config": {"sources": [3], "sizes": [100, 10]}, "cells": [[{}]]}',
     "its 'cells' are not 2 rows of 1 cells (config: 2 sizes x 1 sources)"),
])
def test_a_damaged_grid_json_is_one_line_naming_it(tmp_path, capsys, content, why):
    path = tmp_path / "grid.json"
    path.write_bytes(content)
    assert sg.main(["--replot", "--out", str(tmp_path)]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith(f"error: grid.json={str(path)!r} is invalid: {why}")
    assert not (tmp_path / "predicted.png").exists()  # found before any drawing


@pytest.mark.parametrize("edit,why", [
    (lambda c: c.pop("sigma"), "its cell [1][0] has no 'sigma' number"),
    (lambda c: c.pop("actual_auto"), "its cell [1][0] has no 'actual_auto'"),
    (lambda c: c.update(predicted="fedx"), "its cell [1][0]'s 'predicted' is 'fedx', not one of target_only"),
])
def test_a_cell_the_heat_maps_cannot_read_is_named(tmp_path, capsys, edit, why):
    result = _grid_result()
    edit(result["cells"][1][0])
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(result))
    assert sg.main(["--replot", "--out", str(tmp_path)]) == 2
    assert why in _one_error_line(capsys.readouterr().err)


def test_the_replot_command_line_prints_no_traceback(tmp_path):
    (tmp_path / "grid.json").write_text("[1, 2]")  # was a TypeError traceback, exit 1
    done = subprocess.run([sys.executable, "-m", "fda_ray.synthetic_grid", "--replot", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert _one_error_line(done.stderr) == (f"error: grid.json={str(tmp_path / 'grid.json')!r} is invalid: a JSON "
                                            "object (a mapping of keys to values) expected, it holds a list")


# ---------------------------------------------------------------- python -m benchmarks.projection

@pytest.mark.parametrize("content,why", [
    (b"[1]", "a JSON object (a mapping of keys to values) expected, it holds a list"),
    (b'{"rows": [{"nodes": 1}]}', "its row 0 has no 'trials' number (each row needs nodes, trials, "
                                  "overhead_s_per_trial)"),
    (b'{"rows": [{"nodes": 1, "trials": 8}]}', "its row 0 has no 'overhead_s_per_trial' number"),
    (b'{"rows": []}', "its 'rows' list is empty"),
    (b'{"rows": [[1]]}', "its row 0 is not a mapping"),
    (PNG, "a binary file, not text"),
])
def test_a_damaged_cluster_json_is_one_line_naming_it(tmp_path, capsys, content, why):
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    assert pj.main(["--cluster-json", str(path)]) == 2
    assert _one_error_line(capsys.readouterr().err).startswith(f"error: --cluster-json={str(path)!r} is invalid: {why}")


def _record(root: Path, rows: dict, key: str = "k1") -> Path:
    """root/sweep/trials/<key>/{trial.json,rows.json} from one committed record, its rows.json replaced by `rows`;
    returns the rows.json."""
    src = next(p for p in sorted((pj.RESULTS).glob("*/trials/*")) if (p / "rows.json").is_file())
    rec = root / "sweep" / "trials" / key
    rec.mkdir(parents=True)
    (rec / "trial.json").write_bytes((src / "trial.json").read_bytes())
    if isinstance(rows.get("config"), dict):  # its trial's method (another's rows are a damaged record)
        rows = {**rows, "config": {**rows["config"],
                                   "method": json.loads((src / "trial.json").read_text())["params"]["method"]}}
    (rec / "rows.json").write_text(json.dumps(rows))
    return rec / "rows.json"


def _timed_rows(**config: object) -> dict:
    cfg = {"dataset": "nowhere", "model": "no-such-model", "method": "fedda", "rounds": 2, "warmup_rounds": 0,
           **config}
    return {"config": cfg, "rows": [{"round": 1, "seconds": 2.0, "client_seconds_sum": 1.0},
                                    {"round": 2, "seconds": 2.0, "client_seconds_sum": 1.0}]}


def test_records_that_are_no_folder_or_hold_no_timed_record_are_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    untimed = tmp_path / "untimed"
    _record(untimed, {**_timed_rows(), "rows": [{"round": 1}, {"round": 2, "seconds": 0}]})
    for folder, why in ((tmp_path / "missing", "no such folder"), (tmp_path / "file", "a file, not a folder"),
                        (tmp_path / "empty", "no finished trial record with timed rounds under it"),
                        (untimed, "no finished trial record with timed rounds under it")):
        assert pj.main(["--records", str(folder)]) == 2  # was max() of an empty sequence, a traceback
        assert _one_error_line(capsys.readouterr().err).startswith(f"error: --records={str(folder)!r} is invalid: "
                                                                    f"{why}")


@pytest.mark.parametrize("rows,why", [
    ({"rows": [{"round": 1}]}, "its 'config' is missing (the trial's resolved RunConfig)"),
    (_timed_rows(model=None), "its config has no 'model' (a text)"),
    (_timed_rows(rounds="2"), "its config has no 'rounds' (an integer)"),
    (_timed_rows(params=[1]), "its config's 'params' is not a mapping of method families to their parameters"),
    ({**_timed_rows(), "rows": [{"round": 1, "seconds": "1.5 s"}]}, "its row 0 has a 'seconds' that is not a "
                                                                    "number of seconds ('1.5 s')"),
])
def test_a_record_that_cannot_be_timed_is_one_line_naming_its_rows_json(tmp_path, capsys, rows, why):
    path = _record(tmp_path, rows)
    assert pj.main(["--records", str(tmp_path)]) == 2
    assert _one_error_line(capsys.readouterr().err) == f"error: rows.json={str(path)!r} is invalid: {why}"


def test_a_record_whose_config_is_a_list_is_no_traceback(tmp_path, capsys):
    """Was a TypeError in load_records. The records' reader may leave such a record out with a warning line
    (fda_ray.experiments.records.finished); either way the command ends in one error line naming it or --records."""
    path = _record(tmp_path, {**_timed_rows(), "config": [1, 2]})
    assert pj.main(["--records", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last in (f"error: rows.json={str(path)!r} is invalid: its 'config' is not a mapping (the trial's "
                    "resolved RunConfig)",
                    f"error: --records={str(tmp_path)!r} is invalid: no finished trial record with timed rounds "
                    "under it (it takes a folder of sweep directories, each with trials/*/rows.json, as docs/results)")


def test_records_of_no_planned_work_project_nothing_without_a_traceback(tmp_path, capsys):
    """Every grid and search not projected (no record of their models): the totals are empty, not max() of
    nothing."""
    _record(tmp_path, _timed_rows())
    assert pj.main(["--records", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no record of model" in out and "Not projected" in out


def test_the_projection_command_line_prints_no_traceback(tmp_path):
    bench = tmp_path / "cluster.json"
    bench.write_text('{"rows": [{"nodes": 1}]}')  # was KeyError: 'overhead_s_per_trial', exit 1
    done = subprocess.run([sys.executable, "-m", "benchmarks.projection", "--cluster-json", str(bench)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert _one_error_line(done.stderr).startswith(f"error: --cluster-json={str(bench)!r} is invalid: its row 0 ")


# ---------------------------------------------------------------- python -m tools.pages

def test_a_page_that_is_binary_a_folder_or_missing_is_one_line(tmp_path, capsys):
    (tmp_path / "p.md").write_bytes(PNG)
    (tmp_path / "d.md").mkdir()
    for page, why in (("p.md", "a binary file, not text"), ("d.md", "a directory, not a file"),
                      ("none.md", "no such file")):
        assert pages.main(["--check", str(tmp_path / page)]) == 2
        assert _one_error_line(capsys.readouterr().err) == f"error: page={str(tmp_path / page)!r} is invalid: {why}"


def test_no_page_is_rewritten_when_a_later_one_is_damaged(tmp_path, capsys):
    stale = tmp_path / "stale.md"
    text = "by <!-- records: gap-range fmnist-ablation fedda -->1.3 to 18.6<!-- /records --> points\n"
    stale.write_text(text)
    (tmp_path / "bad.md").write_bytes(PNG)
    assert pages.main([str(stale), str(tmp_path / "bad.md")]) == 2
    assert "bad.md" in _one_error_line(capsys.readouterr().err)
    assert stale.read_text() == text


def test_the_pages_command_line_prints_no_traceback(tmp_path):
    (tmp_path / "p.md").write_bytes(PNG)  # was a UnicodeDecodeError traceback
    done = subprocess.run([sys.executable, "-m", "tools.pages", "--check", str(tmp_path / "p.md")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert _one_error_line(done.stderr) == f"error: page={str(tmp_path / 'p.md')!r} is invalid: a binary file, not text"


# ---------------------------------------------------------------- `ray up`'s bootstrap config (the planner)

@pytest.mark.parametrize("content,why", [
    (b"\xff\xfe head_node_type: h", "not UTF-8 text (byte 0xff at position 0)"),
    (b"", "an empty file"),
    (b"a: [\n", "not YAML (expected the node content, but found '<stream end>', line 2)"),
    (b"- head\n- worker\n", "a YAML mapping expected (`ray up` writes one), it holds a list"),
    (b"available_node_types: [1]\n", "its available_node_types is not a mapping of node type names to node types"),
    (b"available_node_types:\n  w: 4\n", "its node type 'w' is not a mapping"),
    (b"available_node_types:\n  w: {resources: [1]}\n",
     "its node type 'w' has resources that are not a mapping of resource names to numbers"),
    (b"available_node_types:\n  w: {resources: {CPU: many}}\n", "its node type 'w' has resource 'CPU' = 'many', "
                                                                 "not a number >= 0"),
])
def test_a_damaged_bootstrap_config_is_one_warning_and_no_node_types(tmp_path, monkeypatch, content, why):
    """Found where `ray up` puts it (~/ray_bootstrap_config.yaml, the default path): Ray's autoscaler cannot load
    such a file either, so no node type is known, and the sweep is planned on the nodes up now."""
    monkeypatch.setenv("HOME", str(tmp_path))
    path = tmp_path / "ray_bootstrap_config.yaml"
    path.write_bytes(content)
    with pytest.warns(RunWarning) as caught:
        assert autoscaler_node_types() == []
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "\n" not in message
    assert message == (f"autoscaler_config={str(path)!r} is invalid: {why}; the node types an autoscaler can add "
                       "are not known here: trials are planned on the nodes up now")


def test_a_sound_bootstrap_config_warns_nothing(tmp_path, monkeypatch, recwarn):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ray_bootstrap_config.yaml").write_text(
        "head_node_type: head\navailable_node_types:\n  head: {resources: {CPU: 8}}\n"
        "  gpu: {max_workers: 2, resources: {CPU: 48, GPU: 4}}\n  auto: {max_workers: 1}\n")
    assert autoscaler_node_types() == [{"CPU": 8.0}, {"CPU": 48.0, "GPU": 4.0}, {}]
    assert not [w for w in recwarn if issubclass(w.category, RunWarning)]


# ---------------------------------------------------------------- the auxiliary scripts' flags

def _aux(name: str):  # type: ignore[no-untyped-def]
    """An auxiliary script's module (imported here, so a test of its flags runs nothing of it)."""
    import importlib

    return importlib.import_module(name)


@pytest.mark.parametrize("module,argv,line", [
    ("benchmarks.fused_ops", ["--trials", "abc"], "error: argument --trials: trials='abc' is invalid: an integer"),
    ("benchmarks.fused_ops", ["--trials", "0"], "error: trials=0 is invalid: an integer >= 1"),
    ("benchmarks.fused_ops", ["--trals", "3"], "error: unrecognized arguments: --trals 3; did you mean '--trials'?"),
    ("benchmarks.kernel", ["--threads", "abc"], "error: argument --threads: threads='abc' is invalid: an integer"),
    ("benchmarks.kernel", ["--memory-gib", "lots"],
     "error: argument --memory-gib: memory_gib='lots' is invalid: a number of GiB"),
    ("benchmarks.kernel", ["--bogus"], "error: unrecognized arguments: --bogus"),
    ("benchmarks.projection", ["--trials-per-gpu", "abc"],
     "error: argument --trials-per-gpu: trials_per_gpu='abc' is invalid: an integer"),
    ("benchmarks.projection", ["--measured-noise-column-s", "abc"],
     "error: argument --measured-noise-column-s: measured_noise_column_s='abc' is invalid: a number of seconds"),
    ("benchmarks.projection", ["--gpus", "x"], "error: --gpus='x' is invalid: comma-separated integers >= 1"),
    ("benchmarks.projection", ["--bogus"], "error: unrecognized arguments: --bogus"),
    ("benchmarks.flower", ["--rounds", "abc"], "error: argument --rounds: rounds='abc' is invalid: an integer"),
    ("benchmarks.flower", ["--bogus-flag"], "error: unrecognized arguments: --bogus-flag"),  # (was ignored)
    ("tools.pages", ["--bogus"], "error: unrecognized arguments: --bogus"),
    ("tools.pages", ["--check=1"], "error: argument --check: ignored explicit argument '1'"),
    ("tools.gpu_memory_probe", ["fashion-mnist", "fedgp", "--rounds", "abc"],
     "error: argument --rounds: rounds='abc' is invalid: an integer"),
    ("tools.gpu_memory_probe", ["fashion-mnist", "fedgp", "--stall", "abc"],
     "error: argument --stall: stall='abc' is invalid: a number of seconds"),
    ("tools.gpu_memory_probe", ["fashion-mnist", "fedgp", "--concurrent", "abc"],
     "error: argument --concurrent: invalid choice: 'abc' (choose from '0', '1')"),
    ("tools.authors_fedgp", ["--repo", "r", "--out", "o", "--iter", "i", "--bogus"],
     "error: unrecognized arguments: --bogus"),  # (main_noniid.py's own flags go after --)
    ("tools.authors_fedgp", ["--iter", "abc"], "error: the following arguments are required: --repo, --out"),
    ("tools.imports", ["--bogus"], "error: unrecognized arguments: --bogus"),  # (was ignored, exit 0)
])
def test_an_auxiliary_scripts_bad_flag_is_one_line_exit_2(module, argv, line, capsys):
    """The benchmarks and tools beside fda-ray refuse a bad value or an unknown flag as its programs do
    (fda_ray.core.parsing.OneLineParser): one line naming the option, the value and what is allowed, exit 2, no
    usage dump (argparse printed its usage, 2 to 7 lines, and a message without the rule)."""
    assert _aux(module).main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and _one_error_line(captured.err) == line


def test_flower_without_flwr_names_it_and_how_to_install_it(monkeypatch, capsys):
    """benchmarks.flower runs under Flower's own virtual environment: elsewhere it is one line naming the missing
    package and its install command, exit 2, before any work (was a ModuleNotFoundError traceback, exit 1)."""
    import sys as _sys

    monkeypatch.setitem(_sys.modules, "flwr", None)  # (importlib.util.find_spec: None, as where it is not installed)
    assert _aux("benchmarks.flower").main(["--rounds", "1"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("error: benchmarks.flower needs Flower (flwr), which ") and \
        'pip install "flwr[simulation]==1.42.0"' in line and "--flower-python" in line, line


def test_tools_imports_has_a_help_text(capsys):
    """`python tools/imports.py --help` printed the whole import report (it read no argument); now its usage."""
    assert _aux("tools.imports").main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python tools/imports.py [-h]") and "every circle (exit 1 if any)" in out
