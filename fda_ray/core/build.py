"""What computed a number: the build (the libraries whose arithmetic a run's numbers depend on) and the version of
fda-ray's own number-changing code. A torch upgrade alone moved FedWCA's test accuracy by 1.2-3.0 points
(docs/results/seed003.md), so every trial record says which build finished it, and a sweep resumed under another
build says so instead of mixing the two in one table (fda_ray.experiments.sweep, --mix-builds).

    build(aggregation)           {"torch", "torchvision", "numpy", "code", "aggregation", "cpu", "plugins"} here
    code_version()               a hash of the number-changing modules' code, blind to comments and docstrings
    differences(recorded, here)  the fields two builds disagree on ([] when they agree or cannot be compared)

"aggregation" is the implementation of the aggregation kernels that actually ran (cpp, cuda or reference: a kernel
that cannot be built falls back to the reference, which agrees only to rounding), known once a run has aggregated;
"cpu" is the CPU capability torch dispatches to and the C++ kernel is built for (DEFAULT, AVX2, AVX512: another SIMD
width sums in another order); "plugins" the version of each plug-in module loaded (plugin_versions, fda_ray.core.plugins: a user's
method is number-changing code too), None without plug-ins.

The number-changing modules are those whose code decides what a run computes: the algorithms, training, data,
partitions, the round loop, the kernels' reference and seeding. A comment or a docstring does not change the code
version; any change to a statement does, whether or not it changes a number (the hash cannot tell).
"""
from __future__ import annotations

import ast
import functools
import hashlib
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

PACKAGE = Path(__file__).resolve().parents[1]
# Relative to the fda_ray package: directories (every .py below) and single modules.
NUMBER_CHANGING = ("algorithms", "train", "data", "kernels", "runtime/partitions.py", "runtime/loop.py",
                   "runtime/experiment.py", "core/config.py", "core/seeding.py", "core/layout.py",
                   "core/multitask.py", "core/contract.py")
LIBRARIES = ("torch", "torchvision", "numpy")
FIELDS = LIBRARIES + ("code", "aggregation", "cpu", "plugins")


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _sources() -> list[Path]:
    out: list[Path] = []
    for part in NUMBER_CHANGING:
        p = PACKAGE / part
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    kernels = PACKAGE / "kernels" / "csrc"
    out += sorted(kernels.glob("*.cpp")) + sorted(kernels.glob("*.cu")) + sorted(kernels.glob("*.h"))
    return out


def fingerprint(sources: Iterable[tuple[str, str]]) -> str:
    """12 hex digits over (name, text) pairs in order: a .py file's syntax tree without docstrings (comments never
    reach the tree), any other file's text."""
    h = hashlib.sha1()
    for name, text in sources:
        h.update(name.encode())
        if name.endswith(".py"):
            text = ast.dump(_without_docstrings(ast.parse(text)), include_attributes=False)
        h.update(text.encode())
    return h.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The fingerprint of the number-changing modules and the C++/CUDA kernel sources, in a fixed order."""
    return fingerprint((str(f.relative_to(PACKAGE)), f.read_text()) for f in _sources())


def package_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_capability() -> str:
    """The CPU capability torch dispatches to: "DEFAULT", "AVX2", "AVX512", ... (the C++ kernel is built for it)."""
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # older torch
        return "DEFAULT"


def plugin_versions() -> str | None:
    """'module@<12 hex>' for each plug-in loaded in this process (fda_ray.core.plugins; its source fingerprinted as
    fda-ray's own code is), ', '-joined in name order; None without plug-ins."""
    import sys

    from fda_ray.core import plugins

    if not plugins.loaded():
        return None
    out = []
    for name in sorted(plugins.loaded()):
        origin = Path(getattr(sys.modules.get(name), "__file__", "") or "")
        files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        try:
            out.append(f"{name}@{fingerprint((str(f.relative_to(origin.parent)), f.read_text()) for f in files)}")
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):  # no file (a namespace), unreadable
            out.append(f"{name}@unknown")
    return ", ".join(out)


def build(aggregation: str | None = None) -> dict[str, str | None]:
    """This process's build; `aggregation`: the kernels' implementation that ran (None: not known yet, or no
    aggregation went through the kernels, as in FSSDA)."""
    import torch  # torch as torch.__version__ spells it ("2.15.0+cu132"), as records have named it from the start

    return {**{lib: package_version(lib) for lib in LIBRARIES}, "torch": torch.__version__, "code": code_version(),
            "aggregation": aggregation, "cpu": cpu_capability(), "plugins": plugin_versions()}


def differences(recorded: Mapping[str, Any] | None, here: Mapping[str, Any]) -> list[str]:
    """`field recorded -> here` for each build field both name and disagree on; a record that does not name a
    field (made before it was recorded) cannot disagree on it."""
    if not recorded:
        return []
    return [f"{k} {recorded[k]} -> {here[k]}" for k in FIELDS
            if recorded.get(k) is not None and here.get(k) is not None and str(recorded[k]) != str(here[k])]
