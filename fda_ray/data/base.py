"""The data contract: a dataset is a `Split` of tensors (or images read on demand), registered by name in
`DATASETS`; a data view is a `Pair` (x, y). Also where datasets are looked for on disk, and the one error a
missing dataset raises (`DatasetNotFound`: every path searched and how to obtain the data), and its subclass for
a damaged one (`DatasetDamaged`: the file, what is wrong, the command that repairs it).
"""
from __future__ import annotations

import dataclasses
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


class SplitInvalid(ValueError):
    """A loader's Split that breaks the contract above (checked once, when the dataset is loaded: check_split)."""


def check_split(name: str, split: object) -> Split:
    """`split`, the Split dataset `name`'s loader returned, checked against the contract (x float32, y (n,) int64
    class indices in [0, num_classes), as many labels as samples, the same feature shape in train and test) before
    any work, so that a plug-in's mistake is one line naming the dataset, the field, the value and what is allowed,
    not a torch error in round 0 (or one blamed on the model). What converts without loss is converted: numpy arrays
    to tensors, integer labels of another dtype (int32 from an .npz), whole-number float labels and (n, 1) labels
    to (n,) int64, float64 / float16 features to float32 (the models' dtype). Labels are judged for a classification
    task without auxiliary labels; a binary, regression or multi-task Split is checked for its types, lengths and
    shapes only. Returns the Split, converted where needed."""
    def bad(field: str, what: str) -> SplitInvalid:
        return SplitInvalid(f"dataset {name!r} is invalid: {field} {what} (the contract: fda_ray.data.Split's "
                            "docstring, docs/plugins.md)")

    if not isinstance(split, Split):
        kind = type(split).__name__
        raise bad("its loader's result", f"is a {kind}, not a fda_ray.data.Split: return Split(x_train, y_train, "
                  "x_test, y_test, num_classes=...)")
    k = split.num_classes
    if isinstance(k, (np.integer, torch.Tensor)) and not isinstance(k, bool) and getattr(k, "ndim", 0) == 0 \
            and float(k) == int(k):
        k = int(k)  # (np.int64(4), tensor(4): a count computed with numpy or torch)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise bad("num_classes", f"is {split.num_classes!r}: a whole number of classes (outputs), at least 1")
    labels = split.task == "classification" and not split.aux_tasks

    def tensor(field: str, v: Any) -> Any:
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                raise bad(field, "is a numpy array of Python objects: a tensor of numbers")
            return torch.from_numpy(np.ascontiguousarray(v))  # (unambiguous: the same numbers, as a tensor)
        return v

    def features(field: str, x: Any) -> Any:
        x = tensor(field, x)
        if not isinstance(x, torch.Tensor):
            return x  # (images read on demand: ImageFiles, which makes float32 images itself)
        if x.dtype in (torch.float64, torch.float16, torch.bfloat16):
            return x.float()  # the models' dtype (numpy's default float64 is a common, harmless source)
        if x.dtype != torch.float32:
            raise bad(field, f"holds {str(x.dtype).replace('torch.', '')} values: features are float32 (images "
                      "scaled to [0, 1]: x.float() / 255)")
        if x.ndim < 2:
            raise bad(field, f"has shape {tuple(x.shape)}: (n, d) vectors or (n, C, H, W) images")
        return x

    def targets(field: str, y: Any, n: int | None) -> torch.Tensor:
        y = tensor(field, y)
        if not isinstance(y, torch.Tensor):
            raise bad(field, f"is a {type(y).__name__}: a tensor of labels")
        if n is not None and len(y) != n:
            raise bad(field, f"holds {len(y)} labels for {n} samples: one label per sample")
        if not labels:
            return y
        if y.ndim == 2 and y.shape[1] == 1:
            y = y.reshape(-1)  # (n, 1) -> (n,): the same labels
        if y.ndim != 1:
            raise bad(field, f"has shape {tuple(y.shape)}: (n,) class indices")
        if y.is_floating_point():
            if len(y) and not bool(torch.all(torch.isfinite(y) & (y == y.round()))):
                bad_value = y[~(torch.isfinite(y) & (y == y.round()))][0].item()
                raise bad(field, f"holds the float label {bad_value!r}: class indices are whole numbers "
                          f"0..{k - 1}")
        elif y.dtype.is_complex:
            raise bad(field, f"holds {str(y.dtype).replace('torch.', '')} values: class indices, int64")
        if y.dtype != torch.int64:
            y = y.to(torch.int64)  # (int32 from an .npz, uint8, whole-number floats, bool: the same labels)
        if len(y):
            lo, hi = int(y.min()), int(y.max())
            if lo < 0:
                raise bad(field, f"holds the label {lo}: class indices are 0..{k - 1} (num_classes={k})")
            if hi >= k:
                raise bad(field, f"holds the label {hi}, and num_classes={k} allows 0..{k - 1}: register "
                          f"num_classes={hi + 1} (or more) or fix the labels")
        return y

    def pair(field: str, xy: Any) -> tuple[Any, torch.Tensor]:
        if not isinstance(xy, (tuple, list)) or len(xy) != 2:
            raise bad(field, f"is a {type(xy).__name__}: an (x, y) pair")
        x = features(f"{field}'s x", xy[0])
        return x, targets(f"{field}'s y", xy[1], len(x) if hasattr(x, "__len__") else None)

    x_train, x_test = features("x_train", split.x_train), features("x_test", split.x_test)
    for field, x in (("x_train", x_train), ("x_test", x_test)):
        if not isinstance(x, torch.Tensor):
            raise bad(field, f"is a {type(x).__name__}: a tensor, (n, d) or (n, C, H, W)")
    if x_test.shape[1:] != x_train.shape[1:]:
        raise bad("x_test", f"has samples of shape {tuple(x_test.shape[1:])}, x_train's are "
                  f"{tuple(x_train.shape[1:])}: the same feature shape")
    changes: dict[str, Any] = {
        "x_train": x_train, "x_test": x_test, "num_classes": k,
        "y_train": targets("y_train", split.y_train, len(x_train)),
        "y_test": targets("y_test", split.y_test, len(x_test)),
        "domains": tuple(pair(f"domains[{i}]", d) for i, d in enumerate(split.domains)),
        "environments": tuple(pair(f"environments[{i}]", e) for i, e in enumerate(split.environments)),
        "env_tests": tuple(None if e is None else pair(f"env_tests[{i}]", e) for i, e in enumerate(split.env_tests)),
    }
    return dataclasses.replace(split, **changes)  # (the same tensors where nothing was converted)




def _candidate_dirs(data_dir: str | None, subdirs: list[str], system_dirs: list[str]) -> list[Path]:
    """Where to look. A named data_dir is the only place searched (a typo never falls back to another copy
    silently); without one: $FDA_DATA_DIR, ./data, ~/.cache/fda_ray, then the system's copy."""
    # Absolute: image files are read where a batch is drawn, which may be an actor on another node whose working
    # directory is not the command's (a relative --data-dir named files there that are not these).
    if data_dir:
        root = Path(data_dir).expanduser().absolute()
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
    dirs = [r.absolute() / s if s else r.absolute() for r in roots for s in subdirs]
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


