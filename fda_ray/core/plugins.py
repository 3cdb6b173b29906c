"""Plug-ins: a user's methods, models, datasets and recipes, from a module outside fda-ray, in every process of a run.

    python -m fda_ray --import my_fda --method fedprox                     the run's command line
    python -m fda_ray.sweep --import my_fda --grid my-grid.yaml            a sweep, its grid-file checks, its trials
    [project.entry-points."fda_ray.plugins"]                               an installed package: loaded everywhere,
    my-fda = "my_fda"                                                      with no flag

A plug-in is a module that registers what it defines when it is imported (`ALGORITHMS.add`, `MODELS.add`,
`DATASETS.add`, `RECIPES.add`; docs/plugins.md). A run has many processes: the command line, a sweep's pool workers
(started fresh by `spawn`), Tune's trial processes and the client actors (Ray workers). Each imports the plug-ins
before it looks a name up:

- `load(modules)` imports modules here and exports what is loaded in $FDA_RAY_IMPORTS (each module's name and the
  sys.path folder it was found in), which every process started from here inherits: the spawn pool, a Ray this
  process starts, and, through `ray_env()`, the workers of a cluster it joins.
- `load_pending()` imports the entry-point group `fda_ray.plugins` and $FDA_RAY_IMPORTS. The worker-side entry
  points run it first, and a registry that misses a name runs it once before it gives up (fda_ray.core.registry).
- A name registered from a module outside fda-ray (the Python API: `import my_fda` and no flag) notes that module
  (`note`), so it is exported too. A script's own `__main__` cannot be imported by another process: its names are
  known only to it.

The plug-ins' code is part of what computes a number: each record's build says which version of each ran
(fda_ray.core.build.plugin_versions).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterable, Sequence

GROUP = "fda_ray.plugins"  # the entry-point group of installed plug-ins
ENV = "FDA_RAY_IMPORTS"  # the plug-ins this process loaded: a JSON list of [module, sys.path folder or null]
FLAG = "--import"

_loaded: dict[str, str | None] = {}  # module -> the sys.path folder it was imported from (None: an installed one)
_pending_done = False


class PluginError(ValueError):
    """A plug-in that cannot be imported: one line naming the module, why, and where it was looked for."""


def _root(module: ModuleType) -> str | None:
    """The sys.path folder `module` was imported from (another process adds it to its sys.path), or None for a
    module without a file."""
    origin = getattr(module, "__file__", None)
    if not origin:
        return None
    path = Path(origin).resolve()
    if path.name == "__init__.py":
        path = path.parent
    for _ in module.__name__.split("."):
        path = path.parent
    return str(path)


def _import(name: str, root: str | None = None, field: str = "import") -> ModuleType:
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise PluginError(f"{field}={name!r} is invalid: a module name (my_fda, or package.module)")
    if root and root not in sys.path and Path(root).is_dir():
        sys.path.append(root)  # after the process's own folders: a plug-in never shadows another module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            where = f"{os.getcwd()} (this folder), " if "" in sys.path or os.getcwd() in sys.path else ""
            raise PluginError(f"{field}={name!r} is invalid: no module {e.name!r} in {where}sys.path or the "
                              "installed packages (a module file or package folder on sys.path, or pip install "
                              "it)") from None
        raise PluginError(f"{field}={name!r} is invalid: importing it failed: {_where(e)}") from None
    except Exception as e:  # the plug-in's own error: one line, with where it happened
        raise PluginError(f"{field}={name!r} is invalid: importing it failed: {_where(e)}") from None


def _where(e: BaseException) -> str:
    """'ValueError: message (file.py:12)' at the innermost frame of the failure."""
    from fda_ray.core.interrupts import error_line

    return error_line(e)


def _export() -> None:
    os.environ[ENV] = json.dumps([[m, r] for m, r in _loaded.items()])


def load(modules: Iterable[str], *, field: str = "import") -> tuple[str, ...]:
    """Import `modules` (and the installed entry points) and export them to the processes started from here.
    Loading a module again does nothing. Returns every plug-in module loaded in this process."""
    load_pending()
    for name in modules:
        if name in _loaded:
            continue
        _loaded[name] = _root(_import(name, field=field))
        _export()
    return tuple(_loaded)


def specs() -> tuple[tuple[str, str | None], ...]:
    """(module, sys.path folder) of each plug-in loaded here: what another process needs to load them."""
    return tuple(_loaded.items())


def load_specs(given: Iterable[Sequence]) -> tuple[str, ...]:
    """Load the plug-ins another process passed as `specs()` (and this process's pending ones)."""
    load_pending()
    for name, root in given:
        if name not in _loaded:
            _import(name, root)
            _loaded[name] = root
            _export()
    return tuple(_loaded)


def load_pending() -> tuple[str, ...]:
    """The plug-ins this process was started with: the entry-point group's and $FDA_RAY_IMPORTS'. Runs once."""
    global _pending_done
    if _pending_done:
        return tuple(_loaded)
    _pending_done = True  # first: a plug-in importing fda-ray must not come back here
    for name, root in _from_env(os.environ.get(ENV, "")):
        if name not in _loaded:
            _import(name, root, field=ENV)
            _loaded[name] = root
    for name in _entry_points():
        if name not in _loaded:
            _loaded[name] = _root(_import(name, field=f"entry point {GROUP}"))
    if _loaded:
        _export()
    return tuple(_loaded)


def _from_env(text: str) -> list[tuple[str, str | None]]:
    """$FDA_RAY_IMPORTS as this module writes it (JSON), or as a user may: module names separated by commas."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            return [(str(m), r if isinstance(r, str) else None) for m, r in json.loads(text)]
        except (ValueError, TypeError):
            raise PluginError(f"{ENV}={text!r} is invalid: a JSON list of [module, folder] pairs, or module names "
                              "separated by commas") from None
    return [(m.strip(), None) for m in text.split(",") if m.strip()]


def _entry_points() -> list[str]:
    """The modules of the installed packages' `fda_ray.plugins` entry points ("module" or "module:function"; a
    function is called once its module is imported)."""
    from importlib import metadata

    out = []
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda ep: ep.name):
        try:
            obj = ep.load()
        except Exception as e:
            raise PluginError(f"entry point {GROUP}:{ep.name}={ep.value!r} is invalid: importing it failed: "
                              f"{_where(e)}") from None
        if callable(obj) and not isinstance(obj, ModuleType):
            obj()
        out.append(ep.module)
    return out


def note(obj: object) -> None:
    """A registry entry's defining module, if it is outside fda-ray and importable by another process: loaded
    there too (the Python API's plug-ins need no flag)."""
    name = getattr(obj, "__module__", None)
    if not isinstance(name, str) or name in _loaded or name.split(".")[0] in ("fda_ray", "__main__",
                                                                              "__mp_main__", "builtins"):
        return
    module = sys.modules.get(name)
    if module is None:
        return
    _loaded[name] = _root(module)
    _export()


def loaded() -> tuple[str, ...]:
    return tuple(_loaded)


def ray_env() -> dict[str, str]:
    """Environment variables for a Ray job's workers (ray.init's runtime_env), so that the workers of a joined
    cluster load the plug-ins too (a Ray this process starts inherits its environment anyway)."""
    return {ENV: os.environ[ENV]} if _loaded and ENV in os.environ else {}


def from_argv(argv: Sequence[str]) -> list[str]:
    """The modules a command line names with `--import MODULE` or `--import=MODULE` (repeatable; commas allowed),
    read before its parser is built: a plug-in's families add flags of their own."""
    out: list[str] = []
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a == "--":
            break
        if a == FLAG and i + 1 < len(argv):
            out += argv[i + 1].split(",")
            next(it, None)
        elif a.startswith(FLAG + "="):
            out += a[len(FLAG) + 1:].split(",")
    return [m.strip() for m in out if m.strip()]


def _config_imports(argv: Sequence[str]) -> list[str]:
    """The `import` key of the command's `--config FILE` (fda_ray.core.config_files; `--print-config` writes it).
    A file that cannot be read is left to the parser, which names what is wrong with it."""
    from fda_ray.core.config_files import read_mapping

    files = [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == "--config"]
    files += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    if len(files) != 1:
        return []
    try:
        value = read_mapping(files[0]).get("import", [])
    except (ValueError, OSError, UnicodeDecodeError):
        return []
    names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [m.strip() for n in names for m in str(n).split(",") if m.strip()]


def preload(argv: Sequence[str]) -> int | None:
    """A command's first step: import the modules its `--import` flags (and its --config file's `import`) name.
    None, or 2 after one line on stderr."""
    try:
        load(_config_imports(argv) + from_argv(argv))
    except PluginError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return None


def add_option(p) -> None:  # type: ignore[no-untyped-def]
    """The `--import MODULE` option of a command (read by `preload` before parsing; here for --help and argparse)."""
    p.add_argument(FLAG, action="append", default=[], metavar="MODULE", dest="imports",
                   help="import a plug-in module first (its methods, models, datasets, recipes; docs/plugins.md); "
                        "repeatable. Installed packages' 'fda_ray.plugins' entry points load without it")
