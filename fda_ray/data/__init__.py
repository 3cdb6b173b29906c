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

from fda_ray.data import conditions as _conditions  # noqa: F401  (registers fmnist-conditions)
from fda_ray.core.registry import count_environments
from fda_ray.data.base import DATASETS, UNLABELLED, Dataset, DatasetNotFound, Pair, Split, add_noise
from fda_ray.data.domainbed import load_pool
from fda_ray.data import fmnist_domains as _fmnist_domains  # noqa: F401  (registers fmnist-5)
from fda_ray.data.images import ImageFiles, concat, take
from fda_ray.data import medical_csv as _medical_csv  # noqa: F401  (registers the medical tables)
from fda_ray.data.setting import Setting
from fda_ray.data.standard import load_cifar10, load_fashion_mnist
from fda_ray.data.synthetic import synthetic_domains


def load(name: str, data_dir: str | None = None, download: bool = False, **options) -> Split:
    """The dataset registered as `name` (DATASETS), read from `data_dir` or the standard places; `options` go to
    its loader (construction_seed: the seed that builds a DomainBed construction, fda_ray.data.domainbed)."""
    return DATASETS.get(name)(data_dir=data_dir, download=download, **options)


__all__ = ["DATASETS", "Dataset", "DatasetNotFound", "ImageFiles", "Pair", "Setting", "Split", "UNLABELLED", "add_noise", "concat",
           "count_environments", "load", "load_cifar10", "load_fashion_mnist", "load_pool", "synthetic_domains",
           "take"]
