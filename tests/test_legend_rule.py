"""The legend rule (fda_ray.experiments.figures): a legend never lists lines a reader cannot tell apart. Coinciding
lines are grouped (within half a percent of the panel's range) and drawn once under one entry; the auto-weighted
beta figure of identical sources has one entry, not nine; the noise level is not written sigma."""
from __future__ import annotations

from fda_ray.experiments import figures
from fda_ray.papers.grids import Grid, Row


def test_coinciding_groups_lines_within_half_a_percent_of_the_range():
    lines = {"source 1": [0.5, 0.6, 0.7], "source 2": [0.5, 0.6, 0.7], "source 3": [0.5, 0.6, 0.7001],
             "source 4": [0.2, 0.3, 0.4]}
    # range 0.5: 0.0001 is within 0.0025, so sources 1-3 coincide; source 4 stands apart
    assert figures.coinciding(lines) == [["source 1", "source 2", "source 3"], ["source 4"]]
    assert figures.coinciding({"a": [0.0, 1.0], "b": [0.0, 0.99]}) == [["a"], ["b"]]  # 1 % of the range apart
    assert figures.group_label(["source 1", "source 2", "source 3"]) == "source 1-3 (coincide)"
    assert figures.group_label(["source 1", "source 3"]) == "source 1, 3 (coincide)"
    assert figures.group_label(["FedGP", "FedDA"]) == "FedGP = FedDA"


def _beta_rows(betas_by_round):
    return [{"row": "fedgp_auto", "seed": 0, "phase": "main", "grid_value": 0.4, "round": r, "beta_i": b}
            for r, b in enumerate(betas_by_round)]


def test_the_beta_figure_of_identical_sources_has_one_legend_entry(tmp_path):
    grid = Grid(name="t", dataset="fashion-mnist", variable="noise", values=(0.4,),
                rows=(Row("fedgp_auto", "FedGP_Auto", "fedgp_auto"),), seeds={}, profiles={"quick": {}})
    same = _beta_rows([[0.3] * 9, [0.35] * 9, [0.4] * 9])
    d = figures.beta_figure(same, grid, "fedgp_auto", [0.4], tmp_path / "b")
    assert d.series == {"noise = 0.4": ["source 1-9 (coincide: mean, band min-max)"]}
    apart = _beta_rows([[0.3, 0.6], [0.35, 0.7], [0.4, 0.8]])
    d = figures.beta_figure(apart, grid, "fedgp_auto", [0.4], tmp_path / "c")
    assert d.series == {"noise = 0.4": ["source 1", "source 2"]}


def test_curves_draw_a_line_per_distinguishable_row(tmp_path):
    curves = {0.0: {"a": [(0, 10.0), (1, 50.0)], "b": [(0, 10.0), (1, 50.0)], "c": [(0, 10.0), (1, 30.0)]}}
    d = figures.curves_figure(curves, {"a": "A", "b": "B", "c": "C"}, {0.0: "col"}, tmp_path / "cv",
                              ylabel="accuracy (%)", title="t")
    assert d.series == {"col": ["A = B", "C"]}
    assert (tmp_path / "cv.png").is_file()


def test_the_noise_level_is_not_written_sigma():
    assert figures._value_label("noise", 0.4) == "noise = 0.4"
    assert "σ" not in figures.AXIS_NAMES["noise"]


def test_the_search_trajectory_shows_the_point_each_trial_tried(tmp_path):
    import json
    from pathlib import Path

    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.search import trajectory_figure
    from fda_ray.papers.searches import SEARCHES

    sel = json.loads((Path(__file__).resolve().parents[1] / "docs/results/search-beta/selection.json").read_text())
    d = trajectory_figure(SEARCHES["beta"], sel["studies"], storage_path(tmp_path / "t"))
    for study, entry in sel["studies"].items():
        assert d.series[f"{study}: point"] == ["beta"]  # a panel of beta under each study's accuracies
        assert d.series[study] == [e["key"] for e in entry["trials"]]


def test_no_two_rows_share_a_colour_up_to_twenty(tmp_path):
    # domainbed-colored's 13 rows drew with ten colours: three pairs shared one
    for n in (8, 13, 20):
        assert len({figures.colour(i, n) for i in range(n)}) == n
    rows = tuple(Row(f"r{i}", f"row {i}", "target_only") for i in range(13))
    grid = Grid(name="many", dataset="fashion-mnist", variable="noise", values=(0.0, 0.4), rows=rows, seeds={},
                profiles={"quick": {}})
    summary = {"profile": "quick", "cells": {f"r{i}": {"0": {"mean": float(i), "std": 0.0},
                                                          "0.4": {"mean": float(i) + 1, "std": 0.0}}
                                             for i in range(13)}}
    d = figures.accuracy_figure(summary, grid, [r.key for r in rows], [0.0, 0.4], tmp_path / "a")
    assert d.series["ours"] == [f"row {i}" for i in range(13)]
