"""The sweep's figures (matplotlib): valid PNG and PDF files of a plausible size, the series expected, their
colours present in the image; the data shapers; heat maps. Not pixel-exact: fonts differ between machines."""
from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib import colors as mcolors

from fda_ray.experiments.figures import (
    accuracy_figure, beta_figure, beta_rows, estimate_rows, estimates_figure, heatmap, predicted_rules)
from fda_ray.papers.grids import Grid, Row

GRID = Grid(name="fig", dataset="fashion-mnist", variable="noise", values=(0.0, 0.4, 0.8),
            rows=(Row("fedgp", "FedGP_0.5", "fedgp"), Row("fedgp_auto", "FedGP_Auto", "fedgp_auto"),
                  Row("target_only", "Target Only", "target_only")),
            seeds={}, profiles={"quick": {}}, paper={"fedgp": {0.0: 76.3, 0.4: 71.1, 0.8: 62.2}}, paper_ref="Auto-weighted FDA, Table 10")


def _rows() -> list[dict]:
    rows = []
    for key, method in (("fedgp", "fedgp"), ("fedgp_auto", "fedgp_auto"), ("target_only", "target_only")):
        for v in GRID.values:
            for r in range(4):
                row = {"row": key, "method": method, "seed": 0, "grid_value": v, "round": r,
                       "phase": "warmup" if r == 0 else "main", "accuracy": 0.5 + 0.1 * r - v / 4}
                if method != "target_only" and r > 0:
                    row.update(beta_i=[0.2 + 0.1 * r, 0.5, 0.9 - 0.1 * r], sigma2=1e-4 * r, d2_i=[1e-3, 2e-3, 4e-3],
                               predicted_rule="fedgp" if r % 2 else "target_only")
                rows.append(row)
    return rows


def _colour_present(img: np.ndarray, name: str) -> bool:
    rgb = np.array(mcolors.to_rgb(name))
    return bool((np.abs(img[..., :3] - rgb).max(-1) < 0.02).sum() > 20)


def test_accuracy_figure_png_pdf_series_and_colours(tmp_path):
    summary = {"profile": "quick", "cells": {
        "fedgp": {"0": {"mean": 70.0, "std": 1.0}, "0.4": {"mean": 65.0, "std": 2.0}, "0.8": {"mean": 60.0, "std": 0.0}},
        "target_only": {"0": {"mean": 60.0, "std": 0.0}, "0.4": {"mean": 55.0, "std": 0.0}}}}
    drawn = accuracy_figure(summary, GRID, ["fedgp", "fedgp_auto", "target_only"], list(GRID.values), tmp_path / "acc")
    assert sorted(p.name for p in drawn.paths) == ["acc.pdf", "acc.png"]
    assert drawn.series == {"ours": ["FedGP_0.5", "Target Only"], "paper": ["FedGP_0.5"]}  # no cells: no line
    # one legend names every row drawn, ours or the paper's (it named the paper panel's rows only: a row without a
    # paper number was an unlabelled line)
    assert drawn.texts == {"title": "Sweep fig: final target accuracy", "ylabel": "target test accuracy (%)",
                           "legend": ["FedGP_0.5", "Target Only"]}
    img = mpimg.imread(tmp_path / "acc.png")
    assert 400 < img.shape[0] < 1500 and 1000 < img.shape[1] < 3000  # two panels side by side, 150 dpi
    assert _colour_present(img, "C0") and _colour_present(img, "C2")  # FedGP_0.5 and Target Only's lines
    pdf = (tmp_path / "acc.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and b"/Type /Page" in pdf
    assert not list(tmp_path.glob("*.tmp*"))  # written through temporary files, renamed into place


def test_beta_and_estimates_figures(tmp_path):
    rows = _rows()
    got = beta_rows(rows, "fedgp_auto")[0.4]
    assert [r for r, _ in got] == [1, 2, 3]  # main rounds only, in order
    assert [b for _, b in got] == [pytest.approx([0.2 + 0.1 * r, 0.5, 0.9 - 0.1 * r]) for r in (1, 2, 3)]
    drawn = beta_figure(rows, GRID, "fedgp_auto", GRID.values, tmp_path / "beta")
    assert drawn is not None and set(drawn.series) == {"noise = 0", "noise = 0.4", "noise = 0.8"}
    assert all(v == ["source 1", "source 2", "source 3"] for v in drawn.series.values())
    assert beta_figure(rows, GRID, "fedgp", GRID.values, tmp_path / "no") is None  # static beta: no figure
    assert beta_figure(rows, GRID, "target_only", GRID.values, tmp_path / "no") is None
    assert not (tmp_path / "no.png").exists()
    est = estimate_rows(rows)
    assert est[0.0]["fedgp"][0] == (1, pytest.approx(0.01), pytest.approx(np.sqrt(7e-3 / 3)))
    drawn = estimates_figure(rows, GRID, GRID.values, tmp_path / "est")
    assert drawn is not None and len(drawn.series) == 6 and drawn.series["noise = 0.4: $\\hat d$"] == ["FedGP_0.5", "FedGP_Auto"]
    assert mpimg.imread(tmp_path / "est.png").shape[0] > 500
    assert predicted_rules(rows)["fedgp"][0.8] == {"fedgp": 2, "target_only": 1}


def test_heatmap_categories_and_values(tmp_path):
    codes = np.array([[0, 1], [2, -1]])
    drawn = heatmap(codes, ["n=5", "n=500"], ["D1", "D9"], tmp_path / "h", title="t", categories=["A", "B", "C", "D"])
    assert drawn.series == {"categories": ["A", "B", "C"]}  # only the categories that occur, -1 is empty
    img = mpimg.imread(tmp_path / "h.png")
    assert _colour_present(img, "tab:blue") and _colour_present(img, "tab:orange") and _colour_present(img, "tab:green")
    drawn = heatmap(np.random.default_rng(0).random((3, 4)), list("abc"), list("defg"), tmp_path / "v", title="v",
                    colorbar_label="MSE")
    assert drawn.series == {"values": ["MSE"]} and (tmp_path / "v.pdf").read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ValueError, match=r"labels must match values of shape \(2, 2\)"):
        heatmap(codes, ["a"], ["b", "c"], tmp_path / "bad", title="x", categories=["A", "B", "C"])


def test_a_regression_sweeps_figure_says_loss(tmp_path):
    """A regression grid's summary carries its loss (summary["metric"] == "loss"): the figure's axis and title say
    test loss (they said accuracy (%), under values of 280)."""
    summary = {"profile": "quick", "metric": "loss", "cells": {"fedgp": {"0": {"mean": 281.8, "ci95": 3.0}}}}
    drawn = accuracy_figure(summary, GRID, ["fedgp"], [0.0], tmp_path / "loss")
    assert drawn.texts["ylabel"] == "target test loss (MSE)" and drawn.texts["title"] == "Sweep fig: final target test loss"
