"""Fidelity to the reference code, fix by fix: before (fda-ray's earlier behaviour, still an option) / after (the
default now) / the reference, on the same small seeded inputs.

    python -m benchmarks.fidelity            # one Markdown table per family

The references are written out here from their public code (not imported: none is a dependency):
- FSSDA's multi-source imitation weights: MinNormSolver.find_min_norm_element_FW of
  isl-org/MultiObjectiveOptimization (min_norm_solvers.py), whose loop never increments its counter;
- FedWCA's pieces: tim-learn/SHOT (obtain_label), VisionLearningGroup/SND (benchmarks.fidelity_fedwca);
- the auxiliary-label GP model and loss: enyijiang/MIDRC at 95291b2 (benchmarks.fidelity_healthcare).
The tests (tests/test_fssda_core.py, tests/test_fedwca_core.py, tests/test_healthcare.py, tests/test_models.py)
hold their own copies of the same formulas and assert what this table prints.
"""
from __future__ import annotations

from fda_ray.core.parsing import first_paragraph

import argparse

import numpy as np
import torch

from fda_ray.algorithms.fssda.minnorm import REFERENCE_MAX_ITER, STOP_CRIT, min_norm_weights

GUARD = 100_000  # where the written-out reference is stopped (it has no cap of its own)


def _ref_from2(v1v1: float, v1v2: float, v2v2: float) -> tuple[float, float]:
    """The reference's _min_norm_element_from2: the line search clipped to 0.001 / 0.999."""
    if v1v2 >= v1v1:
        return 0.999, v1v1
    if v1v2 >= v2v2:
        return 0.001, v2v2
    gamma = -1.0 * ((v1v2 - v2v2) / (v1v1 + v2v2 - 2 * v1v2))
    return gamma, v2v2 + gamma * (v1v2 - v2v2)


def reference_min_norm(vecs: np.ndarray, guard: int = GUARD) -> tuple[np.ndarray | None, int]:
    """find_min_norm_element_FW on vectors (S, M): (weights, steps), or (None, guard) where it has not returned
    after `guard` steps."""
    n = len(vecs)
    dps = vecs @ vecs.T
    init = None
    for i in range(n):
        for j in range(i + 1, n):
            c, d = _ref_from2(dps[i, i], dps[i, j], dps[j, j])
            if init is None or d < init[2]:
                init = ((i, j), c, d)
    assert init is not None
    sol = np.zeros(n)
    sol[init[0][0]], sol[init[0][1]] = init[1], 1 - init[1]
    if n < 3:
        return sol, 0
    for step in range(1, guard + 1):
        t = int(np.argmin(dps @ sol))
        nc, _ = _ref_from2(sol @ dps @ sol, sol @ dps[:, t], dps[t, t])
        new = nc * sol
        new[t] += 1 - nc
        if np.sum(np.abs(new - sol)) < STOP_CRIT:
            return sol, step
        sol = new
    return None, guard


def gradient_sets(inputs: int) -> list[np.ndarray]:
    """Seeded sets of 3-5 gradients (S, 30) sharing a common direction, as the terms of one loss do: half with
    a large shared part (Frank-Wolfe zig-zags), half with a shared part of the size of the rest."""
    out = []
    for seed in range(inputs):
        rng = np.random.default_rng(seed)
        s = int(rng.integers(3, 6))
        if seed % 2:
            out.append(3 * rng.normal(size=30) + rng.normal(size=(s, 30)) * rng.uniform(0.1, 1.0, size=(s, 1)))
        else:
            out.append(rng.normal(size=30) + rng.normal(size=(s, 30)) * rng.uniform(0.3, 3))
    return out


def rows_fssda(inputs: int = 400) -> list[dict]:
    """The min-norm solver: the 250-step cap against the reference, over `inputs` seeded gradient sets."""
    before, after, cycles, steps = [], [], 0, []
    for g in gradient_sets(inputs):
        ref, n = reference_min_norm(g)
        if ref is None:
            cycles += 1
            continue
        steps.append(n)
        before.append(float(np.abs(min_norm_weights(torch.from_numpy(g), max_iter=REFERENCE_MAX_ITER).numpy()
                                   - ref).max()))
        after.append(float(np.abs(min_norm_weights(torch.from_numpy(g)).numpy() - ref).max()))
    return [
        {"fix": "min-norm: no 250-step cap", "quantity": f"largest weight difference from the reference, {len(before)} inputs",
         "before": f"{max(before):.2e}", "after": f"{max(after):.2e}", "reference": "0 (by definition)"},
        {"fix": "min-norm: no 250-step cap", "quantity": "inputs where the cap binds (reference > 250 steps)",
         "before": f"{sum(n > REFERENCE_MAX_ITER for n in steps)} of {len(steps)}",
         "after": "-", "reference": f"steps: median {int(np.median(steps))}, max {max(steps)}"},
        {"fix": "min-norm: exact line search", "quantity": f"inputs where the reference never returns (>{GUARD} steps)",
         "before": "0", "after": "0", "reference": f"{cycles} of {inputs}"},
    ]


def _table(rows: list[dict]) -> str:
    cols = ("fix", "quantity", "before", "after", "reference")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    fmt = lambda x: f"{x:.4g}" if isinstance(x, float) else str(x)  # noqa: E731
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m benchmarks.fidelity", description=first_paragraph(__doc__)).parse_args(argv)
    from benchmarks import fidelity_fedwca, fidelity_healthcare

    for title, rows in (("FSSDA", rows_fssda()), ("FedWCA", fidelity_fedwca.rows()),
                        ("Auxiliary-label GP (Healthcare FDA)", fidelity_healthcare.rows())):
        print(f"## {title}\n\n{_table(rows)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
