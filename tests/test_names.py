"""Names a reader knows: the papers' short names (FedGP, Auto-weighted FDA, Healthcare FDA, FSSDA, FedWCA) wherever a
user reads, and our internal numbering (000-004, "seed 004", "004 Table 10", "trap 3") only in docs/methods.md's
mapping and in identifiers (the grid noniid-000, the page results/seed002.md)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# "seed 004", "004 Table 10", "(003 C.2)", "000's", "001/004", "trap 3"; not 1 000, 0.001, noniid-000, seed000.md, "000"
INTERNAL = re.compile(r"[Ss]eeds?[ -]00[0-4]|(?<![\w./=\-\"'])(?<!\d )(?<!\d,)00[0-4](?![\w\-%\"]|'(?!s\b)|\.\d)"
                      r"|\btraps? \d")


def internal(text: str) -> list[str]:
    return [line.strip()[:160] for line in text.splitlines() if INTERNAL.search(line)]


def test_the_pattern_finds_the_numbering_and_leaves_identifiers():
    for found in ("seed 004, Table 10", "(004 C.3)", "003's temperatures", "as in 003.", "| 001/004 |", "trap 3",
                  "Seeds 001 and 004", "the seed-000 grids"):
        assert internal(found), found
    for left in ("noniid-000", "results/seed002.md", "lr 0.001", "CheXpert 1 000", 'recipe == "000"', "n = 2000",
                 "FedGP Table 1", "seed 0", "1,000"):
        assert not internal(left), left


@pytest.mark.parametrize("command", ["fda_ray.experiments.cli", "fda_ray.experiments.sweep",
                                     "fda_ray.experiments.diagnose", "fda_ray.experiments.collect",
                                     "fda_ray.experiments.synthetic_grid"])
def test_help_names_the_papers(command, capsys):
    import importlib

    assert importlib.import_module(command).main(["--help"]) in (0, None)
    text = capsys.readouterr().out
    assert "usage:" in text and internal(text) == []


def test_grids_searches_and_summaries_name_the_papers():
    """Every built-in grid and search as its file (paper_ref, notes, labels) and a summary of each grid."""
    from fda_ray.experiments import summary
    from fda_ray.papers.files import dump, grid_to_dict, search_to_dict
    from fda_ray.papers.grids import GRIDS
    from fda_ray.papers.searches import SEARCHES

    for name, grid in GRIDS.items():
        assert internal(dump(grid_to_dict(grid))) == [], name
        rows = [{"row": r.key, "grid_value": grid.values[0], "trial": f"t{i}", "seed": 0, "round": 0,
                 "accuracy": 0.5} for i, r in enumerate(grid.rows)]
        for profile in grid.profiles:
            text, _ = summary.summarize(rows, [], grid, profile, [r.key for r in grid.rows], [grid.values[0]],
                                      "python -m fda_ray.sweep")
            assert internal(text) == [], (name, profile)
    for name, search in SEARCHES.items():
        assert internal(dump(search_to_dict(search))) == [], name


def _strings(path: Path) -> list[str]:
    """The string literals of a module that are not docstrings (what it can print, write or title)."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def test_no_string_a_user_can_read_uses_the_numbering():
    """Figure titles, table captions, warnings and errors are string literals of the package: none numbers a paper."""
    found = [f"{p.relative_to(ROOT)}: {s[:100]!r}" for p in sorted((ROOT / "fda_ray").rglob("*.py"))  # papers/ too
             for s in _strings(p) if internal(s)]
    assert found == []


def test_the_docs_name_the_papers_and_methods_md_maps_the_numbers():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {}
    for page in pages:
        text = page.read_text()
        if page.name == "methods.md" and page.parent.name == "docs":
            mapping = re.search(r"\n## The papers and their short names\n.*?\n## ", text, re.S)
            assert mapping, "docs/methods.md lost its mapping section"
            for number, name in (("000", "Healthcare FDA"), ("001", "FedGP"), ("002", "FSSDA"), ("003", "FedWCA"),
                                 ("004", "Auto-weighted FDA")):
                assert f"| {name} | {number} |" in mapping.group(0)
            text = text.replace(mapping.group(0), "\n## ")
        if internal(text):
            found[str(page.relative_to(ROOT))] = internal(text)[:3]
    assert found == {}
