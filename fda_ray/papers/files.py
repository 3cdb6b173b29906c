"""Grids and searches written down in YAML or JSON files, run like the built-in ones.

    python -m fda_ray.sweep --grid noise --print-grid > my-noise.yaml   # a built-in grid as a file, to edit
    python -m fda_ray.sweep --grid my-noise.yaml --profile quick        # run the file's grid
    python -m fda_ray.sweep --search beta --print-grid > my-beta.yaml   # the same for a search
    python -m fda_ray.sweep --search my-beta.yaml

A grid file is the Grid dataclass (fda_ray.papers.grids) as plain data, one key per field:

    name: my-noise                     # the sweep's default --out is sweeps/<name>-<profile>
    dataset: fashion-mnist
    variable: noise                    # the RunConfig field the grid varies
    values: [0.0, 0.4, 0.8]
    seeds: 3                           # seeds per value: one number, or {0.4: 3, 0.8: 1} (missing: 1)
    rows:                              # the table's rows, in order: a method with RunConfig fields
      - {key: fedgp_0.5, label: FedGP_0.5, method: fedgp, params: {beta: 0.5}}
      - {key: fedgp_auto, label: FedGP_Auto, method: fedgp_auto}
    fixed: {rounds: 50}                # RunConfig fields every trial sets
    profiles:                          # --profile NAME: RunConfig fields over the grid's, and what runs
      quick: {fields: {rounds: 10}, values: [0.4], seeds: 1, note: "10 rounds, noise 0.4 only"}
      paper: {}
    paper: {fedgp_auto: {0.4: 71.5}}   # optional: the paper's numbers (row -> value -> %), shown beside ours
    paper_ref: "Auto-weighted FDA, Table 10"

and the rest of Grid's fields where needed (value_labels, value_fields for columns that are settings, paper_auc,
share_source_only, a profile's rows and row_fields). A search file is the Search dataclass (fda_ray.papers.searches) the
same way: `methods`, the `space` as a list of `{name, kind: uniform|loguniform|choice, low, high}` or `{name, kind:
choice, values}`, `variable` and `values` (the settings), `rules` (fda_ray.papers.selection), `profiles`, and optionally
`fixed`, `references` (rows, as a grid's), `num_samples`, `rerun_seeds`, `grace_period`, `reduction_factor`,
`value_fields`, `value_labels` and `note`.

A file is checked before anything runs, with the built-in definitions' one-line errors: an unknown or missing key,
a value of the wrong type, an unknown method or dataset, a profile or row naming what the grid lacks, and every
row's trial of every profile built into a RunConfig (a misspelt field or a bad value fails here, not in a worker).

Why the built-in grids stay Python: they share rows, fields and the papers' tables (fda_ray/papers/paper.py) between 40
definitions, which a file would copy out, and copies drift. Instead, each built-in one is written out by
`--print-grid` in this format, and that file loads back to the same definition and plans the same trials (the
test suite checks every built-in grid and search), so a file made from a built-in is an exact starting point.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Mapping

from fda_ray.core.registry import did_you_mean, plugin_hint
from fda_ray.papers.grids import MAX_SAMPLES, MAX_SEEDS, Grid, Profile, Row
from fda_ray.papers.searches import Dim, Search

SUFFIXES = (".yaml", ".yml", ".json")
NAME = re.compile(r"[A-Za-z0-9_.\-]+")  # a row key, a grid's, a search's or a profile's name: a folder name


class DefinitionFileError(ValueError):
    """A grid or search file that cannot be used: one line naming the file, the key and the value, and what is
    allowed."""


def is_file_ref(ref: str) -> bool:
    """A --grid / --search value that names a file rather than a built-in definition."""
    return ref.lower().endswith(SUFFIXES)


# -- writing ---------------------------------------------------------------------------------------------------------

def _plain(x: Any) -> Any:
    """Data as YAML and JSON write it: tuples as lists, mappings as dicts (keys kept: floats stay floats)."""
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _row_dict(r: Row) -> dict[str, Any]:
    d = {"key": r.key, "label": r.label, "method": r.method}
    if r.params:
        d["params"] = _plain(r.params)
    return d


def _profile_dict(p: Profile) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if p.fields:
        d["fields"] = _plain(p.fields)
    if p.values is not None:
        d["values"] = list(p.values)
    if p.rows is not None:
        d["rows"] = list(p.rows)
    if p.seeds is not None:
        d["seeds"] = p.seeds
    if p.note:
        d["note"] = p.note
    if p.row_fields:
        d["row_fields"] = _plain(p.row_fields)
    return d


def grid_to_dict(grid: Grid) -> dict[str, Any]:
    """The grid as a file's mapping (only the fields that differ from Grid's defaults, beside the required ones)."""
    d: dict[str, Any] = {"name": grid.name, "dataset": grid.dataset, "variable": grid.variable,
                         "values": list(grid.values), "seeds": dict(grid.seeds),
                         "rows": [_row_dict(r) for r in grid.rows]}
    if grid.fixed:
        d["fixed"] = _plain(grid.fixed)
    d["profiles"] = {name: _profile_dict(p) for name, p in grid.profiles.items()}
    for key in ("paper", "paper_auc", "value_labels", "value_fields"):
        if getattr(grid, key):
            d[key] = _plain(getattr(grid, key))
    if grid.paper_ref:
        d["paper_ref"] = grid.paper_ref
    if grid.share_source_only:
        d["share_source_only"] = True
    return d


def search_to_dict(search: Search) -> dict[str, Any]:
    """The search as a file's mapping."""
    space = []
    for dim in search.space:
        s: dict[str, Any] = {"name": dim.name, "kind": dim.kind}
        if dim.kind == "choice":
            s["values"] = list(dim.values)
        else:
            s.update(low=dim.low, high=dim.high)
        space.append(s)
    d: dict[str, Any] = {"name": search.name, "dataset": search.dataset, "methods": list(search.methods),
                         "space": space, "variable": search.variable, "values": list(search.values),
                         "rules": list(search.rules),
                         "profiles": {name: _profile_dict(p) for name, p in search.profiles.items()}}
    if search.fixed:
        d["fixed"] = _plain(search.fixed)
    if search.references:
        d["references"] = [_row_dict(r) for r in search.references]
    d["num_samples"] = dict(search.num_samples)
    d.update(rerun_seeds=search.rerun_seeds, grace_period=search.grace_period,
             reduction_factor=search.reduction_factor)
    for key in ("value_fields", "value_labels"):
        if getattr(search, key):
            d[key] = _plain(getattr(search, key))
    if search.note:
        d["note"] = search.note
    return d


def dump(data: Mapping[str, Any], fmt: str = "yaml") -> str:
    """A definition's mapping as YAML (float keys stay floats) or JSON (keys become text; the loader reads them
    back as numbers)."""
    if fmt == "json":
        def keys(x: Any) -> Any:
            if isinstance(x, dict):
                return {(f"{k:g}" if isinstance(k, float) else k): keys(v) for k, v in x.items()}
            return [keys(v) for v in x] if isinstance(x, list) else x
        return json.dumps(keys(data), indent=2) + "\n"
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True)


# -- reading ---------------------------------------------------------------------------------------------------------

class Checker:
    """Type checks that end in one line: `grid file 'g.yaml': rows[2].method=3 is invalid: text`."""

    def __init__(self, what: str, path: str) -> None:
        self.prefix = f"{what} file {path!r}"

    def fail(self, where: str, value: Any, allowed: str, names: Any = (), pluggable: bool = False
             ) -> DefinitionFileError:
        """pluggable: `names` are a registry's, which a plug-in may add to (fda_ray.core.plugins)."""
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        hint = did_you_mean(value, names) or (plugin_hint() if pluggable else "")
        return DefinitionFileError(f"{self.prefix}: {where}={shown} is invalid: {allowed}{hint}")

    def keys(self, where: str, d: Any, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(d, dict):
            raise self.fail(where or "file", d, "a mapping of keys to values")
        for k in d:
            if k not in required + optional:
                name = f"{where}.{k}" if where else str(k)
                raise self.fail(name, d[k], f"not a known key; known: {', '.join(required + optional)}")
        for k in required:
            if k not in d:
                raise DefinitionFileError(f"{self.prefix}: {f'{where}.' if where else ''}{k} is missing (required: "
                                          f"{', '.join(required)})")
        return d

    def text(self, where: str, v: Any) -> str:
        if not isinstance(v, str) or not v:
            raise self.fail(where, v, "a non-empty text")
        return v

    def number(self, where: str, v: Any) -> float:
        """A number as written (an integer stays one: an integer field such as target_labelled is a grid's
        variable too); a JSON key's text ("0.4", "200") read as the number it spells."""
        if isinstance(v, str) and not isinstance(v, bool):
            try:
                return int(v) if v.lstrip("-").isdigit() else float(v)
            except ValueError:
                raise self.fail(where, v, "a number") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(where, v, "a number")
        return v

    def integer(self, where: str, v: Any, low: int = 1, high: int | None = None) -> int:
        """`high`: a count that plans that many trials (seeds, trials per study), bounded as the command line's
        flags are (a typo of 10**20 would plan for ever)."""
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            raise self.fail(where, v, f"an integer >= {low}" if high is None else f"an integer from {low} to {high}")
        return v

    def seeds(self, where: str, v: Any) -> int:
        """Seeds per cell: an integer from 1 to MAX_SEEDS (as --seeds)."""
        return self.integer(where, v, high=MAX_SEEDS)

    def name(self, where: str, v: Any) -> str:
        """A name that becomes a folder's or a file's (a row key in trial folders' names, the grid's name and a
        profile's in the default --out): refused if it could name a path elsewhere."""
        v = self.text(where, v)
        if not NAME.fullmatch(v) or v in (".", ".."):
            raise self.fail(where, v, "letters, digits, '_', '-' and '.' (it names folders: no '/', not '.' or '..')")
        return v

    def mapping(self, where: str, v: Any) -> dict:
        if not isinstance(v, dict):
            raise self.fail(where, v, "a mapping")
        return v

    def fields(self, where: str, v: Any) -> dict:
        """A mapping of RunConfig fields, a YAML boolean given for a field of words read as its word
        (`vectorise: off`; fda_ray.core.config.boolean_word)."""
        from fda_ray.core.config import boolean_word

        return {k: boolean_word(k, x) for k, x in self.mapping(where, v).items()}

    def seq(self, where: str, v: Any, *, empty: bool = False) -> list:
        if not isinstance(v, list) or (not empty and not v):
            raise self.fail(where, v, "a list" + ("" if empty else " of at least one item"))
        return v

    def by_value(self, where: str, v: Any, item: Callable[[str, Any], Any]) -> dict[float, Any]:
        """A mapping keyed by grid values (numbers; JSON's text keys read as numbers: "0.4" and "0.40" are one)."""
        out: dict[float, Any] = {}
        for k, x in self.mapping(where, v).items():
            number = self.number(f"{where} key", k)
            if number in out:
                raise self.fail(f"{where} key", k, f"each value once ({number:g} is given twice)")
            out[number] = item(f"{where}[{k}]", x)
        return out

    def distinct(self, where: str, values: tuple[float, ...]) -> tuple[float, ...]:
        """Values each given once: a value twice would plan its trials twice, run at once into one record."""
        if any(math.isclose(a, b, rel_tol=0, abs_tol=1e-9) for i, a in enumerate(values) for b in values[:i]):
            raise self.fail(where, list(values), "each value once")
        return values


def _row(c: Checker, where: str, d: Any) -> Row:
    from fda_ray.algorithms import ALGORITHMS

    d = c.keys(where, d, ("key", "method"), ("label", "params"))
    method = c.text(f"{where}.method", d["method"])
    if method not in ALGORITHMS:
        raise c.fail(f"{where}.method", method, f"one of {', '.join(ALGORITHMS.names())}", ALGORITHMS.names(),
                     pluggable=True)
    key = c.name(f"{where}.key", d["key"])
    params = c.fields(f"{where}.params", d.get("params", {}))
    if "method" in params:
        raise c.fail(f"{where}.params.method", params["method"], "set by the row's `method`, not in its params")
    return Row(key, c.text(f"{where}.label", d.get("label", key)), method, params)


def _profile(c: Checker, where: str, d: Any) -> Profile:
    d = c.keys(where, {} if d is None else d, (), ("fields", "values", "rows", "seeds", "note", "row_fields"))
    values = d.get("values")
    rows = d.get("rows")
    return Profile(
        fields=c.fields(f"{where}.fields", d.get("fields", {})),
        values=None if values is None else tuple(c.number(f"{where}.values[{i}]", v)
                                                 for i, v in enumerate(c.seq(f"{where}.values", values))),
        rows=None if rows is None else tuple(c.text(f"{where}.rows[{i}]", r)
                                             for i, r in enumerate(c.seq(f"{where}.rows", rows))),
        seeds=None if d.get("seeds") is None else c.seeds(f"{where}.seeds", d["seeds"]),
        note=d.get("note", "") if isinstance(d.get("note", ""), str) else c.text(f"{where}.note", d["note"]),
        row_fields={k: c.fields(f"{where}.row_fields.{k}", v)
                    for k, v in c.mapping(f"{where}.row_fields", d.get("row_fields", {})).items()})


def _dataset(c: Checker, v: Any) -> str:
    from fda_ray.data.base import DATASETS

    name = c.text("dataset", v)
    if name not in DATASETS:
        raise c.fail("dataset", name, f"one of {', '.join(DATASETS.names())}", DATASETS.names(), pluggable=True)
    return name


def _values(c: Checker, d: dict) -> tuple[float, ...]:
    return c.distinct("values", tuple(c.number(f"values[{i}]", v) for i, v in enumerate(c.seq("values", d["values"]))))


def grid_from_dict(data: Any, path: str = "<mapping>") -> Grid:
    """A Grid from a file's mapping, every key and value checked (DefinitionFileError, one line)."""
    c = Checker("grid", path)
    d = c.keys("", data, ("name", "dataset", "variable", "values", "rows", "profiles"),
               ("seeds", "fixed", "paper", "paper_ref", "paper_auc", "share_source_only", "value_labels",
                "value_fields"))
    values = _values(c, d)
    seeds = d.get("seeds", {})
    seeds = ({v: c.seeds("seeds", seeds) for v in values} if not isinstance(seeds, dict)
             else c.by_value("seeds", seeds, c.seeds))
    profiles = {c.name("profiles key", k): _profile(c, f"profiles.{k}", p)
                for k, p in c.mapping("profiles", d["profiles"]).items()}
    if not profiles:
        raise c.fail("profiles", d["profiles"], "name at least one profile (the sweep runs --profile quick unless "
                                                "told otherwise)")
    paper = {k: c.by_value(f"paper.{k}", v, c.number) for k, v in c.mapping("paper", d.get("paper", {})).items()}
    paper_auc = {k: c.by_value(f"paper_auc.{k}", v, c.number)
                 for k, v in c.mapping("paper_auc", d.get("paper_auc", {})).items()}
    share = d.get("share_source_only", False)
    if not isinstance(share, bool):
        raise c.fail("share_source_only", share, "true or false")
    try:
        grid = Grid(
            name=c.name("name", d["name"]), dataset=_dataset(c, d["dataset"]), variable=c.text("variable", d["variable"]),
            values=values, rows=tuple(_row(c, f"rows[{i}]", r) for i, r in enumerate(c.seq("rows", d["rows"]))),
            seeds=seeds, profiles=profiles, paper=paper,
            paper_ref=d.get("paper_ref", "") if isinstance(d.get("paper_ref", ""), str) else c.text("paper_ref", d["paper_ref"]),
            fixed=c.fields("fixed", d.get("fixed", {})), share_source_only=share,
            value_labels=c.by_value("value_labels", d.get("value_labels", {}), c.text), paper_auc=paper_auc,
            value_fields=c.by_value("value_fields", d.get("value_fields", {}), c.fields))
    except DefinitionFileError:
        raise
    except ValueError as e:  # Grid's own checks (a profile naming a value or row the grid lacks, ...)
        raise DefinitionFileError(f"{c.prefix}: {str(e).splitlines()[0]}") from None
    _field_names(c, grid)
    return grid


def _field_names(c: Checker, d: Grid | Search) -> None:
    """Every RunConfig field a grid or a search names exists (a misspelt field fails here, in one line)."""
    known = run_config_fields()
    if not d.value_fields and d.variable not in known:
        raise c.fail("variable", d.variable, "a RunConfig field (or give every value's fields in value_fields)")
    for i, dim in enumerate(getattr(d, "space", ())):
        if "." not in dim.name and dim.name not in known:
            raise c.fail(f"space[{i}].name", dim.name, "a RunConfig field, or a family's parameter as family.name")
    known_fields(c, "fixed", d.fixed, known)
    for r in (d.rows if isinstance(d, Grid) else d.references):
        known_fields(c, f"row {r.key!r} params", r.params, known)
    for v, fields in d.value_fields.items():
        known_fields(c, f"value_fields[{v:g}]", fields, known)
    for name, prof in d.profiles.items():
        known_fields(c, f"profiles.{name}.fields", prof.fields, known)
        for key, fields in prof.row_fields.items():
            known_fields(c, f"profiles.{name}.row_fields.{key}", fields, known)


def run_config_fields() -> set[str]:
    from fda_ray.core.config import config_names

    return set(config_names())


def known_fields(c: Checker, where: str, fields: Mapping[str, Any], known: set[str]) -> None:
    for k in fields:
        if k not in known:
            raise DefinitionFileError(f"{c.prefix}: {where}: field {k!r} is not a RunConfig field (python -m fda_ray "
                                      "--help lists them, with underscores)")


def check_config(c: Checker, where: str, params: Mapping[str, Any]) -> None:
    """One trial's fields built into a RunConfig: a value it refuses is one line naming where."""
    from fda_ray.core.config import RunConfig

    known_fields(c, where, params, run_config_fields())
    try:
        RunConfig(**params)
    except (TypeError, ValueError) as e:
        raise DefinitionFileError(f"{c.prefix}: {where}: {str(e).splitlines()[0]}") from None


def _dim(c: Checker, where: str, d: Any) -> Dim:
    from fda_ray.core.config import boolean_word

    d = c.keys(where, d, ("name", "kind"), ("low", "high", "values"))
    kind = c.text(f"{where}.kind", d["kind"])
    unused = ("low", "high") if kind == "choice" else ("values",) if kind in ("uniform", "loguniform") else ()
    for key in unused:  # a key the kind does not read would be ignored without a word
        if d.get(key) is not None:
            raise c.fail(f"{where}.{key}", d[key], f"not read by kind {kind!r} (a choice lists its values; a range "
                                                   "gives low and high)")
    try:
        return Dim(c.text(f"{where}.name", d["name"]), kind,
                   None if d.get("low") is None else c.number(f"{where}.low", d["low"]),
                   None if d.get("high") is None else c.number(f"{where}.high", d["high"]),
                   tuple(boolean_word(d["name"], v) for v in c.seq(f"{where}.values", d.get("values", []), empty=True)))
    except DefinitionFileError:  # (the checker's own line names the file and the key already)
        raise
    except ValueError as e:
        raise DefinitionFileError(f"{c.prefix}: {where}: {str(e).splitlines()[0]}") from None


def search_from_dict(data: Any, path: str = "<mapping>") -> Search:
    """A Search from a file's mapping, every key and value checked (DefinitionFileError, one line)."""
    from fda_ray.algorithms import ALGORITHMS

    c = Checker("search", path)
    d = c.keys("", data, ("name", "dataset", "methods", "space", "variable", "values", "rules", "profiles"),
               ("fixed", "references", "num_samples", "rerun_seeds", "grace_period", "reduction_factor",
                "value_fields", "value_labels", "note"))
    methods = tuple(c.text(f"methods[{i}]", m) for i, m in enumerate(c.seq("methods", d["methods"])))
    for i, m in enumerate(methods):
        if m not in ALGORITHMS:
            raise c.fail(f"methods[{i}]", m, f"one of {', '.join(ALGORITHMS.names())}", ALGORITHMS.names(),
                         pluggable=True)
    profiles = {c.name("profiles key", k): _profile(c, f"profiles.{k}", p)
                for k, p in c.mapping("profiles", d["profiles"]).items()}
    if not profiles:
        raise c.fail("profiles", d["profiles"], "name at least one profile (quick and paper are the usual)")
    num = d.get("num_samples", {"quick": 8, "paper": 24})
    if not isinstance(num, dict):  # one count for every profile, as a grid's `seeds: 3` is one for every value
        num = {p: num for p in profiles}
    num = {c.text("num_samples key", k): c.integer(f"num_samples.{k}", v, high=MAX_SAMPLES)
           for k, v in c.mapping("num_samples", num).items()}
    missing = [p for p in profiles if p not in num]
    if missing:
        raise c.fail("num_samples", num, f"give the trials per study of every profile ({', '.join(profiles)})")
    try:
        search = Search(
            name=c.name("name", d["name"]), dataset=_dataset(c, d["dataset"]), methods=methods,
            space=tuple(_dim(c, f"space[{i}]", x) for i, x in enumerate(c.seq("space", d["space"]))),
            variable=c.text("variable", d["variable"]), values=_values(c, d),
            rules=tuple(c.text(f"rules[{i}]", r) for i, r in enumerate(c.seq("rules", d["rules"]))),
            profiles=profiles, fixed=c.fields("fixed", d.get("fixed", {})),
            references=tuple(_row(c, f"references[{i}]", r)
                             for i, r in enumerate(c.seq("references", d.get("references", []), empty=True))),
            num_samples=num, rerun_seeds=c.seeds("rerun_seeds", d.get("rerun_seeds", 3)),
            grace_period=c.integer("grace_period", d.get("grace_period", 10)),
            reduction_factor=c.integer("reduction_factor", d.get("reduction_factor", 2), low=2),
            value_fields=c.by_value("value_fields", d.get("value_fields", {}), c.fields),
            value_labels=c.by_value("value_labels", d.get("value_labels", {}), c.text),
            note=d.get("note", "") if isinstance(d.get("note", ""), str) else c.text("note", d["note"]))
    except DefinitionFileError:
        raise
    except ValueError as e:  # Search's own checks (an unknown rule, a knob searched twice, ...)
        raise DefinitionFileError(f"{c.prefix}: {str(e).splitlines()[0]}") from None
    _field_names(c, search)
    return search


def _read(ref: str, what: str) -> Any:
    from fda_ray.core.config_files import ConfigFileError, read_mapping

    try:
        data = read_mapping(ref, field=what, mapping=f"a {what} definition (a mapping of keys to values)")
    except ConfigFileError as e:
        raise DefinitionFileError(str(e)) from None
    if not data:  # (an empty file would otherwise fail on its first missing key, which says less)
        raise DefinitionFileError(f"{what}={ref!r} is invalid: an empty file; `python -m fda_ray.sweep --{what} NAME "
                                  f"--print-grid` writes a built-in one to start from")
    return data


def grid_file(path: str) -> Grid:
    """The grid a .yaml/.yml/.json file defines, its keys and values checked (not yet its trials: fda_ray.
    experiments.trials.load_grid plans them too)."""
    return grid_from_dict(_read(path, "grid"), path)


def search_file(path: str) -> Search:
    """The search a .yaml/.yml/.json file defines, its keys and values checked (fda_ray.experiments.search.
    load_search checks its trials too)."""
    return search_from_dict(_read(path, "search"), path)


def resolve(ref: str, known: Mapping[str, Any], what: str, plural: str, read: Callable[[str], Any],
            planned: Callable[[Any, str], Any]) -> Any:
    """A built-in grid or search by name (`known`), or the one a .yaml/.yml/.json file defines: its keys and values
    checked (`read`), then every profile's trials built into RunConfigs, `planned(definition, profile)` giving
    (where, fields) pairs, so a bad field or value is one line now rather than an error in a worker."""
    if ref in known:
        return known[ref]
    if not is_file_ref(ref):
        raise DefinitionFileError(f"{what}={ref!r} is invalid: a {what} file (.yaml, .yml, .json) or one of the known "
                                  f"{plural}: {', '.join(known)}{did_you_mean(ref, known)}")
    definition = read(ref)
    c = Checker(what, ref)
    for name in definition.profiles:
        try:
            checks = list(planned(definition, name))
        except ValueError as e:
            raise DefinitionFileError(f"{c.prefix}: profile {name!r}: {str(e).splitlines()[0]}") from None
        for where, fields in checks:
            check_config(c, f"profile {name!r}, {where}", fields)
    return definition


def write_definition(definition: Grid | Search, path: Any) -> None:
    """Keep the definition a sweep ran beside its records (grid.yaml / search.yaml), so collect and --resume read
    the same grid even when the file it came from has changed or gone. `path`: a Path or a StoragePath (s3://)."""
    data = grid_to_dict(definition) if isinstance(definition, Grid) else search_to_dict(definition)
    path.write_text(dump(data, "yaml"))
