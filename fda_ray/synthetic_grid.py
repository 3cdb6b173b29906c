"""`python -m fda_ray.synthetic_grid`: the command line of fda_ray.experiments.synthetic_grid (kept here so the documented command works)."""
from fda_ray.experiments.synthetic_grid import main

if __name__ == "__main__":
    raise SystemExit(main())
