"""Results pages whose numbers come from the trial records: generated blocks in Markdown.

A page marks every generated part with an HTML comment that names a generator and its arguments, and closes it:

    <!-- records: table fmnist-ablation -->
    | method | noise 0.2 | ...
    <!-- /records -->

or, inside a sentence, one number: `above FedDA by <!-- records: gap-range fmnist-ablation fedda -->1.3 to 19.1
<!-- /records --> points`. Markdown renders the comments as nothing. The arguments name a sweep directory under
docs/results (its trials/ records and the `Command:` line of its summary.md, which fixes the grid, the profile, the
rows and the values) and the generator's own words.

    python -m tools.pages                 # rewrite every block of every page from the records
    python -m tools.pages --check         # list the blocks whose text differs from the records; exit 1 if any

Run without naming pages, both also keep each results folder's own summary.md tables as today's summariser writes them
from the folder's records (summary_files).

tests/test_pages.py runs the check on every committed page (slow tier), so a typed number that disagrees with its
records fails the suite. The generators are pure functions of the records (GENERATORS, by name); the statistics are
fda_ray.experiments.tables'. A spec word `key=value` is a keyword argument (`cell conditions oracle 0 digits=1`);
a spec cannot hold ">" (the block pattern stops there), so column labels with arrows are the generators' own.

The package, one concept a module: engine (the block patterns, render, rewrite, pages, main, GENERATORS), records
(a results directory read as a Sweep: load_sweep, load_found; RESULTS, ROOT; the helpers the generators share), and
the generators by family, each registering itself in GENERATORS when imported here: summaries (a sweep's own
tables), seed_pages (Healthcare FDA's and FSSDA's tables and prose), claims (orderings and gaps with their seed spread),
searches (the selections' reruns), run_files (single runs' Parquet files), fssda (FSSDA), domainbed and
paper_grids (Auto-weighted FDA), fmnist_prose (the Fashion-MNIST grids' prose), fedwca (FedWCA), curves (one run's curve
beside the paper), projection (docs/scaling.md's) and authors (runs of the authors' own scripts, tools/authors_fedgp.py); summary_files
refreshes the folders' summary.md tables.
"""
from __future__ import annotations

from tools.pages import records
from tools.pages.engine import BLOCK, FENCE, GENERATORS, OPTION, PAGES, main, pages, render, rewrite
from tools.pages.records import RESULTS, ROOT, Sweep, command_of, load_found, load_sweep

# the generator families: importing each registers its generators in GENERATORS (in this order: GENERATORS.names())
from tools.pages import summaries, seed_pages, claims, searches, run_files  # noqa: F401
from tools.pages import fssda, domainbed, paper_grids, fmnist_prose  # noqa: F401
from tools.pages import fedwca, curves, projection, authors  # noqa: F401
from tools.pages.curves import _ranges  # noqa: F401  (tests/test_pages.py checks it)

__all__ = ["BLOCK", "FENCE", "GENERATORS", "OPTION", "PAGES", "RESULTS", "ROOT", "Sweep", "command_of", "load_found",
           "load_sweep", "main", "pages", "records", "render", "rewrite"]
