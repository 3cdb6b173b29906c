"""Datasets from their standard on-disk layouts, as tensors, plus the seeds' synthetic regression data.

Registered datasets (DATASETS): fashion-mnist (four IDX files), cifar10 (torchvision's python pickle
batches), synthetic (004 Appendix B), DomainBed's environment datasets (fda_ray.domainbed) and seed 000's
medical datasets (fda_ray.medical). Nothing is downloaded unless asked (`download=True`), and a
missing dataset raises DatasetNotFound naming every path searched and how to get the data.
"""
from __future__ import annotations

import gzip
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fda_ray.registry import Registry

Pair = tuple[torch.Tensor, torch.Tensor]  # (x, y) of one data view
UNLABELLED = -1  # a sample's label in a view where it is not labelled (seed 002's devices' target shards)


def add_noise(x: torch.Tensor, std: float, gen: torch.Generator | None) -> torch.Tensor:
    """x + N(0, std^2) drawn from `gen` (no clipping, no normalisation): the target domain's feature noise,
    drawn afresh every time an image is read (fda_ray.shifts)."""
    if std == 0:
        return x
    return x + std * torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)


class DatasetNotFound(FileNotFoundError):
    """No copy of a dataset was found in any searched location."""


@dataclass(frozen=True)
class Split:
    """Train and test tensors of one dataset. x: (n, C, H, W) float32 in [0, 1] or (n, d); y: (n,) int64 or (n, k)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int  # output size: classes, or regression outputs
    task: str = "classification"  # or "binary" (one logit; num_classes 2), "regression"
    # Extra domains (synthetic data: D_2..D_9, the sources with increasing shift), else empty.
    domains: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
    # DomainBed datasets (fda_ray.domainbed): one (x, y) per environment in DomainBed's index order, and the
    # environments' names; x_train etc. are then empty (0, *input_shape) tensors that only carry the shape.
    environments: tuple[tuple[Any, torch.Tensor], ...] = ()
    env_names: tuple[str, ...] = ()
    # Environments that come with their own test split (seed 000's per-domain train/test tables), else empty:
    # one (x, y) or None per environment (fda_ray.shifts, partition heldout_domain).
    env_tests: tuple[tuple[Any, torch.Tensor] | None, ...] = ()
    # Seed 000's auxiliary labels (fda_ray.multitask): ((name, classes), ...); y is then (n, 1 + K).
    aux_tasks: tuple[tuple[str, int], ...] = ()

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


DATASETS: Registry[Callable[..., Split]] = Registry("dataset")


def _candidate_dirs(data_dir: str | None, subdirs: list[str], system_dirs: list[str]) -> list[Path]:
    """Where to look. A named data_dir is the only place searched (a typo never falls back to another copy
    silently); without one: $FDA_DATA_DIR, ./data, ~/.cache/fda_ray, then the system's copy."""
    if data_dir:
        root = Path(data_dir).expanduser()
        if root.exists() and not root.is_dir():
            raise DatasetNotFound(f"data_dir={data_dir!r} is invalid: it is a file, not a directory")
        if root.is_dir() and not os.access(root, os.R_OK | os.X_OK):
            raise DatasetNotFound(f"data_dir={data_dir!r} is invalid: the directory is not readable")
        return [root / s if s else root for s in subdirs]
    roots: list[Path] = []
    for root in (os.environ.get("FDA_DATA_DIR"), "data", os.path.expanduser("~/.cache/fda_ray")):
        if root:
            roots.append(Path(root))
    dirs = [r / s if s else r for r in roots for s in subdirs]
    dirs += [Path(p) for p in system_dirs]
    seen, out = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _not_found(name: str, data_dir: str | None, dirs: list[Path], how: str) -> DatasetNotFound:
    where = (f" in data_dir={data_dir!r}" + ("" if Path(data_dir).expanduser().is_dir() else " (no such directory)")
             + "; only the named directory is searched") if data_dir else ""
    return DatasetNotFound(f"{name} not found{where}; searched: {', '.join(str(d) for d in dirs)}. {how}")


def check_labels(path: Path, y: np.ndarray, num_classes: int, n: int) -> None:
    """Labels are one class index per sample, in [0, num_classes)."""
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"{path}: {y.shape} labels for {n} images (one label per image expected)")
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"{path}: label values {int(y.min())}..{int(y.max())} are outside the dataset's "
                         f"{num_classes} classes 0..{num_classes - 1}")


# ---------------------------------------------------------------- Fashion-MNIST (IDX files)

FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
FMNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzip-compressed) into a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:  # broken gzip stream
        raise ValueError(f"{path}: unreadable ({e})") from None
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


@DATASETS.register("fashion-mnist")
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
        raise _not_found("Fashion-MNIST", data_dir, dirs,
                         "Get it with `apt-get install -y dataset-fashion-mnist` (Debian/Ubuntu), or pass --download "
                         "(torchvision downloader, needs internet), or put the four IDX files in $FDA_DATA_DIR")
    xtr, ytr, xte, yte = (read_idx(_idx_path(found, f)) for f in FMNIST_FILES)
    for images, labels, x, y in ((FMNIST_FILES[0], FMNIST_FILES[1], xtr, ytr), (FMNIST_FILES[2], FMNIST_FILES[3], xte, yte)):
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise ValueError(f"{_idx_path(found, images)}: images of shape {x.shape[1:]}; Fashion-MNIST's are 28 x 28")
        check_labels(_idx_path(found, labels), y, 10, len(x))
    to_x = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0).unsqueeze(1)  # (n, 1, 28, 28)
    return Split(to_x(xtr), torch.from_numpy(ytr.astype(np.int64)), to_x(xte), torch.from_numpy(yte.astype(np.int64)), 10)


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


@DATASETS.register("cifar10")
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


# ---------------------------------------------------------------- synthetic regression (004 Appendix B)

def synthetic_domains(seed: int = 0, n: int = 5000, dim: int = 50, outputs: int = 10, n_basis: int = 100,
                      n_domains: int = 9, max_shift: float = 1.0, mixture: int = 10
                      ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """D_1..D_n_domains of 004 Appendix B: x (n, dim) from a mixture of `mixture` unit-covariance Gaussians
    with centres ~ U(-0.5, 0.5)^dim; y (n, outputs), y_k = sum of `n_basis` radial basis functions
    exp(-|x - mu|^2 / (2 s)^2). D_1 is the target domain; D_k moves every basis centre and width by
    (k - 1) / (n_domains - 1) * max_shift times a fixed random direction, so the shift grows with k.

    Deviation from the paper's text, on purpose: it draws the widths from U(-0.5, 0.5), which in R^50 makes
    every basis function ~exp(-50) = 0 and the targets constant. Widths here are sqrt(dim) * U(0.5, 1.5) so
    that the exponent is of order one and the functions vary over the data.
    """
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-0.5, 0.5, size=(mixture, dim))
    mu = rng.uniform(-0.5, 0.5, size=(outputs, n_basis, dim)) * 4.0
    width = np.sqrt(dim) * rng.uniform(0.5, 1.5, size=(outputs, n_basis))
    d_mu = rng.normal(size=mu.shape)
    d_width = rng.uniform(-0.5, 0.5, size=width.shape)
    out = []
    for k in range(n_domains):
        s = k / max(n_domains - 1, 1) * max_shift
        comp = rng.integers(0, mixture, size=n)
        x = centres[comp] + rng.normal(size=(n, dim))  # (n, dim)
        mu_k = mu + s * d_mu
        width_k = width * (1.0 + s * d_width)
        # |x - mu|^2 expanded, so no (n, outputs, n_basis, dim) intermediate is built
        sq = np.clip((x**2).sum(1)[:, None, None] - 2 * np.einsum("nd,obd->nob", x, mu_k)
                     + (mu_k**2).sum(-1)[None], 0.0, None)  # (n, outputs, n_basis)
        y = np.exp(-sq / (2.0 * width_k[None]) ** 2).sum(-1)  # (n, outputs)
        out.append((torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))))
    return out


@DATASETS.register("synthetic")
def load_synthetic(data_dir: str | None = None, download: bool = False, seed: int = 0, n: int = 5000) -> Split:
    """The target domain D_1 split 80/20 into train/test; D_2..D_9 as `domains` (the sources)."""
    doms = synthetic_domains(seed=seed, n=n)
    x1, y1 = doms[0]
    cut = int(0.8 * len(x1))
    return Split(x1[:cut], y1[:cut], x1[cut:], y1[cut:], num_classes=y1.shape[1], task="regression",
                 domains=tuple(doms[1:]))


def load(name: str, data_dir: str | None = None, download: bool = False) -> Split:
    return DATASETS.get(name)(data_dir=data_dir, download=download)


from fda_ray import domainbed as _domainbed  # noqa: E402,F401  (registers DomainBed's datasets)
from fda_ray import medical as _medical  # noqa: E402,F401  (registers seed 000's datasets)
from fda_ray import medical_csv as _medical_csv  # noqa: E402,F401  (and its CSV tables)
from fda_ray import fmnist_domains as _fmnist_domains  # noqa: E402,F401  (FMNIST-5, seeds 002 and 003)
