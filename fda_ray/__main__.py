"""`python -m fda_ray --method fedgp --noise 0.4`: one run from the command line (fda_ray.experiments.cli).

The programmatic entry point is the function `fda_ray.run(config)`; this module name cannot shadow it.
"""
import sys

from fda_ray.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main())
