"""`python -m fda_ray.run`: JSON output, progress lines, one-line errors with exit code 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fda_ray.cli import main

TINY = ["--num-sources", "2", "--rounds", "1", "--warmup-rounds", "1", "--samples-per-client", "96",
        "--test-samples", "50", "--target-labelled", "32", "--threads", "1"]


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
    assert (tmp_path / "r.parquet").exists()


@pytest.mark.parametrize("args,needle", [
    (["--method", "fedfoo"], "method='fedfoo' is invalid: known methods: source_only"),
    (["--noise", "-1"], "noise=-1.0 is invalid"),
    (["--beta", "2"], "beta=2.0 is invalid"),
    (["--projection", "orthogonal"], "projection='orthogonal' is invalid"),
    (["--dataset", "mnist"], "dataset='mnist' is invalid: known datasets"),
])
def test_bad_input_one_line_exit_2(fmnist_dir, capsys, args, needle):
    rc = main(["--data-dir", str(fmnist_dir), *TINY, *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and err.count("\n") == 1


def test_missing_dataset_names_searched_paths(tmp_path, monkeypatch, capsys):
    import fda_ray.data as data

    monkeypatch.setattr(data, "FMNIST_SYSTEM_DIR", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FDA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    rc = main(["--data-dir", str(tmp_path / "empty"), *TINY])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(tmp_path / "empty") in err and "apt-get install -y dataset-fashion-mnist" in err


def test_module_entry_point_exits_2_without_traceback(fmnist_dir):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    p = subprocess.run([sys.executable, "-m", "fda_ray.run", "--method", "nope", "--data-dir", str(fmnist_dir)],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "method='nope' is invalid" in p.stderr
