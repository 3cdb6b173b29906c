"""`python -m fda_ray.diagnose`: the command line of fda_ray.experiments.diagnose (kept here so the documented command works)."""
from fda_ray.experiments.diagnose import main

if __name__ == "__main__":
    raise SystemExit(main())
