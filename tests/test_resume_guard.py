"""A resume never adopts another sweep (issue 63, class 2): `--resume` and `--resume auto` (the command the SLURM
script and the RayJob run) into a folder whose sweep.json names another grid, another search, or a grid file with
other rows refuse in one line naming what the folder holds, exit 2, and change nothing in it; chunks of one sweep
(other values, seeds or rows of the same grid) still resume into one folder."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fda_ray.experiments import sweep
from fda_ray.experiments.manifest import Manifest, write as write_manifest
from fda_ray.papers.files import dump, grid_to_dict, write_definition
from fda_ray.papers.grids import GRIDS
from fda_ray.papers.searches import SEARCHES


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` by its bytes' digest (and every directory): what "changes nothing" compares."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


def _held(out: Path, kind: str, name: str, definition=None, command: str = "") -> Path:
    """A folder as a sweep (or search) leaves it: sweep.json, the kept definition, a trial's record."""
    out.mkdir(parents=True)
    write_manifest(out, Manifest(kind=kind, name=name, profile="quick", command=command or
                                 f"python -m fda_ray.sweep --{kind} {name} --out {out}"))
    if definition is not None:
        write_definition(definition, out / f"{kind}.yaml")
    (out / "trials" / "abc123").mkdir(parents=True)
    (out / "trials" / "abc123" / "rows.json").write_text('{"rows": []}\n')
    (out / "summary.md").write_text("the held sweep's summary\n")
    return out


def _tiny_file(path: Path, rows: list[str]) -> Path:
    from test_sweep import make_tiny_grid

    d = grid_to_dict(make_tiny_grid())
    d["name"] = "tiny-file"
    known = {r["key"]: r for r in d["rows"]}
    d["rows"] = [known.get(k, {"key": k, "label": k, "method": k}) for k in rows]
    d["paper"] = {k: v for k, v in d.get("paper", {}).items() if k in rows}
    path.write_text(dump(d))
    return path


@pytest.mark.parametrize("resume", ["auto", "yes"])
@pytest.mark.parametrize("case", ["other-grid", "a-search", "other-file-rows"])
def test_resume_into_another_sweeps_folder_refuses_in_one_line_and_changes_nothing(tmp_path, capsys, case, resume,
                                                                                   fmnist_dir):
    out = tmp_path / "out"
    if case == "other-grid":
        _held(out, "grid", "domainbed-colored", GRIDS["domainbed-colored"])
        argv, held = ["--grid", "noise"], "grid 'domainbed-colored'"
    elif case == "a-search":
        _held(out, "search", "beta", SEARCHES["beta"])
        argv, held = ["--grid", "noise"], "search 'beta'"
    else:
        first = _tiny_file(tmp_path / "first.yaml", ["target_only", "fedgp_auto"])
        from fda_ray.papers.files import grid_file
        _held(out, "grid", str(first), grid_file(str(first)))
        other = _tiny_file(tmp_path / "other.yaml", ["target_only", "fedda"])
        argv, held = ["--grid", str(other)], f"grid {str(first)!r}, whose rows differ"
    before = _tree(out)
    code = sweep.main([*argv, "--out", str(out), "--resume", resume, "--data-dir", str(fmnist_dir),
                       "--backend", "local"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: out={str(out)!r} is invalid for --grid"), err
    assert held in err[0] and "or choose another --out" in err[0] and "--resume)" in err[0]
    assert _tree(out) == before  # nothing moved, replaced or added


def test_a_grid_file_edited_since_its_sweep_is_said_as_that(tmp_path, capsys, fmnist_dir):
    """The same file, edited: the line said "whose rows differ from 'g.yaml''s", the file compared with itself."""
    from fda_ray.papers.files import grid_file

    out, path = tmp_path / "out", tmp_path / "g.yaml"
    _tiny_file(path, ["target_only", "fedgp_auto"])
    _held(out, "grid", str(path), grid_file(str(path)))
    _tiny_file(path, ["target_only", "fedda"])
    assert sweep.main(["--grid", str(path), "--out", str(out), "--resume", "--data-dir", str(fmnist_dir),
                       "--backend", "local"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"it holds the records of grid {str(path)!r}, whose rows differ from the file's now (edited since)" in line


def test_a_search_resumed_into_a_grids_folder_refuses(tmp_path, capsys, fmnist_dir):
    out = _held(tmp_path / "out", "grid", "noise", GRIDS["noise"])
    before = _tree(out)
    code = sweep.main(["--search", "beta", "--out", str(out), "--resume", "auto", "--data-dir", str(fmnist_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "is invalid for --search beta: it holds the records of grid 'noise', not of a search" in err[0]
    assert _tree(out) == before


def test_an_unreadable_sweep_json_is_not_adopted(tmp_path, capsys, fmnist_dir):
    out = _held(tmp_path / "out", "grid", "noise", GRIDS["noise"])
    (out / "sweep.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    before = _tree(out)
    code = sweep.main(["--grid", "noise", "--out", str(out), "--resume", "auto", "--data-dir", str(fmnist_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "sweep.json" in err[0] and "cannot be read" in err[0]
    assert _tree(out) == before


def test_chunks_of_one_sweep_still_resume_into_one_folder(tmp_path, capsys, fmnist_dir):
    """The same grid with other values, or the same grid file with other values: one sweep, resumed."""
    out = _held(tmp_path / "out", "grid", "noise", GRIDS["noise"])
    assert sweep.main(["--grid", "noise", "--values", "0.8", "--out", str(out), "--resume", "auto", "--dry-run",
                       "--data-dir", str(fmnist_dir), "--backend", "local"]) == 0
    first = _tiny_file(tmp_path / "g.yaml", ["target_only", "fedgp_auto"])
    from fda_ray.papers.files import grid_file
    out2 = _held(tmp_path / "out2", "grid", str(first), grid_file(str(first)))
    moved = tmp_path / "elsewhere" / "g.yaml"  # the same definition, from another path, with another value list
    moved.parent.mkdir()
    import yaml
    d = yaml.safe_load(first.read_text())
    d["values"] = [0.0, 0.8, 0.4]
    moved.write_text(dump(d))
    assert sweep.main(["--grid", str(moved), "--values", "0.4", "--out", str(out2), "--resume", "--dry-run",
                       "--data-dir", str(fmnist_dir), "--backend", "local"]) == 0
    assert "is invalid" not in capsys.readouterr().err


@pytest.mark.slow  # a real sweep (a worker process) and the launcher's command in a subprocess
def test_the_launchers_resume_auto_refuses_a_folder_of_another_grid_file(tmp_path, fmnist_dir):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    first = _tiny_file(tmp_path / "first.yaml", ["target_only"])
    common = ["--out", str(tmp_path / "out"), "--data-dir", str(fmnist_dir), "--backend", "local", "--workers", "1",
              "--values", "0.8", "--no-figures"]
    ran = subprocess.run([sys.executable, "-m", "fda_ray.sweep", "--grid", str(first), *common], env=env,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    before = _tree(tmp_path / "out")
    other = _tiny_file(tmp_path / "other.yaml", ["source_only"])
    again = subprocess.run([sys.executable, "-m", "fda_ray.sweep", "--grid", str(other), *common, "--resume", "auto"],
                           env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    (line,) = again.stderr.strip().splitlines()
    assert f"it holds the records of grid {str(first)!r}, whose rows differ from those of {str(other)!r}" in line
    assert _tree(tmp_path / "out") == before


def _chunk(rows=None, values=None, seeds=None, profile="quick", overrides=None, command="python -m fda_ray.sweep"):
    return Manifest(kind="grid", name="noise", profile=profile, rows=rows, values=values, seeds=seeds,
                    overrides=overrides or {}, command=command)


@pytest.mark.parametrize("held,new,want", [
    # other values of one grid: both columns, in the grid's order; the latest chunk's command
    (_chunk(values=(0.8,)), _chunk(values=(0.0,), command="second"), ((None, (0.0, 0.8), None), "second")),
    # the profile's rows (None) and a row it does not run (fedgp_beta1, the quick profile leaves it out)
    (_chunk(), _chunk(rows=("fedgp_beta1",)),
     ((("source_only", "finetune_offline", "fedda", "fedgp", "fedgp_beta1", "fedda_auto", "fedgp_auto",
        "target_only", "oracle"), None, None), "python -m fda_ray.sweep")),
    # rows by method name (the rows of it the quick profile runs: not FedGP_1) and by key: keys, in the grid's
    # order; back to the profile's whole list: None
    (_chunk(rows=("target_only",)), _chunk(rows=("fedgp",)), ((("fedgp", "target_only"), None, None),
                                                               "python -m fda_ray.sweep")),
    # seeds: 1 then the profile's 3 is the profile's (None); 5 then the profile's is 5
    (_chunk(seeds=1), _chunk(), ((None, None, None), "python -m fda_ray.sweep")),
    (_chunk(seeds=5), _chunk(), ((None, None, 5), "python -m fda_ray.sweep")),
    (_chunk(seeds=1, values=(0.0,)), _chunk(seeds=2, values=(0.8,)), ((None, (0.0, 0.8), 2), "python -m fda_ray.sweep")),
])
def test_a_chunks_sweep_json_holds_every_chunk_so_far(held, new, want):
    """sweep.json after a chunk of the same sweep: the union of the chunks' rows, values and seeds (readers plan the
    trials from it: the results pages showed only the last chunk's), the latest command."""
    from fda_ray.experiments.arguments import chunk_manifest

    m = chunk_manifest(held, new, GRIDS["noise"])
    assert ((m.rows, m.values, m.seeds), m.command) == want


@pytest.mark.parametrize("held", [None, _chunk(profile="paper", values=(0.8,)), _chunk(values=(0.8,),
                                                                                        overrides={"rounds": 3})])
def test_a_chunk_of_another_profile_or_other_fields_writes_its_own_sweep_json(held):
    """Nothing held, another profile or other command-line fields (other trials): the new chunk's own manifest."""
    from fda_ray.experiments.arguments import chunk_manifest

    new = _chunk(values=(0.0,), command="new")
    assert chunk_manifest(held, new, GRIDS["noise"]) == new
