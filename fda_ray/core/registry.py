"""Name -> object registries (rules, methods, models, datasets), DomainBed style.

A typo in a name gives one ValueError that lists the known names, and the closest of them (`did_you_mean`, the
standard library's difflib), so a CLI can print it as is. A name not found is looked for once more after the
process's pending plug-ins are imported (fda_ray.core.plugins: a worker process finds a plug-in's names without a
call of its own), and an entry registered from a module outside fda-ray is noted as a plug-in, so that the other
processes of a run import it too.

A registry may name its home, the module that registers its built-in entries (`home=`): the registry imports it the
first time it is read. So a module that only looks names up (the run config's checks, the partitions) needs the
registry and not the families behind it, and the import graph has no circle through them (tools/imports.py).
The registries the run config checks its names against live here, each with its home: `ALGORITHMS` (methods,
fda_ray.algorithms), `DATASETS` (a `Dataset` entry: loader, the authors' defaults, environment count; fda_ray.data)
and `MODELS` (fda_ray.train.models). The recipes and the aggregation rules are registered beside what uses them.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar

from fda_ray.core import plugins

T = TypeVar("T")


def did_you_mean(value: object, names: Iterable[str], cutoff: float = 0.6) -> str:
    """"; did you mean 'fedgp'?" for the known name closest to a misspelt `value` (difflib's ratio of at least
    `cutoff`), or "" when none is close or `value` is not a string."""
    if not isinstance(value, str):
        return ""
    names = [str(n) for n in names]
    # compared without case and separators first: DomainBed's class names (PACS, ColoredMNIST, OfficeHome) are what
    # its users type, and difflib's ratio of "PACS" to "pacs" is 0
    folded = {_fold(n): n for n in names}
    if _fold(value) in folded:
        return f"; did you mean {folded[_fold(value)]!r}?"
    close = difflib.get_close_matches(value, names, n=1, cutoff=cutoff) or \
        [folded[c] for c in difflib.get_close_matches(_fold(value), list(folded), n=1, cutoff=cutoff)]
    return f"; did you mean {close[0]!r}?" if close else ""


def _fold(name: str) -> str:
    return "".join(ch for ch in name.casefold() if ch not in "-_ ")


def plugin_hint() -> str:
    return "; a plug-in's names need its module: --import MODULE (docs/plugins.md)"


class Registry(Generic[T]):
    """A small ordered mapping from names to registered objects."""

    def __init__(self, kind: str, pluggable: bool = False, home: str | None = None) -> None:
        self.kind = kind
        self.pluggable = pluggable  # plug-ins may add to it (fda_ray.core.plugins)
        self.home = home  # the module that registers the built-in entries, imported when the registry is first read
        self._items: dict[str, T] = {}

    def _load_home(self) -> None:
        if self.home is not None:
            home, self.home = self.home, None  # first: the home's own additions must not load it again
            try:
                importlib.import_module(home)
            except BaseException:
                self.home = home
                raise

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        self._load_home()  # the built-in entries first, whoever adds first
        if name in self._items:
            # (a plug-in's import that hits this is located at its own line: plugins' error_line skips fda-ray's)
            first = getattr(self._items[name], "load", self._items[name])  # (a Dataset: its loader's module)
            owner = getattr(first, "__module__", None)
            by = f" (first by {owner})" if isinstance(owner, str) else ""
            raise ValueError(f"{self.kind} {name!r} is registered twice{by}: pick another name for this {self.kind}")
        self._items[name] = obj
        if self.pluggable:
            plugins.note(obj, self.kind, name)

    def _find(self, name: object) -> bool:
        """Whether `name` is registered, once the pending plug-ins are imported if it was not."""
        self._load_home()
        if name in self._items or not self.pluggable:
            return name in self._items
        plugins.load_pending()
        return name in self._items

    def get(self, name: str) -> T:
        if self._find(name):
            return self._items[name]
        if self.pluggable and (elsewhere := plugins.main_only(self.kind, str(name))) is not None:
            raise elsewhere  # (registered in the command's script: not an unknown name, and not worth a retry)
        known = ", ".join(self._items)
        hint = did_you_mean(name, self._items) or (plugin_hint() if self.pluggable else "")
        raise ValueError(f"unknown {self.kind} {name!r}; known: {known}{hint}")

    def names(self) -> list[str]:
        self._load_home()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return self._find(name)

    def __iter__(self) -> Iterator[str]:
        self._load_home()
        return iter(self._items)


@dataclass(frozen=True)
class Dataset:
    """A registered dataset: its loader, the authors' settings for it (what a RunConfig field left as None becomes;
    fda_ray/data/paper_defaults.py), and its environments (DomainBed-style datasets: a count, or a function of
    data_dir that counts them without reading the images; None: a dataset without environments). Calling it
    loads it."""

    load: Callable[..., Any]
    defaults: Mapping[str, Any] | None = None
    environments: int | Callable[[str | None], int] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load(*args, **kwargs)

    def count_environments(self, data_dir: str | None) -> int | None:
        return self.environments(data_dir) if callable(self.environments) else self.environments


class DatasetRegistry(Registry[Dataset]):
    """The datasets by name: one registration gives the loader, the defaults and the environment count."""

    def add(self, name: str, obj: Callable[..., Any], *, defaults: Mapping[str, Any] | None = None,
            environments: int | Callable[[str | None], int] | None = None) -> None:
        entry = obj if isinstance(obj, Dataset) else Dataset(obj, None if defaults is None else dict(defaults),
                                                             environments)
        super().add(name, entry)
        plugins.note(entry.load, self.kind, name)  # a plug-in's dataset is its loader's module's (fda_ray.core.plugins)

    def register(self, name: str, *, defaults: Mapping[str, Any] | None = None,  # type: ignore[override]
                 environments: int | Callable[[str | None], int] | None = None
                 ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def deco(load: Callable[..., Any]) -> Callable[..., Any]:
            self.add(name, load, defaults=defaults, environments=environments)
            return load

        return deco


# Every dataset by name (RunConfig.dataset), filled by its home fda_ray.data (each loader module registers its own).
DATASETS = DatasetRegistry("dataset", pluggable=True, home="fda_ray.data")


def count_environments(dataset: str, data_dir: str | None) -> int:
    """Environments of a dataset without reading its images (a config's default source count): the count
    registered with it (DATASETS.add(..., environments=))."""
    n = DATASETS.get(dataset).count_environments(data_dir)
    if n is None:
        with_envs = [d for d in DATASETS.names() if DATASETS.get(d).environments is not None]
        raise ValueError(f"dataset={dataset!r} is invalid for partitions domainbed and domain_shards: it has no "
                         f"environments (datasets with environments: {', '.join(with_envs)})")
    return n


# Every model by name (RunConfig.model -> a function of the input shape and the number of outputs), filled by its home.
MODELS: Registry[Callable[..., Any]] = Registry("model", pluggable=True, home="fda_ray.train.models")


class AlgorithmRegistry(Registry[type]):
    """The methods by name. A family's parameters (RunConfig.params[family], its flags --<family>-<field>) are one
    `Params` class's: a method whose Params has fields and whose family already belongs to another Params class
    with fields is refused in one line, since one of the two classes would be dropped without a word (its flags
    unknown, its fields judged against the other's). A method that reuses a family reuses its Params class as is
    (HalfHalf in docs/plugins.md); one with parameters of its own names a family of its own."""

    def add(self, name: str, obj: type) -> None:
        params = getattr(obj, "Params", None)
        family = getattr(obj, "family", None)
        if params is not None and dataclasses.is_dataclass(params) and dataclasses.fields(params):
            for other in self.names():
                cls = self._items[other]
                if cls.family == family and cls.Params is not params and dataclasses.fields(cls.Params):
                    raise ValueError(
                        f"method {name!r} is invalid: its family {family!r} already has the parameters of "
                        f"{cls.Params.__module__}.{cls.Params.__qualname__} (method {other!r}), and a family has "
                        f"one Params class: give {obj.__qualname__} a family of its own (family = 'my_family' on "
                        f"it and on {params.__qualname__}), or use {cls.Params.__qualname__} as it is")
        super().add(name, obj)


# Every method by name (RunConfig.method -> its Algorithm class, fda_ray.algorithms.base). Defined here, filled by
# its home: the config checks a method's name without importing the families (which type their config as RunConfig).
ALGORITHMS: AlgorithmRegistry = AlgorithmRegistry("method", pluggable=True, home="fda_ray.algorithms")


def family_params() -> dict[str, type]:
    """Each method family that has parameters of its own (RunConfig.params[family]), with its Params class."""
    out: dict[str, type] = {}
    for name in ALGORITHMS.names():
        cls = ALGORITHMS.get(name)
        if dataclasses.fields(cls.Params):
            out.setdefault(cls.family, cls.Params)
    return out
