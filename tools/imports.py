"""The import structure of the fda_ray package and the repository's tools beside it (tools/, benchmarks/), read
from the source: every import statement, in functions too,
except those under `if TYPE_CHECKING:` (they never run). Importing `a.b.c` from outside package `a.b` also
runs the package faces `a.b/__init__.py` (and `a/__init__.py`) first, so those count as imports too; a module
never re-runs the faces of its own packages.

    python tools/imports.py            modules per package, the packages' floors, and every circle (exit 1 if any);
                                       then the circles with the type-only imports counted too (informative)

tests/test_imports.py fails on any circle between modules or between packages.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("fda_ray", "tools", "benchmarks")  # the installed package, then the checkout's tools (not installed)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every Python module of the package and the tools, by dotted name."""
    return {module_name(p): p for top in TOP for p in sorted((ROOT / top).rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_only: bool = False) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement outside `if TYPE_CHECKING:` blocks (with type_only, inside them
    too)."""
    out: list[tuple[str, list[str]]] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child) and not type_only:
                for sub in child.orelse:
                    walk_one(sub)
                continue
            walk_one(child)

    def walk_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names]))
        walk(node)

    walk(tree)
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def graph(mods: dict[str, Path] | None = None, type_only: bool = False) -> dict[str, set[str]]:
    """module -> the modules its imports run (our own modules only); with type_only, the modules its type-only
    imports name too."""
    mods = mods if mods is not None else modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        own = set(_ancestors(m)) | ({m} if path.name == "__init__.py" else set())
        for target, names in _imports(ast.parse(path.read_text(), str(path)), type_only):
            hits = [target] + [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
            for h in hits:
                for t in [*_ancestors(h), h]:
                    if t in mods and t != m and t not in own:
                        edges[m].add(t)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def package_of(module: str) -> str:
    """A subpackage of fda_ray (fda_ray.core, ...) or of tools (tools.pages), the benchmarks package, or a
    module by itself."""
    parts = module.split(".")
    if parts[0] != "fda_ray" and len(parts) >= 1 and (ROOT / parts[0] / "__init__.py").is_file():
        return parts[0]
    if len(parts) >= 2 and (ROOT / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, ts in edges.items():
        p = package_of(m)
        out.setdefault(p, set())
        for t in ts:
            if package_of(t) != p:
                out[p].add(package_of(t))
    return out


def floors(pkg_edges: dict[str, set[str]]) -> dict[str, int]:
    """Floor 0: imports no other package; floor k: 1 + the highest floor it imports (a circle has no floors)."""
    memo: dict[str, int] = {}

    def floor(p: str, seen: tuple[str, ...] = ()) -> int:
        if p in seen:
            raise ValueError(f"circle between packages: {' -> '.join((*seen, p))}")
        if p not in memo:
            memo[p] = 1 + max((floor(q, (*seen, p)) for q in pkg_edges[p]), default=-1)
        return memo[p]

    for p in pkg_edges:
        floor(p)
    return memo


def main(argv: list[str] | None = None) -> int:
    import argparse

    from fda_ray.core.parsing import OneLineParser

    # It takes no arguments: --help prints the docstring's usage, anything else is refused in one line, exit 2 (an
    # argument was ignored, and the whole report printed with exit 0 as if it had been understood).
    p = OneLineParser(prog="python tools/imports.py", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    mods = modules()
    edges = graph(mods)
    pkg = package_graph(edges)
    mod_circles = circles(edges)
    pkg_circles = circles(pkg)
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    print(f"{len(mods)} modules, {sum(lines.values())} lines, {sum(map(len, edges.values()))} imports between them")
    if not pkg_circles:
        fl = floors(pkg)
        print("\nfloor  package                     modules  lines  imports packages")
        for p in sorted(fl, key=lambda p: (-fl[p], p)):
            ms = [m for m in mods if package_of(m) == p]
            print(f"{fl[p]:>5}  {p:<27} {len(ms):>7} {sum(lines[m] for m in ms):>6}  {', '.join(sorted(pkg[p])) or '-'}")
    for kind, cs in (("module", mod_circles), ("package", pkg_circles)):
        print(f"\n{kind} circles: {len(cs)}")
        for c in cs:
            print("  " + " <-> ".join(c))
    # The same drawing with the imports under `if TYPE_CHECKING:` counted too (they never run, so they are not
    # an error here; they show where the types still tie packages together).
    typed = graph(mods, type_only=True)
    t_mod, t_pkg = circles(typed), circles(package_graph(typed))
    print(f"\nwith type-only imports counted too: {sum(map(len, typed.values()))} imports, module circles: "
          f"{len(t_mod)}, package circles: {len(t_pkg)}")
    for c in t_mod + t_pkg:
        print(f"  ({len(c)}) " + " <-> ".join(c))
    return 1 if mod_circles or pkg_circles else 0


if __name__ == "__main__":
    sys.exit(main())
