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

A worker that cannot import a plug-in the command could (a dependency on the shell's sys.path only, a folder not on
its node, an import that raises there) stops the command with one line: `load_in_worker` raises WorkerImportError
(the plug-in, the kind of process, its host, the import error, what to do), which no retry can mend; a command
prints it as `error: ...` and exits 1 (`explain`, through fda_ray.core.interrupts.CRASH_EXPLAINERS). A failed load
is remembered: a later lookup in that process raises it again rather than "unknown method ... did you mean".
`check_ray_workers` runs that load in a Ray worker on every node before a Tune launch, so that it fails before a
trial starts.

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

from fda_ray.core.interrupts import error_line

PACKAGE = str(Path(__file__).parent.parent) + os.sep  # fda-ray's own files: an error's place is the plug-in's, not these
GROUP = "fda_ray.plugins"  # the entry-point group of installed plug-ins
ENV = "FDA_RAY_IMPORTS"  # the plug-ins this process loaded: a JSON list of [module, sys.path folder or null]
FLAG = "--import"
MAIN_ENV = "FDA_RAY_MAIN_NAMES"  # names registered in the command's __main__ (a JSON list of "kind name"): no other
#                                  process can import them, and its lookup there says so (main_only) at once

_loaded: dict[str, str | None] = {}  # module -> the sys.path folder it was imported from (None: an installed one)
_pending_done = False
_failure: PluginError | None = None  # the pending plug-ins' failed load: raised again by every later load_pending


class PluginError(ValueError):
    """A plug-in that cannot be imported: one line naming the module, why, and where it was looked for. `module`,
    `root` (the sys.path folder it was exported with), `error` (the import's own error in one line, or None) and
    `missing` (the module a ModuleNotFoundError names, or None) say what failed, for WorkerImportError."""

    module: str | None = None
    root: str | None = None
    error: str | None = None
    missing: str | None = None


class WorkerImportError(RuntimeError):
    """A plug-in that the command imported and a worker process cannot (a Ray client actor, a Tune trial process, a
    local worker process). Not bad input (exit 2) but the workers' environment (exit 1), and not worth a retry: the
    same import fails again in that process, or its successor."""

    def __init__(self, module: str, kind: str, where: str, error: str, hint: str) -> None:
        self.module, self.kind, self.where, self.error, self.hint = module, kind, where, error, hint
        super().__init__(worker_import_message(module, kind, where, error, hint))

    def __reduce__(self):  # (it crosses processes: a Ray error's cause, a pool future's exception)
        return (WorkerImportError, (self.module, self.kind, self.where, self.error, self.hint))


def worker_import_message(module: str, kind: str, where: str, error: str, hint: str) -> str:
    """The line (after 'error: ') that says a worker could not import a plug-in."""
    return f"plug-in {module!r} cannot be imported in a {kind} ({where}): {error}; {hint}"


def worker_import_hint(module: str, root: str | None, missing: str | None, kind: str = "") -> str:
    """What to do, by cause: a dependency missing there, the plug-in's own folder missing there, or its import
    raising there."""
    dependency = missing and not (module == missing or module.startswith(missing + "."))  # not the plug-in itself
    if dependency and kind.startswith("local"):
        return (f"a local worker is a fresh process with the command's sys.path and environment, nothing else: "
                f"install {missing!r}, or put its folder on PYTHONPATH, so that any process can import it")
    if dependency:
        return (f"install {missing!r} where the workers run (on every node of a cluster), or put its folder on "
                "PYTHONPATH before the command starts: a sys.path entry made inside the command does not reach Ray's "
                "workers")
    if missing:
        folder = f"its folder {root} is not there: " if root else ""
        return (f"{folder}install the plug-in where the workers run, as fda-ray is (on a cluster, on every node: "
                "cluster.yaml's setup_commands), or put its folder on PYTHONPATH before the command starts")
    return "its import fails in this process and not in the command's: make it importable in a worker process too"


def _failed(message: str, name: str, root: str | None, e: BaseException | None) -> PluginError:
    err = PluginError(message)
    err.module, err.root = name, root
    err.missing = e.name if isinstance(e, ModuleNotFoundError) else None
    if err.missing and (name == err.missing or name.startswith(err.missing + ".")):
        err.error = f"ModuleNotFoundError: {e}"  # (not found at all: no line of it ran, importlib's is no help)
    else:
        err.error = None if e is None else error_line(e, PACKAGE)
    return err


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
            raise _failed(f"{field}={name!r} is invalid: no module {e.name!r} in {where}sys.path or the installed "
                          "packages (a module file or package folder on sys.path, or pip install it)",
                          name, root, e) from None
        raise _failed(f"{field}={name!r} is invalid: importing it failed: {error_line(e, PACKAGE)}", name, root,
                      e) from None
    except Exception as e:  # the plug-in's own error: one line, at the plug-in's line (not fda-ray's check it hit)
        raise _failed(f"{field}={name!r} is invalid: importing it failed: {error_line(e, PACKAGE)}", name, root,
                      e) from None


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
    """The plug-ins this process was started with: the entry-point group's and $FDA_RAY_IMPORTS'. Runs once; a
    failure is raised again by every later call (a registry's lookup, a retried job in the same worker), never
    forgotten into an "unknown name"."""
    global _pending_done, _failure
    if _pending_done:
        if _failure is not None:
            raise _failure
        return tuple(_loaded)
    _pending_done = True  # first: a plug-in importing fda-ray must not come back here
    try:
        for name, root in _from_env(os.environ.get(ENV, "")):
            if name not in _loaded:
                _import(name, root, field=ENV)
                _loaded[name] = root
        for name in _entry_points():
            if name not in _loaded:
                _loaded[name] = _root(_import(name, field=f"entry point {GROUP}"))
    except PluginError as e:
        _failure = e
        raise
    if _loaded:
        _export()
    return tuple(_loaded)


def _host() -> str:
    import socket

    return f"host {socket.gethostname()}"


def load_in_worker(kind: str, given: Iterable[Sequence] = ()) -> tuple[str, ...]:
    """A worker's plug-ins (load_specs: `given` and the pending ones); `kind` names the process ("Ray client
    actor", "Tune trial process", "local worker process"). A plug-in it cannot import raises WorkerImportError."""
    try:
        return load_specs(given)
    except PluginError as e:
        if e.module is None:  # (a malformed $FDA_RAY_IMPORTS: no plug-in to name)
            raise WorkerImportError(ENV, kind, _host(), str(e), "set it as the command does: a JSON list of "
                                    "[module, folder] pairs, or module names separated by commas") from None
        raise WorkerImportError(e.module, kind, _host(), e.error or str(e),
                                worker_import_hint(e.module, e.root, e.missing, kind)) from None


def worker_import_error(e: BaseException | None) -> WorkerImportError | None:
    """The WorkerImportError behind `e`: itself, a Ray error's cause (RayTaskError, an actor that died in its
    creation task), or one in its __cause__ / __context__ chain; else None."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, WorkerImportError):
            cause = getattr(e, "cause", None)  # Ray's RayTaskError(WorkerImportError): its own line is the cause's
            return cause if isinstance(cause, WorkerImportError) else e
        cause = getattr(e, "cause", None)
        if isinstance(cause, BaseException) and id(cause) not in seen:
            e = cause
            continue
        e = e.__cause__ or e.__context__
    return None


def explain(e: BaseException) -> bool | int:
    """For an exception escaping a command (fda_ray.core.interrupts.CRASH_EXPLAINERS): a worker that could not
    import a plug-in is told in one line (exit 1), not as a traceback; so is a plug-in that the command's own
    process refused after `preload` (a family's flag that clashes with another flag, as its parser is built: bad
    input, exit 2)."""
    if isinstance(e, PluginError):
        print(f"error: {e}", file=sys.stderr)
        return 2
    w = worker_import_error(e)
    if w is None:
        return False
    print(f"error: {w}", file=sys.stderr)
    return True


def check_ray_workers(kind: str = "Tune trial process", timeout_s: float = 300.0) -> None:
    """Before a Ray launch (a sweep's Tune trials): load this process's plug-ins in a Ray worker of each alive
    node (the job's runtime_env, as the trials get it), so that one that cannot import one stops the launch before a
    trial starts (WorkerImportError). Nothing to do without plug-ins; a node that does not answer in `timeout_s` is
    left to the trials themselves."""
    if not _loaded:
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(_probe)
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(kind, specs()) for n in ray.nodes() if n.get("Alive")]
    if not refs:
        return
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    found = None
    for ref in done:  # each read (an error left unread is printed by Ray, with its traceback)
        try:
            ray.get(ref)
        except Exception as e:  # (another failure of the probe itself, a node going away: the trials meet it)
            found = found or worker_import_error(e)
    if found is not None:
        raise found


def _probe(kind: str, given: Sequence[Sequence]) -> None:
    load_in_worker(kind, given)


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
                              f"{error_line(e, PACKAGE)}") from None
        if callable(obj) and not isinstance(obj, ModuleType):
            try:  # (its registrations run here: a name registered twice is the package's error, in one line)
                obj()
            except Exception as e:
                raise PluginError(f"entry point {GROUP}:{ep.name}={ep.value!r} is invalid: calling it failed: "
                                  f"{error_line(e, PACKAGE)}") from None
        out.append(ep.module)
    return out


def _registrar() -> str | None:
    """The module whose code called the registry (the first frame outside fda-ray's files: `python -m fda_ray`'s
    own __main__ is fda-ray's), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if isinstance(module, str) and not frame.f_code.co_filename.startswith(PACKAGE):
            return module
        frame = frame.f_back
    return None


def note(obj: object, kind: str | None = None, entry: str | None = None) -> None:
    """A registry entry's defining module, if it is outside fda-ray and importable by another process: loaded
    there too (the Python API's plug-ins need no flag). An entry (`kind` `entry`, e.g. recipe 'main_prox')
    defined or registered in a script's own __main__ is exported by name as well ($FDA_RAY_MAIN_NAMES): another
    process imports the object's module but not the registration, so its lookup fails at once with what to do
    (main_only), not as an unknown name retried."""
    name = getattr(obj, "__module__", None)
    if kind and entry and (name in ("__main__", "__mp_main__") or _registrar() in ("__main__", "__mp_main__")):
        names = _main_names()
        if f"{kind} {entry}" not in names:
            os.environ[MAIN_ENV] = json.dumps([*names, f"{kind} {entry}"])
    if not isinstance(name, str) or name in _loaded or name.split(".")[0] in ("fda_ray", "__main__",
                                                                              "__mp_main__", "builtins"):
        return
    module = sys.modules.get(name)
    if module is None:
        return
    _loaded[name] = _root(module)
    _export()


def _main_names() -> list[str]:
    try:
        names = json.loads(os.environ.get(MAIN_ENV, "[]"))
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def main_only(kind: str, entry: str) -> WorkerImportError | None:
    """For a name this process lacks: the error to raise when the command registered it in its __main__ (note),
    which this process cannot import and no retry mends; else None."""
    if f"{kind} {entry}" not in _main_names() or sys.modules.get("__main__") is None:
        return None
    return WorkerImportError("__main__", "worker process", _host(),
                             f"{kind} {entry!r} is registered in the command's __main__ (a script run as python "
                             "script.py), which another process cannot import",
                             "move its registration into a module of yours and import that module (docs/plugins.md)")


def loaded() -> tuple[str, ...]:
    return tuple(_loaded)


def ray_env() -> dict[str, str]:
    """Environment variables for a Ray job's workers (ray.init's runtime_env), so that the workers of a joined
    cluster load the plug-ins too (a Ray this process starts inherits its environment anyway)."""
    out = {ENV: os.environ[ENV]} if _loaded and ENV in os.environ else {}
    if MAIN_ENV in os.environ:  # (so that a worker's lookup of a __main__ name says why it is missing)
        out[MAIN_ENV] = os.environ[MAIN_ENV]
    return out


def _is_flag(word: str) -> bool:
    """Whether `word` is `--import` as argparse reads it: the flag itself or an abbreviation of it (`--imp`), which
    argparse takes for the flag (the commands have no other option starting with `--i`), so that the module it
    names is loaded too and not left to an "unknown name" later."""
    return len(word) >= 3 and FLAG.startswith(word)


def from_argv(argv: Sequence[str]) -> list[str]:
    """The modules a command line names with `--import MODULE` or `--import=MODULE` (repeatable; commas allowed;
    the flag abbreviated as argparse allows, `--imp`), read before its parser is built: a plug-in's families add
    flags of their own."""
    out: list[str] = []
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a == "--":
            break
        flag, eq, value = a.partition("=")
        if _is_flag(flag) and eq:
            out += value.split(",")
        elif _is_flag(a) and i + 1 < len(argv):
            out += argv[i + 1].split(",")
            next(it, None)
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


def cwd_on_path() -> None:
    """Put the working directory on sys.path as `python -m` does (first, and not with -P / $PYTHONSAFEPATH): a
    console script (`fda-ray`) starts with its bin folder there instead, so a plug-in in the current folder would be
    found by `python -m fda_ray --import my_fda` and not by `fda-ray --import my_fda`."""
    if sys.flags.safe_path:
        return
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)


def preload(argv: Sequence[str]) -> int | None:
    """A command's first step: import the modules its `--import` flags (and its --config file's `import`) name,
    from the working directory too (cwd_on_path). None, or 2 after one line on stderr."""
    try:
        names = _config_imports(argv) + from_argv(argv)
        if names:
            cwd_on_path()
        load(names)
    except PluginError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return None


def add_option(p) -> None:  # type: ignore[no-untyped-def]
    """The `--import MODULE` option of a command (read by `preload` before parsing; here for --help and argparse)."""
    p.add_argument(FLAG, action="append", default=[], metavar="MODULE", dest="imports",
                   help="import a plug-in module first (its methods, models, datasets, recipes; docs/plugins.md); "
                        "repeatable. Installed packages' 'fda_ray.plugins' entry points load without it")


def _register_explainer() -> None:
    from fda_ray.core import interrupts

    if explain not in interrupts.CRASH_EXPLAINERS:
        interrupts.CRASH_EXPLAINERS.append(explain)


_register_explainer()
