"""`fda_ray.search.search(name, ...)`: a Ray Tune search from Python, as `python -m fda_ray.sweep --search NAME` runs
it (fda_ray.experiments.search; kept here so the documented call works)."""
from fda_ray.experiments.search import search

__all__ = ["search"]
