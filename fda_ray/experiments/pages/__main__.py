"""python -m fda_ray.experiments.pages: the same command as python -m fda_ray.pages."""
from fda_ray.experiments.pages import main

raise SystemExit(main())
