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

from pathlib import Path

from fda_ray.data import conditions as _conditions  # noqa: F401  (registers fmnist-conditions)
from fda_ray.data.base import DATASETS, UNLABELLED, DatasetNotFound, Pair, Split, add_noise
from fda_ray.data.domainbed import COLORED_ENVS, FOLDER_DATASETS, ROTATED_ANGLES, ENV_DATASETS, load_pool
from fda_ray.data.fmnist_domains import FMNIST5_DOMAINS
from fda_ray.data.images import ImageFiles, concat, take
from fda_ray.data.medical_csv import MEDICAL_DATASETS, count_domains
from fda_ray.data.setting import Setting
from fda_ray.data.standard import load_cifar10, load_fashion_mnist
from fda_ray.data.synthetic import synthetic_domains


def load(name: str, data_dir: str | None = None, download: bool = False, **options) -> Split:
    """The dataset registered as `name` (DATASETS), read from `data_dir` or the standard places; `options` go to
    its loader (construction_seed: the seed that builds a DomainBed construction, fda_ray.data.domainbed)."""
    return DATASETS.get(name)(data_dir=data_dir, download=download, **options)


def count_environments(dataset: str, data_dir: str | None) -> int:
    """Environments of a dataset without reading its images (a config's default source count)."""
    if dataset in MEDICAL_DATASETS:  # Healthcare FDA's tables: one environment per domain
        return count_domains(dataset, data_dir)
    if dataset in FOLDER_DATASETS:
        return len(FOLDER_DATASETS[dataset].environments)
    if dataset.startswith("colored-"):
        return len(COLORED_ENVS)
    if dataset.startswith("rotated-"):
        return len(ROTATED_ANGLES)
    if dataset == "fmnist-5":
        return len(FMNIST5_DOMAINS)
    if dataset == "imagefolder":
        root = Path(data_dir).expanduser() if data_dir else None
        if root is None or not root.is_dir():
            raise DatasetNotFound(f"imagefolder: data_dir={data_dir!r} is not a directory; expected "
                                  "<data_dir>/<domain>/<class>/<image files>")
        return sum(1 for p in root.iterdir() if p.is_dir())
    raise ValueError(f"dataset={dataset!r} is invalid for partitions domainbed and domain_shards: it has no "
                     f"environments (DomainBed datasets: {', '.join(ENV_DATASETS)})")


__all__ = ["DATASETS", "DatasetNotFound", "ImageFiles", "Pair", "Setting", "Split", "UNLABELLED", "add_noise", "concat",
           "count_environments", "load", "load_cifar10", "load_fashion_mnist", "load_pool", "synthetic_domains",
           "take"]
