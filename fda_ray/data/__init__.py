"""Datasets by name, from their standard on-disk layouts (nothing is downloaded at run time), and what an FDA
run's data becomes once partitioned. `load(name)` returns a `Split`; a missing dataset raises `DatasetNotFound`
naming every path searched and how to obtain the data. The registered sources (`DATASETS`):

    standard        fashion-mnist (IDX files), cifar10 (torchvision's pickles)             data/standard.py
    synthetic       the FedDA/FedGP paper's Appendix B regression domains                  data/synthetic.py
    domainbed       DomainBed's ColoredMNIST / RotatedMNIST constructions (also on
                    Fashion-MNIST) and its image-folder datasets (VLCS, PACS, ...)       data/domainbed.py
    fmnist-5        five visual domains built from Fashion-MNIST (Digit-Five's analogue)  data/fmnist_domains.py
    conditions      fmnist-conditions: binary tasks with auxiliary labels (CheXpert's
                    analogue, the auxiliary-label paper)                                 data/conditions.py
    medical tables  CheXpert / MIMIC / generic CSV tables with auxiliary labels            data/medical_csv.py

Importing this package registers every source. The partitions that turn a `Split` into a run's `Setting` are
fda_ray.runtime.partitions.
"""
from __future__ import annotations

import errno
import os

from fda_ray.data import conditions as _conditions  # noqa: F401  (registers fmnist-conditions)
from fda_ray.core.registry import count_environments
from fda_ray.data.base import DATASETS, UNLABELLED, Dataset, DatasetNotFound, Pair, Split, add_noise, check_split
from fda_ray.data.domainbed import load_pool
from fda_ray.data import fmnist_domains as _fmnist_domains  # noqa: F401  (registers fmnist-5)
from fda_ray.data.images import ImageFiles, concat, take
from fda_ray.data import medical_csv as _medical_csv  # noqa: F401  (registers the medical tables)
from fda_ray.data.setting import Setting
from fda_ray.data.standard import load_cifar10, load_fashion_mnist
from fda_ray.data.synthetic import synthetic_domains


def load(name: str, data_dir: str | None = None, download: bool = False, **options) -> Split:
    """The dataset registered as `name` (DATASETS), read from `data_dir` or the standard places; `options` go to
    its loader (construction_seed: the seed that builds a DomainBed construction, fda_ray.data.domainbed).

    What the loader returns is checked once here (check_split: a plug-in's mistake is one line before any work),
    and so is its environment count against the registered one. A loader that is not downloading only reads, so
    the OSError of a file it could not open (a plug-in's plain np.load of a missing file) is a missing dataset,
    DatasetNotFound naming the path, never a refused write ("free the space": fda_ray.core.interrupts)."""
    entry = DATASETS.get(name)
    try:
        split = entry(data_dir=data_dir, download=download, **options)
    except DatasetNotFound:
        raise
    except OSError as e:
        if download or e.errno not in _READ_ERRNOS:
            raise
        path = e.filename or "its file"
        why = e.strerror or os.strerror(e.errno)
        owner = getattr(entry.load, "__module__", "its loader")
        raise DatasetNotFound(f"dataset {name!r} could not be read: {path}: {why}; searched: {path} (the path its "
                              f"loader, {owner}, opened). Get the data as {owner} documents, put it there or pass "
                              "--data-dir; a loader that looks in several places raises fda_ray.data.DatasetNotFound "
                              "naming them (docs/plugins.md)") from None
    split = check_split(name, split)
    if split.environments:
        registered = entry.count_environments(data_dir)
        if registered is not None and registered != len(split.environments):
            names = ", ".join(split.env_names) or f"{len(split.environments)} unnamed"
            raise ValueError(f"dataset {name!r} is invalid: it is registered with environments={registered} and "
                             f"its loader returned {len(split.environments)} ({names}): register "
                             f"DATASETS.add({name!r}, ..., environments={len(split.environments)}) (or a function "
                             "of data_dir that counts them)")
    return split


# The errors of opening a file that is not there or not readable (a read: the loader is not downloading).
_READ_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG}


__all__ = ["DATASETS", "Dataset", "DatasetNotFound", "ImageFiles", "Pair", "Setting", "Split", "UNLABELLED", "add_noise", "concat",
           "count_environments", "load", "load_cifar10", "load_fashion_mnist", "load_pool", "synthetic_domains",
           "take"]
