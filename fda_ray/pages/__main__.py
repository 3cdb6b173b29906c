"""python -m fda_ray.pages [--check] [PAGE...]: regenerate the numbers of README.md and docs/ from the trial records."""
from fda_ray.pages import main

raise SystemExit(main())
