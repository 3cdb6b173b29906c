"""`python -m fda_ray.sweep`: the command line of fda_ray.experiments.sweep (kept here so the documented command works)."""
from fda_ray.experiments.sweep import main

if __name__ == "__main__":
    raise SystemExit(main())
