"""FedWCA (source-free FDA by weighted cluster aggregation) and the source-free baselines:

    methods.py           the Algorithm classes (fedwca, shot_source_only, shot_local, shot_fedavg)
    shot.py              SHOT's pseudo-labels (prototypes), information-maximisation loss and mixup partners
    finch.py             FINCH's first partition (first-neighbour clustering of the clients)
    cluster_weights.py   the cross-cluster weights, SND and the soft cluster models (Eq. 4-9)
"""
from __future__ import annotations

from fda_ray.algorithms.fedwca.methods import FAMILY, FedWCA

__all__ = ["FAMILY", "FedWCA"]
