"""Docs include what a command writes instead of retyping it.

A markdown doc marks an included file with a pair of lines, the path relative to the repository root:

    <!-- include: bench/results/summary.md -->
    ...exactly the file's content...
    <!-- end include -->

`refresh` puts each file's current content between its markers; `stale` names the blocks that
differ from their file (tests/test_docs.py holds README.md and docs/*.md to it). A marker that
opens without closing, closes without opening, or names no file is an IncludeError naming the doc
and the line.

    .venv/bin/python bench/includes.py docs/results.md [more docs]   # refresh them in place
"""

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r"<!-- include: (\S+) -->")
END = "<!-- end include -->"


class IncludeError(ValueError):
    """A malformed include marker, or an include of a file that does not exist."""


@dataclass(frozen=True)
class Block:
    path: str  # the included file, relative to the repository root
    line: int  # the include marker's line in the doc, from 1
    first: int  # index (from 0) of the first line between the markers
    end: int  # index of the end marker's line


def blocks(text: str, doc: str) -> list[Block]:
    """The include blocks of `text` (the doc named `doc` in errors), in order."""
    found, opened = [], None
    for index, line in enumerate(text.splitlines()):
        where = f"{doc}:{index + 1}"
        if line.startswith("<!-- include"):
            match = INCLUDE.fullmatch(line)
            if not match:
                raise IncludeError(f"{where}: malformed include marker {line!r}; write <!-- include: <path> -->")
            if opened:
                raise IncludeError(f"{where}: an include opens inside the one of line {opened.line}, never closed")
            opened = Block(match.group(1), index + 1, index + 1, -1)
        elif line.startswith("<!-- end include"):
            if line != END:
                raise IncludeError(f"{where}: malformed end marker {line!r}; write {END}")
            if not opened:
                raise IncludeError(f"{where}: {END} without an include before it")
            found.append(Block(opened.path, opened.line, opened.first, index))
            opened = None
    if opened:
        raise IncludeError(f"{doc}:{opened.line}: <!-- include: {opened.path} --> has no {END} after it")
    return found


def content(block: Block, doc: str, root: Path = ROOT) -> str:
    """What belongs between the markers: the file's text, ending with a newline."""
    path = root / block.path
    if not path.is_file():
        raise IncludeError(f"{doc}:{block.line}: includes {block.path}, which does not exist")
    text = path.read_text()
    return text if text.endswith("\n") or not text else text + "\n"


def refresh(text: str, doc: str, root: Path = ROOT) -> str:
    """`text` with every include block holding its file's current content."""
    lines = text.splitlines(keepends=True)
    out, at = [], 0
    for block in blocks(text, doc):
        out += lines[at : block.first]
        out.append(content(block, doc, root))
        at = block.end
    return "".join(out + lines[at:])


def stale(text: str, doc: str, root: Path = ROOT) -> list[str]:
    """The paths of the blocks whose text differs from their file's."""
    lines = text.splitlines(keepends=True)
    return [b.path for b in blocks(text, doc) if "".join(lines[b.first : b.end]) != content(b, doc, root)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("docs", nargs="+", type=Path, help="markdown files to refresh in place")
    args = parser.parse_args()
    for doc in args.docs:
        try:
            text = doc.read_text()
            refreshed = refresh(text, str(doc))
        except (OSError, IncludeError) as error:
            sys.exit(f"includes: {error}")
        if refreshed != text:
            doc.write_text(refreshed)
        print(f"{doc}: {len(blocks(text, str(doc)))} include(s), {'refreshed' if refreshed != text else 'current'}")


if __name__ == "__main__":
    main()
