"""The fused-trials benchmarks beside the sweep's: benchmarks.served (served trials against trials of their own) and
benchmarks.compiled_step (a fused step eager and under torch.compile): bad input in one line, their tables from a
record, and a tiny run of each whose numbers are checked against the plain path."""
from __future__ import annotations

import json

import pytest

from benchmarks import compiled_step, served


@pytest.mark.parametrize("module,args,line", [
    (served, ["--fuse", "1"], "error: fuse=1 is invalid: a whole number >= 2 (the served run's --fuse)"),
    (served, ["--device", "tpu"], "error: device='tpu' is invalid: cpu or cuda"),
    (compiled_step, ["--steps", "0"], "error: steps=0 is invalid: an integer >= 1"),
    (compiled_step, ["--device", "tpu"], "error: device='tpu' is invalid: cpu, or cuda on a machine with a GPU"),
])
def test_bad_arguments_are_one_line(module, args, line, capsys):
    assert module.main(args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]


def test_the_served_table_is_the_records_with_the_ratio_over_plain():
    run = {"trials": 4, "trials_per_minute": 2.0, "trials_at_once_max": 2, "trials_per_batch_max": None,
           "server_batches_median": None}
    result = {"runs": [{**run, "fuse": 1, "wall_seconds": 120.0},
                       {**run, "fuse": 4, "wall_seconds": 80.0, "trials_per_batch_max": 3, "server_batches_median": 5}],
              "accuracy_gap_points_max": 0.0}
    lines = served.table(result).splitlines()
    assert lines[2] == "| plain (--fuse off) | 4 | 120.0 s | 1.00 | 2.0 | 2 | - | - |"
    assert lines[3] == "| served (--fuse 4) | 4 | 80.0 s | 1.50 | 2.0 | 2 | 3 | 5 |"


@pytest.mark.slow  # torch.compile's first compile takes tens of seconds
def test_a_compiled_step_gives_eagers_gradients_within_float_tolerance(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert compiled_step.main(["--trials", "2", "--clients", "1", "--batch", "4", "--steps", "1", "--repeats", "1",
                               "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["layouts"]) == {"per_model", "grouped"}
    for got in r["layouts"].values():
        assert set(got) == {"eager", "compiled"}  # CUDA graphs only on a GPU
        assert got["eager"]["grad_rel_diff_max"] == 0.0  # the same code path twice
        # the compiled kernels sum in other orders: float32 rounding of a few thousand terms, far below a mix-up
        assert 0.0 <= got["compiled"]["grad_rel_diff_max"] <= 1e-4
        assert all(m["ms_per_step"] > 0 for m in got.values())
    assert compiled_step.table(r) in capsys.readouterr().out


@pytest.mark.slow  # two Tune runs on a local Ray
def test_the_served_benchmark_runs_both_and_their_numbers_agree(fmnist_dir, tmp_path, capsys, no_ray):
    out = tmp_path / "s.json"
    assert served.main(["--methods", "fedgp,fedda", "--seeds", "1", "--rounds", "2", "--fuse", "2",
                        "--data-dir", str(fmnist_dir), "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    plain, fused = r["runs"]
    assert (plain["fuse"], fused["fuse"]) == (1, 2) and plain["trials"] == fused["trials"] >= 2
    assert plain["trials_per_batch_max"] is None and fused["trials_per_batch_max"] >= 1
    assert r["accuracy_gap_points_max"] <= 2.0  # float tolerance: within 2 test samples of 100
