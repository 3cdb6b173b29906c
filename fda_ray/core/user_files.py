"""Files a user hands in or a crash can damage, read with one-line errors: `<field>=<path> is invalid: <why>`.

    read_text(path, "config")              the file's text: no such file, a directory, unreadable, empty (allow_empty
                                           False), a binary file or bytes that are not UTF-8 are each one line
    read_json(path, "sweep.json", dict)    its JSON, of the expected kind (a mapping, a list)
    text_damage(data) / json_damage(...)   why some bytes are not usable text / JSON, in a few words, for callers
                                           that report a damaged record as a warning and go on (records.py)
    torch_damage(data, exc)                why torch's safe loader refused a file's bytes, in a few words

The commands read their users' files through these (the run's and the sweep's --config and a --grid / --search
file through fda_ray.core.config_files.read_mapping; a sweep directory's sweep.json, selection.json and records'
trial.json; a --model-weights file and the checkpoints through torch_damage), so that a file of the wrong kind
(`--config /bin/ls`), a file cut short by a crash, or one edited by hand ends in the same kind of line, naming the
file and what is wrong, instead of a decoder's message that names neither. The errors are ValueErrors, which
every command line already prints as one `error:` line with exit code 2.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KINDS = {dict: "a JSON object (a mapping of keys to values)", list: "a JSON list"}


class DamagedFileError(ValueError):
    """A user's file that cannot be used: one line naming the field, the file and what is wrong."""

    def __init__(self, field: str, path: Any, why: str) -> None:
        super().__init__(f"{field}={str(path)!r} is invalid: {why}")
        self.field, self.path, self.why = field, str(path), why


def is_number(value: Any) -> bool:
    """A JSON or YAML number: an int or a float, not a boolean (which Python counts as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: Any) -> bool:
    """A whole JSON or YAML number: an int, not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """A JSON value's kind in words (what a file held instead of what was expected)."""
    return {dict: "an object", list: "a list", str: "a text", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def text_damage(data: bytes) -> str | None:
    """Why `data` is not UTF-8 text (None when it is): a binary file (NUL bytes: an image, a program, a torch or
    Parquet file), or the first byte that UTF-8 cannot decode."""
    if b"\x00" in data[:8192]:
        return "a binary file, not text"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 text (byte 0x{data[e.start]:02x} at position {e.start})"
    return None


def json_damage(e: json.JSONDecodeError) -> str:
    """A JSON parse error in a few words (json's own message names neither the file nor the kind of problem)."""
    if not e.doc.strip():
        return "an empty file, not JSON"
    return f"not JSON ({e.msg}: line {e.lineno} column {e.colno})"


def torch_damage(data: bytes, e: BaseException) -> str:
    """Why torch.load(weights_only=True) refused `data` (a file's bytes), in a few words. Told by the bytes, not by
    torch's messages, which run to many lines of advice about weights_only that do not fit a file that is not a
    torch file at all: torch.save writes a zip archive (its first bytes PK 03 04); its legacy format, a pickle
    (80)."""
    if not data:
        return "an empty file, not a torch file"
    if not data.startswith((b"PK\x03\x04", b"\x80")):
        return "not a torch file (torch.save writes a zip archive; this is something else)"
    text = str(e)
    if "allowed global" in text or "Unsupported global" in text:  # a pickled object: refused by the safe loader
        return "it holds Python objects, not only tensors and plain data (torch.load(weights_only=True) refuses them)"
    if data.startswith(b"PK\x03\x04"):
        return "cut short or damaged (its zip archive cannot be read)"
    return "not a torch file (a pickle that torch.load(weights_only=True) cannot read)"


def read_bytes(path: Any, field: str) -> bytes:
    """The file's bytes; a missing file, a directory or a refused read is one line. `path`: a str, a Path or a
    StoragePath (an object store's file too)."""
    from fda_ray.core.storage import StoragePath, storage_path

    p = storage_path(path) if isinstance(path, StoragePath) or "://" in str(path) else Path(path)
    if p.is_dir():
        raise DamagedFileError(field, path, "a directory, not a file")
    if not p.is_file():
        if isinstance(p, Path) and p.exists():  # /dev/null, a pipe, a socket: it is there, but holds no file's bytes
            raise DamagedFileError(field, path, "not a regular file (a device, a pipe or a socket)")
        raise DamagedFileError(field, path, "no such file")
    try:
        return p.read_bytes()
    except OSError as e:  # permissions, an I/O error on a damaged disk
        raise DamagedFileError(field, path, f"cannot be read ({e.strerror or type(e).__name__})") from None


def read_text(path: Any, field: str, allow_empty: bool = True) -> str:
    """The file's UTF-8 text (a leading byte-order mark dropped: editors on Windows write one)."""
    data = read_bytes(path, field)
    why = text_damage(data)
    if why is not None:
        raise DamagedFileError(field, path, why)
    text = data.decode("utf-8").removeprefix("\ufeff")
    if not allow_empty and not text.strip():
        raise DamagedFileError(field, path, "an empty file")
    return text


def parse_json(text: str, field: str, path: Any, kind: type | None = None) -> Any:
    """`text` (the file's) as JSON, of `kind` (dict or list) when given."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DamagedFileError(field, path, json_damage(e)) from None
    if kind is not None and not isinstance(data, kind):
        raise DamagedFileError(field, path, f"{KINDS.get(kind, kind.__name__)} expected, it holds {_kind(data)}")
    return data


def read_json(path: Any, field: str, kind: type | None = None) -> Any:
    """The file's JSON, of `kind` (dict or list) when given; every way it can fail is one line."""
    return parse_json(read_text(path, field), field, path, kind)
