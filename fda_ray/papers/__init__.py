"""Named experiment grids of the seed papers and the published numbers they are compared with.

A grid is plain data (fda_ray.papers.grids.GRIDS): the dataset, the rows of the paper's table (a method with its
settings), the values of the grid variable, the seeds per value, the fields every trial sets and the fields
of each profile. fda_ray.experiments.trials plans it and `python -m fda_ray.sweep` runs it; adding a grid is a few lines
here.
"""
from fda_ray.papers.grids import GRIDS, Grid
from fda_ray.papers.paper import PAPER_TABLES

__all__ = ["GRIDS", "Grid", "PAPER_TABLES"]
