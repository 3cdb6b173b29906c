"""The package's structure and the committed records' identities.

- No import circles, between modules or between packages (tools/imports.py reads every import statement,
  in functions too, except those under `if TYPE_CHECKING:`): the layout by concept stays a set of floors.
- Every committed trial record in docs/results keeps its key: the key is recomputed from the record's own
  fields by today's code (a moved or renamed module, a new RunConfig field or a changed resolution that
  changes a key would make `--resume` rerun finished trials and orphan their records).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from fda_ray.experiments.records import moved_by_a_documented_default

from fda_ray.experiments.records import TRIAL_FILE, Trial, trial_key

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("imports_tool", ROOT / "tools" / "imports.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_circles():
    tool = _tool()
    edges = tool.graph()
    assert len(edges) > 60  # every module was read
    assert tool.circles(edges) == []
    pkg = tool.package_graph(edges)
    assert tool.circles(pkg) == []
    fl = tool.floors(pkg)
    # the layers, bottom up: the core imports no other package; Ray's runtime sits above the algorithms
    assert fl["fda_ray.core"] == 0
    assert fl["fda_ray.core"] < fl["fda_ray.data"] < fl["fda_ray.train"] < fl["fda_ray.algorithms"] \
        < fl["fda_ray.runtime"] < fl["fda_ray.experiments"]
    # With the type-only imports counted too, no circle either, between modules or packages (the families type their
    # config as RunConfig, which sits in the core and reaches the registries through fda_ray.core.registry)
    typed = tool.graph(type_only=True)
    assert tool.circles(typed) == [] and tool.circles(tool.package_graph(typed)) == []


def test_the_circle_finder_finds_circles():
    tool = _tool()
    assert tool.circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    with pytest.raises(ValueError, match="circle between packages"):
        tool.floors({"x": {"y"}, "y": {"x"}})


def test_imports_read_function_level_and_package_faces(tmp_path):
    """A function-level import counts, a TYPE_CHECKING one does not, and importing a.b.c from outside a.b runs
    the face a/b/__init__.py (the way client -> algorithms.base once closed a circle through the face)."""
    tool = _tool()
    src = tmp_path / "fda_ray"
    (src / "pkg").mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "pkg" / "__init__.py").write_text("from fda_ray.pkg.inner import X\n")
    (src / "pkg" / "inner.py").write_text("X = 1\n")
    (src / "user.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fda_ray.other\n"
                                 "def f():\n    from fda_ray.pkg.inner import X\n")
    (src / "other.py").write_text("")
    tool.ROOT = tmp_path
    edges = tool.graph(tool.modules())
    assert edges["fda_ray.user"] == {"fda_ray.pkg", "fda_ray.pkg.inner"}
    assert edges["fda_ray.pkg.inner"] == set()  # its own package's face is not re-run


def committed_records() -> list[Path]:
    return sorted((ROOT / "docs" / "results").rglob(TRIAL_FILE))


def test_committed_trial_keys_unchanged():
    records = committed_records()
    assert len(records) > 900
    changed = []
    for path in records:
        d = json.loads(path.read_text())
        v = "all" if d["value"] is None else f"{d['value']:g}"
        middle = d["key"][len(d["row"]) + 1:d["key"].rindex(f"-seed{d['seed']}-")]  # "<variable><value>"
        assert middle.endswith(v), path
        key = trial_key(d["row"], middle[:-len(v)], d["value"], d["seed"], d["params"], d.get("kind", "run"),
                        d.get("weights_from"))
        if path.parent.name != d["key"] or (key != d["key"] and not moved_by_a_documented_default(
                path.parent, Trial.from_dict(d))):  # (a default changed on purpose: records.MOVED_DEFAULTS)
            changed.append(f"{path.relative_to(ROOT)}: {key}")
    assert changed == []


def test_a_changed_field_changes_the_key():
    """The check above can fail: a number-changing field moves the key, an execution field does not."""
    params = {"dataset": "fashion-mnist", "method": "fedgp", "seed": 0, "noise": 0.2}
    key = trial_key("fedgp", "noise", 0.2, 0, params)
    assert trial_key("fedgp", "noise", 0.2, 0, {**params, "beta": 0.25}) != key
    assert trial_key("fedgp", "noise", 0.2, 0, {**params, "client_retries": 5}) == key


def test_the_package_face_is_lazy_and_gives_its_three_names():
    """`import fda_ray.core` loads no torch (the face imports nothing until a name is used); the face's names are
    the runtime's own objects; a name it does not have is an AttributeError."""
    import subprocess
    import sys

    code = ("import sys, fda_ray.core; print('torch' in sys.modules);"
            "from fda_ray import RunConfig, History, run;"
            "import fda_ray.core.config as c, fda_ray.runtime.engine as e, fda_ray.core.history as h;"
            "print(RunConfig is c.RunConfig and run is e.run and History is h.History)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert out.returncode == 0 and out.stdout.split() == ["False", "True"], out.stderr[-2000:]
    import fda_ray

    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        fda_ray.nope
