"""fda-ray: a parallel simulator for federated domain adaptation (FedDA, FedGP and their auto-weighted
versions, with the baselines of the seed papers).

    from fda_ray import RunConfig, run
    history = run(RunConfig(dataset="fashion-mnist", method="fedgp", noise=0.4))
"""
from fda_ray.runtime.config import RunConfig
from fda_ray.runtime.engine import run
from fda_ray.core.history import History

__all__ = ["RunConfig", "History", "run"]
__version__ = "0.1.0"
