"""The synthetic experiment (Auto-weighted FDA Figure 2) on a 2 x 2 grid: the quantities move the way the grid is built
(distance with the source index, variance with smaller subsamples), predicted = argmin of the Delta errors,
actual = argmin of the test MSEs, the agreement share counts the cells, and the outputs are written."""
from __future__ import annotations

import json

import pytest

from fda_ray.experiments import synthetic_grid as sg
import matplotlib.image as mpimg


def test_small_grid_end_to_end(tmp_path):
    cfg = sg.GridConfig(sources=(1, 9), sizes=(500, 5), trials=1, rounds=5, hidden=8)
    result = sg.run_grid(cfg)
    cells = result["cells"]  # [size][source]
    assert len(cells) == 2 and len(cells[0]) == 2
    assert cells[0][0]["d"] == pytest.approx(0.0, abs=1e-6)  # D_1 is the target domain itself
    assert cells[0][1]["d"] > 0.1 and cells[1][1]["d"] == pytest.approx(cells[0][1]["d"])  # d: source only
    assert cells[1][0]["sigma"] > 5 * cells[0][0]["sigma"]  # 5 samples vs 500: about 10x the std
    for c in (c for row in cells for c in row):
        assert c["predicted"] == min(sg.RULES, key=lambda r: c["delta"][r])
        assert c["actual_static"] == min(sg.RULES, key=lambda r: c["test_mse"][r])
        assert set(c["test_mse"]) == {*sg.RULES, "fedda_auto", "fedgp_auto"}
    assert result["agreement_static"] == sum(c["predicted"] == c["actual_static"] for row in cells for c in row) / 4
    text = sg.write_outputs(result, tmp_path, 1.0, "test")
    for name in ("predicted", "actual_static", "actual_auto"):
        img = mpimg.imread(tmp_path / f"{name}.png")  # (H, W, 4) floats in [0, 1]
        assert img.shape[0] > 200 and img.shape[1] > 300 and img[..., :3].std() > 0.05  # drawn, not blank
        assert (tmp_path / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    assert json.loads((tmp_path / "grid.json").read_text())["agreement_static"] == result["agreement_static"]
    assert "2 x 2 grid" in text and "%" in text
    # the static beta the run used, in the titles and the summary (they said 0.5 whatever --beta was)
    result["config"]["beta"] = 0.9
    text = sg.write_outputs(result, tmp_path, 1.0, "test")
    assert "beta 0.5" not in text and "![actual, beta 0.9]" in text and "actual (beta 0.9)" in text
    titles = []
    from fda_ray.experiments import figures

    real = figures.heatmap
    try:
        figures.heatmap = lambda *a, **k: (titles.append(k["title"]), real(*a, **k))[1]
        sg.draw_heatmaps(result, tmp_path)
    finally:
        figures.heatmap = real
    assert titles[:2] == ["(a) smallest Δ error at init (β = 0.9)", "(b) best target test MSE, β = 0.9"]


@pytest.mark.parametrize("args,field", [(["--sources", "0,3"], "sources=(0, 3)"), (["--sizes", "1"], "sizes=(1,)"),
                                        (["--sizes", "a,b"], "sizes='a,b'"), (["--trials", "0"], "trials=0"),
                                        (["--beta", "2"], "beta=2.0"),
                                        # each once and in the heat maps' order (a cell twice counted twice)
                                        (["--sources", "2,2"], "sources=(2, 2)"), (["--sources", "9,1"], "sources=(9, 1)"),
                                        (["--sizes", "10,2000"], "sizes=(10, 2000)")])
def test_bad_arguments_give_one_line(args, field, capsys):
    assert sg.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {field} is invalid")


def test_agreement_counts_exact_and_near_best_cells():
    from fda_ray.experiments.synthetic_grid import agreement

    def cell(pred, mse):  # mse: target_only, source_only, fedda, fedgp, fedda_auto, fedgp_auto
        m = dict(zip(("target_only", "source_only", "fedda", "fedgp", "fedda_auto", "fedgp_auto"), mse))
        static = min(("target_only", "source_only", "fedda", "fedgp"), key=m.get)
        auto = min(("target_only", "source_only", "fedda_auto", "fedgp_auto"), key=m.get)
        return {"predicted": pred, "test_mse": m, "actual_static": static,
                "actual_auto": {"fedda_auto": "fedda", "fedgp_auto": "fedgp"}.get(auto, auto)}

    r = agreement({"cells": [[cell("target_only", [1.005, 3, 2, 1.0, 2, 0.5]),  # 0.5 % behind FedGP: near best
                              cell("fedgp", [1, 3, 2, 0.9, 2, 0.8]),  # exact (static and auto)
                              cell("source_only", [1, 3, 2, 0.9, 2, 0.8])]]})  # far behind
    assert r["agreement_static"] == pytest.approx(1 / 3) and r["near_best_static"] == pytest.approx(2 / 3)
    assert r["agreement_auto"] == pytest.approx(1 / 3) and r["near_best_auto"] == pytest.approx(1 / 3)
