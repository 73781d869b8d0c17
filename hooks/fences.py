"""How the book's Markdown is read by its tests.

The site is rendered by Python-Markdown (pymdownx.superfences), but the fences are
executed by pytest-markdown-docs, which parses pages with markdown-it. Out of the box
markdown-it does not know MkDocs' indented blocks, so a fence inside an admonition
(``!!! note``), a collapsible block (``??? note``, ``???+ note``) or a content tab
(``=== "Tab"``) would be silently skipped. :func:`make_parser` adds one block rule that
treats all of these as containers of indented Markdown, so their fences are seen.

:func:`scan_fences` is a deliberately simple, line-based scan of the same pages;
``tests/test_book.py`` compares the two so that a fence the parser misses fails a test.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING

from markdown_it import MarkdownIt

if TYPE_CHECKING:
    from markdown_it.rules_block import StateBlock

PYTHON_LANGS = ("python", "py", "python3")

# `!!! note "Title"`, `??? tip`, `???+ example`, `=== "Tab"`, `===+ "Tab"`.
_BLOCK_MARKER = re.compile(r"(?:!!!|\?\?\?\+?|===\+?)[ \t]+\S")


def _indented_block(state: "StateBlock", start_line: int, end_line: int, silent: bool) -> bool:
    """markdown-it block rule: a marker line followed by Markdown indented 4 more columns."""
    if state.sCount[start_line] - state.blkIndent >= 4:
        return False  # an indented code block, not a marker
    start = state.bMarks[start_line] + state.tShift[start_line]
    line = state.src[start : state.eMarks[start_line]]
    if not _BLOCK_MARKER.match(line):
        return False
    if silent:
        return True

    indent = state.sCount[start_line] + 4
    next_line = start_line + 1
    last_content = start_line
    while next_line < end_line:
        empty = state.isEmpty(next_line)
        if not empty and state.sCount[next_line] < indent:
            break
        if not empty:
            last_content = next_line
        next_line += 1
    end = last_content + 1

    old_parent, old_line_max, old_indent = state.parentType, state.lineMax, state.blkIndent
    state.parentType = "mkdocs_block"
    state.lineMax = end
    state.blkIndent = indent

    token = state.push("mkdocs_block_open", "div", 1)
    token.block = True
    token.info = line
    token.map = [start_line, end]
    state.md.block.tokenize(state, start_line + 1, end)
    token = state.push("mkdocs_block_close", "div", -1)
    token.block = True

    state.parentType, state.lineMax, state.blkIndent = old_parent, old_line_max, old_indent
    state.line = end
    return True


def make_parser() -> MarkdownIt:
    """The markdown-it parser used to find the fences that the tests execute."""
    md = MarkdownIt("commonmark")
    md.block.ruler.before(
        "fence",
        "mkdocs_block",
        _indented_block,
        {"alt": ["paragraph", "reference", "blockquote", "list"]},
    )
    return md


def fence_info(info: str) -> tuple[str | None, set[str]]:
    """Split a fence's info string into (language, options).

    Accepts both ``python continuation`` and superfences' brace form
    ``{.python continuation}`` (the only one the site renders correctly).
    """
    info = info.strip()
    if info.startswith("{"):
        parts = info.strip("{}").split()
        lang = next((p[1:] for p in parts if p.startswith(".")), None)
        return lang, {p for p in parts if not p.startswith(".")}
    parts = info.split()
    return (parts[0] if parts else None), set(parts[1:])


@dataclasses.dataclass
class Fence:
    """One fenced block of a page. ``line`` is 1-based, the line of the opening fence."""

    line: int
    lang: str | None
    options: set[str]
    content: str
    closing_line: int | None = None


def parsed_fences(text: str, parser: MarkdownIt | None = None) -> list[Fence]:
    """Every fence that the (hooked) markdown-it parser sees on a page."""
    if parser is None:  # the book's parser: a page's text is parsed once a process
        return [
            Fence(line, lang, set(opts), content) for line, lang, opts, content in _parsed(text)
        ]
    return [Fence(*fence) for fence in _parse(text, parser)]


def _parse(text: str, parser: MarkdownIt) -> list[tuple]:
    fences = []
    for token in parser.parse(text):
        if token.type == "fence" and token.map:
            lang, options = fence_info(token.info)
            fences.append((token.map[0] + 1, lang, options, token.content))
    return fences


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> tuple[tuple, ...]:
    """The fences of ``text`` with :func:`make_parser`'s parser, kept: the pytest
    session asks for each page's fences from several places (the copy-run's pages, the
    corpus markers, the book's tests), each of which would parse the page again."""
    return tuple((line, lang, frozenset(o), c) for line, lang, o, c in _parse(text, make_parser()))


_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def scan_fences(text: str) -> list[Fence]:
    """Every fence on a page, found line by line, whatever block it is nested in.

    A fence is closed by a line of at least as many of the same character; fences
    shown inside a longer fence (say, Markdown examples in a ````markdown block)
    are content, not fences.
    """
    fences: list[Fence] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m or ("`" in m["info"] and m["fence"][0] == "`"):
            i += 1
            continue
        char, width, indent = m["fence"][0], len(m["fence"]), len(m["indent"])
        lang, options = fence_info(m["info"])
        body = []
        j = i + 1
        while j < len(lines):
            close = re.match(r"^[ \t]*(`{3,}|~{3,})[ \t]*$", lines[j])
            if close and close[1][0] == char and len(close[1]) >= width:
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        fences.append(
            Fence(i + 1, lang, options, "\n".join(body) + "\n", j + 1 if j < len(lines) else None)
        )
        i = j + 1
    return fences
