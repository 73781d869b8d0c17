"""hooks/book_markdown.py, the Markdown extension both builders run, through Python-Markdown
itself: a page of docs/ gets its outputs, continuation marks and downloads line; any
other text (a docstring that mkdocstrings converts) is left as it is."""

from __future__ import annotations

import json

import markdown
import pytest
from hooks import book_markdown, pagecode

PAGE = (
    "# 9.9 A page\n\nText.\n\n"
    "```python\nx = 1\nprint(x)\n```\n\n"
    "## Going on\n\n"
    '!!! note "In a box"\n    ```{.python continuation}\n    print(x + 1)\n    ```\n\n'
    "```python\ny = 2  # prints nothing\n```\n"
)
# What the builders list (mkdocs.yml): toc runs the postprocessors on each heading's
# text as well as on the page, which once emptied the outputs before the page's turn.
EXTENSIONS = ["toc", "admonition", "attr_list", "pymdownx.superfences", "hooks.book_markdown"]


@pytest.fixture
def docs(tmp_path, monkeypatch):
    """A docs/ folder with one page (x/page.md) and its recorded outputs."""
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "page.md").write_text(PAGE, encoding="utf-8")
    (tmp_path / "other.md").write_text("# Other\n\nNo code.\n", encoding="utf-8")
    outputs = tmp_path / "_outputs"
    (outputs / "x").mkdir(parents=True)
    record = pagecode.outputs_record("x/page.md", pagecode.blocks(PAGE), ["1\n", "2\n", ""])
    (outputs / "x" / "page.json").write_text(json.dumps(record))
    monkeypatch.setattr(book_markdown, "DOCS", tmp_path)
    monkeypatch.setattr(pagecode, "OUTPUTS", outputs)
    return tmp_path


def _html(text: str) -> str:
    return markdown.Markdown(extensions=EXTENSIONS).convert(text)


def test_a_page_of_docs_gets_its_outputs_marks_and_downloads(docs):
    html = _html(PAGE)
    assert html.count('<div class="sitp-output') == 2 and "<!-- sitp-output" not in html
    assert html.index('<pre class="sitp-output__text">1</pre>') > html.index("</code></pre>")
    assert html.count(f'<span class="filename">{book_markdown.CONTINUATION_TITLE}</span>') == 1
    assert html.count(" download=") == 2 and "../downloads/sitp-x-page.py" in html
    assert html.index(book_markdown.DOWNLOADS_INTRO) < html.index("Text.")


def test_other_text_is_left_as_it_is(docs):
    """A docstring with the same code is no page: no output, no mark, no downloads."""
    html = _html(PAGE.replace("Text.", "A docstring."))
    assert "sitp-output" not in html and "download=" not in html
    assert book_markdown.CONTINUATION_TITLE not in html
    assert book_markdown.page_of(PAGE) == "x/page.md"
    assert book_markdown.page_of("# Other\n\nNo code.\n") is None  # nothing to rewrite


def test_the_page_is_found_with_front_matter_and_after_an_edit(docs):
    (docs / "x" / "page.md").write_text("---\ntitle: A\n---\n" + PAGE, encoding="utf-8")
    assert book_markdown.page_of(PAGE + "\n") == "x/page.md"  # as a builder hands it over
    edited = PAGE.replace("x = 1", "x = 10")  # another size: seen whatever the clock
    (docs / "x" / "page.md").write_text(edited, encoding="utf-8")
    assert book_markdown.page_of(edited) == "x/page.md"
    assert book_markdown.page_of(PAGE) is None


def test_one_markdown_instance_converts_page_after_page(docs):
    """The outputs of one page never reach the next (mkdocstrings reuses its instance)."""
    md = markdown.Markdown(extensions=EXTENSIONS)
    assert md.convert(PAGE).count('<div class="sitp-output') == 2
    md.reset()
    assert "sitp-output" not in md.convert(PAGE.replace("Text.", "Other text."))


def test_a_build_of_a_copy_of_docs_reads_the_copy(docs, monkeypatch):
    """The option docs_dir (the Zensical build's staged copy): pages and outputs come
    from there, and a notebook's Markdown page beside its .ipynb is no book page."""
    monkeypatch.undo()  # docs/ and docs/_outputs are the repository's again
    (docs / "x" / "page.ipynb").write_text("{}", encoding="utf-8")
    (docs / "x" / "page.md").rename(docs / "x" / "book.md")
    (docs / "_outputs" / "x" / "page.json").rename(docs / "_outputs" / "x" / "book.json")
    md = markdown.Markdown(
        extensions=EXTENSIONS, extension_configs={"hooks.book_markdown": {"docs_dir": str(docs)}}
    )
    assert md.convert(PAGE).count('<div class="sitp-output') == 2
    assert "sitp-x-book.py" in md.convert(PAGE)
    (docs / "x" / "book.ipynb").write_text("{}", encoding="utf-8")
    assert "sitp-output" not in md.convert(PAGE)
