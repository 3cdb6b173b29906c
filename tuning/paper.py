"""Published target test accuracies (%) of the seed papers, to print beside ours.

TABLE10_FMNIST: seed 004, Table 10, Fashion-MNIST feature-noise grid (9 sources, 1 target, 100 labelled
target samples, 50 rounds), by our method name and noise std.
"""
from __future__ import annotations

_NOISE = (0.0, 0.2, 0.4, 0.6, 0.8)
_ROWS = {
    "source_only": (83.94, 25.49, 18.55, 16.71, 14.99),
    "finetune_offline": (81.39, 48.26, 40.15, 36.64, 33.71),
    "fedda": (86.41, 69.73, 58.6, 50.13, 45.51),
    "fedgp": (76.33, 75.09, 71.09, 68.01, 62.22),
    "fedda_auto": (78.37, 77.10, 72.58, 67.78, 62.81),
    "fedgp_auto": (76.22, 75.16, 71.53, 67.53, 62.98),
    "target_only": (74.00, 70.59, 66.03, 61.26, 57.82),
    "oracle": (82.00, 82.53, 81.20, 75.60, 72.60),
}
TABLE10_FMNIST: dict[str, dict[float, float]] = {m: dict(zip(_NOISE, v)) for m, v in _ROWS.items()}

PAPER_TABLES = {"004-table10-fmnist": TABLE10_FMNIST}
