"""fda-ray: a parallel simulator for federated domain adaptation (FedDA, FedGP and their auto-weighted
versions, with the baselines of the seed papers).

    from fda_ray import RunConfig, run
    history = run(RunConfig(dataset="fashion-mnist", method="fedgp", noise=0.4))

The package face is lazy (PEP 562): `import fda_ray.core.registry` (or any small module) does not load the
runtime, torch and every method family; the three names below are imported the first time they are used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fda_ray.core.history import History
    from fda_ray.core.config import RunConfig
    from fda_ray.runtime.engine import run

__all__ = ["RunConfig", "History", "run"]
__version__ = "0.1.0"

_HOMES = {"RunConfig": "fda_ray.core.config", "run": "fda_ray.runtime.engine", "History": "fda_ray.core.history"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value  # once: later lookups are plain attributes
        return value
    raise AttributeError(f"module 'fda_ray' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
