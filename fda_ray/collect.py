"""`python -m fda_ray.collect DIR...`: the command line of fda_ray.experiments.collect (kept here so the documented
command works)."""
from fda_ray.experiments.collect import main

if __name__ == "__main__":
    raise SystemExit(main())
