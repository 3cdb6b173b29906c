"""Healthcare FDA's medical image tables: CSV files that name each image, its diagnosis, domain and auxiliary labels.

The images are never shipped; a table points at them (docs/datasets.md). Two kinds of table:

  medical-csv   one generic table, `<data_dir>/table.csv` (or --data-dir naming the file itself), with a header
                `path,label,domain[,split][,aux_<name>...]`: label Yes/No, 1/0, 1.0/0.0, true/false or
                positive/negative; split train or test (without a split column, or for a domain without test
                rows, the held-out domain tests on the rest of its training rows); aux_age is bucketed as Healthcare FDA's
                code does ((age - 18) // 9, 9 classes, clamped), every other aux_<name> is categorical over the
                table's sorted values; an empty auxiliary cell is a missing label (ignored by the loss). An optional
                `<table>.json` beside it overrides: {"domains": [order], "image_root": dir, "aux": {name:
                {"start": 18, "width": 9, "count": 9} | {"value": index, ...}}}. Domains default to sorted order.
                Every field of it is checked as it is read (read_sidecar): a key it does not know, a value of
                the wrong kind, an aux rule for a column the table lacks is one line naming the file, the field,
                the value and what is allowed.
  chexpert, mimic-cxr, midrc   the authors' per-domain files (enyijiang/MIDRC, metadata/): `<data_dir>/
                {chexpert,mimic,MIDRC}_table_<domain>_{train,test}.csv` with their columns and label mappings
                (FORMATS); the domains in the papers' order, the target first (Edema, Asian, IL). A generic
                table there instead (`table.csv`, as datasets/prepare_chexpert.py and prepare_mimic.py write
                it) is read with the same domain names in that order.

Relative image paths are relative to the table's folder (or image_root; a relative image_root is itself relative
to the table's folder). Every image is checked to exist when
the table is read (the authors' loaders skip missing images silently; here a missing one is an error naming
it), and every training table must hold both classes. Images are read per batch (fda_ray.data.images.ImageFiles)
with Healthcare FDA's transforms.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from fda_ray.core.user_files import DamagedFileError, read_json
from fda_ray.data.base import DATASETS, DatasetNotFound, Split
from fda_ray.data.paper_defaults import PAPER_DEFAULTS
from fda_ray.data.images import IMAGE_SIZE, ImageFiles
from fda_ray.core.multitask import MISSING

POSITIVE = ("yes", "1", "1.0", "true", "positive")
NEGATIVE = ("no", "0", "0.0", "false", "negative")
GENERIC_FILE = "table.csv"


class TableError(ValueError):
    """A table that cannot be read as the dataset's format (one line: file, line, column, value, allowed)."""


def parse_label(text: str, where: str) -> int:
    t = text.strip().lower()
    if t in POSITIVE:
        return 1
    if t in NEGATIVE:
        return 0
    raise TableError(f"{where}: label {text!r} is invalid: one of Yes/No, 1/0, 1.0/0.0, true/false, positive/negative")


@dataclass(frozen=True)
class Aux:
    """One auxiliary task: its name, classes and how a cell's text becomes a class (MISSING when empty)."""

    name: str
    classes: int
    parse: Callable[[str, str], int]  # (text, where) -> class


def categorical(name: str, values: Mapping[str, int], other: int | None = None) -> Aux:
    """A categorical label by exact text; `other`: the class of any other value (MIDRC's race), else an error."""
    classes = max([*values.values(), *([other] if other is not None else [])]) + 1

    def parse(text: str, where: str) -> int:
        t = text.strip()
        if t == "":
            return MISSING
        if t in values:
            return values[t]
        if other is not None:
            return other
        raise TableError(f"{where}: {name} {text!r} is invalid: one of {', '.join(values)}")
    return Aux(name, classes, parse)


def bucketed(name: str, start: float, width: float, count: int) -> Aux:
    """A number bucketed as (value - start) // width, clamped into 0..count-1 (Healthcare FDA's (age - 18) // 9 would give
    -1 under 18 and 9 at 99: docs/authors-code.md)."""
    def parse(text: str, where: str) -> int:
        t = text.strip()
        if t == "":
            return MISSING
        try:
            v = float(t)
        except ValueError:
            raise TableError(f"{where}: {name} {text!r} is invalid: a number") from None
        return int(min(max((v - start) // width, 0), count - 1))
    return Aux(name, count, parse)


def age_000(name: str = "age") -> Aux:
    return bucketed(name, 18, 9, 9)  # CheXpert and MIMIC in the authors' code


@dataclass(frozen=True)
class Format:
    """The authors' per-domain tables of one dataset."""

    prefix: str  # file names: <prefix>_<domain>_<split>.csv
    domains: tuple[str, ...]  # the papers' order, the target first
    path_col: int  # column positions (negative: from the end, as their MIMIC loader reads)
    label_col: int
    aux: tuple[tuple[int, Aux], ...] = field(default_factory=tuple)  # (column, task)
    target_labelled: int = 1000  # Healthcare FDA App. A.3


SEX_MF = categorical("sex", {"Male": 0, "Female": 1})
FORMATS: dict[str, Format] = {
    # img_path,sex,age,angle,is_dignosed
    "chexpert": Format("chexpert_table", ("Edema", "LungLesion", "Pneumonia", "Atelectasis", "Consolidation"), 0, 4,
                       ((1, SEX_MF), (2, age_000()), (3, categorical("view", {"Frontal": 0, "Lateral": 1})))),
    # ...,img_path,admission_type,gender,age,is_dignosed (the last five columns)
    "mimic-cxr": Format("mimic_table", ("Asian", "Black", "White", "Hispanic"), -5, -1,
                        ((-3, categorical("sex", {"M": 0, "F": 1})), (-2, age_000())), target_labelled=100),
    # img_path,race,is_covid,sex,age,state
    "midrc": Format("MIDRC_table", ("IL", "NC", "CA", "IN", "TX"), 0, 2,
                    ((1, categorical("race", {"White": 0, "Black or African American": 1}, other=2)), (3, SEX_MF),
                     (4, bucketed("age", 0, 10, 10))), target_labelled=2000),
}


@dataclass
class Table:
    """The rows of one domain's table: image paths, labels (n, 1 + K)."""

    paths: list[str] = field(default_factory=list)
    labels: list[list[int]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # "file:line" of each row, for errors


def read_text(path: Path) -> str:
    """A table's text: UTF-8, with or without the byte-order mark spreadsheet programs write. Another encoding is
    a TableError naming the table, the line, the column and the byte (a Latin-1 'é' is one byte UTF-8 refuses)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        header = next(csv.reader([data.split(b"\n", 1)[0].decode("utf-8-sig", "replace")]), [])
        col = data.count(b",", start, e.start)
        name = repr(header[col].strip()) if col < len(header) else f"number {col + 1}"
        raise TableError(f"{path}:{line}: column {name}: byte 0x{data[e.start]:02x} is not UTF-8; save the table as "
                         "UTF-8") from None


def _check_leaks(trains: Mapping[str, "Table"], tests: Mapping[str, "Table | None"]) -> None:
    """No image is both a training and a test image (of any domain): a test that saw its images in training
    measures nothing."""
    seen = {p: src for t in trains.values() for p, src in zip(t.paths, t.sources)}
    for t in tests.values():
        for p, src in zip(t.paths if t is not None else (), t.sources if t is not None else ()):
            if p in seen:
                raise TableError(f"{src}: column 'path': image {p!r} is a test image and a training image "
                                 f"({seen[p]}); a test image must not be trained on")


def _drop_test_images(name: str, trains: Mapping[str, "Table"], tests: Mapping[str, "Table | None"]) -> None:
    """The authors' per-domain files split each domain 80/20 on its own, so an image positive for two conditions can
    be a test image of one domain and a training image of another (in the files of enyijiang/MIDRC's history, CheXpert's
    Edema test table shares at least 4 577 of its 20 899 images with the other domains' training tables; MIDRC's IL
    tables one image). Those training rows are left out,
    with one warning, so that no test image is trained on; a generic table, which its writer controls, is refused
    instead (_check_leaks)."""
    import warnings

    from fda_ray.core.notices import RunWarning

    tested = {p for t in tests.values() if t is not None for p in t.paths}
    dropped = {}
    for d, t in trains.items():
        keep = [i for i, p in enumerate(t.paths) if p not in tested]
        if len(keep) < len(t.paths):
            dropped[d] = (len(t.paths) - len(keep), len(t.paths), t.sources[next(i for i, p in enumerate(t.paths)
                                                                                 if p in tested)])
            t.paths[:] = [t.paths[i] for i in keep]
            t.labels[:] = [t.labels[i] for i in keep]
            t.sources[:] = [t.sources[i] for i in keep]
    if dropped:
        parts = ", ".join(f"{d} {n} of {total}" for d, (n, total, _) in dropped.items())
        first = next(iter(dropped.values()))[2]
        warnings.warn(f"{name}: training rows that name a test image are left out, so no test image is trained on: "
                      f"{parts} (the first {first}; the authors' tables split each domain on its own)", RunWarning,
                      stacklevel=2)


def _resolve(path: str, root: Path) -> str:
    p = Path(path.strip())
    return str(p if p.is_absolute() else root / p)


def _check_images(tables: Mapping[str, Table], what: str, authors: bool = False) -> None:
    """Every image a table names exists. The authors' per-domain files name images by absolute paths on their own
    cluster (/shared/rsaas/...), and their format has no image root: the message says to rewrite the prefix."""
    missing = [(t.sources[i], p) for t in tables.values() for i, p in enumerate(t.paths) if not os.path.isfile(p)]
    if missing:
        where, path = missing[0]
        how = "fix the paths or the image root (table.json's image_root)"
        if authors and os.path.isabs(path):
            how = ("these tables name images by absolute paths; rewrite their prefix to where your copy is "
                   f"(e.g. sed -i 's#{_prefix(path)}#/your/copy/#' {Path(where.rsplit(':', 1)[0]).parent}/*.csv), "
                   "or write a generic table with datasets/prepare_*.py")
        raise DatasetNotFound(f"{what}: {len(missing)} image file(s) named by the tables do not exist, the first "
                              f"{path!r} ({where}); {how}")


def _prefix(path: str) -> str:
    """The part of an absolute image path before the release's own folders (CheXpert-v1.0-small/, files/p..), or
    its first two folders: what a user's copy replaces."""
    for mark in ("CheXpert-v1.0-small/", "CheXpert-v1.0/", "files/p"):
        if mark in path:
            return path[: path.index(mark)]
    parts = Path(path).parts
    return str(Path(*parts[:3])) + "/" if len(parts) > 3 else str(Path(path).parent) + "/"


def _check_classes(domain: str, t: Table, split: str) -> None:
    labels = {row[0] for row in t.labels}
    if labels != {0, 1}:
        have = "no positive" if 1 not in labels else "no negative"
        raise TableError(f"domain {domain!r}: its {split} table has {have} sample ({len(t.labels)} rows, "
                         f"{t.sources[0].rsplit(':', 1)[0] if t.sources else 'no file'}); each domain needs both classes")


def _to_split(name: str, domains: Sequence[str], trains: Mapping[str, Table], tests: Mapping[str, Table | None],
              aux: Sequence[Aux], authors: bool = False) -> Split:
    """A Split of environments of image files, y (n, 1 + K); `authors`: read from the authors' per-domain files."""
    _check_images({**trains, **{f"{d}/test": t for d, t in tests.items() if t is not None}}, name, authors)
    envs, env_tests = [], []
    for d in domains:
        _check_classes(d, trains[d], "training")
        envs.append(_pair(trains[d], len(aux)))
        env_tests.append(_pair(tests[d], len(aux)) if tests.get(d) is not None and tests[d].paths else None)
    shape = (0, 3, IMAGE_SIZE, IMAGE_SIZE)
    empty_y = torch.zeros(0, 1 + len(aux), dtype=torch.int64)
    return Split(torch.zeros(shape), empty_y, torch.zeros(shape), empty_y, num_classes=2, task="binary",
                 environments=tuple(envs), env_names=tuple(domains), env_tests=tuple(env_tests),
                 aux_tasks=tuple((a.name, a.classes) for a in aux))


def _pair(t: Table, k: int):
    y = torch.tensor(t.labels, dtype=torch.int64).reshape(-1, 1 + k)
    return ImageFiles(tuple(t.paths), recipe="healthcare"), y


# ---------------------------------------------------------------- the authors' per-domain files

def read_format_table(path: Path, fmt: Format) -> Table:
    """One of the authors' files: a header line, then comma-separated rows (their loaders split on ',')."""
    t = Table()
    rows = list(csv.reader(io.StringIO(read_text(path), newline="")))
    width = len(rows[0]) if rows else 0
    for line, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        where = f"{path}:{line}"
        if len(row) != width:
            raise TableError(f"{where}: {len(row)} columns, the header has {width}")
        try:
            labels = [parse_label(row[fmt.label_col], where)] + [a.parse(row[c], where) for c, a in fmt.aux]
        except IndexError:
            raise TableError(f"{where}: {len(row)} columns are too few for the {fmt.prefix} format") from None
        t.paths.append(_resolve(row[fmt.path_col], path.parent))
        t.labels.append(labels)
        t.sources.append(where)
    return t


def load_format(name: str, data_dir: str | None) -> Split:
    fmt = FORMATS[name]
    root = Path(data_dir).expanduser() if data_dir else None
    generic = root if root is not None and root.is_file() else (root / GENERIC_FILE if root is not None else None)
    if generic is not None and generic.is_file() and not (root.is_dir() and any(root.glob(f"{fmt.prefix}_*.csv"))):
        # a generic table (datasets/prepare_*.py writes one) read in the format's domain order, target first
        domains, trains, tests, aux = read_generic(generic, fmt.domains)
        return _to_split(name, domains, trains, {d: tests.get(d) for d in domains}, aux)
    if root is None or not root.is_dir():
        raise DatasetNotFound(f"{name}: data_dir={data_dir!r} is not a directory; it must hold the authors' tables "
                              f"{fmt.prefix}_<domain>_{{train,test}}.csv for domains {', '.join(fmt.domains)} "
                              "(enyijiang/MIDRC metadata/, or datasets/README.md's preparation scripts)")
    trains, tests = {}, {}
    for d in fmt.domains:
        tr = root / f"{fmt.prefix}_{d}_train.csv"
        if not tr.is_file():
            found = sorted(p.name for p in root.glob(f"{fmt.prefix}_*_train.csv"))
            raise DatasetNotFound(f"{name}: domain {d!r} has no table {tr} (found: {', '.join(found) or 'none'})")
        trains[d] = read_format_table(tr, fmt)
        te = root / f"{fmt.prefix}_{d}_test.csv"
        tests[d] = read_format_table(te, fmt) if te.is_file() else None
    _drop_test_images(name, trains, tests)
    return _to_split(name, fmt.domains, trains, tests, [a for _, a in fmt.aux], authors=True)


# ---------------------------------------------------------------- the generic table

def generic_table_path(data_dir: str | None) -> Path:
    if not data_dir:
        raise DatasetNotFound(f"medical-csv: give --data-dir, the table (a CSV with columns path,label,domain"
                              f"[,split][,aux_<name>...]) or a folder holding {GENERIC_FILE}")
    p = Path(data_dir).expanduser().absolute()  # (relative image paths are under it: read on other nodes too)
    if p.is_file():
        return p
    if (p / GENERIC_FILE).is_file():
        return p / GENERIC_FILE
    raise DatasetNotFound(f"medical-csv: no table at {p}; searched {p} and {p / GENERIC_FILE} (a CSV with columns "
                          "path,label,domain[,split][,aux_<name>...]; datasets/README.md)")


SIDECAR_KEYS = {"domains": "the domains' order, a list of the table's domain names",
                "image_root": "the folder relative image paths are under, a path (text)",
                "aux": "the auxiliary labels' rules, an object {name: rule} for the table's aux_<name> columns"}
BUCKETS = ("start", "width", "count")
BUCKET_RULE = '{"start": number, "width": number > 0, "count": integer >= 1}'
CATEGORICAL_RULE = '{"value": class index (an integer >= 0), ...}'


def _shown(value: Any) -> str:
    """A sidecar value as the file spells it (JSON), cut short when long: the error line shows what was found."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: Any) -> bool:
    """A finite JSON number: true is no number, and Python's json reads NaN and Infinity, which bucket nothing."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_sidecar(side: Path, aux_cols: Sequence[str]) -> dict[str, Any]:
    """The table's sidecar `<table>.json` ({} when there is none), every field checked: `domains` a non-empty list
    of distinct non-empty names, `image_root` a non-empty path, `aux` an object whose every key is the <name> of
    one of the table's aux_<name> columns (`aux_cols`) and whose rule is a bucket rule (BUCKET_RULE) or a
    categorical one (CATEGORICAL_RULE). A sidecar is written by hand, so anything else is a TableError naming the
    file, the field, the value found and what is allowed, before any row is used (a wrong kind used to surface as
    a traceback, or as float()'s message naming neither the file nor the field)."""
    if not side.is_file():
        return {}
    try:
        mapping = read_json(side, "sidecar", dict)
    except DamagedFileError as e:  # the table's .json beside it (domain names, labels): one line naming it
        raise TableError(f"{side}: {e.why}") from None

    def bad(field: str, value: Any, allowed: str) -> TableError:
        return TableError(f"{side}: {field} {_shown(value)} is invalid: {allowed}")

    for key in mapping:
        if key not in SIDECAR_KEYS:
            raise TableError(f"{side}: key {json.dumps(key)} is unknown; a sidecar holds "
                             f"{', '.join(SIDECAR_KEYS)}")
    domains = mapping.get("domains", [])
    if "domains" in mapping:
        if not isinstance(domains, list) or not domains:
            raise bad("domains", domains, SIDECAR_KEYS["domains"])
        for d in domains:
            if not isinstance(d, str) or not d.strip():
                raise bad("domains", d, "each domain a name (non-empty text) of the table's column 'domain'")
        if len(set(domains)) != len(domains):
            twice = next(d for d in domains if domains.count(d) > 1)
            raise bad("domains", twice, "each domain once (it is listed twice)")
    root = mapping.get("image_root", "")
    if "image_root" in mapping and (not isinstance(root, str) or not root.strip()):
        raise bad("image_root", root, SIDECAR_KEYS["image_root"])
    rules = mapping.get("aux", {})
    if not isinstance(rules, dict):
        raise bad("aux", rules, SIDECAR_KEYS["aux"])
    names = [c[len("aux_"):] for c in aux_cols]
    for name, rule in rules.items():
        field = f"aux.{name}"
        if name not in names:
            raise TableError(f"{side}: {field} names no column of the table: it has no aux_{name} (its auxiliary "
                             f"columns: {', '.join(aux_cols) or 'none'})")
        if not isinstance(rule, dict) or not rule:
            raise bad(field, rule, f"a rule, {BUCKET_RULE} (a number bucketed) or {CATEGORICAL_RULE}")
        if set(rule) & set(BUCKETS):  # a bucket rule: its three fields, nothing else
            missing = [k for k in BUCKETS if k not in rule]
            extra = [k for k in rule if k not in BUCKETS]
            if missing or extra:
                raise bad(field, rule, f"a bucket rule holds exactly {BUCKET_RULE} ("
                                       + (f"{missing[0]!r} is missing" if missing else f"{extra[0]!r} is extra") + ")")
            if not _is_number(rule["start"]):
                raise bad(f"{field}.start", rule["start"], "a number (the first bucket's lower edge)")
            if not _is_number(rule["width"]) or not rule["width"] > 0:
                raise bad(f"{field}.width", rule["width"], "a number > 0 (each bucket's width)")
            if not isinstance(rule["count"], int) or isinstance(rule["count"], bool) or rule["count"] < 1:
                raise bad(f"{field}.count", rule["count"], "an integer >= 1 (the number of buckets)")
        else:
            for value, index in rule.items():
                if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                    raise bad(f"{field}.{value}", index, "a class index (an integer >= 0)")
    return mapping


def read_generic(path: Path, domains: Sequence[str] | None = None
                 ) -> tuple[list[str], dict[str, Table], dict[str, Table], list[Aux]]:
    """(domains, training tables, test tables, auxiliary tasks) of a generic table; `domains`: their order (else
    the sidecar's, else sorted)."""
    side = path.with_suffix(".json")
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    rows = [(reader.line_num, {k.strip(): (v or "") for k, v in r.items() if k is not None}) for r in reader]
    aux_cols = [h for h in header if h.startswith("aux_")]
    mapping = read_sidecar(side, aux_cols)  # checked: every value read from it below is of its kind
    missing = [c for c in ("path", "label", "domain") if c not in header]
    if missing:
        raise TableError(f"{path}: column {missing[0]!r} is missing; the header must hold path,label,domain"
                         f"[,split][,aux_<name>...], found {','.join(header)}")
    if not rows:
        raise TableError(f"{path}: no rows under the header; a row per image is needed")
    rules = mapping.get("aux", {})
    aux: list[Aux] = []
    for col in aux_cols:
        name = col[len("aux_"):]
        rule = rules.get(name)
        if isinstance(rule, dict) and set(BUCKETS) <= set(rule):
            aux.append(bucketed(name, float(rule["start"]), float(rule["width"]), int(rule["count"])))
        elif isinstance(rule, dict):
            aux.append(categorical(name, {str(k): int(v) for k, v in rule.items()}))
        elif name == "age":
            aux.append(age_000())
        else:  # categorical over the table's sorted values
            values = sorted({r[col].strip() for _, r in rows if r[col].strip()})
            aux.append(categorical(name, {v: i for i, v in enumerate(values)}))
    # a relative image_root is under the table's folder, as relative image paths are: not under the current
    # directory, which differs between the shell, a Ray worker and another node (an absolute one stays as it is)
    root = path.parent / Path(mapping["image_root"]).expanduser() if "image_root" in mapping else path.parent
    trains: dict[str, Table] = {}
    tests: dict[str, Table] = {}
    listed: dict[tuple[str, str, str], str] = {}  # (domain, split, image) -> its row
    for line, r in rows:
        where = f"{path}:{line}"
        domain = r["domain"].strip()
        if not domain:
            raise TableError(f"{where}: column 'domain' is empty; every row names its domain")
        split = r.get("split", "").strip().lower() or "train"
        if split not in ("train", "test"):
            raise TableError(f"{where}: split {r['split']!r} is invalid: train or test")
        image = _resolve(r["path"], root)
        # an image twice in one domain's split would be counted twice (trained on twice as often); in two domains
        # it may be (an image positive for two conditions, as the authors' tables have it)
        if (domain, split, image) in listed:
            raise TableError(f"{where}: column 'path': image {r['path']!r} is listed before in domain {domain!r}'s "
                             f"{split} rows ({listed[domain, split, image]}); list each image once a domain and split")
        listed[domain, split, image] = where
        t = (trains if split == "train" else tests).setdefault(domain, Table())
        t.paths.append(image)
        t.labels.append([parse_label(r["label"], where)] + [a.parse(r[c], where) for c, a in zip(aux_cols, aux)])
        t.sources.append(where)
    in_table = sorted(set(trains) | set(tests))
    if not domains and mapping.get("domains"):  # the sidecar sets the order of every domain: one it leaves out
        left = [d for d in in_table if d not in mapping["domains"]]  # would vanish from the run without a word
        if left:
            raise TableError(f"{side}: domains={mapping['domains']!r} is invalid: it lacks "
                             f"{', '.join(map(repr, left))}, a domain of {path.name}; list every domain of the table "
                             "(the list sets their order), or drop the domain's rows from the table")
    domains = list(domains or mapping.get("domains") or in_table)
    for d in domains:
        if d not in trains:
            raise TableError(f"{path}: domain {d!r} has no training rows (domains in the table: "
                             f"{', '.join(in_table)})")
    if len(domains) < 2:
        raise TableError(f"{path}: column 'domain' holds one domain ({domains[0]!r}); a federated domain adaptation "
                         "run needs a target domain and at least one source domain")
    _check_leaks(trains, tests)
    return domains, trains, tests, aux


@DATASETS.register("medical-csv", defaults=PAPER_DEFAULTS["medical-csv"],
                   environments=lambda data_dir: count_domains(data_dir))
def load_medical_csv(data_dir: str | None = None, download: bool = False) -> Split:
    """A generic medical table (module docstring)."""
    domains, trains, tests, aux = read_generic(generic_table_path(data_dir))
    return _to_split("medical-csv", domains, trains, {d: tests.get(d) for d in domains}, aux)


def count_domains(data_dir: str | None) -> int:
    """The domains of a generic medical table without checking its images (a config's default source count; the
    named formats register their fixed count)."""
    return len(read_generic(generic_table_path(data_dir))[0])


for _name in FORMATS:
    DATASETS.add(_name, lambda data_dir=None, download=False, _n=_name: load_format(_n, data_dir),
                 defaults=PAPER_DEFAULTS[_name], environments=len(FORMATS[_name].domains))
MEDICAL_DATASETS = ("medical-csv", *FORMATS)
