"""FSSDA (federated semi-supervised domain adaptation by knowledge distillation) and its baselines:

    methods.py        the Algorithm classes (fssda, fssda_serial, ssda_only, fl_only)
    minnorm.py        the multi-source min-norm weights (Frank-Wolfe over the simplex)
    distillation.py   the teachers' soft / hard labels and the distillation losses (Eq. 1-3)
"""
from __future__ import annotations

from fda_ray.algorithms.fssda.methods import FAMILY, FLOnly, FSSDA, FSSDASerial, SSDAOnly

__all__ = ["FAMILY", "FLOnly", "FSSDA", "FSSDASerial", "SSDAOnly"]
