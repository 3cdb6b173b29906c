"""Damaged or wrong-kind data files a user hands in: CIFAR-10's pickled batches (a crafted batch must not run its
code; a batch without its labels is one line), a generic medical table's sidecar table.json of the wrong kinds,
the preparation scripts' CSV inputs (datasets/prepare_chexpert.py, prepare_mimic.py), the repair command a
damaged MNIST / Fashion-MNIST names (absolute, runnable from any folder; without a checkout, what to do instead),
and the Fashion-MNIST files tools/authors_fedgp.py copies. Each is one line naming the file and what is wrong,
exit 2 when found before any work, never a traceback. Every file is built in tmp_path."""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import pickle
import pickletools
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fda_ray.data import releases, standard
from fda_ray.data.base import DATASETS, DatasetDamaged, DatasetNotFound
from fda_ray.data.medical_csv import TableError

from conftest import make_fmnist_dir, write_idx

ROOT = Path(__file__).resolve().parent.parent
BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def _no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1 and not p.stdout, p.stderr


# ---------------------------------------------------------------- CIFAR-10 batches

class Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]  (the pure-Python pickler: its dispatch is a dict)
    """Writes a batch as Python 2's cPickle wrote the release's: str as Python 2 str (SHORT_BINSTRING, which
    encoding="bytes" reads as bytes, with no _codecs.encode) and numpy's _reconstruct under numpy 1's module path
    numpy.core.multiarray."""

    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def save_py2_str(self, obj: str | bytes) -> None:
        b = obj.encode("latin1") if isinstance(obj, str) else obj
        self.write(pickle.SHORT_BINSTRING + bytes([len(b)]) + b if len(b) < 256 else
                   pickle.BINSTRING + struct.pack("<i", len(b)) + b)
        self.memoize(obj)

    def save_global(self, obj, name=None):  # type: ignore[no-untyped-def]
        if getattr(obj, "__name__", "") == "_reconstruct":
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)

    dispatch[str] = save_py2_str
    dispatch[bytes] = save_py2_str
    dispatch[type(len)] = save_global


def _batch(n: int, offset: int) -> dict:
    x = ((np.arange(n * 3072).reshape(n, 3072) + offset) % 256).astype(np.uint8)
    return {"batch_label": "training batch", "labels": [(offset + j) % 10 for j in range(n)], "data": x,
            "filenames": [f"img_{offset}_{j}.png" for j in range(n)]}


def make_cifar(root: Path, how: str = "py2", n: int = 3) -> Path:
    """<root>/cifar-10-batches-py/ with six tiny batches: "py2" as the release's Python 2 pickles, "protoK" as
    Python 3's pickle.dump(protocol=K) of the same dict with bytes keys (a user's re-save, the test fixtures)."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    for b, name in enumerate(BATCHES):
        batch = _batch(n, 11 * b)
        if how == "py2":
            f = io.BytesIO()
            Py2Pickler(f, protocol=2).dump(batch)
            (d / name).write_bytes(f.getvalue())
        else:
            batch = {k.encode(): (v.encode() if isinstance(v, str) else v) for k, v in batch.items()}
            (d / name).write_bytes(pickle.dumps(batch, protocol=int(how.removeprefix("proto"))))
    return d


def _globals(data: bytes) -> set[str]:
    """The globals a pickle names (GLOBAL opcodes; STACK_GLOBAL's two strings before it)."""
    out, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            out.add(arg.replace(" ", "."))
        elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            out.add(f"{strings[-2]}.{strings[-1]}")
    return out


def _repair(found: Path) -> str:
    return (f"to get it again: tar -xzf cifar-10-python.tar.gz -C {found.parent} (the release, "
            f"https://www.cs.toronto.edu/~kriz/cifar.html), or remove {found} and pass --download (torchvision's "
            "downloader, needs internet)")


def test_the_release_s_python_2_batches_and_python_3_re_saves_load(tmp_path):
    d = make_cifar(tmp_path / "py2")
    raw = (d / "data_batch_1").read_bytes()
    # what the release's batches name, and no more: the restricted unpickler is checked against the real format
    assert _globals(raw) == {"numpy.core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype"}
    split = DATASETS.get("cifar10")(str(tmp_path / "py2"))
    assert split.x_train.shape == (15, 3, 32, 32) and split.x_test.shape == (3, 3, 32, 32)
    assert split.y_train[:3].tolist() == [0, 1, 2] and split.y_test.tolist() == [5, 6, 7]
    expected = _batch(3, 0)["data"].reshape(3, 3, 32, 32).astype(np.float32) / 255
    assert np.array_equal(split.x_train[:3].numpy(), expected)
    for proto in (2, 4, 5):  # _codecs.encode (2), numpy._core's module path (4), _frombuffer (5)
        make_cifar(tmp_path / f"p{proto}", f"proto{proto}")
        again = DATASETS.get("cifar10")(str(tmp_path / f"p{proto}"))
        assert np.array_equal(again.x_train.numpy(), split.x_train.numpy()) and again.y_train.tolist() == \
            split.y_train.tolist()


class RunsCode:
    """A pickled object whose unpickling runs a command (os.system) or Python (eval): what a crafted batch does."""

    def __init__(self, call: str, marker: Path) -> None:
        self.call, self.marker = call, marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        if self.call == "system":
            return os.system, (f"touch {self.marker}",)
        return eval, (f"open({str(self.marker)!r}, 'w').close()",)


@pytest.mark.parametrize("call", ["system", "eval"])
def test_a_crafted_batch_is_refused_before_its_code_runs(tmp_path, call):
    d = make_cifar(tmp_path, "proto2")
    marker = tmp_path / "ran"
    crafted = pickle.dumps({b"data": RunsCode(call, marker), b"labels": [0]}, protocol=2)
    (d / "data_batch_1").write_bytes(crafted)
    with pytest.raises(DatasetDamaged) as e:
        DATASETS.get("cifar10")(str(tmp_path))
    # (protocol 2 writes Python 2's module names: builtins is __builtin__)
    named = f"{os.system.__module__}.system" if call == "system" else "__builtin__.eval"
    assert str(e.value) == (f"CIFAR-10 is damaged: {d / 'data_batch_1'}: a pickle that names {named}, refused "
                            "unrun: a CIFAR-10 batch names only numpy's arrays (a pickle can run the code it names); "
                            + _repair(d))
    assert not marker.exists()  # the code did not run
    pickle.loads(crafted)  # the control: a plain pickle.load of the same bytes runs it
    assert marker.exists()


@pytest.mark.parametrize("batch,why", [
    ({b"data": np.zeros((3, 3072), np.uint8)}, "not a CIFAR-10 python batch (no 'labels' entry; it holds b'data')"),
    ({b"labels": [1, 2, 3]}, "not a CIFAR-10 python batch (no 'data' entry; it holds b'labels')"),
    ({b"data": np.zeros((3, 3072), np.uint8), b"labels": ["cat", "dog", "cat"]},
     "'labels' hold <U3 values, not class indices (integers 0..9)"),
    ({b"data": np.zeros((3, 3072), np.uint8), b"labels": 7}, "() labels for 3 images (one label per image expected)"),
    ({b"data": np.zeros((3, 3072), np.uint8), b"labels": [1, 2]}, "(2,) labels for 3 images (one label per image "
                                                                   "expected)"),
    ({b"data": np.zeros((3, 3072), np.uint8), b"labels": [1, 2, 10]},
     "label values 1..10 are outside the dataset's 10 classes 0..9"),
    ({b"data": np.zeros((3, 1000), np.uint8), b"labels": [1, 2, 3]},
     "'data' of shape (3, 1000): images are not 3 x 32 x 32 (CIFAR-10 rows hold 3072 values)"),
    ({b"data": np.zeros((3, 3072), np.float32), b"labels": [1, 2, 3]},
     "'data' holds float32 values; CIFAR-10's are bytes (uint8, 0..255)"),
    ({b"data": b"not an array", b"labels": [1]}, "'data' holds |S12 values; CIFAR-10's are bytes (uint8, 0..255)"),
    ({b"data": [[1, 2], [3]], b"labels": [1]}, None),  # a ragged list: numpy's own words, one line
    ([1, 2, 3], "not a CIFAR-10 python batch (it holds list, not a dict)"),
])
def test_a_batch_without_its_entries_or_of_the_wrong_kind_is_one_line(tmp_path, batch, why):
    d = make_cifar(tmp_path, "proto2")
    (d / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DatasetDamaged) as e:
        DATASETS.get("cifar10")(str(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"CIFAR-10 is damaged: {d / 'test_batch'}: ") and \
        msg.endswith("; " + _repair(d)), msg
    if why is not None:
        assert msg == f"CIFAR-10 is damaged: {d / 'test_batch'}: {why}; {_repair(d)}"
    else:
        assert "its data or labels are not an array" in msg


@pytest.mark.parametrize("damage,why", [
    (lambda b: b[: len(b) // 2], "not a CIFAR-10 python batch (a damaged pickle: "),  # cut short
    (lambda b: b"", "not a CIFAR-10 python batch (a damaged pickle: EOFError"),
    (lambda b: b"\x89PNG\r\n\x1a\n" + bytes(100), "not a CIFAR-10 python batch (a damaged pickle: "),
])
def test_a_cut_short_or_foreign_batch_is_one_line(tmp_path, damage, why):
    d = make_cifar(tmp_path, "py2")
    p = d / "data_batch_3"
    p.write_bytes(damage(p.read_bytes()))
    with pytest.raises(DatasetDamaged) as e:
        DATASETS.get("cifar10")(str(tmp_path))
    assert str(e.value).startswith(f"CIFAR-10 is damaged: {p}: {why}") and "\n" not in str(e.value)


def test_the_cifar_digests_are_torchvision_s():
    from torchvision.datasets import CIFAR10

    assert {name: md5 for name, (_, md5) in releases.CIFAR10_BATCHES.items()} == \
        dict(CIFAR10.train_list + CIFAR10.test_list)


def test_a_full_size_batch_that_is_not_the_release_is_refused_by_its_md5_before_it_is_unpickled(tmp_path):
    d = make_cifar(tmp_path, "proto2")
    size = releases.CIFAR10_BATCHES["data_batch_2"][0]
    (d / "data_batch_2").write_bytes(b"\x80\x02" + bytes(size - 2))  # the release's size, another content
    with pytest.raises(DatasetDamaged) as e:
        DATASETS.get("cifar10")(str(tmp_path))
    got = hashlib.md5(b"\x80\x02" + bytes(size - 2)).hexdigest()
    assert str(e.value) == (f"CIFAR-10 is damaged: {d / 'data_batch_2'}: the release's size ({size} bytes) but md5 "
                            f"{got[:16]}..., not CIFAR-10's release d4bba439e000b95f... (a changed byte: a tampered "
                            f"or corrupted copy); {_repair(d)}")


def test_a_batch_of_the_release_s_size_and_digest_loads_and_is_hashed_once(tmp_path, monkeypatch):
    """The rule on a small stand-in release (the table monkeypatched): the digest matches -> it loads, the verdict
    kept per file version; one byte changed -> refused."""
    d = make_cifar(tmp_path, "proto2")
    body = (d / "data_batch_1").read_bytes()
    monkeypatch.setitem(releases.CIFAR10_BATCHES, "data_batch_1", (len(body), hashlib.md5(body).hexdigest()))
    monkeypatch.setattr(releases, "_SEEN", {})
    DATASETS.get("cifar10")(str(tmp_path))
    assert [k[4] for k in releases._SEEN if k[0] == str(d / "data_batch_1")] == ["CIFAR-10"]
    assert list(releases._SEEN.values()) == [None]
    changed = bytearray(body)
    changed[-10] ^= 1
    (d / "data_batch_1").write_bytes(bytes(changed))
    os.utime(d / "data_batch_1", ns=(1, 1))  # another version even where the clock's granularity is coarse
    with pytest.raises(DatasetDamaged, match=r"data_batch_1: the release's size \(\d+ bytes\) but md5 "):
        DATASETS.get("cifar10")(str(tmp_path))


def test_a_crafted_batch_under_the_command_line_is_one_line_exit_2_and_runs_nothing(tmp_path):
    d = make_cifar(tmp_path, "proto2")
    marker = tmp_path / "ran"
    (d / "data_batch_1").write_bytes(pickle.dumps({b"data": RunsCode("system", marker)}, protocol=2))
    p = subprocess.run([sys.executable, "-m", "fda_ray", "--dataset", "cifar10", "--data-dir", str(tmp_path),
                        "--rounds", "1", "--executor", "serial"], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    assert p.returncode == 2 and not marker.exists()
    _no_traceback(p)
    assert p.stderr.startswith(f"error: CIFAR-10 is damaged: {d / 'data_batch_1'}: a pickle that names ")


# ---------------------------------------------------------------- the medical table's sidecar

def _table(root: Path, sidecar: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = ["path,label,domain,aux_sex,aux_age"] + [f"{dom}{label}.png,{label},{dom},M,{age}" for dom in "ab"
                                                    for label, age in ((1, 30), (0, 40))]  # (each image once)
    for row in rows[1:]:
        (root / row.split(",")[0]).write_bytes(b"not read: the sidecar is refused first")
    (root / "table.csv").write_text("\n".join(rows) + "\n")
    (root / "table.json").write_text(json.dumps(sidecar))
    return root


BUCKET = '{"start": number, "width": number > 0, "count": integer >= 1}'


@pytest.mark.parametrize("sidecar,why", [
    ({"aux": [1]}, "aux [1] is invalid: the auxiliary labels' rules, an object {name: rule} for the table's "
                   "aux_<name> columns"),
    ({"image_root": 5}, "image_root 5 is invalid: the folder relative image paths are under, a path (text)"),
    ({"image_root": None}, "image_root null is invalid: the folder relative image paths are under, a path (text)"),
    ({"aux": {"sex": {"start": "x", "width": 1, "count": 2}}},
     'aux.sex.start "x" is invalid: a number (the first bucket\'s lower edge)'),
    ({"aux": {"age": {"start": 0, "width": 0, "count": 2}}},
     "aux.age.width 0 is invalid: a number > 0 (each bucket's width)"),
    ({"aux": {"age": {"start": float("nan"), "width": 9, "count": 2}}},
     "aux.age.start NaN is invalid: a number (the first bucket's lower edge)"),
    ({"aux": {"age": {"start": 0, "width": 9, "count": 2.5}}},
     "aux.age.count 2.5 is invalid: an integer >= 1 (the number of buckets)"),
    ({"aux": {"age": {"start": 0, "width": 9, "count": True}}},
     "aux.age.count true is invalid: an integer >= 1 (the number of buckets)"),
    ({"aux": {"age": {"start": 0, "width": 9}}},
     f'aux.age {{"start": 0, "width": 9}} is invalid: a bucket rule holds exactly {BUCKET} (\'count\' is missing)'),
    ({"aux": {"sex": {"M": "0", "F": 1}}}, 'aux.sex.M "0" is invalid: a class index (an integer >= 0)'),
    ({"aux": {"sex": {"M": -1}}}, "aux.sex.M -1 is invalid: a class index (an integer >= 0)"),
    ({"aux": {"sex": "Male"}}, f'aux.sex "Male" is invalid: a rule, {BUCKET} (a number bucketed) or '
                               '{"value": class index (an integer >= 0), ...}'),
    ({"domains": "a"}, "domains \"a\" is invalid: the domains' order, a list of the table's domain names"),
    ({"domains": []}, "domains [] is invalid: the domains' order, a list of the table's domain names"),
    ({"domains": ["a", 2]}, "domains 2 is invalid: each domain a name (non-empty text) of the table's column "
                            "'domain'"),
    ({"domains": ["a", "b", "a"]}, 'domains "a" is invalid: each domain once (it is listed twice)'),
])
def test_a_sidecar_field_of_the_wrong_kind_is_one_line_naming_file_field_value_and_what_is_allowed(
        tmp_path, sidecar, why):
    root = _table(tmp_path, sidecar)
    with pytest.raises(TableError) as e:
        DATASETS.get("medical-csv")(str(root))
    assert str(e.value) == f"{root / 'table.json'}: {why}"


def test_a_sidecar_key_or_rule_the_table_does_not_have_is_named(tmp_path):
    root = _table(tmp_path / "key", {"domain": ["a", "b"]})
    with pytest.raises(TableError) as e:
        DATASETS.get("medical-csv")(str(root))
    assert str(e.value) == f'{root / "table.json"}: key "domain" is unknown; a sidecar holds domains, image_root, aux'
    root = _table(tmp_path / "rule", {"aux": {"view": {"AP": 0}}})
    with pytest.raises(TableError) as e:
        DATASETS.get("medical-csv")(str(root))
    assert str(e.value) == (f"{root / 'table.json'}: aux.view names no column of the table: it has no aux_view (its "
                            "auxiliary columns: aux_sex, aux_age)")


def test_a_valid_sidecar_still_sets_order_root_and_rules(tmp_path):
    from fda_ray.data.medical_csv import read_generic

    root = _table(tmp_path / "t", {"domains": ["b", "a"], "image_root": str(tmp_path / "images"),
                                   "aux": {"age": {"start": 20, "width": 10.0, "count": 3}, "sex": {"M": 1}}})
    domains, trains, _, aux = read_generic(root / "table.csv")
    assert domains == ["b", "a"] and trains["a"].paths[0] == str(tmp_path / "images" / "a1.png")
    assert [(a.name, a.classes) for a in aux] == [("sex", 2), ("age", 3)]
    assert [row[1:] for row in trains["a"].labels] == [[1, 1], [1, 2]]


def test_a_relative_image_root_is_under_the_tables_folder_wherever_the_command_runs(tmp_path, monkeypatch):
    """A relative image_root is read as relative image paths are, from the table's folder: not from the current
    directory (a Ray worker's or another node's differs from the shell's, and it used to be the current one)."""
    from fda_ray.data.medical_csv import read_generic

    root = _table(tmp_path / "t", {"image_root": "images"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    _, trains, _, _ = read_generic(root / "table.csv")
    assert trains["a"].paths[0] == str(root / "images" / "a1.png")


def test_a_damaged_sidecar_under_the_command_line_is_one_line_exit_2(tmp_path):
    root = _table(tmp_path, {"aux": {"sex": {"start": "x", "width": 1, "count": 2}}})
    p = subprocess.run([sys.executable, "-m", "fda_ray", "--dataset", "medical-csv", "--data-dir", str(root),
                        "--rounds", "1", "--executor", "serial"], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    assert p.returncode == 2
    _no_traceback(p)
    assert p.stderr == (f'error: {root / "table.json"}: aux.sex.start "x" is invalid: a number (the first bucket\'s '
                        "lower edge)\n")


# ---------------------------------------------------------------- datasets/prepare_chexpert.py, prepare_mimic.py

def _script(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "datasets" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CHEXPERT = "CheXpert's train.csv"
CHEXPERT_HEADER = "Path,Sex,Age,Frontal/Lateral,AP/PA,Edema,Lung Lesion,Pneumonia,Atelectasis,Consolidation"


def _chexpert_csv(path: Path) -> Path:
    rows = [CHEXPERT_HEADER] + [f"train/patient{i:05d}/study1/view1_frontal.jpg,Male,{30 + i},Frontal,AP,"
                                f"{'1.0' if i % 2 else ''},,,," for i in range(8)]
    path.write_text("\n".join(rows) + "\n")
    return path


CSV_DAMAGE = {  # name -> (how the file is written, why it is refused; {what}: what the argument should be)
    "missing": (None, "no such file"),
    "folder": (lambda p: p.mkdir(), "a directory, not a file"),
    "binary": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), "a binary file, not {what} (a CSV "
                                                                               "table)"),
    "latin1": (lambda p: p.write_bytes(b"Path,Sex\nna\xefve,M\n"), "not UTF-8 text (byte 0xef at position 11), "
                                                                  "not {what}"),
    "empty": (lambda p: p.write_text(""), "an empty file, not {what}"),
    "gz cut short": (lambda p: p.write_bytes(gzip.compress(b"Path,Sex\n" * 1000)[:40]),
                     "a gzip file cut short or damaged (Compressed file ended before the end-of-stream marker was "
                     "reached)"),
}


@pytest.mark.parametrize("damage", sorted(CSV_DAMAGE))
def test_prepare_chexpert_refuses_an_unusable_input_in_one_line(tmp_path, capsys, damage):
    write, why = CSV_DAMAGE[damage]
    src, out = tmp_path / "train.csv", tmp_path / "table.csv"
    if write is not None:
        write(src)
    assert _script("prepare_chexpert").main([str(src), str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: train_csv={str(src)!r} is invalid: {why.format(what=CHEXPERT)}\n"
    assert not out.exists()


def test_prepare_chexpert_names_a_missing_column_and_a_row_cut_short(tmp_path, capsys):
    src = _chexpert_csv(tmp_path / "train.csv")
    text = src.read_text()
    src.write_text(text.replace("Lung Lesion", "LungLesion", 1))
    assert _script("prepare_chexpert").main([str(src), str(tmp_path / "o.csv")]) == 2
    assert capsys.readouterr().err == (f"error: train_csv={str(src)!r} is invalid: not CheXpert's train.csv (no column "
                                       "'Lung Lesion'; its columns: Path, Sex, Age, Frontal/Lateral, AP/PA, Edema, "
                                       "LungLesion, Pneumonia, ...)\n")
    src.write_text(text.rstrip("\n")[:-12] + "\n")  # the last line cut short, as by a stopped download
    assert _script("prepare_chexpert").main([str(src), str(tmp_path / "o.csv")]) == 2
    assert capsys.readouterr().err == (f"error: train_csv={str(src)!r} is invalid: line 9 has 4 fields where the "
                                       "header has 10 (a file cut short?)\n")
    src.write_text(CHEXPERT_HEADER + "\n")
    assert _script("prepare_chexpert").main([str(src), str(tmp_path / "o.csv")]) == 2
    assert capsys.readouterr().err == (f"error: train_csv={str(src)!r} is invalid: not CheXpert's train.csv (no rows "
                                       "under its header)\n")


def test_prepare_chexpert_reads_a_gzipped_release_and_says_when_the_output_cannot_be_written(tmp_path, capsys):
    src = _chexpert_csv(tmp_path / "train.csv")
    gz = tmp_path / "train.csv.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert _script("prepare_chexpert").main([str(gz), str(tmp_path / "a.csv"), "--per-class", "2"]) == 0
    assert _script("prepare_chexpert").main([str(src), str(tmp_path / "b.csv"), "--per-class", "2"]) == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    capsys.readouterr()
    out = tmp_path / "new-folder" / "t.csv"  # the documented command writes into a folder of its own: made
    assert _script("prepare_chexpert").main([str(src), str(out), "--per-class", "2"]) == 0
    assert out.read_bytes() == (tmp_path / "b.csv").read_bytes()
    capsys.readouterr()
    out = tmp_path / "a.csv" / "t.csv"  # under a file: one line, before the work (no domain's counts printed)
    assert _script("prepare_chexpert").main([str(src), str(out)]) == 1
    assert capsys.readouterr().err == f"error: out={str(out)!r} cannot be written ({tmp_path / 'a.csv'} is a file, " \
                                      "not a folder)\n"


def _mimic_inputs(root: Path) -> dict[str, Path]:
    files = {"chexpert": "subject_id,study_id,No Finding,Edema\n10000001,50000001,1.0,\n10000002,50000002,,1.0\n",
             "metadata": "dicom_id,subject_id,study_id,ViewPosition\n"
                         "d1,10000001,50000001,PA\nd2,10000002,50000002,AP\n",
             "patients": "subject_id,gender,anchor_age\n10000001,F,40\n10000002,M,50\n",
             "admissions": "subject_id,admission_type,race\n10000001,URGENT,WHITE\n10000002,URGENT,ASIAN\n"}
    for name, text in files.items():
        (root / f"{name}.csv").write_text(text)
    return {name: root / f"{name}.csv" for name in files}


def _mimic(paths: dict[str, Path], out: Path) -> list[str]:
    return [a for name, p in paths.items() for a in (f"--{name}", str(p))] + ["--out", str(out)]


WHAT = {"chexpert": "MIMIC-CXR-JPG's mimic-cxr-2.0.0-chexpert.csv",
        "metadata": "MIMIC-CXR-JPG's mimic-cxr-2.0.0-metadata.csv", "patients": "MIMIC-IV's patients.csv",
        "admissions": "MIMIC-IV's admissions.csv"}


@pytest.mark.parametrize("damage", sorted(CSV_DAMAGE))
@pytest.mark.parametrize("which", sorted(WHAT))
def test_prepare_mimic_refuses_an_unusable_input_in_one_line(tmp_path, capsys, damage, which):
    paths = _mimic_inputs(tmp_path)
    write, why = CSV_DAMAGE[damage]
    paths[which].unlink()
    if write is not None:
        write(paths[which])
    out = tmp_path / "table.csv"
    assert _script("prepare_mimic").main(_mimic(paths, out)) == 2
    assert capsys.readouterr().err == (f"error: {which}={str(paths[which])!r} is invalid: "
                                       f"{why.format(what=WHAT[which])}\n")
    assert not out.exists()


@pytest.mark.parametrize("which,header,why", [
    ("metadata", "a,b", "not MIMIC-CXR-JPG's mimic-cxr-2.0.0-metadata.csv (no column 'dicom_id'; its columns: a, b)"),
    ("patients", "subject_id,sex,age", "not MIMIC-IV's patients.csv (no column 'gender'; its columns: subject_id, "
                                       "sex, age)"),
    ("chexpert", "subject_id,study_id,Edema", "not MIMIC-CXR-JPG's mimic-cxr-2.0.0-chexpert.csv (no column 'No "
                                              "Finding'; its columns: subject_id, study_id, Edema)"),
    ("admissions", "subject_id,admission_type", "not MIMIC-IV's admissions.csv (no column 'race' (MIMIC-IV 2.x) or "
                                                "'ethnicity' (MIMIC-IV 1.0))"),
])
def test_prepare_mimic_names_an_input_s_missing_column(tmp_path, capsys, which, header, why):
    paths = _mimic_inputs(tmp_path)
    paths[which].write_text(header + "\n" + ",".join(["1"] * len(header.split(","))) + "\n")
    assert _script("prepare_mimic").main(_mimic(paths, tmp_path / "t.csv")) == 2
    assert capsys.readouterr().err == f"error: {which}={str(paths[which])!r} is invalid: {why}\n"


def test_prepare_mimic_names_a_label_that_is_not_a_number_and_still_joins_good_inputs(tmp_path, capsys):
    paths = _mimic_inputs(tmp_path)
    assert _script("prepare_mimic").main(_mimic(paths, tmp_path / "t.csv") + ["--test-share", "0"]) == 0
    assert (tmp_path / "t.csv").read_text().splitlines()[1:] == [
        "files/p10/p10000001/s50000001/d1.jpg,0,White,train,F,40",
        "files/p10/p10000002/s50000002/d2.jpg,1,Asian,train,M,50"]
    capsys.readouterr()
    paths["chexpert"].write_text("subject_id,study_id,No Finding,Edema\n10000001,50000001,yes,\n")
    assert _script("prepare_mimic").main(_mimic(paths, tmp_path / "u.csv")) == 2
    assert capsys.readouterr().err == (f"error: chexpert={str(paths['chexpert'])!r} is invalid: line 2, column 'No "
                                       "Finding': 'yes' is not a label (1.0, 0.0, -1.0 or blank)\n")


@pytest.mark.parametrize("script", ["prepare_chexpert", "prepare_mimic"])
def test_the_preparation_scripts_exit_2_with_one_line_and_no_traceback(tmp_path, script):
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x89PNG\x00\x01\xff\xfe")
    if script == "prepare_chexpert":
        argv = [str(binary), str(tmp_path / "o.csv")]
    else:
        paths = _mimic_inputs(tmp_path)
        paths["metadata"] = binary
        argv = _mimic(paths, tmp_path / "o.csv")
    p = subprocess.run([sys.executable, str(ROOT / "datasets" / f"{script}.py"), *argv], capture_output=True,
                       text=True, timeout=60, cwd=str(tmp_path))
    assert p.returncode == 2
    _no_traceback(p)
    assert p.stderr.startswith("error: ") and f"={str(binary)!r} is invalid: a binary file, not " in p.stderr


MIMIC_ARGS = ["--chexpert", "c", "--metadata", "m", "--patients", "p", "--admissions", "a", "--out", "o"]


@pytest.mark.parametrize("script,argv,line", [
    ("prepare_chexpert", ["t.csv", "o.csv", "--test-share", "-1"],
     "error: test_share=-1.0 is invalid: a number in (0, 1)"),
    ("prepare_chexpert", ["t.csv", "o.csv", "--per-class", "0"], "error: per_class=0 is invalid: an integer >= 1"),
    ("prepare_chexpert", ["t.csv", "o.csv", "--per-class", "abc"],
     "error: argument --per-class: per_class='abc' is invalid: an integer >= 1"),
    ("prepare_chexpert", ["t.csv", "o.csv", "--test-share", "nan"],
     "error: argument --test-share: test_share='nan' is invalid: a number in (0, 1)"),
    ("prepare_chexpert", ["t.csv", "o.csv", "--negatives", "abc"],
     "error: argument --negatives: invalid choice: 'abc' (choose from 'blank', 'explicit')"),
    ("prepare_chexpert", ["t.csv", "o.csv", "--bogus"], "error: unrecognized arguments: --bogus"),
    ("prepare_mimic", [*MIMIC_ARGS, "--seed", "abc"], "error: argument --seed: seed='abc' is invalid: an integer"),
    ("prepare_mimic", [*MIMIC_ARGS, "--test-share", "abc"],
     "error: argument --test-share: test_share='abc' is invalid: a number in [0, 1)"),
    ("prepare_mimic", [*MIMIC_ARGS, "--test-share", "1.5"], "error: test_share=1.5 is invalid: a number in [0, 1)"),
    ("prepare_mimic", [*MIMIC_ARGS, "--per-class", "0"], "error: per_class=0 is invalid: an integer >= 1"),
    ("prepare_mimic", [*MIMIC_ARGS, "--seeds", "1"],
     "error: unrecognized arguments: --seeds 1; did you mean '--seed'?"),
    ("prepare_mnist", ["w.whl", "--bogus"], "error: unrecognized arguments: --bogus"),
    ("prepare_mnist", ["w.whl", "--force=1"], "error: argument --force: ignored explicit argument '1'"),
])
def test_the_preparation_scripts_refuse_a_bad_flag_in_one_line(script, argv, line, tmp_path, monkeypatch, capsys):
    """A bad value or an unknown flag is one line naming the option, the value and what is allowed, exit 2, no usage
    dump (argparse printed its usage; an out-of-range --test-share said "--per-class must be >= 1 and --test-share
    in (0, 1)", without `error:` or the value), before any file is read."""
    monkeypatch.chdir(tmp_path)
    assert _script(script).main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the repair command of MNIST / Fashion-MNIST

def _full_size_labels(d: Path) -> Path:
    """Fashion-MNIST's four files in `d`, its training labels of the release's size but not the release."""
    make_fmnist_dir(d, n_train=20, n_test=5)
    (d / "train-labels-idx1-ubyte.gz").unlink()
    p = d / "train-labels-idx1-ubyte"
    p.write_bytes(struct.pack(">II", 2049, 60000) + bytes(60000))
    return p


def test_the_repair_command_is_absolute_and_runs_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _full_size_labels(tmp_path / "fm")
    with pytest.raises(DatasetDamaged) as e:
        DATASETS.get("fashion-mnist")("fm")  # a relative --data-dir
    script = ROOT / "datasets" / "fashion-mnist.sh"
    assert script.is_file() and str(e.value).endswith(f"; to get it again: bash {script} --out {tmp_path / 'fm'}")
    mnist_sh = ROOT / "datasets" / "mnist.sh"
    assert releases.repair_command("MNIST", Path("m")) == f"bash {mnist_sh} --out {tmp_path / 'm'}"
    assert releases.repair_command("Fashion-MNIST", Path("my data")) == \
        f"bash {script} --out '{tmp_path / 'my data'}'"  # quoted for the shell


def test_the_named_mnist_command_works_from_another_folder(tmp_path):
    """`bash <checkout>/datasets/mnist.sh --out <abs> --check` from a folder that is not the checkout finds its
    helper and checks the folder (exit 1: a damaged file, named; --check writes and downloads nothing)."""
    d = tmp_path / "MNIST" / "raw"
    _full_size_labels(d)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = releases.repair_command("MNIST", d).split()
    p = subprocess.run([*command, "--check"], capture_output=True, text=True, timeout=60, cwd=str(elsewhere),
                       env={**os.environ, "FDA_DATA_DIR": str(tmp_path / "not-here")})
    assert p.returncode == 1 and p.stderr.startswith(f"error: {d}/") and "damaged" in p.stderr, p.stderr
    _no_traceback(p)


def test_without_the_checkout_s_installers_the_line_names_what_works_instead(tmp_path, monkeypatch):
    """A wheel install has no datasets/ folder beside the package."""
    monkeypatch.setattr(releases, "DATASETS_DIR", tmp_path / "no-checkout")
    here = Path(releases.__file__).resolve()
    assert releases.repair_command("Fashion-MNIST", Path(releases.FMNIST_SYSTEM_DIR)) == \
        "sudo apt-get install --reinstall dataset-fashion-mnist"
    assert releases.repair_command("Fashion-MNIST", tmp_path / "fm") == (
        f"sudo apt-get install dataset-fashion-mnist, then python3 {here} install Fashion-MNIST "
        f"/usr/share/datasets/fashion-mnist {tmp_path / 'fm'}")
    assert releases.repair_command("MNIST", tmp_path / "m") == (
        f"bash datasets/mnist.sh --out {tmp_path / 'm'} in an fda-ray source checkout (the installer is not part of "
        "the installed package)")
    # the named helper runs by its path from any folder (standard library only)
    p = subprocess.run([sys.executable, str(here), "install", "--help"], capture_output=True, text=True, timeout=60,
                       cwd=str(tmp_path))
    assert p.returncode == 0 and "SRC" in p.stdout.upper()


def test_a_verdict_is_kept_per_dataset_not_only_per_file(tmp_path, monkeypatch):
    """MNIST and Fashion-MNIST share names and sizes: a file that is one's release must still be refused as the
    other's after the first verdict (stand-in digests monkeypatched: the rule, not the real files)."""
    p = tmp_path / "train-labels-idx1-ubyte"
    p.write_bytes(b"\x00\x00\x08\x01" + bytes(8))
    body = p.read_bytes()
    monkeypatch.setattr(releases, "_SEEN", {})
    monkeypatch.setitem(releases.RELEASES, "MNIST", {p.name: (len(body), hashlib.sha256(body).hexdigest())})
    monkeypatch.setitem(releases.RELEASES, "Fashion-MNIST", {p.name: (len(body), "0" * 64)})
    assert releases.content_problem("MNIST", p, body) is None
    assert releases.content_problem("Fashion-MNIST", p, body) is not None  # not MNIST's cached verdict


# ---------------------------------------------------------------- tools/authors_fedgp.py

def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("authors_fedgp", ROOT / "tools" / "authors_fedgp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("damage,why", [
    ("gz cut short", "unreadable (Compressed file ended before the end-of-stream marker was reached)"),
    ("not gzip", "unreadable (Not a gzipped file (b'\\x00\\x00'))"),
    ("full size", "the release's size (60008 bytes) but sha256 "),
    ("idx cut short", "expected 20 values for shape (20,), found 10"),
])
def test_authors_fedgp_refuses_a_damaged_file_in_one_line_and_leaves_no_part_file(tmp_path, damage, why):
    src = make_fmnist_dir(tmp_path / "src", n_train=20, n_test=5)
    labels = src / "train-labels-idx1-ubyte.gz"
    if damage == "gz cut short":
        labels.write_bytes(labels.read_bytes()[:-12])
    elif damage == "not gzip":
        labels.write_bytes(struct.pack(">II", 2049, 20) + bytes(20))  # a raw file under the .gz name
    elif damage == "full size":
        labels.unlink()
        labels = src / "train-labels-idx1-ubyte"
        labels.write_bytes(struct.pack(">II", 2049, 60000) + bytes(60000))
    else:
        labels.unlink()
        labels = src / "train-labels-idx1-ubyte"
        labels.write_bytes(struct.pack(">II", 2049, 20) + bytes(10))
    with pytest.raises(ValueError) as e:
        _tool().prepare_datadir(src, tmp_path / "data")
    msg = str(e.value)
    assert msg.startswith(f"data={str(src)!r} is invalid: {labels}: {why}") and "\n" not in msg, msg
    assert msg.endswith(f"; to get it again: bash {ROOT / 'datasets' / 'fashion-mnist.sh'} --out {src}")
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == ["train-images-idx3-ubyte"]  # the one before it; no .part


def test_authors_fedgp_exits_2_with_one_line_before_the_authors_script_runs(tmp_path, capsys):
    src = make_fmnist_dir(tmp_path / "src", n_train=20, n_test=5)
    cut = src / "t10k-images-idx3-ubyte.gz"
    cut.write_bytes(cut.read_bytes()[:50])
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "main_noniid.py").write_text("raise SystemExit('the authors script must not run')\n")
    rc = _tool().main(["--repo", str(repo), "--out", str(tmp_path / "out"), "--iter", "x", "--data", str(src),
                       "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith(f"error: data={str(src)!r} is invalid: {cut}: ")
    assert not list((tmp_path / "work").rglob("*.part")) and not (tmp_path / "out").exists()


def test_authors_fedgp_leaves_no_part_file_when_a_copy_is_stopped(tmp_path, monkeypatch):
    src = make_fmnist_dir(tmp_path / "src", n_train=20, n_test=5)
    tool = _tool()

    def stopped(self, target):  # type: ignore[no-untyped-def]  (Ctrl-C between the write and the rename)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        tool.prepare_datadir(src, tmp_path / "data")
    assert list((tmp_path / "data" / "FashionMNIST" / "raw").iterdir()) == []


def test_authors_fedgp_writes_again_a_damaged_copy_an_earlier_run_left(tmp_path):
    src = make_fmnist_dir(tmp_path / "src", n_train=20, n_test=5)
    raw = _tool().prepare_datadir(src, tmp_path / "data")
    good = (raw / "t10k-labels-idx1-ubyte").read_bytes()
    (raw / "t10k-labels-idx1-ubyte").write_bytes(good[:-2])  # cut short: no longer what its header declares
    _tool().prepare_datadir(src, tmp_path / "data")
    assert (raw / "t10k-labels-idx1-ubyte").read_bytes() == good == gzip.decompress(
        (src / "t10k-labels-idx1-ubyte.gz").read_bytes())
