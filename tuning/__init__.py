"""Named experiment grids of the seed papers and the published numbers they are compared with.

A grid is plain data (tuning.grids.GRIDS): the dataset, the methods, the values of the grid variable,
the seeds per value and the config fields of a profile. Runners (fda_ray.reproduce now, the Tune sweep
later) read it; adding a grid is a few lines here.
"""
from tuning.grids import GRIDS, Grid
from tuning.paper import PAPER_TABLES

__all__ = ["GRIDS", "Grid", "PAPER_TABLES"]
