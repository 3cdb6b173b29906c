"""The numpy PNG charts: a valid PNG (read back by zlib and by the PNG signature/CRC rules), ticks,
text, lines and heat maps drawn where they should be, and the sweep figures from rows."""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from fda_ray.figures import accuracy_figure, beta_figure, beta_rows
from fda_ray.plot import PALETTE, Canvas, Panel, Series, heatmap, line_chart, nice_ticks, read_png, text_size, write_png
from tuning.grids import Grid


def test_png_round_trip_and_chunk_crcs(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, size=(7, 11, 3), dtype=np.uint8)
    write_png(tmp_path / "x.png", rgb)
    data = (tmp_path / "x.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos = 8
    kinds = []
    while pos < len(data):  # every chunk's CRC is right, so any PNG reader accepts the file
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + body)
        kinds.append(kind)
        pos += 12 + n
    assert kinds == [b"IHDR", b"IDAT", b"IEND"]
    np.testing.assert_array_equal(read_png(tmp_path / "x.png"), rgb)


@pytest.mark.parametrize("lo,hi", [(0, 1), (13.2, 87.9), (-0.003, 0.004), (5, 5), (0, 1e6)])
def test_nice_ticks_cover_the_range_with_round_steps(lo, hi):
    t = nice_ticks(lo, hi)
    assert t[0] <= lo and t[-1] >= hi and 3 <= len(t) <= 12
    steps = np.diff(t)
    np.testing.assert_allclose(steps, steps[0], rtol=1e-9)
    mant = steps[0] / 10 ** np.floor(np.log10(steps[0]))
    assert any(np.isclose(mant, m) for m in (1, 2, 2.5, 5, 10))


def test_text_and_lines_land_where_asked():
    c = Canvas(120, 40)
    c.text(10, 10, "Ab1", scale=2)
    w, h = text_size("Ab1", 2)
    ink = np.argwhere(c.px.min(axis=2) < 128)  # (k, 2) rows, cols of dark pixels
    assert ink[:, 1].min() >= 10 and ink[:, 1].max() < 10 + w and ink[:, 0].min() >= 10 and ink[:, 0].max() < 10 + h
    c = Canvas(50, 50)
    c.line(5, 25, 45, 25, (255, 0, 0), width=3)
    assert tuple(c.px[25, 25]) == (255, 0, 0) and tuple(c.px[10, 25]) == (255, 255, 255)


def test_line_chart_draws_each_series_in_its_colour(tmp_path):
    panels = [Panel("a", "x", "y", [Series("one", [0, 1, 2], [1, 2, 3], [0.1, 0.2, 0.1]),
                                    Series("two", [0, 1, 2], [3, float("nan"), 1])])]
    line_chart(panels, tmp_path / "c.png", title="t")
    img = read_png(tmp_path / "c.png").reshape(-1, 3)
    for colour in PALETTE[:2]:
        assert (np.abs(img.astype(int) - colour).sum(1) == 0).sum() > 50
    assert (np.abs(img.astype(int) - PALETTE[2]).sum(1) == 0).sum() == 0  # no third series
    with pytest.raises(ValueError, match="panels"):
        line_chart([], tmp_path / "none.png")


def test_heatmap_colours_follow_the_values(tmp_path):
    heatmap(np.array([[0.0, 1.0]]), ["r"], ["lo", "hi"], tmp_path / "h.png", annotate=False, cell=40)
    img = read_png(tmp_path / "h.png")
    colours = {tuple(p) for p in img.reshape(-1, 3)}
    assert (68, 1, 84) in colours and (253, 231, 37) in colours  # viridis ends: the minimum and the maximum
    heatmap(np.array([[0, 1], [1, -1]]), ["a", "b"], ["c", "d"], tmp_path / "k.png", categories=["FedDA", "FedGP"])
    colours = {tuple(p) for p in read_png(tmp_path / "k.png").reshape(-1, 3)}
    assert PALETTE[0] in colours and PALETTE[1] in colours and PALETTE[2] not in colours
    with pytest.raises(ValueError, match=r"values shape \(1, 2\) is invalid"):
        heatmap(np.zeros((1, 2)), ["a", "b"], ["c", "d"], tmp_path / "bad.png")


GRID = Grid(name="g", dataset="fashion-mnist", variable="noise", values=(0.0, 0.8), methods=("fedgp_auto", "fedda"),
            seeds={}, profiles={"quick": {}}, paper={"fedda": {0.0: 80.0, 0.8: 40.0}}, paper_ref="p, Table 1")


def _rows():
    rows = []
    for v in GRID.values:
        for r in range(3):
            rows.append({"method": "fedgp_auto", "seed": 0, "grid_value": v, "round": r,
                         "phase": "warmup" if r == 0 else "main", "beta_i": None if r == 0 else [0.1 * r, 0.2 * r]})
            rows.append({"method": "fedda", "seed": 0, "grid_value": v, "round": r, "phase": "main", "beta_i": [0.5, 0.5]})
    return rows


def test_beta_rows_keep_main_rounds_of_one_method_and_seed():
    got = beta_rows(_rows(), GRID, "fedgp_auto")
    assert got[0.8] == [(1, [0.1, 0.2]), (2, [0.2, 0.4])] and set(got) == {0.0, 0.8}
    assert beta_rows(_rows(), GRID, "fedgp_auto", seed=1) == {}


def test_sweep_figures_are_written(tmp_path):
    summary = {"profile": "quick", "cells": {"fedgp_auto": {"0": {"mean": 70.0, "std": 1.0}, "0.8": {"mean": 60.0, "std": 2.0}},
                                             "fedda": {"0": {"mean": 75.0, "std": 0.0}}}}
    accuracy_figure(summary, GRID, tmp_path / "acc.png")
    assert read_png(tmp_path / "acc.png").shape[1] > 800  # two panels: ours and the paper's
    assert beta_figure(_rows(), GRID, "fedgp_auto", tmp_path / "b.png")
    assert not beta_figure(_rows(), GRID, "target_only", tmp_path / "none.png") and not (tmp_path / "none.png").exists()
    assert not beta_figure(_rows(), GRID, "fedda", tmp_path / "static.png")  # static beta: no beta_i figure
