"""Check the links of README.md and docs/: every relative link names a file or
directory of the repository, and every ``#anchor`` a heading (or an explicit
``<a id>``/``<a name>``) of the page it points at, with GitHub's anchor rules.
Run by ``make lint``: ``python -m tests.doc_links`` prints each broken link and
exits 1. The pages are read with a CommonMark parser (markdown-it-py, with tables),
so code spans and fenced blocks hold no links and reference links are resolved.

GitHub's anchors: the heading's text without its markup, lower-cased; every
character that is not a letter, a digit, a space, ``-`` or ``_`` dropped; each
space a ``-``; a repeated anchor gets ``-1``, ``-2``, … in page order.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[1]
MARKDOWN = MarkdownIt("commonmark").enable("table")
HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


@dataclass(frozen=True)
class Broken:
    page: str
    line: int
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.target}: {self.why}"


def pages(root: Path = REPO) -> list[Path]:
    """The pages checked: README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _tokens(text: str) -> Iterator[tuple[Token, Token]]:
    """(block, token) for every block token and every inline token within one."""
    for block in MARKDOWN.parse(text):
        yield block, block
        for child in block.children or ():
            yield block, child


def slug(heading: str) -> str:
    """GitHub's anchor of one heading (before the ``-N`` of a repeat): its text as
    rendered, without markup, links as their text."""
    children = MARKDOWN.parseInline(heading)[0].children or []
    text = "".join(c.content for c in children if c.type in ("text", "code_inline"))
    kept = []
    for char in text.strip().lower():
        if char in " -_" or unicodedata.category(char)[0] in "LN":
            kept.append("-" if char == " " else char)
    return "".join(kept)


def anchors(text: str) -> set[str]:
    """Every anchor a page offers: its headings' (repeats numbered) and explicit ones."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    heading = False
    for _, token in _tokens(text):
        if token.type in ("html_block", "html_inline"):
            found.update(HTML_ANCHOR.findall(token.content))
        elif token.type == "inline" and heading:
            base = slug(token.content)
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        heading = token.type == "heading_open"
    return found


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and image, outside code."""
    lines = text.splitlines()
    for block, token in _tokens(text):
        target = token.attrGet("href") or token.attrGet("src")
        if target is None or block.map is None:
            continue
        target = unquote(str(target))
        first, end = block.map
        yield next((n + 1 for n in range(first, end) if target in lines[n]), first + 1), target


def check(page: Path, root: Path = REPO) -> list[Broken]:
    """The broken links of one page."""
    text = page.read_text()
    name = str(page.relative_to(root))
    broken = []
    for number, target in links(text):
        if EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        if path_part:
            resolved = (
                (root / path_part.lstrip("/"))
                if path_part.startswith("/")
                else page.parent / path_part
            ).resolve()
            if not resolved.exists():
                broken.append(Broken(name, number, target, "no such file"))
                continue
            if root.resolve() not in (resolved, *resolved.parents):
                broken.append(Broken(name, number, target, "outside the repository"))
                continue
        else:
            resolved = page
        if anchor and resolved.suffix == ".md" and resolved.is_file():
            if anchor not in anchors(resolved.read_text()):
                broken.append(Broken(name, number, target, f"no heading makes #{anchor}"))
    return broken


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(argv[0]).resolve() if argv else REPO
    broken = [b for page in pages(root) for b in check(page, root)]
    for item in broken:
        print(item, file=sys.stderr)
    checked = len(pages(root))
    if broken:
        print(f"{len(broken)} broken link(s) in {checked} pages", file=sys.stderr)
        return 1
    print(f"links: {checked} pages, no broken link")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
