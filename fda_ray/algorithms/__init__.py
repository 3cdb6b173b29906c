"""Every method by name: ALGORITHMS maps a method (RunConfig.method) to its Algorithm class.

One module per method family (fda: FedDA/FedGP, their auto-weighted versions and baselines; personalised:
Auto-weighted FDA's personalised-FL baselines, fedavg_all, ditto, fedrep, apfl, knn_per; healthcare: Healthcare FDA's
online FedAvg Finetune and GP, with and without auxiliary labels; fssda: FSSDA's FSSDA, its serial variant
and the SSDAOnly / FLOnly baselines; fedwca: FedWCA's FedWCA and its variants, with the Source Only / Local /
FedAvg baselines of source-free adaptation); each family
registers its classes here and its local recipes in fda_ray.train.client.RECIPES. The contract is in `base`.
"""
from __future__ import annotations

from fda_ray.algorithms.base import Algorithm, Params
from fda_ray.core.contract import ClientResult, ClientTask, Round, ServerState
from fda_ray.algorithms.fda.methods import VARIANTS as _FDA
from fda_ray.algorithms.fedwca.methods import FAMILY as _FEDWCA
from fda_ray.algorithms.fssda.methods import FAMILY as _FSSDA
from fda_ray.algorithms.healthcare.methods import FAMILY as _HEALTHCARE
from fda_ray.algorithms.personalised.methods import FAMILY as _PERSONALISED
from fda_ray.core.registry import ALGORITHMS, family_params

for _cls in (*_FDA, *_PERSONALISED, *_HEALTHCARE, *_FSSDA, *_FEDWCA):
    ALGORITHMS.add(_cls.name, _cls)

__all__ = ["ALGORITHMS", "Params", "family_params", "Algorithm", "ClientResult", "ClientTask", "Round", "ServerState"]
