"""python -m fda_ray.pages: regenerate the results pages' numbers from their trial records (fda_ray.experiments.pages)."""
from fda_ray.experiments.pages import main

if __name__ == "__main__":
    raise SystemExit(main())
