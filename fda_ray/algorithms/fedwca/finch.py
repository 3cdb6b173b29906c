"""FINCH's first partition (FedWCA section 4.1; Sarfraz et al. 2019), the clustering FedWCA runs once, after round 0,
on the clients' flattened first-layer parameters (docs/methods.md, FedWCA's open point 8).

    kappa_i = argmax_{j != i} cos(x_i, x_j)                        each point's first neighbour
    A(i, j) = 1 if j = kappa_i or i = kappa_j or kappa_i = kappa_j  (the paper prints commas; FINCH means "or")
    clusters = the connected components of A

The three cases are exactly the weakly connected components of the directed graph i -> kappa_i (two points with
the same first neighbour are joined through it), found here by union-find. Pure numpy; the hierarchy FINCH builds
on top of this partition is not used by FedWCA.
"""
from __future__ import annotations

import numpy as np


def first_neighbours(x: np.ndarray) -> np.ndarray:
    """(n,) int: kappa_i, the index of each row's nearest other row under cosine similarity (ties: the lowest
    index). x (n, d) with n >= 2; an all-zero row has similarity 0 to everything."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"FINCH needs at least 2 points (n, d), got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = x / np.where(norms > 0, norms, 1.0)
    sim = unit @ unit.T  # (n, n)
    np.fill_diagonal(sim, -np.inf)
    return sim.argmax(axis=1)


def first_partition(x: np.ndarray) -> np.ndarray:
    """(n,) int cluster labels 0..C-1 of FINCH's first partition, numbered in the order of each cluster's first
    member."""
    kappa = first_neighbours(x)
    parent = list(range(len(kappa)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in enumerate(kappa):
        a, b = find(i), find(int(j))
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = [find(i) for i in range(len(kappa))]
    order = {r: c for c, r in enumerate(dict.fromkeys(roots))}
    return np.array([order[r] for r in roots], dtype=np.int64)
