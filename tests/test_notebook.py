"""examples/results-and-search.ipynb runs top to bottom (nbclient, a fresh Python kernel): it loads a committed
sweep, checks fda_ray.results.load against collect's table, redraws its figure and runs a tiny search on Ray Tune."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_example_notebook_runs(fmnist_dir, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("FDA_RAY_EXAMPLE_DATA", str(fmnist_dir))
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(ROOT / "examples" / "results-and-search.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "collect's cells agree: 24" in text  # 8 rows x 3 noise levels
    assert "target_val: beta = " in text and "oracle: beta = " in text
    assert "figure: " in text
