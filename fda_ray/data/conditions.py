"""Healthcare FDA's datasets: domains with their own train/test tables, a binary main task and auxiliary labels.

A medical dataset is a `Split` of task "binary" whose `environments` hold each domain's training table, whose
`env_tests` hold its test table, and whose labels carry the auxiliary tasks (fda_ray.core.multitask: y is
(n, 1 + K), column 0 the diagnosis). fda_ray.runtime.partitions' partition `heldout_domain` holds one domain out as the
target (Healthcare FDA Sec. 5.1).

fmnist-conditions (docs/datasets.md; runs here): the CheXpert-like construction on Fashion-MNIST. Five
domains, each the binary task "is it class c_d" for one of the five mutually confusable tops (Shirt,
Pullover, Coat, T-shirt, Dress: the role of CheXpert's five lung conditions; domain 0, Shirt, is the default
target, the role of Edema). From the 70 000 pooled images, shuffled with the construction seed 0, each domain
takes disjoint images: 2 000 positives + 2 000 negatives (any other class) to train on, 1 000 + 1 000 to test
on (a smaller pool, such as the tests' generated files, scales these sizes down). Auxiliary labels are real properties of the image the model sees:
  ink_mass    (9 classes) the bucket of the image's mean intensity among the pool's 9-quantiles: correlated with
              the garment, the role of age
  flipped     (2) the image is mirrored left-right with probability 0.6 if y = 1, 0.4 if y = 0: a weakly
              label-correlated nuisance, the role of sex / view
  brightness  (3) the image is scaled by 1, 0.75 or 0.5, drawn uniformly: unrelated to the label
"""
from __future__ import annotations

import numpy as np
import torch

from fda_ray.data.base import DATASETS, Pair, Split
from fda_ray.data.paper_defaults import PAPER_DEFAULTS

CONSTRUCTION_SEED = 0
FMNIST_POOL = 70_000  # Fashion-MNIST's train + test images
CONDITION_CLASSES = (6, 2, 4, 0, 3)  # Fashion-MNIST Shirt, Pullover, Coat, T-shirt/top, Dress
CONDITION_NAMES = ("shirt", "pullover", "coat", "t-shirt", "dress")
CONDITION_TRAIN = 2000  # positives (and negatives) per domain's training table (CheXpert: 2 000 / 2 000)
CONDITION_TEST = 1000  # positives (and negatives) per domain's test table
CONDITION_AUX = (("ink_mass", 9), ("flipped", 2), ("brightness", 3))
FLIP_PROB = (0.4, 0.6)  # P(mirrored | y = 0), P(mirrored | y = 1)
BRIGHTNESS = (1.0, 0.75, 0.5)


def _take_disjoint(order: np.ndarray, mask: np.ndarray, used: np.ndarray, k: int, what: str) -> np.ndarray:
    """The first k unused positions of `order` where mask holds; marks them used."""
    free = order[mask[order] & ~used[order]]
    if len(free) < k:
        raise ValueError(f"fmnist-conditions: only {len(free)} unused images for {what}, {k} needed")
    pick = free[:k]
    used[pick] = True
    return pick


def condition_indices(labels: torch.Tensor, seed: int = CONSTRUCTION_SEED, train: int = CONDITION_TRAIN,
                      test: int = CONDITION_TEST) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Which pool images each domain takes: per domain (train indices, train labels, test indices, test
    labels), `train` (`test`) positives and as many negatives, disjoint across domains and tables, positives
    and negatives interleaved. A pool smaller than Fashion-MNIST's scales the sizes down."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    if n < FMNIST_POOL:  # a smaller stand-in pool (the tests' generated files): the same recipe, scaled down
        train, test = max(1, train * n // FMNIST_POOL), max(1, test * n // FMNIST_POOL)
    order = rng.permutation(n)
    y_all = labels.numpy()
    used = np.zeros(n, dtype=bool)
    out = []
    for d, c in enumerate(CONDITION_CLASSES):
        parts: list[np.ndarray] = []
        for size in (train, test):
            pos = _take_disjoint(order, y_all == c, used, size, f"positives of {CONDITION_NAMES[d]}")
            neg = _take_disjoint(order, y_all != c, used, size, f"negatives of {CONDITION_NAMES[d]}")
            idx = np.concatenate([pos, neg])
            y = np.concatenate([np.ones(size, np.int64), np.zeros(size, np.int64)])
            mix = rng.permutation(len(idx))  # interleaved: a capped table stays balanced
            parts += [idx[mix], y[mix]]
        out.append((parts[0], parts[1], parts[2], parts[3]))
    return out


def ink_buckets(images: torch.Tensor) -> np.ndarray:
    """(N,) in 0..8: each image's mean intensity bucketed by the pool's 9-quantiles."""
    ink = (images.float() / 255.0).mean((1, 2)).numpy()  # (N,)
    edges = np.quantile(ink, np.linspace(0, 1, 10)[1:-1])  # the 8 inner edges
    return np.searchsorted(edges, ink, side="right")


def condition_domains(images: torch.Tensor, labels: torch.Tensor, seed: int = CONSTRUCTION_SEED
                      ) -> tuple[list[Pair], list[Pair]]:
    """(training tables, test tables), one per domain: x (n, 1, 28, 28) in [0, 1], y (n, 4) int64 =
    (condition, ink_mass, flipped, brightness). images uint8 (N, 28, 28), labels (N,)."""
    rng = np.random.default_rng([seed, 1])  # the image properties' draws (the selection has its own stream)
    ink = ink_buckets(images)
    x_all = images.float() / 255.0  # (N, 28, 28)
    tables: tuple[list[Pair], list[Pair]] = ([], [])
    for tr_idx, tr_y, te_idx, te_y in condition_indices(labels, seed):
        for table, idx, y in ((tables[0], tr_idx, tr_y), (tables[1], te_idx, te_y)):
            flip = rng.random(len(idx)) < np.where(y == 1, FLIP_PROB[1], FLIP_PROB[0])
            bright = rng.integers(0, len(BRIGHTNESS), len(idx))
            x = x_all[torch.from_numpy(idx)].clone()  # (n, 28, 28)
            f = torch.from_numpy(flip)
            x[f] = x[f].flip(-1)
            x = x * torch.tensor(BRIGHTNESS, dtype=torch.float32)[torch.from_numpy(bright)].view(-1, 1, 1)
            aux = np.stack([y, ink[idx], flip.astype(np.int64), bright], 1)  # (n, 4)
            table.append((x.unsqueeze(1).contiguous(), torch.from_numpy(aux)))
    return tables


@DATASETS.register("fmnist-conditions", defaults=PAPER_DEFAULTS["fmnist-conditions"])
def load_fmnist_conditions(data_dir: str | None = None, download: bool = False) -> Split:
    """The CheXpert-like construction on Fashion-MNIST (module docstring)."""
    from fda_ray.data.domainbed import load_pool

    images, labels = load_pool("fashion-mnist", data_dir)
    trains, tests = condition_domains(images, labels)
    empty = torch.zeros(0, 1, 28, 28)
    return Split(empty, torch.zeros(0, 1 + len(CONDITION_AUX), dtype=torch.int64), empty,
                 torch.zeros(0, 1 + len(CONDITION_AUX), dtype=torch.int64), num_classes=2, task="binary",
                 environments=tuple(trains), env_names=CONDITION_NAMES, env_tests=tuple(tests),
                 aux_tasks=CONDITION_AUX)
