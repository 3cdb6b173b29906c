"""Sweeps through Ray Tune end to end on a tiny grid: Parquet rows, summary, resume, the Tuner API, and
one-line errors for bad grids and values."""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
import ray

from fda_ray import sweep
from tuning.grids import GRIDS, Grid

TINY = {"num_sources": 3, "rounds": 2, "warmup_rounds": 1, "samples_per_client": 128, "test_samples": 100,
        "target_labelled": 32}


@pytest.fixture
def tiny_grid(monkeypatch):
    grid = Grid(name="tiny-noise", dataset="fashion-mnist", variable="noise", values=(0.0, 0.8),
                methods=("fedgp", "target_only"), seeds={}, profiles={"quick": dict(TINY), "paper": dict(TINY)},
                paper={"fedgp": {0.0: 76.33}}, paper_ref="test numbers")
    monkeypatch.setitem(GRIDS, grid.name, grid)
    return grid


@pytest.fixture
def no_ray():
    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()


def _args(fmnist_dir, out, *more):
    return ["--grid", "tiny-noise", "--data-dir", str(fmnist_dir), "--out", str(out), *more]


def test_sweep_end_to_end_and_resume(tiny_grid, fmnist_dir, tmp_path, capsys, no_ray):
    out = tmp_path / "sweep"
    assert sweep.main(_args(fmnist_dir, out, "--json")) == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[printed.index("{"):])
    table = pq.read_table(out / "results.parquet").to_pylist()
    # 2 methods x 2 noise values x 1 seed, 3 rounds each (1 warm-up + 2), hyper-parameters as columns.
    assert len(table) == 4 * 3
    assert {(r["method"], r["noise"]) for r in table} == {(m, v) for m in ("fedgp", "target_only") for v in (0.0, 0.8)}
    assert sorted({r["round"] for r in table}) == [0, 1, 2]
    assert all(r["grid_value"] == r["noise"] and r["samples_per_client"] == 128 for r in table)
    finals = {(r["method"], r["noise"]): r["accuracy"] for r in table if r["round"] == 2}
    assert summary["cells"]["fedgp"]["0"]["mean"] == pytest.approx(100 * finals[("fedgp", 0.0)])
    assert summary["cells"]["fedgp"]["0"]["paper"] == 76.33 and summary["failures"] == []
    text = (out / "summary.md").read_text()
    assert f"{100 * finals[('fedgp', 0.0)]:.2f} / 76.33" in text and "Wall time" in text
    # The trials equal plain runs of the same configs.
    from fda_ray.config import RunConfig
    from fda_ray.engine import run

    cfg = RunConfig(dataset="fashion-mnist", method="target_only", noise=0.8, seed=0, threads=1,
                    data_dir=str(fmnist_dir), **TINY)
    assert finals[("target_only", 0.8)] == pytest.approx(run(cfg).final_accuracy)
    # A second run into the same directory needs --resume; resuming a finished sweep redoes nothing.
    assert sweep.main(_args(fmnist_dir, out)) == 2
    assert "pass --resume" in capsys.readouterr().err
    before = (out / "results.parquet").stat().st_mtime_ns
    assert sweep.main(_args(fmnist_dir, out, "--resume")) == 0
    again = pq.read_table(out / "results.parquet").to_pylist()
    assert len(again) == len(table) and (out / "results.parquet").stat().st_mtime_ns > before
    assert {(r["method"], r["noise"], r["round"]): r["accuracy"] for r in again} == \
           {(r["method"], r["noise"], r["round"]): r["accuracy"] for r in table}


@pytest.mark.parametrize("args,field", [(["--grid", "nope"], "grid='nope'"),
                                        (["--grid", "noise", "--profile", "huge"], "profile='huge'"),
                                        (["--grid", "noise", "--seeds", "0"], "seeds=0"),
                                        (["--grid", "noise", "--max-concurrent", "0"], "max_concurrent=0")])
def test_bad_sweep_arguments_give_one_line(args, field, capsys):
    assert sweep.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field} is invalid")


def test_bad_grid_value_gives_one_line(tiny_grid, fmnist_dir, tmp_path, capsys, monkeypatch):
    bad = Grid(name="bad", dataset="fashion-mnist", variable="beta", values=(1.5,), methods=("fedda",), seeds={},
               profiles={"quick": dict(TINY)})
    monkeypatch.setitem(GRIDS, "bad", bad)
    assert sweep.main(["--grid", "bad", "--data-dir", str(fmnist_dir), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: beta=1.5 is invalid")


def test_search_space_rejects_unknown_fields():
    import fda_ray.tune as ft

    with pytest.raises(ValueError, match=r"search space field 'lr' is invalid: RunConfig fields are"):
        ft.search_space(method="fedgp", lr=0.1)


def test_programmatic_tuner(fmnist_dir, tmp_path, no_ray):
    """The README's Tune API path: a Tuner over RunConfig fields; each trial's last round equals a plain run."""
    from ray import tune

    import fda_ray.tune as ft
    from fda_ray.config import RunConfig
    from fda_ray.engine import run

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    space = ft.search_space(dataset="fashion-mnist", data_dir=str(fmnist_dir), threads=1,
                            method=tune.grid_search(["fedda", "target_only"]), noise=0.4, **TINY)
    results = tune.Tuner(ft.with_resources(space), param_space=space,
                         run_config=tune.RunConfig(storage_path=str(tmp_path), name="api", verbose=0)).fit()
    assert len(results) == 2 and not results.errors
    for r in results:
        assert r.metrics["round"] == 2
        cfg = RunConfig(**{k: v for k, v in r.config.items()})
        assert r.metrics["accuracy"] == pytest.approx(run(cfg).final_accuracy)
