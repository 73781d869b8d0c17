"""The book built by Zensical gives a reader what the MkDocs build gives, page by page.

MkDocs with Material builds the published book; Zensical, Material's successor, builds
the same mkdocs.yml (scripts/zensical_build.py, ``make build-zensical``). This compares
what a reader gets from the two sites, feature by feature, never byte by byte: the same
pages; on each page the same recorded outputs, formulas, admonitions, code blocks and
their annotations and continuation marks, API entries, tables, images, heading anchors
and downloads; the same search entries; and every internal link of the Zensical site
resolves.

Where Zensical cannot match yet, the difference is listed in ``KNOWN`` with its reason.
The test fails on any difference not listed, and on a listed one that no longer occurs
(the list must shrink as Zensical catches up).

Both sites are built once per run (the ``built_site`` and ``zensical_site`` fixtures of
tests/conftest.py; ``make test`` builds both before pytest).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.test_site_links import check_redirects, check_site_links

pytestmark = pytest.mark.site

# What a reader sees, as (feature, CSS-like description): counted inside a page's
# article (class md-content__inner).
FEATURES = {
    "outputs": "div.sitp-output: a block's recorded output (hooks/book_markdown.py)",
    "math": ".arithmatex: a formula (pymdownx.arithmatex, typeset by KaTeX)",
    "admonitions": "div.admonition, details: a note, tip, exercise or solution",
    "code blocks": "div.highlight: a highlighted code block",
    "annotations": ".annotate: a code block with annotations",
    "continuations": ".continuation: a continuation fence with its mark",
    "api entries": ".doc-object: one object documented by mkdocstrings",
    "downloads": "a[download]: a link to the page's script or notebook",
    "tables": "table",
    "images": "img",
    "tabs": ".tabbed-set: a set of content tabs",
}


class _Features(HTMLParser):
    """Counts the features of one page's article, and collects its heading anchors."""

    VOID = {"img", "br", "hr", "input", "meta", "link", "source", "wbr", "col", "area"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0  # open elements inside the article; 0: outside
        self.counts: Counter = Counter()
        self.anchors: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        if not self.depth:
            if tag == "article" and "md-content__inner" in classes:
                self.depth = 1
            return
        if tag not in self.VOID:
            self.depth += 1
        c = self.counts
        c["outputs"] += tag == "div" and "sitp-output" in classes
        c["math"] += "arithmatex" in classes
        c["admonitions"] += (tag == "div" and "admonition" in classes) or tag == "details"
        c["code blocks"] += tag == "div" and "highlight" in classes
        c["annotations"] += "annotate" in classes
        c["continuations"] += "continuation" in classes
        c["api entries"] += "doc-object" in classes
        c["downloads"] += tag == "a" and "download" in attrs
        c["tables"] += tag == "table"
        c["images"] += tag == "img"
        c["tabs"] += "tabbed-set" in classes
        if re.fullmatch(r"h[1-6]", tag) and attrs.get("id"):
            self.anchors.add(attrs["id"])

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.depth and tag not in self.VOID:
            self.depth -= 1

    def handle_endtag(self, tag):
        if self.depth and tag not in self.VOID:
            self.depth -= 1


def page_features(html: str) -> tuple[dict[str, int], set[str]]:
    """A page's features and heading anchors (its article only: the navigation is the
    same on every page and three quarters of its HTML, so it is cut off first)."""
    start = html.find('<article class="md-content__inner')
    if start >= 0:
        html = html[start : html.rfind("</article>") + len("</article>")]
    parser = _Features()
    parser.feed(html)
    parser.close()
    return {name: parser.counts[name] for name in FEATURES}, parser.anchors


def pages(site: Path) -> dict[str, Path]:
    """The site's pages by URL path ("ch02/strides/"), without 404.html and assets."""
    out = {}
    for path in site.rglob("index.html"):
        rel = path.parent.relative_to(site).as_posix()
        if not rel.startswith("assets/"):
            out["" if rel == "." else rel + "/"] = path
    return out


def search_entries(site: Path) -> dict[str, set[str]]:
    """The search index's entries, as {page: {anchors}} ("" for the page itself).

    MkDocs' search plugin writes search/search_index.json ({"docs": [...]}); Zensical
    writes its own index (scripts/zensical_build.search_index finds it). Both give each
    entry a location "page/#anchor".
    """
    from scripts.zensical_build import search_index

    index = search_index(site)
    assert index is not None, f"no search index in {site}"
    data = json.loads(index.read_text(encoding="utf-8"))
    out: dict[str, set[str]] = {}
    for doc in data.get("items", data.get("docs", [])):
        page, _, anchor = doc["location"].partition("#")
        out.setdefault(page, set()).add(anchor)
    return out


# Differences that Zensical cannot avoid yet: (page, what differs) -> why. The test
# fails when one of them stops occurring, so that the list stays true.
KNOWN: dict[tuple[str, str], str] = {
    ("notebooks/hello/", "code blocks"): (
        "mkdocs-jupyter shows a notebook as Jupyter's HTML, whose cells are no div.highlight; "
        "nbconvert's Markdown page (scripts/zensical_build.py) has each code cell and each "
        "printed output as a code block"
    ),
    ("notebooks/hello/", "math"): (
        "mkdocs-jupyter leaves a notebook's $...$ as text for KaTeX's auto-render; in the "
        "Markdown page pymdownx.arithmatex wraps each formula (KaTeX typesets both)"
    ),
    ("notebooks/hello/", "search entries"): (
        "MkDocs indexes mkdocs-jupyter's page as one text with empty sections (and its title "
        "heading as a section); Zensical indexes the Markdown page section by section"
    ),
}


def differences(mkdocs_site: Path, zensical_site: Path) -> dict[tuple[str, str], str]:
    """Every difference a reader would see between the two sites: (page, what) -> detail."""
    found: dict[tuple[str, str], str] = {}
    ours, theirs = pages(mkdocs_site), pages(zensical_site)
    for page in sorted(set(ours) ^ set(theirs)):
        found[(page, "page")] = "only in " + ("MkDocs" if page in ours else "Zensical")
    search_ours, search_theirs = search_entries(mkdocs_site), search_entries(zensical_site)
    for page in sorted(set(ours) & set(theirs)):
        a, anchors_a = page_features(ours[page].read_text(encoding="utf-8"))
        b, anchors_b = page_features(theirs[page].read_text(encoding="utf-8"))
        for name in FEATURES:
            if a[name] != b[name]:
                found[(page, name)] = f"MkDocs {a[name]}, Zensical {b[name]}"
        if anchors_a != anchors_b:
            found[(page, "heading anchors")] = (
                f"only MkDocs: {sorted(anchors_a - anchors_b)[:5]}, "
                f"only Zensical: {sorted(anchors_b - anchors_a)[:5]}"
            )
        entries_a, entries_b = search_ours.get(page, set()), search_theirs.get(page, set())
        if entries_a != entries_b:
            found[(page, "search entries")] = (
                f"MkDocs {len(entries_a)}, Zensical {len(entries_b)}; only MkDocs: "
                f"{sorted(entries_a - entries_b)[:5]}, only Zensical: "
                f"{sorted(entries_b - entries_a)[:5]}"
            )
    return found


def test_zensical_gives_the_reader_what_mkdocs_gives(built_site: Path, zensical_site: Path):
    found = differences(built_site, zensical_site)
    new = {k: v for k, v in found.items() if k not in KNOWN}
    gone = [k for k in KNOWN if k not in found]
    report = [f"/{page} {what}: {detail}" for (page, what), detail in sorted(new.items())]
    report += [f"/{page} {what}: listed in KNOWN but no longer differs" for page, what in gone]
    assert not report, f"{len(report)} differences between the two builds:\n" + "\n".join(report)


def test_the_zensical_site_shows_the_books_features(zensical_site: Path):
    """Not only equal to MkDocs': the features are there (two sites that both lost them
    would compare equal). The expected counts come from the sources."""
    from hooks import pagecode

    page = "ch02/strides.md"
    text = (pagecode.DOCS / page).read_text(encoding="utf-8")
    blocks, recorded = pagecode.blocks(text), pagecode.load_outputs(page)
    printed = [pagecode.recorded_output(b, blocks, recorded) for b in blocks]
    strides, _ = page_features((zensical_site / "ch02/strides/index.html").read_text("utf-8"))
    assert strides["outputs"] == sum(1 for r in printed if r and r["stdout"]) > 0
    assert strides["downloads"] == 2 and strides["math"] > 0
    directives = (pagecode.DOCS / "api/tensor.md").read_text("utf-8").count("\n::: ")
    tensor, _ = page_features((zensical_site / "api/tensor/index.html").read_text("utf-8"))
    assert tensor["api entries"] >= directives > 0


def test_zensical_site_links_resolve(zensical_site: Path):
    broken, _ = check_site_links(zensical_site)
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:50])


def test_zensical_old_urls_redirect_to_the_new_pages(zensical_site: Path):
    """Zensical writes mkdocs.yml's redirects itself, as mkdocs-redirects does."""
    problems = check_redirects(zensical_site)
    assert not problems, f"{len(problems)} redirects are wrong:\n" + "\n".join(problems)


def test_the_feature_counter_counts_only_the_article():
    html = (
        '<nav><div class="admonition"></div></nav>'
        '<article class="md-content__inner md-typeset"><h1 id="t">T</h1>'
        '<div class="admonition note"><p><span class="arithmatex">x</span></p></div>'
        '<div class="sitp-output"><pre>1</pre></div><img src="a.png">'
        '<a href="x.py" download="x.py">x</a><details><summary>s</summary></details>'
        '</article><div class="sitp-output"></div>'
    )
    counts, anchors = page_features(html)
    assert counts["admonitions"] == 2 and counts["outputs"] == 1 and counts["math"] == 1
    assert counts["images"] == 1 and counts["downloads"] == 1 and anchors == {"t"}
