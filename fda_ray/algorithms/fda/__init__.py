"""The FDA family (FedDA / FedGP, their auto-weighted versions and baselines: "Federated Domain Adaptation via Gradient Projection",
and "Auto-weighted FDA", the beta estimators' paper; see docs/methods.md):

    params.py        the family's hyper-parameters (FDAParams: beta, projection, filter, ...), RunConfig keywords
    methods.py       the Algorithm classes (source_only, target_only, fedda, fedgp, fedda_auto, fedgp_auto,
                     finetune_offline, oracle)
    estimators.py    the auto-weighting estimators of the source-target gap and the target variance (Eq. 7-8)
    diagnostics.py   the estimators' and rules' diagnostics on known distributions (python -m fda_ray.diagnose)
"""
from __future__ import annotations

from fda_ray.algorithms.fda.methods import FDA, VARIANTS

__all__ = ["FDA", "VARIANTS"]
