"""`python -m fda_ray [COMMAND] ...`: the `fda-ray` command (fda_ray.experiments.commands); no command runs one run,
`python -m fda_ray --method fedgp --noise 0.4`.

The programmatic entry point is the function `fda_ray.run(config)`; this module name cannot shadow it.
"""
import sys

from fda_ray.experiments.commands import main

if __name__ == "__main__":
    sys.exit(main())
