"""FMNIST-5: five visual domains built from Fashion-MNIST (docs/datasets.md), the Digit-Five analogue.

The FSSDA paper (FSSDA: Office-31 pairs) and FedWCA (FedWCA: Digit-Five) need several domains of one label space; the
only real image data here is Fashion-MNIST, so each domain is a disjoint slice of its 70 000 images (train then
test, as DomainBed pools them) put through one transform of fda_ray.data.corruptions:

    env 0 clean, 1 fmnist-m (MNIST-M-like colour texture), 2 rotate-45, 3 invert, 4 edges (Sobel, sketch-like)

env e = pool[perm][e::5] (14 000 images each) for a permutation seeded by the construction seed (not the trial
seed: the domains are the dataset, the same in every trial, as DomainBed's constructions); domain e's random
draws (fmnist-m's textures) come from a generator seeded by (construction seed, e). Images are 3 x 28 x 28 in
[0, 1] (grey domains replicated to three channels). A process builds them once (about 5 s) and keeps them.
"""
from __future__ import annotations

import functools

import torch

from fda_ray.data.corruptions import apply_domain, to_rgb
from fda_ray.data.base import DATASETS, Pair, Split
from fda_ray.data.paper_defaults import PAPER_DEFAULTS
from fda_ray.core.seeding import derive_seed

FMNIST5_DOMAINS = ("clean", "fmnist-m", "rotate-45", "invert", "edges")
CONSTRUCTION_SEED = 0


def domain_environments(images: torch.Tensor, labels: torch.Tensor, domains: tuple[str, ...] = FMNIST5_DOMAINS,
                        seed: int = CONSTRUCTION_SEED) -> list[Pair]:
    """One (x (m, 3, 28, 28) float32 in [0, 1], y (m,)) per domain from the uint8 pool images (n, 28, 28)."""
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
    images, labels = images[perm], labels[perm]
    out = []
    for e, name in enumerate(domains):
        x = images[e :: len(domains)].unsqueeze(1).float() / 255.0  # (m, 1, 28, 28)
        gen = torch.Generator().manual_seed(derive_seed(seed, e, purpose=f"fmnist-5/{name}"))
        out.append((to_rgb(apply_domain(name, x, gen)).clamp(0.0, 1.0).contiguous(), labels[e :: len(domains)].clone()))
    return out


@functools.lru_cache(maxsize=2)
def _build(data_dir: str | None) -> Split:
    from fda_ray.data.domainbed import load_pool

    images, labels = load_pool("fashion-mnist", data_dir)
    envs = domain_environments(images, labels)
    empty = torch.zeros(0, 3, 28, 28)
    none = torch.zeros(0, dtype=torch.int64)
    return Split(empty, none, empty, none, 10, environments=tuple(envs), env_names=FMNIST5_DOMAINS)


@DATASETS.register("fmnist-5", defaults=PAPER_DEFAULTS["fmnist-5"], environments=len(FMNIST5_DOMAINS))
def load_fmnist5(data_dir: str | None = None, download: bool = False) -> Split:
    """FMNIST-5 (module docstring): five environments of 14 000 Fashion-MNIST images each."""
    return _build(data_dir)
