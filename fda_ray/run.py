"""`python -m fda_ray.run ...`: one run from the command line (see fda_ray.cli).

The programmatic entry point is the function `fda_ray.run(config)` (fda_ray.engine.run); this module only
exists for `python -m` and is not meant to be imported.
"""
import sys

from fda_ray.cli import main

if __name__ == "__main__":
    sys.exit(main())
