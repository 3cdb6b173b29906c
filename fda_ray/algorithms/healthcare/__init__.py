"""Auxiliary-label training with gradient projection (weakly-supervised FDA for healthcare): online FedAvg
Finetune and Finetune GP, with and without auxiliary labels, in methods.py. The multi-task heads and losses are
fda_ray.core.multitask; the network fda_ray.train.models.MultiHead.
"""
from __future__ import annotations

from fda_ray.algorithms.healthcare.methods import FAMILY

__all__ = ["FAMILY"]
