"""The preparation scripts' CSV inputs (prepare_chexpert.py, prepare_mimic.py), read with one-line errors: a release's
table that is missing, a folder, binary, not UTF-8, empty, cut short, gzipped (read as it is) or without the columns
a script reads; and the command lines of the scripts here (prepare_mnist.py too), whose bad flags are one line.
Standard library only, as the scripts are (they run before fda-ray is installed).

A helper, not a program: `python -m datasets.csv_inputs` says so and names the programs, exit 2."""
from __future__ import annotations

import argparse
import csv
import difflib
import gzip
import io
import math
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, `error: ...`, exit code 2 (no usage dump): the form of fda-ray's
    programs (fda_ray.core.parsing.OneLineParser, which the scripts cannot import before fda-ray is installed); an
    unknown flag names the script's closest one."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            flags = [a.split("=")[0] for a in message.removeprefix("unrecognized arguments: ").split()
                     if a.startswith("--")]
            known = [o for action in self._actions for o in action.option_strings]
            close = difflib.get_close_matches(flags[0], known, n=1, cutoff=0.8) if flags else []
            message += f"; did you mean {close[0]!r}?" if close else ""
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)

    def parse_or_exit_code(self, argv: Sequence[str] | None) -> argparse.Namespace | int:
        """The parsed namespace, or the exit code (--help: 0, bad input: 2) for a script's `main` to return."""
        try:
            return self.parse_args(argv)
        except SystemExit as e:
            return int(e.code or 0)


def typed(field: str, kind: type, allowed: str) -> Callable[[str], Any]:
    """A flag's type whose error names the field, the value and what is allowed (`per_class='x' is invalid: ...`)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{field}={text!r} is invalid: {allowed}") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{field}={text!r} is invalid: {allowed}")
        return value

    parse.__name__ = kind.__name__
    return parse


def out_of_range(per_class: int, test_share: float) -> str | None:
    """The error line for --per-class or --test-share out of range (None: both fine)."""
    if per_class < 1:
        return f"error: per_class={per_class!r} is invalid: an integer >= 1"
    if not 0 < test_share < 1:
        return f"error: test_share={test_share!r} is invalid: a number in (0, 1)"
    return None


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


if __name__ == "__main__":  # a helper run as a program: it defined names and exited 0 having done nothing
    print("error: datasets/csv_inputs.py is the preparation scripts' helper, not a program; the programs are "
          "`python datasets/prepare_chexpert.py` and `python datasets/prepare_mimic.py` (datasets/README.md)",
          file=sys.stderr)
    sys.exit(2)
