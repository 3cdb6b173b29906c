"""`fda_ray.search.search(name, ...)`: a Ray Tune search from Python, as `python -m fda_ray.sweep --search NAME` runs
it (fda_ray.experiments.search; kept here so the documented call works)."""
from fda_ray.experiments.search import search

__all__ = ["search"]


if __name__ == "__main__":  # a library module run as a program (`python -m fda_ray.search`): say which program is meant
    import sys

    from fda_ray.experiments.commands import not_a_program

    sys.exit(not_a_program("fda_ray.search", "python -m fda_ray.sweep --search NAME"))
