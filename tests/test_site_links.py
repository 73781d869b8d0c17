"""Every link of the built site resolves: internal links and their anchors, offline.

Reads the HTML that ``mkdocs build`` wrote (the ``built_site`` fixture of conftest.py)
with the standard library's html.parser. A link to another page must name a file of the
site, and its ``#anchor`` an ``id`` on that page. External links are listed (in the
report below and in ``$SITP_SCREENSHOTS/external-links.txt``), never fetched: the checks
run without a network.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest
import yaml

pytestmark = pytest.mark.site

ROOT = Path(__file__).resolve().parent.parent
# (tag, attribute) pairs that point at another resource.
LINK_ATTRS = {
    ("a", "href"),
    ("link", "href"),
    ("script", "src"),
    ("img", "src"),
    ("source", "src"),
    ("iframe", "src"),
}
# Pages whose links are not relative to their own place: Material's 404 page is served
# from any URL and links from the site root.
SKIP_PAGES = {"404.html"}


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (tag != "meta" or name == "id"):
                self.ids.add(value)
            if (tag, name) in LINK_ATTRS:
                self.links.append((tag, value))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _target_file(site: Path, page: Path, url: str) -> Path:
    path = unquote(urlsplit(url).path)
    target = (site / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target.resolve()


def check_site_links(site: Path) -> tuple[list[str], dict[str, set[str]]]:
    """Broken internal links of a built site (one line each) and its external links."""
    pages = {p.resolve(): None for p in site.rglob("*.html")}
    parsed: dict[Path, _Page] = {}

    def get(path: Path) -> _Page:
        if path not in parsed:
            parsed[path] = _parse(path)
        return parsed[path]

    broken: list[str] = []
    external: dict[str, set[str]] = defaultdict(set)
    for page in sorted(pages):
        rel = page.relative_to(site.resolve()).as_posix()
        if rel in SKIP_PAGES or rel.startswith("assets/"):
            continue
        for tag, url in get(page).links:
            split = urlsplit(url)
            if split.scheme in ("http", "https", "mailto", "ftp") or url.startswith("//"):
                external[url].add(rel)
                continue
            if split.scheme in ("data", "javascript", "blob"):
                continue
            if split.scheme:
                broken.append(f"{rel}: <{tag}> {url}: unknown scheme {split.scheme!r}")
                continue
            base, fragment = urldefrag(url)
            target = _target_file(site, page, base) if base else page
            if not target.exists():
                broken.append(f"{rel}: <{tag}> {url}: no such file in the site")
                continue
            if fragment and target.suffix == ".html":
                if unquote(fragment) not in get(target).ids:
                    where = target.relative_to(site.resolve()).as_posix()
                    broken.append(f"{rel}: <{tag}> {url}: no id {fragment!r} on {where}")
    return broken, external


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's tags (``!ENV``) read as nothing: only the redirects are wanted."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def redirect_maps() -> dict[str, str]:
    """mkdocs.yml's redirects, old page -> new page ("part3/zero.md" -> "ch07/zero.md")."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    for entry in config["plugins"]:
        if isinstance(entry, dict) and "redirects" in entry:
            return entry["redirects"]["redirect_maps"]
    return {}


def _url_dir(page: str) -> str:
    """The folder of a page's URL: "ch07/zero" for "ch07/zero.md"."""
    return page.removesuffix(".md").removesuffix("/index")


def check_redirects(site: Path) -> list[str]:
    """What is wrong with the redirects of a built site (one line each): each old URL of
    mkdocs.yml's ``redirect_maps`` must be a page that sends the reader, by its
    ``<meta http-equiv="refresh">`` and its canonical link, to the new URL, a page of
    the book (not another redirect)."""
    problems = []
    for old, new in redirect_maps().items():
        page = site / _url_dir(old) / "index.html"
        want = (site / _url_dir(new) / "index.html").resolve()
        if not page.is_file():
            problems.append(f"/{_url_dir(old)}/: no page")
            continue
        html = page.read_text(encoding="utf-8")
        refresh = re.search(r'<meta http-equiv="refresh" content="0; url=([^"]+)"', html)
        canonical = re.search(r'<link rel="canonical" href="([^"]+)"', html)
        for what, found in (("refresh", refresh), ("canonical link", canonical)):
            if not found:
                problems.append(f"/{_url_dir(old)}/: no {what}")
            elif _target_file(site, page, found[1]) != want:
                problems.append(f"/{_url_dir(old)}/: {what} to {found[1]}, not /{_url_dir(new)}/")
        if not want.is_file():
            problems.append(f"/{_url_dir(old)}/: its new page /{_url_dir(new)}/ is not built")
        elif "md-content" not in want.read_text(encoding="utf-8"):
            problems.append(f"/{_url_dir(new)}/ (from /{_url_dir(old)}/) is not a page of the book")
        for tag, url in _parse(page).links:
            if _target_file(site, page, urldefrag(url)[0]) != want:
                problems.append(f"/{_url_dir(old)}/: <{tag}> {url}, not to /{_url_dir(new)}/")
    return problems


def test_redirects_point_at_pages():
    """Each redirect of mkdocs.yml leads from a URL that no page has any more to a page."""
    docs = ROOT / "docs"
    maps = redirect_maps()
    assert maps, "mkdocs.yml has no redirect_maps"
    for old, new in maps.items():
        assert not (docs / old).exists(), f"{old} is a page: its redirect would replace it"
        assert (docs / new).is_file(), f"{old} redirects to {new}, which is not in docs/"


def test_old_urls_redirect_to_the_new_pages(built_site: Path):
    problems = check_redirects(built_site)
    assert not problems, f"{len(problems)} redirects are wrong:\n" + "\n".join(problems)


def test_site_links_resolve(built_site: Path):
    broken, external = check_site_links(built_site)
    out = Path(os.environ.get("SITP_SCREENSHOTS", ROOT / "build" / "site-check"))
    out.mkdir(parents=True, exist_ok=True)
    listing = "".join(
        f"{url}\t{', '.join(sorted(pages))}\n" for url, pages in sorted(external.items())
    )
    (out / "external-links.txt").write_text(listing, encoding="utf-8")
    print(f"{len(external)} external links (not fetched), listed in {out}/external-links.txt")
    print(listing)
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken)


def test_link_checker_catches_a_broken_anchor(tmp_path: Path):
    """The checker itself: a missing file and a missing anchor are reported."""
    (tmp_path / "a").mkdir()
    (tmp_path / "index.html").write_text(
        '<h2 id="here">x</h2><a href="a/#there">ok</a><a href="#here">ok</a>'
        '<a href="a/#nowhere">bad</a><a href="b/">bad</a><a href="https://example.org">x</a>'
    )
    (tmp_path / "a" / "index.html").write_text('<p id="there">y</p><a href="../">up</a>')
    broken, external = check_site_links(tmp_path)
    assert len(broken) == 2, broken
    assert "nowhere" in broken[0] and "b/" in broken[1]
    assert list(external) == ["https://example.org"]
