"""The synthetic regression domains of the FedDA/FedGP paper's Appendix B (D_1 the target, D_2..D_9 sources
with growing shift), used by the diagnostics experiment (`python -m fda_ray.synthetic_grid`).
"""
from __future__ import annotations

import numpy as np
import torch

from fda_ray.data.base import DATASETS, Split
from fda_ray.data.paper_defaults import PAPER_DEFAULTS

# ---------------------------------------------------------------- synthetic regression (Auto-weighted FDA Appendix B)

def synthetic_domains(seed: int = 0, n: int = 5000, dim: int = 50, outputs: int = 10, n_basis: int = 100,
                      n_domains: int = 9, max_shift: float = 1.0, mixture: int = 10
                      ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """D_1..D_n_domains of Auto-weighted FDA Appendix B: x (n, dim) from a mixture of `mixture` unit-covariance Gaussians
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


@DATASETS.register("synthetic", defaults=PAPER_DEFAULTS["synthetic"])
def load_synthetic(data_dir: str | None = None, download: bool = False, seed: int = 0, n: int = 5000) -> Split:
    """The target domain D_1 split 80/20 into train/test; D_2..D_9 as `domains` (the sources)."""
    doms = synthetic_domains(seed=seed, n=n)
    x1, y1 = doms[0]
    cut = int(0.8 * len(x1))
    return Split(x1[:cut], y1[:cut], x1[cut:], y1[cut:], num_classes=y1.shape[1], task="regression",
                 domains=tuple(doms[1:]))
