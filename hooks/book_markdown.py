"""The book's own Markdown: what a page shows beyond what its source says.

A Python-Markdown extension, listed under ``markdown_extensions`` in mkdocs.yml as
``hooks.book_markdown``. MkDocs and Zensical both render pages with Python-Markdown and
both run the extensions that mkdocs.yml lists (Zensical runs no MkDocs hooks), so what a
reader sees on a page comes from this one module whichever builder made the site:

1. Beneath each Python block that prints, what it printed when it last ran: the output
   recorded in ``docs/_outputs/<page>.json`` by ``make outputs`` (the copy-run test,
   tests/test_copy_run.py), never typed by hand and never run here. A record whose code
   hash is not the block's current one is stale: the page shows no output there and the
   build warns.
2. A ``{.python continuation}`` fence, which runs after the blocks before it, is shown
   with a visible mark: the class ``continuation`` and a title bar ("Continues the code
   above"), styled by docs/stylesheets/book.css. Superfences would otherwise drop the
   bare word and render it like a standalone block.
3. Under the title of a page with Python blocks, a line that links the page's code as a
   script and as a notebook (``downloads/sitp-<page>.py`` and ``.ipynb``, generated from
   the blocks by ``hooks/pagecode.py``: by hooks/book.py for MkDocs, by
   scripts/zensical_build.py for Zensical).

The extension rewrites a page only when the text it converts is a page of docs/ (found
by its text, :func:`page_of`): mkdocstrings converts each docstring with the same
extensions, and a docstring is left as it is. Neither builder tells an extension which
page it renders through a public interface, so the page is recognised by what it says.

Problems are logged as warnings on the logger ``mkdocs.hooks.book``, which
``mkdocs build --strict`` turns into a failed build.
"""

from __future__ import annotations

import hashlib
import html
import logging
import os
import re
from pathlib import Path

from markdown import Extension
from markdown.postprocessors import Postprocessor
from markdown.preprocessors import Preprocessor

from hooks import pagecode

# One logger for the book's machinery (hooks/book.py logs on it too): MkDocs counts the
# warnings of every logger under "mkdocs." and fails a strict build on any.
log = logging.getLogger("mkdocs.hooks.book")

DOCS = pagecode.DOCS


# --- which page is being converted ------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A-{3}[ \t]*\r?\n.*?\r?\n(?:-{3}|\.{3})[ \t]*\r?\n", re.DOTALL)
# A page this extension changes has at least one Python fence in superfences' forms.
_PYTHON_FENCE = re.compile(r"^[ \t]*(?:`{3,}|~{3,})[ \t]*\{?\.?(?:python3?|py)\b", re.MULTILINE)


def _text_key(text: str) -> str:
    """A page's text as both builders hand it to Markdown: no front matter, no \\r."""
    text = _FRONT_MATTER.sub("", text.replace("\r\n", "\n"), count=1)
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


# (path, mtime_ns, size) of every page when the index was made, and the index itself:
# the hash of each page's text -> its path under docs/ ("ch02/strides.md").
_INDEX: tuple[tuple, dict[str, str]] = ((), {})


def _pages(docs: Path) -> tuple:
    out = []
    for path in sorted(docs.rglob("*.md")):
        rel = path.relative_to(docs)
        if rel.parts[0].startswith("_") or ".ipynb_checkpoints" in rel.parts:
            continue
        if path.with_suffix(".ipynb").exists():
            continue  # a notebook's page, written by the Zensical build: no book page
        stat = path.stat()
        out.append((rel.as_posix(), stat.st_mtime_ns, stat.st_size))
    return tuple(out)


def page_of(text: str, docs: Path | None = None) -> str | None:
    """The page of docs/ whose source is ``text`` ("ch02/strides.md"), or None.

    None for text that has no Python fence (nothing to rewrite) and for text that is no
    page, such as a docstring that mkdocstrings converts. The index of the pages' texts
    is rebuilt when a page changes (a rebuild of `mkdocs serve`).
    """
    global _INDEX
    if not _PYTHON_FENCE.search(text):
        return None
    docs = docs or DOCS
    stamp = (str(docs), _pages(docs))
    if _INDEX[0] != stamp:
        index = {}
        for rel, _, _ in stamp[1]:
            index[_text_key((docs / rel).read_text(encoding="utf-8-sig"))] = rel
        _INDEX = (stamp, index)
    return _INDEX[1].get(_text_key(text))


# --- outputs: what each block printed, recorded by the copy-run test --------------------

OUTPUT_MARK = "<!-- sitp-output {} -->"
_OUTPUT_MARK = re.compile(r"<!-- sitp-output (\d+) -->")
OUTPUT_LABEL = "Output"
VOLATILE_LABEL = "Output of one run (its timings vary from run to run)"


def insert_output_marks(
    markdown: str, page: str, outputs_dir: Path | None = None
) -> tuple[str, dict[int, tuple]]:
    """Put a mark beneath every block with a current recorded output, warn for stale ones.

    Returns the Markdown and the outputs by block index. The mark is an HTML comment at
    the block's indentation (so it stays inside an admonition, a tab or a list item),
    which :func:`render_outputs` replaces with the output once the page is HTML. The
    outputs are read from docs/_outputs, or from ``outputs_dir``.
    """
    blocks = pagecode.blocks(markdown)
    if not blocks:
        return markdown, {}
    recorded = pagecode.load_outputs(page, outputs_dir)
    closing = {f.line: f for f in pagecode.scan_fences(markdown)}
    lines = markdown.split("\n")
    outputs = {}
    stale = []
    for block in blocks:
        entry = pagecode.recorded_output(block, blocks, recorded)
        if entry is None:
            stale.append(block.line)
        elif entry["stdout"]:
            outputs[block.index] = (entry["stdout"], block.volatile, block.tolerance)
    if stale:
        log.warning(
            "%s: no output recorded for the current code of the block(s) at line(s) %s; "
            "run `make outputs` (the copy-run test records what every block prints).",
            page,
            ", ".join(map(str, stale)),
        )
    for block in reversed(blocks):
        fence = closing.get(block.line)
        if block.index not in outputs or fence is None or fence.closing_line is None:
            continue
        indent = re.match(r"[ \t]*", lines[block.line - 1])[0]
        at = fence.closing_line  # the line after the closing fence (0-based index)
        lines[at:at] = ["", indent + OUTPUT_MARK.format(block.index), ""]
    return "\n".join(lines), outputs


def output_html(stdout: str, volatile: bool, tolerance: float | None = None) -> str:
    label = VOLATILE_LABEL if volatile else OUTPUT_LABEL
    if tolerance is not None and not volatile:
        label += f" (its numbers hold to {tolerance * 100:g}% on other machines)"
    return (
        f'<div class="sitp-output no-copy{" volatile" if volatile else ""}">'
        f'<span class="sitp-output__label">{label}</span>'
        f'<pre class="sitp-output__text">{html.escape(stdout.rstrip(chr(10)))}</pre></div>'
    )


def render_outputs(content: str, outputs: dict[int, tuple]) -> str:
    """Replace the marks of :func:`insert_output_marks` with the outputs' HTML."""

    def render(m: re.Match) -> str:
        found = outputs.get(int(m[1]))
        return output_html(*found) if found else ""

    # Python-Markdown keeps a raw HTML comment as it is, sometimes in a paragraph.
    content = re.sub(r"<p>\s*(<!-- sitp-output \d+ -->)\s*</p>", r"\1", content)
    return _OUTPUT_MARK.sub(render, content)


# --- continuation fences ----------------------------------------------------------------

# An opening fence in superfences' brace form: ```{.python continuation}, maybe indented.
_BRACE_FENCE = re.compile(
    r"^(?P<lead>[ \t]*(?:`{3,}|~{3,}))\{(?P<attrs>[^}\n]*)\}[ \t]*$", re.MULTILINE
)
CONTINUATION_TITLE = "Continues the code above"


def mark_continuations(markdown: str) -> str:
    """Give every Python continuation fence a class and a title bar the reader sees."""

    def mark(m: re.Match) -> str:
        parts = m["attrs"].split()
        langs = {p[1:] for p in parts if p.startswith(".")}
        if not langs & {"python", "py", "python3"}:
            return m.group(0)
        # for the tests; the output's label says them
        options = [
            p for p in parts if p == pagecode.VOLATILE or p.startswith(pagecode.TOLERANCE + "=")
        ]
        if options:
            parts = [p for p in parts if p not in options]
            if "continuation" not in parts:
                return f"{m['lead']}{{{' '.join(parts)}}}"
        if "continuation" not in parts:
            return m.group(0)
        parts = [p for p in parts if p != "continuation"] + [".continuation"]
        if not any(p.startswith("title=") for p in parts):
            parts.append(f'title="{CONTINUATION_TITLE}"')
        return f"{m['lead']}{{{' '.join(parts)}}}"

    return _BRACE_FENCE.sub(mark, markdown)


# --- downloads: the page's code as a script and a notebook ------------------------------

DOWNLOADS_INTRO = "The code of this page, to run yourself:"


def download_uri(page: str, ext: str) -> str:
    """Where a page's download lies in the site: ``downloads/sitp-ch02-strides.py``."""
    return f"{pagecode.DOWNLOADS}/{pagecode.download_name(page)}.{ext}"


def downloads(page: str, text: str) -> dict[str, str]:
    """The files a page offers, by extension (none for a page without Python blocks)."""
    if not pagecode.blocks(text):
        return {}
    return {
        "py": pagecode.page_script(page, text)[0],
        "ipynb": pagecode.page_notebook(page, text),
    }


def downloads_line(page: str) -> str:
    """The Markdown line, under the page's title, that links the page's downloads."""
    here = os.path.dirname(page)
    links = []
    for ext, what in (("ipynb", "notebook"), ("py", "script")):
        uri = download_uri(page, ext)
        links.append(
            f"[{what} (.{ext})]({os.path.relpath(uri, here or '.')})"
            f'{{download="{os.path.basename(uri)}"}}'
        )
    return f"{DOWNLOADS_INTRO} {' · '.join(links)}\n{{.sitp-downloads}}"


def add_downloads_line(markdown: str, page: str) -> str:
    lines = markdown.split("\n")
    at = next((n + 1 for n, line in enumerate(lines) if re.match(r"#[ \t]", line)), 0)
    return "\n".join(lines[:at] + ["", downloads_line(page), ""] + lines[at:])


# --- the page, rewritten -----------------------------------------------------------------


def rewrite(
    markdown: str, page: str, outputs_dir: Path | None = None
) -> tuple[str, dict[int, tuple]]:
    """A page's Markdown as the builders render it, and the outputs to put beneath its
    blocks (by block index) once it is HTML."""
    has_blocks = bool(pagecode.blocks(markdown))
    markdown, outputs = insert_output_marks(markdown, page, outputs_dir)
    if has_blocks:
        markdown = add_downloads_line(markdown, page)
    return mark_continuations(markdown), outputs


class _PagePreprocessor(Preprocessor):
    """Runs first (before snippets and superfences), on the page's text as written.

    Keeps the outputs of the page it rewrote for its postprocessor: both belong to one
    Markdown instance (an extension object may be shared by several).
    """

    def __init__(self, md, docs: Path | None):
        super().__init__(md)
        self.docs = docs
        self.outputs: dict[int, tuple] = {}

    def run(self, lines: list[str]) -> list[str]:
        self.outputs = {}
        text = "\n".join(lines)
        page = page_of(text, self.docs)
        if page is None:
            return lines
        outputs_dir = self.docs / "_outputs" if self.docs else None
        text, self.outputs = rewrite(text, page, outputs_dir)
        return text.split("\n")


class _OutputsPostprocessor(Postprocessor):
    """After the raw HTML is back in place (priority 30), before a builder's search
    indexing (Zensical's runs at 0), so the outputs are searchable with both builders.

    Extensions run the postprocessors on fragments too (toc on each heading's text), so
    the outputs stay with the preprocessor until the next page replaces them.
    """

    def __init__(self, md, pre: _PagePreprocessor):
        super().__init__(md)
        self.pre = pre

    def run(self, text: str) -> str:
        return render_outputs(text, self.pre.outputs) if self.pre.outputs else text


class BookExtension(Extension):
    """The book's page rewriting (module docstring): one preprocessor, one postprocessor.

    Its one option, ``docs_dir``, names the folder of pages (and of their ``_outputs``)
    that the builder reads, when that is not the repository's docs/: the Zensical build
    reads a copy (scripts/zensical_build.py), which a page edited during the build would
    no longer match.
    """

    def __init__(self, **kwargs):
        self.config = {"docs_dir": ["", "the builder's folder of pages; '': docs/"]}
        super().__init__(**kwargs)

    def extendMarkdown(self, md):
        docs = self.getConfig("docs_dir")
        pre = _PagePreprocessor(md, Path(docs).resolve() if docs else None)
        md.preprocessors.register(pre, "sitp_book", 40)
        md.postprocessors.register(_OutputsPostprocessor(md, pre), "sitp_outputs", 25)


def makeExtension(**kwargs):
    return BookExtension(**kwargs)
