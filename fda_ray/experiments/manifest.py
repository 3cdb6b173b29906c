"""What a sweep or a search directory is: `sweep.json`, written beside its records when it starts.

    {"kind": "grid" | "search", "name": grid or search name (or a grid file's path), "profile": "quick",
     "rows": ["fedgp", ...] | null (the profile's), "values": [0.4, ...] | null (the profile's),
     "seeds": 3 | null (the profile's), "overrides": {RunConfig fields the command set}, "command": "python -m ..."}

A grid sweep run in chunks into one folder keeps every chunk's rows, values and seeds here, with the latest chunk's
command (fda_ray.experiments.arguments.chunk_manifest).

Readers (`fda_ray.collect`, the results pages) learn what a directory ran from this file, never by parsing its
command line. Directories written before the manifest existed have only summary.md's `Command:` line: the sweep
command's parser reads that once (`fda_ray.experiments.arguments.manifest_from_command`; there, not here, so that
this module stays free of the parser's imports), and `write_missing` keeps the result beside the records, so the
next read is the file's.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from fda_ray.core.storage import StoragePath, storage_path
from fda_ray.core.user_files import is_number, is_whole

FILE = "sweep.json"
KINDS = ("grid", "search")


class ManifestError(ValueError):
    """A sweep.json that cannot be read: the message is one line naming the file; `why` is what is wrong, alone
    (for a line that names the file its own way)."""

    def __init__(self, message: str, why: str | None = None) -> None:
        super().__init__(message)
        self.why = why if why is not None else message


@dataclass(frozen=True)
class Manifest:
    kind: str  # "grid" or "search"
    name: str  # the grid's or search's name, or a definition file's path
    profile: str
    rows: tuple[str, ...] | None = None
    values: tuple[float, ...] | None = None
    seeds: int | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    command: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ManifestError(f"kind={self.kind!r} is invalid: one of {', '.join(KINDS)}")
        # (a sweep.json edited by hand: its readers look grids up by these, format and compare them)
        for name in ("name", "profile", "command"):
            if not isinstance(getattr(self, name), str):
                raise ManifestError(f"its {name} {getattr(self, name)!r} is not a text")
        if self.rows is not None and not all(isinstance(r, str) for r in self.rows):
            raise ManifestError(f"its rows {list(self.rows)!r} are not a list of row keys (texts)")
        if self.seeds is not None and (not is_whole(self.seeds) or self.seeds < 1):
            raise ManifestError(f"its seeds {self.seeds!r} is not an integer >= 1 or null")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows"] = list(self.rows) if self.rows is not None else None
        d["values"] = list(self.values) if self.values is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Manifest":
        for name, kind in (("rows", list), ("values", list), ("overrides", dict)):
            if d.get(name) is not None and not isinstance(d[name], kind):
                raise ManifestError(f"its {name} {d[name]!r} is not {'a mapping' if kind is dict else 'a list'}")
        if d.get("values") is not None and not all(is_number(v) for v in d["values"]):
            raise ManifestError(f"its values {d['values']!r} are not a list of numbers")
        return cls(kind=d["kind"], name=d["name"], profile=d["profile"],
                   rows=tuple(d["rows"]) if d.get("rows") is not None else None,
                   values=tuple(float(v) for v in d["values"]) if d.get("values") is not None else None,
                   seeds=d.get("seeds"), overrides=dict(d.get("overrides") or {}), command=d.get("command", ""))


def write(directory: StoragePath | str, m: Manifest) -> None:
    """`directory`/sweep.json (atomically, locally or on an object store)."""
    (storage_path(directory) / FILE).write_text(json.dumps(m.to_dict(), indent=1, sort_keys=True) + "\n")


def read(directory: StoragePath | str) -> Manifest | None:
    """The directory's manifest, or None where it has none (written before manifests existed)."""
    from fda_ray.core.user_files import DamagedFileError, read_json

    p = storage_path(directory) / FILE
    if not p.is_file():
        return None
    try:
        d = read_json(p, FILE, dict)
    except DamagedFileError as e:  # binary, not UTF-8, cut short (not JSON), a list: one line naming the file
        raise ManifestError(str(e), e.why) from None
    missing = [k for k in ("kind", "name", "profile") if k not in d]
    if missing:
        why = f"it lacks {', '.join(map(repr, missing))} (it needs kind, name and profile)"
        raise ManifestError(f"{FILE}={str(p)!r} is invalid: {why}", why)
    try:
        return Manifest.from_dict(d)
    except (ValueError, KeyError, TypeError) as e:  # a value of the wrong type (rows not a list, a value not a number)
        why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ManifestError(f"{FILE}={str(p)!r} is invalid: {why}", why) from None
