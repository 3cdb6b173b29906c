"""Damaged or wrong-kind input files, wherever a command reads one (issue 63, class 5): a config, grid or search
file that is not text (`--config /bin/ls`), empty, cut short or of the wrong shape; a weights file that is not a
torch file, not a state dict or does not fit the model; a sweep directory's sweep.json, selection.json, summary.md
and records (trial.json, rows.json, nodes.json, state.pt) damaged by a crash or by hand.

Found before any work: one `error:` line naming the file (`<field>='<path>' is invalid: <what is wrong>`), exit
code 2, never a traceback. A record damaged inside a sweep directory is no reason to fail: one warning line names
it, it is kept (renamed <name>.damaged where it is set aside) and the rest is read or the trial runs again.

The table runs each case through the command's main() in this process (the fast tier) and, for a few, as the
`python -m` process a user starts (the slow tier), on real files written to disk.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# A program's first bytes (ELF), NULs and bytes UTF-8 refuses: what `--config /bin/ls` hands in.
BINARY = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4
RUN = ("--data-dir", "{fm}", "--num-sources", "2", "--rounds", "1", "--warmup-rounds", "1",
       "--samples-per-client", "128", "--target-labelled", "32", "--test-samples", "50", "--executor", "serial")


# ---------------------------------------------------------------- the files

def _write(name: str, data: bytes | str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        p = tmp / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        return p
    return make


def _directory(name: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        (tmp / name).mkdir()
        return tmp / name
    return make


@pytest.fixture(scope="module")
def resnet18_state(tmp_path_factory) -> Path:
    """torchvision's ResNet-18 state dict (random weights: the layout is what is checked), saved once."""
    import torchvision

    path = tmp_path_factory.mktemp("weights") / "resnet18.pt"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    return path


def _weights(kind: str) -> Callable[[Path, Path], Path]:
    """A weights file made from the good state dict: cut short, a tensor, a wrapped dict, another head, objects."""
    def make(tmp: Path, good: Path) -> Path:
        p = tmp / f"{kind}.pt"
        if kind == "cut":
            data = good.read_bytes()
            p.write_bytes(data[: len(data) // 2])
        elif kind == "tensor":
            torch.save(torch.zeros(3), p)
        elif kind == "wrapped":  # a training script's checkpoint, not the model's state dict itself
            torch.save({"state_dict": torch.load(good, weights_only=True), "epoch": 3}, p)
        elif kind == "fc10":  # a model fine-tuned to 10 classes: its fc does not fit ImageNet's 1000
            sd = torch.load(good, weights_only=True)
            sd.update({"fc.weight": torch.zeros(10, 512), "fc.bias": torch.zeros(10)})
            torch.save(sd, p)
        elif kind == "objects":  # pickled Python objects: refused by torch.load(weights_only=True)
            torch.save(argparse.Namespace(weights=torch.zeros(3)), p)
        return p
    return make


def make_sweep_dir(root: Path, kind: str = "grid") -> Path:
    """A finished sweep directory as a sweep leaves it (sweep.json, trials/<key>/trial.json and rows.json) for two
    seeds of one trial; kind "search": a search's, with its selection.json."""
    from fda_ray.experiments import manifest
    from fda_ray.experiments.records import Trial, trial_key

    d = root / f"sweep-{kind}"
    (d / "trials").mkdir(parents=True)
    manifest.write(d, manifest.Manifest(kind=kind, name="noise" if kind == "grid" else "beta", profile="quick",
                                        rows=("target_only",) if kind == "grid" else None, values=(0.0,)))
    for seed in (0, 1):
        params = {"dataset": "fashion-mnist", "method": "target_only", "noise": 0.0, "seed": seed, "rounds": 1}
        t = Trial(trial_key("target_only", "noise", 0.0, seed, params), "target_only", 0.0, seed, params)
        (d / "trials" / t.key).mkdir()
        (d / "trials" / t.key / "trial.json").write_text(json.dumps(t.to_dict()))
        (d / "trials" / t.key / "rows.json").write_text(json.dumps(
            {"config": {"method": "target_only"}, "rows": [{"round": 0, "accuracy": 0.5 + seed / 10}], "seconds": 1}))
    if kind == "search":
        (d / "selection.json").write_text(json.dumps({"studies": {}}))
    return d


def _in_sweep(name: str, data: bytes | str, kind: str = "grid", drop: str | None = None) -> Callable[[Path], Path]:
    """A sweep directory whose `name` (sweep.json, selection.json, summary.md) holds `data`; returns that file."""
    def make(tmp: Path) -> Path:
        d = make_sweep_dir(tmp, kind)
        if drop:
            (d / drop).unlink()
        return _write(name, data)(d)
    return make


# ---------------------------------------------------------------- the table

@dataclass(frozen=True)
class Case:
    id: str
    module: str
    args: tuple[str, ...]  # {file}: the damaged file, {dir}: its folder, {fm}: a tiny Fashion-MNIST folder
    make: Callable  # (tmp) -> the file; weights cases: (tmp, good state dict) -> the file
    field: str  # the line names `<field>='<the file>'`; "" where the line names the file its own way
    why: str  # what is wrong, as the line says it
    code: int = 2
    weights: bool = False


CASES = [
    # --config: the run's, the sweep's, the diagnosis's
    Case("run --config a program", "fda_ray", ("--config", "{file}"), _write("ls", BINARY), "config",
         "a binary file, not text"),
    Case("run --config latin-1 yaml", "fda_ray", ("--config", "{file}"),
         _write("run.yaml", "method: f\xe9dgp\n".encode("latin-1")), "config",
         "not UTF-8 text (byte 0xe9 at position 9)"),
    Case("run --config a directory", "fda_ray", ("--config", "{file}"), _directory("run.yaml"), "config",
         "a directory, not a file"),
    Case("run --config a yaml list", "fda_ray", ("--config", "{file}"), _write("run.yaml", "- rounds\n"), "config",
         "a mapping of option names to values; it holds a list"),
    Case("sweep --config a program", "fda_ray.sweep", ("--config", "{file}", "--dry-run"), _write("s.yaml", BINARY),
         "config", "a binary file, not text"),
    Case("diagnose --config a program", "fda_ray.diagnose", ("--config", "{file}"), _write("ls", BINARY), "config",
         "a binary file, not text"),
    # --grid / --search definition files
    Case("sweep --grid a program", "fda_ray.sweep", ("--grid", "{file}", "--dry-run"), _write("g.yaml", BINARY),
         "grid", "a binary file, not text"),
    Case("sweep --grid an empty file", "fda_ray.sweep", ("--grid", "{file}", "--dry-run"), _write("g.yaml", ""),
         "grid", "an empty file"),
    Case("sweep --grid broken yaml", "fda_ray.sweep", ("--grid", "{file}", "--dry-run"), _write("g.yaml", "rows: [\n"),
         "grid", "not YAML (expected the node content, but found '<stream end>' at line 2 column 1)"),
    Case("sweep --grid a json list", "fda_ray.sweep", ("--grid", "{file}", "--dry-run"), _write("g.json", "[1, 2]"),
         "grid", "a grid definition (a mapping of keys to values); it holds a list"),
    Case("sweep --grid a directory", "fda_ray.sweep", ("--grid", "{file}", "--dry-run"), _directory("g.yaml"),
         "grid", "a directory, not a file"),
    Case("sweep --search a program", "fda_ray.sweep", ("--search", "{file}", "--dry-run"), _write("s.yml", BINARY),
         "search", "a binary file, not text"),
    # --model-weights
    *[Case(f"run --model-weights {k}", "fda_ray", (*RUN, "--model", "resnet18", "--model-weights", "{file}"),
           _weights(k), "model_weights", why, weights=True) for k, why in [
        ("cut", "cut short or damaged (its zip archive cannot be read)"),
        ("tensor", "not a state dict of tensors (it holds a Tensor)"),
        ("wrapped", "not a state dict of tensors (it holds a dict with keys 'state_dict', 'epoch')"),
        ("fc10", "its tensors do not fit torchvision's resnet18: 2 of another shape ('fc.weight' (10, 512) here, "
                 "(1000, 512) in the model"),
        ("objects", "it holds Python objects, not only tensors and plain data"),
    ]],
    Case("run --model-weights a text file", "fda_ray", (*RUN, "--model", "resnet18", "--model-weights", "{file}"),
         _write("w.pt", "not weights\n"), "model_weights", "not a torch file"),
    # a sweep directory's own files, read by collect and by --resume
    Case("collect: sweep.json a program", "fda_ray.collect", ("{dir}",), _in_sweep("sweep.json", BINARY),
         "sweep.json", "a binary file, not text"),
    Case("collect: sweep.json empty", "fda_ray.collect", ("{dir}",), _in_sweep("sweep.json", ""), "sweep.json",
         "an empty file, not JSON"),
    Case("collect: sweep.json cut short", "fda_ray.collect", ("{dir}",), _in_sweep("sweep.json", '{"kind": "gr'),
         "sweep.json", "not JSON (Unterminated string starting at: line 1 column 10)"),
    Case("collect: sweep.json a list", "fda_ray.collect", ("{dir}",), _in_sweep("sweep.json", "[1, 2]"),
         "sweep.json", "a JSON object (a mapping of keys to values) expected, it holds a list"),
    Case("collect: sweep.json without its keys", "fda_ray.collect", ("{dir}",),
         _in_sweep("sweep.json", '{"kind": "grid"}'), "sweep.json", "it lacks 'name', 'profile'"),
    Case("collect --write-manifests: sweep.json a program", "fda_ray.collect", ("--write-manifests", "{dir}"),
         _in_sweep("sweep.json", BINARY), "sweep.json", "a binary file, not text"),
    Case("collect: selection.json a program", "fda_ray.collect", ("{dir}",),
         _in_sweep("selection.json", BINARY, kind="search"), "selection.json", "a binary file, not text"),
    Case("collect: summary.md a program, no sweep.json", "fda_ray.collect", ("{dir}",),
         _in_sweep("summary.md", BINARY, drop="sweep.json"), "", "has no sweep.json nor a summary.md with a"),
    # JSON that parses, with a field of another kind (edited by hand): the same one line, never a traceback
    Case("collect: sweep.json a number for its name", "fda_ray.collect", ("{dir}",),
         _in_sweep("sweep.json", '{"kind": "grid", "name": 5, "profile": "quick"}'), "sweep.json",
         "its name 5 is not a text"),
    Case("collect: sweep.json a list for its profile", "fda_ray.collect", ("{dir}",),
         _in_sweep("sweep.json", '{"kind": "grid", "name": "noise", "profile": [1]}'), "sweep.json",
         "its profile [1] is not a text"),
    Case("collect: selection.json a study that is a list", "fda_ray.collect", ("{dir}",),
         _in_sweep("selection.json", '{"studies": {"a": [1]}}', kind="search"), "selection.json",
         "study 'a' is list, not a mapping"),
    Case("collect: selection.json references that are not lists of accuracies", "fda_ray.collect", ("{dir}",),
         _in_sweep("selection.json", '{"studies": {}, "references": {"0.2": {"fedda_auto": "x"}}}', kind="search"),
         "selection.json", "its references are not a mapping of settings to rows' lists of test accuracies"),
    Case("collect: selection.json a trial without its key", "fda_ray.collect", ("{dir}",),
         _in_sweep("selection.json", '{"studies": {"a": {"trials": [{"point": {}}]}}}', kind="search"),
         "selection.json", "study 'a''s trials are not a list of mappings, each with its key and point"),
    Case("collect: summary.md an unclosed quote, no sweep.json", "fda_ray.collect", ("{dir}",),
         _in_sweep("summary.md", "Command: `python -m fda_ray.sweep --grid 'noise`\n", drop="sweep.json"),
         "summary.md", "its Command: line is not a command line (No closing quotation)"),
    Case("collect --write-manifests: summary.md an unknown flag", "fda_ray.collect", ("--write-manifests", "{dir}"),
         _in_sweep("summary.md", "Command: `python -m fda_ray.sweep --grid noise --bogus 3`\n", drop="sweep.json"),
         "summary.md", "its Command: line is not a sweep command (unrecognized arguments: --bogus 3"),
    Case("collect --write-manifests: summary.md an unknown grid", "fda_ray.collect", ("--write-manifests", "{dir}"),
         _in_sweep("summary.md", "Command: `python -m fda_ray.sweep --grid nosie`\n", drop="sweep.json"),
         "summary.md", "its Command: line's grid='nosie' is invalid: a grid file (.yaml, .yml, .json) or one of "
                       "fedwca-digit-five, "),
    Case("sweep --resume: summary.md an unclosed quote", "fda_ray.sweep",
         ("--grid", "noise", "--values", "0", "--methods", "target_only", "--data-dir", "{fm}", "--resume",
          "--dry-run", "--no-figures", "--out", "{dir}"),
         _in_sweep("summary.md", "Command: `python -m fda_ray.sweep --grid 'noise`\n", drop="sweep.json"), "",
         "summary.md' cannot be read (its Command: line is not a command line (No closing quotation))"),
    Case("sweep --resume: sweep.json a number for its name", "fda_ray.sweep",
         ("--grid", "noise", "--values", "0", "--methods", "target_only", "--data-dir", "{fm}", "--resume",
          "--dry-run", "--no-figures", "--out", "{dir}"),
         _in_sweep("sweep.json", '{"kind": "grid", "name": 5, "profile": "quick"}'), "",
         "sweep.json' cannot be read (its name 5 is not a text)"),
    Case("sweep --resume: sweep.json a program", "fda_ray.sweep",
         ("--grid", "noise", "--values", "0", "--methods", "target_only", "--data-dir", "{fm}", "--resume",
          "--dry-run", "--no-figures", "--out", "{dir}"),
         _in_sweep("sweep.json", BINARY), "", "sweep.json' cannot be read (a binary file, not text)"),
]


def run_main(module: str, args: list[str]) -> tuple[int, str]:
    """The command's main(args) in this process: (exit code, stderr)."""
    mod = importlib.import_module(module if module != "fda_ray" else "fda_ray.experiments.cli")
    main = getattr(mod, "main", None) or importlib.import_module(module + ".__main__").main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(args)
        except SystemExit as e:
            code = int(e.code or 0)
    return code, err.getvalue()


def prepare(case: Case, tmp: Path, fm: Path, good: Path | None) -> tuple[list[str], Path]:
    made = case.make(tmp, good) if case.weights else case.make(tmp)
    args = [a.format(file=made, dir=made.parent, fm=fm) for a in case.args]
    return args, made


def check(case: Case, code: int, stderr: str, made: Path) -> None:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in stderr, stderr[-2000:]
    assert code == case.code, stderr[-2000:]
    assert len(errors) == 1, stderr[-2000:]
    named = f"{case.field}={str(made)!r} is invalid: " if case.field else str(made.parent)
    assert named in errors[0] and case.why in errors[0], errors[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_damaged_or_wrong_kind_file_is_one_line_naming_it(case, tmp_path, fmnist_dir, request, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    good = request.getfixturevalue("resnet18_state") if case.weights else None
    args, made = prepare(case, tmp_path, fmnist_dir, good)
    code, stderr = run_main(case.module, args)
    check(case, code, stderr, made)
    if "--write-manifests" in case.args and "sweep.json" not in case.id:  # nothing written from a bad command
        assert not (made.parent / "sweep.json").exists()


SUBPROCESS = ["run --config a program", "sweep --grid a program", "run --model-weights fc10",
              "collect: sweep.json a program", "sweep --resume: sweep.json a program"]


@pytest.mark.slow  # a Python process per case (each imports torch)
@pytest.mark.parametrize("case", [c for c in CASES if c.id in SUBPROCESS], ids=SUBPROCESS)
def test_a_damaged_file_as_a_user_meets_it(case, tmp_path, fmnist_dir, request):
    """The real entry point, `python -m <module>`: exit code 2, one error line naming the file, no traceback."""
    good = request.getfixturevalue("resnet18_state") if case.weights else None
    args, made = prepare(case, tmp_path, fmnist_dir, good)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    p = subprocess.run([sys.executable, "-m", case.module, *args], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    check(case, p.returncode, p.stderr, made)


# ---------------------------------------------------------------- damaged records: a warning, kept, the rest read

@pytest.mark.parametrize("file,data,why", [
    ("trial.json", BINARY, "its trial.json is damaged (a binary file, not text); left out"),
    ("trial.json", '{"key": "targ', "its trial.json is damaged (not JSON (Unterminated string starting at: line "
                                    "1 column 9)); left out"),
    ("trial.json", "[]", "its trial.json is damaged (a JSON object (a mapping of keys to values) expected, it holds "
                         "a list); left out"),
    ("rows.json", '{"rows": [1, 2]}', "its rows.json is damaged (a row that is not a mapping of metrics); left out"),
    # JSON that parses, a field of another kind: the readers (the table, the build line, fda_ray.results) take it
    ("rows.json", '{"config": [1], "rows": [{"round": 0, "accuracy": 0.5}]}',
     "its rows.json is damaged (its config is list, not dict); left out"),
    ("rows.json", '{"environment": "x", "rows": [{"round": 0, "accuracy": 0.5}]}',
     "its rows.json is damaged (its environment is str, not dict); left out"),
    ("rows.json", '{"seconds": "x", "rows": [{"round": 0, "accuracy": 0.5}]}',
     "its rows.json is damaged (its seconds is str, not int or float); left out"),
    ("rows.json", '{"rows": [{"round": 0, "accuracy": "high"}]}',
     "its rows.json is damaged (row 0's accuracy is 'high', not a number); left out"),
    ("rows.json", '{"rows": [{"round": "0", "accuracy": 0.5}]}',
     "its rows.json is damaged (row 0's round is '0', not a whole number); left out"),
    ("trial.json", '{"key": "k", "row": "target_only", "value": "abc", "seed": 0, "params": {}}',
     "its trial.json is damaged (not a trial (ValueError: value='abc' is invalid for a trial: a number or null)); "
     "left out"),
], ids=["trial.json a program", "trial.json cut short", "trial.json a list", "rows.json rows of numbers",
        "rows.json config a list", "rows.json environment a text", "rows.json seconds a text",
        "rows.json accuracy a text", "rows.json round a text", "trial.json value a text"])
def test_collect_leaves_a_damaged_record_out_with_one_warning(file, data, why, tmp_path):
    """The other seed's record is still tabulated (n=1), the damaged one is named and left as it was."""
    d = make_sweep_dir(tmp_path)
    rec = sorted((d / "trials").iterdir())[0]
    (rec / file).write_bytes(data if isinstance(data, bytes) else data.encode())
    err, out = io.StringIO(), io.StringIO()
    from fda_ray.experiments import collect

    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = collect.main([str(d)])
    warnings = [ln for ln in err.getvalue().splitlines() if ln.startswith("warning:")]
    assert code == 0 and "Traceback" not in err.getvalue(), err.getvalue()
    assert len(warnings) == 1 and f"trial {rec.name} in {d}" in warnings[0] and why in warnings[0], warnings
    assert "(n=1)" in out.getvalue()
    assert (rec / file).read_bytes() == (data if isinstance(data, bytes) else data.encode())  # nothing lost


def test_results_load_leaves_a_record_with_a_damaged_trial_json_out(tmp_path, capsys):
    import fda_ray.results

    d = make_sweep_dir(tmp_path)
    rec = sorted((d / "trials").iterdir())[0]
    (rec / "trial.json").write_bytes(BINARY)
    df = fda_ray.results.load(d)
    assert len(df) == 1 and f"trial {rec.name}" in capsys.readouterr().err


@pytest.mark.parametrize("data", [BINARY, b"{}", b'[{"host": "a"}, 3]', b"", b'[{"host": "a", "build": [1]}]',
                                  b'[{"host": "a", "from_round": "one"}]'],
                         ids=["a program", "a mapping", "a list of other things", "empty", "a build that is a list",
                              "a round that is a text"])
def test_a_damaged_nodes_json_is_kept_aside_and_a_new_list_begun(data, tmp_path, capsys):
    """A cut-off trial's nodes.json damaged: the trial's next attempt keeps it as nodes.json.damaged (one warning)
    and records itself in a new list; a resume's build check reads it as naming no build, never a traceback."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.records import NODES_FILE, _note_start, recorded_builds

    rec = tmp_path / "records" / "t1"
    rec.mkdir(parents=True)
    (rec / NODES_FILE).write_bytes(data)
    assert list(recorded_builds(tmp_path / "records").values()) == [["t1"]]
    nodes = _note_start(storage_path(rec), None)
    assert len(nodes) == 1 and json.loads((rec / NODES_FILE).read_text()) == nodes
    assert (rec / (NODES_FILE + ".damaged")).read_bytes() == data
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "trial t1: its nodes.json cannot be read; kept as nodes.json.damaged" in warning[0]


@pytest.mark.parametrize("data,why", [
    (BINARY, "unreadable: not a torch file"),
    (b"", "unreadable: an empty file, not a torch file"),
], ids=["a program", "empty"])
def test_a_checkpoint_that_is_not_a_torch_file_says_so_in_words(data, why, tmp_path):
    """(test_failures covers the set-aside itself; here: the line says what is wrong, not torch's paragraph.)"""
    from fda_ray.experiments.records import STATE_FILE, load_state

    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / STATE_FILE).write_bytes(data)
    lines: list[str] = []
    assert load_state(tmp_path / "t1", warn=lines.append) is None
    assert len(lines) == 1 and why in lines[0] and "weights_only" not in lines[0], lines
    assert (tmp_path / "t1" / (STATE_FILE + ".damaged")).read_bytes() == data


@pytest.mark.parametrize("data", [BINARY, b"", None], ids=["a program", "empty", "another torch file"])
def test_a_damaged_cached_source_model_is_trained_again(data, tmp_path, capsys):
    """FedWCA's source-model cache: a damaged entry is a miss (kept as .damaged, one warning), never a failure."""
    from fda_ray.algorithms.fedwca.methods import _cached_source

    path = tmp_path / "abc.pt"
    if data is None:  # a torch file of the wrong content
        torch.save({"something": 1}, path)
    else:
        path.write_bytes(data)
    before = path.read_bytes()
    assert _cached_source(path) is None
    assert not path.exists() and (tmp_path / "abc.pt.damaged").read_bytes() == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "trained again" in err[0]
    good = {"weights": torch.zeros(4), "loss": 0.5, "key": {}}
    torch.save(good, path)
    assert torch.equal(_cached_source(path)["weights"], good["weights"])


@pytest.mark.parametrize("data", [BINARY, b"not an image", None], ids=["a program", "text", "cut short"])
def test_an_image_that_cannot_be_decoded_is_named(data, tmp_path):
    """A dataset's image file found damaged when its batch is drawn: one line naming the file (the run then stops
    with its finished rounds kept: fda_ray.runtime.loop)."""
    import numpy as np
    from PIL import Image

    from fda_ray.data.images import ImageFileError, _pil_loader

    path = tmp_path / "x.png"
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(path)
    path.write_bytes(data if data is not None else path.read_bytes()[:40])  # None: a PNG cut short
    with pytest.raises(ImageFileError) as e:
        _pil_loader(str(path))
    assert str(e.value).startswith(f"image={str(path)!r} is invalid: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("data,why", [(BINARY, "a binary file, not text"), (b'{"rows": 3}', "it lacks its rows"),
                                      (b"[1]", "a JSON object (a mapping of keys to values) expected, it holds a list")])
def test_a_damaged_stopped_json_is_kept_aside_and_its_trial_runs_again(data, why, tmp_path, capsys):
    """A search's trial that ASHA stopped keeps its rows in stopped.json: damaged, it is one warning line, kept as
    stopped.json.damaged, and the trial counts as not settled (it runs again), not a traceback in the selection."""
    from fda_ray.core.storage import storage_path
    from fda_ray.experiments.search import STOPPED_FILE, trial_rows

    record = tmp_path / "abc"
    record.mkdir()
    (record / STOPPED_FILE).write_bytes(data)
    assert trial_rows(storage_path(record)) is None
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"warning: trial abc: its {STOPPED_FILE} is damaged ({why}); kept as {STOPPED_FILE}.damaged, the " \
                   "trial runs again"
    assert (record / f"{STOPPED_FILE}.damaged").read_bytes() == data and not (record / STOPPED_FILE).exists()


def test_a_damaged_tune_checkpoint_starts_the_trial_again_in_one_line(tmp_path, capsys):
    import torch

    from fda_ray.experiments.tune import resume_state

    good = tmp_path / "good.pt"
    torch.save({"next_round": 3, "rows": []}, good)
    assert resume_state(good) == {"next_round": 3, "rows": []} and resume_state(tmp_path / "none.pt") is None
    bad = tmp_path / "bad.pt"
    bad.write_bytes(good.read_bytes()[:100])
    assert resume_state(bad) is None
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"warning: Tune's checkpoint {bad} cannot be read (") and \
        line.endswith("); the trial starts again from round 0")


def test_a_damaged_sidecar_of_a_generic_table_names_it(tmp_path):
    from fda_ray.data.medical_csv import TableError, read_generic

    table = tmp_path / "t.csv"
    table.write_text("path,label,domain\na.png,0,x\n")
    table.with_suffix(".json").write_bytes(BINARY)
    with pytest.raises(TableError) as e:
        read_generic(table)
    assert str(e.value) == f"{table.with_suffix('.json')}: a binary file, not text"


def test_a_searchs_damaged_rerun_record_is_left_out_with_one_warning(tmp_path):
    """A rerun of a search's selection whose rows.json parses but holds a text for its accuracy: one warning naming
    it, the table of the others still printed (before: a ValueError traceback from the number format)."""
    from fda_ray.experiments import collect

    d = make_sweep_dir(tmp_path, kind="search")
    keys = sorted(p.name for p in (d / "trials").iterdir())
    (d / "selection.json").write_text(json.dumps({"studies": {"fedgp @ noise 0.4": {
        "trials": [{"key": keys[0], "point": {"beta": 0.5}}], "selected": {"target_val": keys[0]},
        "reruns": {"target_val": keys}}}}))
    (d / "trials" / keys[1] / "rows.json").write_text(json.dumps({"rows": [{"round": 0, "accuracy": "high"}]}))
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = collect.main([str(d)])
    warnings = [ln for ln in err.getvalue().splitlines() if ln.startswith("warning:")]
    assert code == 0 and "Traceback" not in err.getvalue(), err.getvalue()
    assert len(warnings) == 1 and f"trial {keys[1]} in {d}: its rows.json is damaged (row 0's accuracy is 'high', " \
        "not a number); left out" in warnings[0], warnings
    assert "50.0 (n=1)" in out.getvalue(), out.getvalue()  # the other rerun (seed 0's accuracy 0.5)


@pytest.mark.parametrize("lock", [{"pid": "abc", "host": "HERE"}, {"pid": 1, "host": "HERE", "time": "x"},
                                  {"pid": -1, "host": "HERE"}, [1, 2]],
                         ids=["a pid that is a text", "a time that is a text", "a negative pid", "a list"])
def test_a_damaged_lock_file_is_taken_over_with_one_warning(lock, tmp_path, capsys):
    """A lock file edited into other kinds (before: a ValueError or TypeError traceback before any work) reads as a
    lock no process holds: once it is older than a writer's first moments, taken over with one warning line."""
    import socket

    from fda_ray.core import locks

    path = tmp_path / locks.LOCK_FILE
    path.write_text(json.dumps(lock).replace("HERE", socket.gethostname()))
    os.utime(path, (0, 0))  # (a lock written just now may be a writer's, mid-write: refused, not taken over)
    with locks.held(tmp_path, "out", "second"):
        assert json.loads(path.read_text())["command"] == "second"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {path}: the sweep that held it is gone (unreadable); "
                                               "taken over"), err


def test_a_lock_that_is_a_directory_is_refused_in_one_line(tmp_path, fmnist_dir):
    from fda_ray.core import locks

    d = make_sweep_dir(tmp_path)
    (d / locks.LOCK_FILE).mkdir()
    code, err = run_main("fda_ray.sweep", ["--grid", "noise", "--values", "0", "--methods", "target_only",
                                           "--data-dir", str(fmnist_dir), "--resume", "--new-settings",
                                           "--no-figures", "--out", str(d), "--backend", "local"])
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1, err
    assert f"out={str(d)!r} is invalid: its lock {d / locks.LOCK_FILE} is a directory, not a file; remove it " \
           "(rmdir)" in errors[0]
    assert (d / locks.LOCK_FILE).is_dir() and not (d / "results.parquet").exists()  # nothing changed, nothing ran


@pytest.mark.parametrize("name", ["rows.json", "trial.json", "state.pt", "nodes.json", "weights.pt"])
def test_a_directory_where_a_record_file_goes_is_set_aside_before_any_work(name, tmp_path, fmnist_dir):
    """A directory in place of a record's file (before: the trial's first write there failed in the middle of the
    sweep, exit 1, advising to free disk space): a resume's --dry-run names it and moves nothing; the resume keeps
    it as <name>.damaged with one warning line, and the build check and collect read the rest."""
    from fda_ray.experiments.records import recorded_builds, set_aside_damaged

    d = make_sweep_dir(tmp_path)
    rec = sorted((d / "trials").iterdir())[0]
    if (rec / name).exists():
        (rec / name).unlink()
    (rec / name / "inside").mkdir(parents=True)
    args = ["--grid", "noise", "--values", "0", "--methods", "target_only", "--data-dir", str(fmnist_dir),
            "--resume", "--new-settings", "--no-figures", "--out", str(d), "--dry-run"]
    code, err = run_main("fda_ray.sweep", args)
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert code == 0 and "Traceback" not in err, err
    said = f"warning: trial {rec.name}: its {name} is a directory, not a file; a resume without --dry-run keeps " \
           f"it as {name}.damaged"
    assert [w for w in warnings if w.startswith(said)], warnings
    assert (rec / name / "inside").is_dir()  # a dry run moves nothing
    recorded_builds(d / "trials")  # reads past it (before: IsADirectoryError)
    lines = set_aside_damaged(d / "trials")
    assert any(f"its {name} is a directory, not a file; kept as {name}.damaged" in x for x in lines.values())
    assert (rec / f"{name}.damaged" / "inside").is_dir() and not (rec / name).exists()  # kept, not deleted


@pytest.mark.parametrize("case", ["another trial's", "no rows"])
def test_a_rows_json_of_another_trial_or_without_rows_is_a_damaged_record(case, tmp_path, capsys):
    """A rows.json copied from another trial's folder (its config's method differs from this folder's trial.json),
    or one whose row list is empty (before: both counted as finished; collect showed the other trial's number, or
    dropped the cell, in silence, and --resume never ran the trial): one warning, left out by collect, and kept
    aside as rows.json.damaged by a resume, so that the trial runs again."""
    from fda_ray.experiments import collect
    from fda_ray.experiments.records import record_damage, set_aside_damaged

    d = make_sweep_dir(tmp_path)
    rec = sorted((d / "trials").iterdir())[0]
    if case == "no rows":
        text, why = json.dumps({"config": {"method": "target_only"}, "rows": [], "seconds": 1}), "an empty list of rows"
    else:
        other = {"config": {"method": "fedgp", "seed": 0, "noise": 0.0}, "rows": [{"round": 0, "accuracy": 0.9}]}
        text, why = json.dumps(other), "another trial's rows (method 'fedgp' there, 'target_only' in its trial.json)"
    (rec / "rows.json").write_text(text)
    assert record_damage(rec) == why
    assert collect.main([str(d)]) == 0
    captured = capsys.readouterr()
    (warning,) = captured.err.strip().splitlines()
    assert warning.startswith(f"warning: trial {rec.name} in {d}: its rows.json is damaged ({why}); left out"), warning
    assert "90.0" not in captured.out and "(n=1)" in captured.out  # the other seed's cell alone
    lines = set_aside_damaged(d / "trials")
    assert list(lines) == [rec.name] and (rec / "rows.json.damaged").read_text() == text
    assert not (rec / "rows.json").exists()  # pending again: a resume runs it
    # a record whose config matches its trial.json stays whole (numbers compared as numbers, fields it lacks skipped)
    other = sorted((d / "trials").iterdir())[1]
    (other / "rows.json").write_text(json.dumps({"config": {"method": "target_only", "seed": 1, "noise": 0.0,
                                                            "rounds": 1.0, "unknown": [1]}, "rows": [{"round": 0}]}))
    assert record_damage(other) is None
    # a setting the run resolves (vectorise auto, recorded as off; a null filled in) is not another trial's rows: a
    # good record was left out and run again by every --resume
    trial = json.loads((other / "trial.json").read_text())
    trial["params"].update(vectorise="auto", num_sources=None)
    (other / "trial.json").write_text(json.dumps(trial))
    (other / "rows.json").write_text(json.dumps({"config": {"method": "target_only", "seed": 1, "vectorise": "off",
                                                            "num_sources": 2}, "rows": [{"round": 0}]}))
    assert record_damage(other) is None
