"""The data contract: a dataset is a `Split` of tensors (or images read on demand), registered by name in
`DATASETS`; a data view is a `Pair` (x, y). Also where datasets are looked for on disk, and the one error a
missing dataset raises (`DatasetNotFound`: every path searched and how to obtain the data), and its subclass for
a damaged one (`DatasetDamaged`: the file, what is wrong, the command that repairs it).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fda_ray.core.registry import DATASETS, Dataset, DatasetRegistry  # noqa: F401  (re-exported: defined in the core, where the config reads them)

Pair = tuple[torch.Tensor, torch.Tensor]  # (x, y) of one data view
UNLABELLED = -1  # a sample's label in a view where it is not labelled (FSSDA's devices' target shards)


def add_noise(x: torch.Tensor, std: float, gen: torch.Generator | None) -> torch.Tensor:
    """x + N(0, std^2) drawn from `gen` (no clipping, no normalisation): the target domain's feature noise,
    drawn afresh every time an image is read (fda_ray.runtime.partitions)."""
    if std == 0:
        return x
    return x + std * torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)


class DatasetNotFound(FileNotFoundError):
    """No copy of a dataset was found in any searched location."""


class DatasetDamaged(DatasetNotFound, ValueError):
    """A dataset's file is there but is not what it claims: a full-size MNIST / Fashion-MNIST file that is not the
    known release (fda_ray.data.releases), a file cut short. One line naming the file, what is wrong and the command
    that repairs it. A DatasetNotFound (no usable copy was found: the CLIs answer exit 2, one line) and a ValueError
    (what a damaged file raised before, and what callers catch)."""


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
    # DomainBed datasets (fda_ray.data.domainbed): one (x, y) per environment in DomainBed's index order, and the
    # environments' names; x_train etc. are then empty (0, *input_shape) tensors that only carry the shape.
    environments: tuple[tuple[Any, torch.Tensor], ...] = ()
    env_names: tuple[str, ...] = ()
    # Environments that come with their own test split (Healthcare FDA's per-domain train/test tables), else empty:
    # one (x, y) or None per environment (fda_ray.runtime.partitions, partition heldout_domain).
    env_tests: tuple[tuple[Any, torch.Tensor] | None, ...] = ()
    # Healthcare FDA's auxiliary labels (fda_ray.core.multitask): ((name, classes), ...); y is then (n, 1 + K).
    aux_tasks: tuple[tuple[str, int], ...] = ()

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])




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
    env = os.environ.get("FDA_DATA_DIR")
    if env:  # set, it is checked like the flag it stands for (a typo there must not fall back unseen)
        where = Path(env).expanduser()
        if not where.is_dir():
            why = "it is a file, not a directory" if where.exists() else "no such directory"
            raise DatasetNotFound(f"$FDA_DATA_DIR={env!r} is invalid: {why}; point it at the "
                                  "data root, or unset it to search ./data, ~/.cache/fda_ray and the system's copy")
    roots: list[Path] = []
    for root in (env, "data", os.path.expanduser("~/.cache/fda_ray")):
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


def download_failed(e: BaseException) -> str:
    """Why --download did not get a dataset, in a few words, for its not-found line (torchvision's URLError holds
    the reason: no network is 'Name or service not known')."""
    reason = getattr(e, "reason", None)
    why = getattr(reason, "strerror", None) or (str(reason) if reason else "") or getattr(e, "strerror", None) \
        or (str(e).splitlines()[0] if str(e).strip() else type(e).__name__)
    return f"--download failed ({why[:200]})"


def check_labels(path: Path, y: np.ndarray, num_classes: int, n: int) -> None:
    """Labels are one class index per sample, in [0, num_classes)."""
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"{path}: {y.shape} labels for {n} images (one label per image expected)")
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"{path}: label values {int(y.min())}..{int(y.max())} are outside the dataset's "
                         f"{num_classes} classes 0..{num_classes - 1}")


