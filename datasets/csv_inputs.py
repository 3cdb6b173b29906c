"""The preparation scripts' CSV inputs (prepare_chexpert.py, prepare_mimic.py), read with one-line errors: a release's
table that is missing, a folder, binary, not UTF-8, empty, cut short, gzipped (read as it is) or without the columns
a script reads. Standard library only, as the scripts are (they run before fda-ray is installed)."""
from __future__ import annotations

import csv
import gzip
import io
import zlib
from pathlib import Path
from typing import Callable, Sequence


class InputError(ValueError):
    """An input file that cannot be used: one line naming the argument, the file and what is wrong."""

    def __init__(self, field: str, path: str, why: str) -> None:
        super().__init__(f"{field}={path!r} is invalid: {why}")


def read_table(path: str, field: str, what: str, columns: Sequence[str],
               cell: Callable[[str, str], str | None] | None = None) -> list[dict[str, str]]:
    """The rows of CSV `path` (the argument `field`, which should be `what`), by column, each holding `columns`;
    `cell(column, value)`, when given, says what is wrong with a cell (None: nothing). Every way the file can be
    unusable is an InputError (one line) instead of a decoder's or csv's traceback."""
    p = Path(path)
    if p.is_dir():
        raise InputError(field, path, "a directory, not a file")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputError(field, path, "no such file") from None
    except OSError as e:  # permissions, an I/O error
        raise InputError(field, path, f"cannot be read ({e.strerror or type(e).__name__})") from None
    if data[:2] == b"\x1f\x8b":  # a .csv.gz, as the releases are often downloaded
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(field, path, f"a gzip file cut short or damaged ({e})") from None
    if b"\x00" in data[:8192]:
        raise InputError(field, path, f"a binary file, not {what} (a CSV table)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(field, path, f"not UTF-8 text (byte 0x{data[e.start]:02x} at position {e.start}), not "
                                      f"{what}") from None
    if not text.strip():
        raise InputError(field, path, f"an empty file, not {what}")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    try:
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise InputError(field, path, f"not {what} (no column {missing[0]!r}; its columns: "
                                          f"{', '.join(header[:8])}{', ...' if len(header) > 8 else ''})")
        for row in reader:
            if None in row or None in row.values():  # more or fewer fields than the header: a line cut short
                n = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None) or [])
                raise InputError(field, path, f"line {reader.line_num} has {n} fields where the header has "
                                              f"{len(header)} (a file cut short?)")
            for column, value in row.items() if cell is not None else ():
                if (why := cell(column, value)) is not None:
                    raise InputError(field, path, f"line {reader.line_num}, column {column!r}: {value!r} is {why}")
            rows.append(row)
    except csv.Error as e:
        raise InputError(field, path, f"not a CSV table (line {reader.line_num}: {e})") from None
    if not rows:
        raise InputError(field, path, f"not {what} (no rows under its header)")
    return rows


def writable_output(path: str) -> str | None:
    """Make the output's folder (the documented commands write into a new one) and check that the file can be
    written there, before any work; None when it can, else why not, for one line (`out=... cannot be written`)."""
    p = Path(path)
    above = next((d for d in [p.parent, *p.parent.parents] if d.exists()), None)
    if above is not None and not above.is_dir():
        return f"{above} is a file, not a folder"
    if p.is_dir():
        return "a directory, not a file"
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        probe = p.parent / f".{p.name}.write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:  # under a file, a read-only folder, a full disk
        return e.strerror or type(e).__name__
    return None
