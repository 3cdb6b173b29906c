"""The engine of the generated blocks: find them in a page (BLOCK, outside fenced code: FENCE), render each from its
spec with the generator GENERATORS names, and rewrite or check the pages (main: python -m tools.pages). The
generators register themselves in GENERATORS from the package's other modules."""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Callable

from fda_ray.core.parsing import OneLineParser
from fda_ray.core.registry import Registry
from fda_ray.core.user_files import DamagedFileError, read_text
from tools.pages.records import ROOT

PAGES = ("README.md", "docs/*.md", "docs/results/*.md")  # where blocks may be, relative to the repository
FENCE = re.compile(r"(^```.*?^```[^\n]*$)", re.S | re.M)  # fenced code blocks, kept whole by split
BLOCK = re.compile(r"<!-- records: (?P<spec>[^\n]*?) -->(?P<body>.*?)<!-- /records -->", re.S)
OPTION = re.compile(r"^(?P<key>[a-z_]+)=(?P<value>.*)$", re.S)  # a spec word key=value: a keyword argument

GENERATORS: Registry[Callable[..., str]] = Registry("generator")


def render(spec: str) -> str:
    """A block's text: its generator called with the spec's words; a word `key=value` is a keyword argument."""
    words = shlex.split(spec)
    if not words:
        raise ValueError("a records block names no generator")
    args = [w for w in words[1:] if not OPTION.match(w)]
    kwargs = {m["key"]: m["value"] for m in map(OPTION.match, words[1:]) if m}
    return GENERATORS.get(words[0])(*args, **kwargs)


def rewrite(text: str) -> tuple[str, list[str]]:
    """(the page with every block regenerated, the specs of the blocks whose text changed). A block's body keeps
    the newlines around it: a table block is written on its own lines, an inline one inline."""
    changed: list[str] = []

    def one(m: re.Match) -> str:
        body = m.group("body")
        lead = body[:len(body) - len(body.lstrip("\n"))]
        trail = body[len(body.rstrip("\n")):]
        try:
            new = render(m.group("spec"))
        except KeyError as e:  # a generator's lookup of a row, column or seed the records do not hold
            raise ValueError(f"{m.group('spec')}: the records hold no {e.args[0]!r} where this block reads one (a "
                             "trial missing from the folder?)") from None
        if body.strip("\n") != new:
            changed.append(m.group("spec"))
        return f"<!-- records: {m.group('spec')} -->{lead}{new}{trail}<!-- /records -->"

    # a fenced code block shows the syntax (docs/sweeps-and-searches.md): its example is text, not a block
    parts = FENCE.split(text)
    return "".join(p if i % 2 else BLOCK.sub(one, p) for i, p in enumerate(parts)), changed


def pages(root: Path = ROOT) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern)})


def main(argv: list[str] | None = None) -> int:
    import tools.pages as package  # its docstring is the command's description

    # (a bad or unknown flag is one line, exit 2, as fda-ray's programs)
    p = OneLineParser(prog="python -m tools.pages", description=package.__doc__.splitlines()[0])
    p.add_argument("pages", nargs="*", help="pages to regenerate (default: README.md, docs/*.md and docs/results/*.md)")
    p.add_argument("--check", action="store_true", help="change nothing; list the blocks that differ, exit 1 if any")
    a = p.parse_or_exit_code(argv)
    if isinstance(a, int):
        return a
    # Every page is read before any is rewritten: a page named by mistake (a binary file, a folder, a missing path)
    # is one line naming it, exit 2, before any page has changed.
    texts: list[tuple[Path, str]] = []
    for page in [Path(x) for x in a.pages] or pages():
        try:
            text = read_text(page, "page")
        except DamagedFileError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        # universal newlines, as Path.read_text gave them: a page saved with CRLF compares and rewrites as before
        texts.append((page, text.replace("\r\n", "\n").replace("\r", "\n")))
    stale = 0
    for page, text in texts:
        try:
            new, changed = rewrite(text)
        except (ValueError, KeyError) as e:
            print(f"error: {page}: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
        for spec in changed:
            print(f"{page}: {spec}" + (": differs from the records" if a.check else ": rewritten"))
        stale += len(changed)
        if changed and not a.check:
            page.write_text(new)
    if not a.pages:  # the results folders' own summary.md tables (tools.pages.summary_files)
        from tools.pages.summary_files import stale as stale_summaries

        try:
            files = stale_summaries(write=not a.check)
        except (ValueError, KeyError, OSError) as e:
            print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
        for path in files:
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(f"{shown}: " + ("its tables differ from the records" if a.check else "rewritten"))
        stale += len(files)
    return 1 if a.check and stale else 0
