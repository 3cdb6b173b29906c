"""Every method by name: ALGORITHMS maps a method (RunConfig.method) to its Algorithm class.

One module per method family (fda: FedDA/FedGP, their auto-weighted versions and baselines); each family
registers its classes here and its local recipes in fda_ray.client.RECIPES. The contract is in `base`.
"""
from __future__ import annotations

from fda_ray.algorithms.base import Algorithm, ClientResult, ClientTask, Round, ServerState
from fda_ray.algorithms.fda import VARIANTS as _FDA
from fda_ray.registry import Registry

ALGORITHMS: Registry[type[Algorithm]] = Registry("method")
for _cls in _FDA:
    ALGORITHMS.add(_cls.name, _cls)

__all__ = ["ALGORITHMS", "Algorithm", "ClientResult", "ClientTask", "Round", "ServerState"]
