"""The synthetic regression domains of the synthetic experiment (FedGP Sec. 5; Auto-weighted FDA App. B), D_1 the
target and D_2..D_9 sources with growing shift, used by `python -m fda_ray.synthetic_grid` and by the `synthetic`
dataset.

As the authors generate them (`synthetic_exp/generate_data.py` of the papers' code), where the papers' text is short:
  x in R^50 from a mixture of 10 unit-covariance Gaussians with centres ~ U(-0.5, 0.5)^50, N = 5000 samples;
  y = A phi(x) + b in R^10, A (10, 100) and b (10,) ~ U(-0.5, 0.5), phi_i(x) = exp(-|x - mu_i|^2 / s_i),
  M = 100 radial basis functions with centres mu_i ~ U(-0.5, 0.5)^50 and widths s_i = 100 U(0, 1).
Domain shift moves the basis functions, not the inputs: D_k has mu_i + diff_k U(0, 1)^50 and s_i + 100 diff_k U(0, 1)
(fresh draws per domain) with diff_k = (k - 1) * shift_step, and every domain labels the same x (a concept shift).
The authors' step is 0.07 (their levels 0, 0.07, ..., 0.98); the nine domains here are their first nine levels.

Two choices of ours, said because they differ from the authors' script: the mixture component of each sample is
drawn (equal counts, random order) where the script gives consecutive blocks of 500, so that any slice of the
samples (the grid's held-out test points, the dataset's 80/20 split) covers every component; and one seeded
numpy generator makes every draw, so a domain set is a function of its seed.
"""
from __future__ import annotations

import numpy as np
import torch

from fda_ray.data.base import DATASETS, Split
from fda_ray.data.paper_defaults import PAPER_DEFAULTS

SHIFT_STEP = 0.07  # the authors' spacing of source-target shift levels


def synthetic_domains(seed: int = 0, n: int = 5000, dim: int = 50, outputs: int = 10, n_basis: int = 100,
                      n_domains: int = 9, shift_step: float = SHIFT_STEP, mixture: int = 10
                      ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """D_1..D_n_domains (module docstring): [(x (n, dim), y (n, outputs))] float32, the same x in every domain."""
    if n < mixture:
        raise ValueError(f"n={n} is invalid: at least one sample per mixture component ({mixture})")
    rng = np.random.default_rng(seed)
    a = rng.uniform(-0.5, 0.5, size=(outputs, n_basis))
    b = rng.uniform(-0.5, 0.5, size=outputs)
    centres = rng.uniform(-0.5, 0.5, size=(mixture, dim))
    comp = rng.permutation(np.arange(n) % mixture)  # equal counts (as the authors' blocks), in random order
    x = rng.normal(size=(n, dim)) + centres[comp]  # (n, dim)
    mu = rng.uniform(-0.5, 0.5, size=(n_basis, dim))
    width = 100.0 * rng.uniform(0.0, 1.0, size=n_basis)  # s_i = sigma_i^2 of the authors' script
    x_sq = (x**2).sum(1)[:, None]  # (n, 1)
    out = []
    for k in range(n_domains):
        diff = k * shift_step
        mu_k = mu + rng.uniform(0.0, 1.0, size=mu.shape) * diff  # (n_basis, dim)
        width_k = width + 100.0 * rng.uniform(0.0, 1.0, size=n_basis) * diff  # (n_basis,)
        # |x - mu|^2 expanded: no (n, n_basis, dim) intermediate
        sq = np.clip(x_sq - 2.0 * x @ mu_k.T + (mu_k**2).sum(1)[None], 0.0, None)  # (n, n_basis)
        y = np.exp(-sq / width_k[None]) @ a.T + b  # (n, outputs)
        out.append((torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))))
    return out


@DATASETS.register("synthetic", defaults=PAPER_DEFAULTS["synthetic"])
def load_synthetic(data_dir: str | None = None, download: bool = False, seed: int = 0, n: int = 5000) -> Split:
    """The target domain D_1 split 80/20 into train/test; D_2..D_9 as `domains` (the sources)."""
    doms = synthetic_domains(seed=seed, n=n)
    x1, y1 = doms[0]
    cut = int(0.8 * len(x1))
    return Split(x1[:cut], y1[:cut], x1[cut:], y1[cut:], num_classes=y1.shape[1], task="regression",
                 domains=tuple(doms[1:]))
