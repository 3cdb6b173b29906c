"""The personalised-FL baselines of the auto-weighted FDA paper's Tables 1 and 5 (fedavg_all, ditto, fedrep, apfl,
knn_per), in methods.py.
"""
from __future__ import annotations

from fda_ray.algorithms.personalised.methods import FAMILY

__all__ = ["FAMILY"]
