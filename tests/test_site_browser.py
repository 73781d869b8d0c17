"""The published book, checked in a real browser: headless Chromium driven by Playwright.

Both builds of the book are checked, each the same way: the MkDocs site (the
``built_site`` fixture of conftest.py, the published one) and the Zensical site
(``zensical_site``, scripts/zensical_build.py); a test's id starts with its build. A site
is served on 127.0.0.1 by the standard library's http.server in a thread, and Debian's Chromium (``apt-get install
chromium``; ``.ci/run`` installs it) opens every page. Playwright's own browser downloads
are never used: the tests launch ``/usr/bin/chromium`` (or ``$SITP_CHROMIUM``), and skip
with a message when it is missing, except in CI, where a missing browser fails.

Checked on every page: it loads without console errors, page errors or failed requests,
and requests nothing from a host other than 127.0.0.1; its math is typeset by KaTeX; its
images load; its code blocks have copy buttons. Then: search finds the chapters, the
light/dark toggle switches the palette, the notebook page shows its plots. Screenshots of
key pages go to ``$SITP_SCREENSHOTS`` (default ``build/site-check``; CI uploads it), the
Zensical build's with the prefix ``zensical-``.

Run alone: ``pytest -m browser tests`` (builds the site into a temporary directory).
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Pages that get a screenshot (light palette; the home page also in dark).
SCREENSHOT_PAGES = ["", "ch02/strides/", "ch04/attention/", "notebooks/hello/", "api/tensor/"]
# Chapters a search must find: (query, a path the results must link to).
SEARCHES = [("attention", "ch04/attention/"), ("strides", "ch02/strides/")]


def _chromium() -> str | None:
    for candidate in (os.environ.get("SITP_CHROMIUM"), "/usr/bin/chromium", "chromium"):
        if candidate and (found := shutil.which(candidate)):
            return found
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


BUILDS = ["mkdocs", "zensical"]
# A notebook's figures: mkdocs-jupyter's HTML, or the images of nbconvert's Markdown page
# (scripts/zensical_build.py).
NOTEBOOK_IMAGES = {
    "mkdocs": ".jp-RenderedImage img, .output_png img",
    "zensical": ".md-content article img",
}


@pytest.fixture(scope="module", params=BUILDS)
def build(request) -> str:
    """Which builder made the site under test."""
    return request.param


@pytest.fixture(scope="module")
def site(build: str, request) -> Path:
    return request.getfixturevalue("built_site" if build == "mkdocs" else "zensical_site")


@pytest.fixture(scope="module")
def server(site: Path):
    """The site on http://127.0.0.1:<free port>/, served from a thread."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    executable = _chromium()
    if executable is None:
        message = "no Chromium: apt-get install chromium (or set SITP_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def shots(build: str) -> tuple[Path, str]:
    """Where screenshots go, and the prefix of their names ("" for the MkDocs build)."""
    out = Path(os.environ.get("SITP_SCREENSHOTS", ROOT / "build" / "site-check"))
    out.mkdir(parents=True, exist_ok=True)
    return out, "" if build == "mkdocs" else f"{build}-"


# The search index of each builder, relative to the site's root, and the key of its list
# of documents.
SEARCH_INDEXES = {"search/search_index.json": "docs", "search.json": "items"}


def _empty_search_indexes(site: Path) -> dict[str, bytes]:
    """The site's search index with its documents left out, by URL path (its
    configuration kept, so that the theme's search worker starts as it does on the
    real index)."""
    import json

    empty = {}
    for rel, docs in SEARCH_INDEXES.items():
        if (site / rel).is_file():
            index = json.loads((site / rel).read_text(encoding="utf-8"))
            index[docs] = []
            empty["/" + rel] = json.dumps(index).encode()
    return empty


NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"  # see Visit.open


class Visit:
    """A browser tab that records what went wrong while it loaded pages.

    With ``empty_search`` (the mapping :func:`_empty_search_indexes` returns), every page
    is given a search index with no documents: the theme's search worker fetches the
    site's index (2 MB) and builds it again at every page load, the same on every page,
    and that was half the browser's work in the page-by-page check. The search tests
    load the real index.
    """

    def __init__(
        self, browser, base: str, empty_search: dict[str, bytes] | None = None, **context_args
    ):
        self.base = base
        self.problems: list[str] = []
        self.empty_search = empty_search or {}
        self.empty_search_served = 0
        self.context = browser.new_context(
            viewport={"width": 1280, "height": 900}, service_workers="block", **context_args
        )
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        self.loads = 0  # page loads begun (open)
        self.started: dict = {}  # request in flight -> the load it was made in
        self.page.on("request", lambda req: self.started.__setitem__(req, self.loads))
        self.page.on("requestfinished", lambda req: self.started.pop(req, None))
        self.page.on("requestfailed", self._failed)
        self.page.on("response", self._response)

    def _failed(self, req):
        """A failed request is a problem, except one the browser cancelled
        (``net::ERR_ABORTED``) that was not the page's to make: a request of an earlier
        page cut off when the next load began (the search worker's script, fetched after
        the load event, which a load that does not wait for the network to settle leaves
        in flight), or the tab's favicon, which Chromium fetches for itself and cancels
        at will, during a load as well as between two. A favicon that is missing still
        fails: as an HTTP 404 (``_response``)."""
        made_in = self.started.pop(req, self.loads)
        if "ERR_ABORTED" in (req.failure or ""):
            icon = req.resource_type == "other" and "favicon" in urlsplit(req.url).path
            if made_in < self.loads or icon:
                return
        self.problems.append(f"request failed: {req.url} ({req.failure})")

    def _route(self, route):
        host = urlsplit(route.request.url).hostname
        if host == "127.0.0.1" and (
            body := self.empty_search.get(urlsplit(route.request.url).path)
        ):
            route.fulfill(status=200, content_type="application/json", body=body)
            self.empty_search_served += 1
        elif route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            self.problems.append(f"request to another host: {route.request.url}")
            route.abort()

    def _console(self, msg):
        if msg.type == "error":
            self.problems.append(f"console error: {msg.text}")

    def _response(self, response):
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def open(self, path: str, settle: bool = True):
        """Load ``path``; with ``settle``, also wait until the network has been idle for
        half a second, so that requests made after the load event (the search index,
        fonts) are recorded too. Those come from the theme, the same on every page: the
        page-by-page check loads without it and the other tests settle.

        Chromium fails the requests in flight with ``net::ERR_NETWORK_CHANGED`` when the
        host's network interfaces change. tests/test_multihost.py once did that in another
        worker (it added a bridge and veth links beside the host's interfaces; they now
        live in network namespaces of their own), and any program on a reader's machine
        may. A load that saw only such failures is the host's doing, not the page's: it
        is made once more, the problems it recorded dropped."""
        before = len(self.problems)
        self._load(path, settle)
        new = self.problems[before:]
        if new and all(NETWORK_CHANGED in p for p in new):
            del self.problems[before:]
            self._load(path, settle)
        return self.page

    def _load(self, path: str, settle: bool):
        self.loads += 1
        self.page.goto(self.base + path, wait_until="load")
        if settle:
            self.page.wait_for_load_state("networkidle")

    def close(self):
        self.context.close()


def _url_path(source: Path) -> str:
    """The URL path of a page's source under docs/ ("ch02/strides.md" -> "ch02/strides/")."""
    rel = source.relative_to(DOCS).with_suffix("")
    if rel.name in ("index", "README"):
        rel = rel.parent
    return "" if rel.as_posix() == "." else rel.as_posix() + "/"


DOCS = ROOT / "docs"
PAGES = sorted(
    _url_path(p)
    for p in [*DOCS.rglob("*.md"), *DOCS.rglob("*.ipynb")]
    if ".ipynb_checkpoints" not in p.parts
)


def test_every_source_page_is_in_the_site(site: Path):
    from tests.test_site_links import redirect_maps

    # The old URLs of moved pages hold redirects (tests/test_site_links.py checks them).
    moved = {_url_path(DOCS / old) for old in redirect_maps()}
    built = sorted(
        "" if (rel := i.parent.relative_to(site).as_posix()) == "." else rel + "/"
        for i in site.rglob("index.html")
        if not i.relative_to(site).as_posix().startswith("assets/")
    )
    assert [p for p in built if p not in moved] == PAGES


def _continuations(source: Path) -> int:
    from hooks.fences import PYTHON_LANGS, scan_fences

    return sum(
        1
        for f in scan_fences(source.read_text(encoding="utf-8"))
        if f.lang in PYTHON_LANGS and "continuation" in f.options
    )


CONTINUATIONS = {_url_path(p): _continuations(p) for p in DOCS.rglob("*.md")}
# The numbers the reader sees on the items of the ordered lists under each "Exercises"
# heading (an <ol start="2"> after a solution block continues at 2).
EXERCISE_NUMBERS = r"""() => {
  const out = {};
  for (const h of document.querySelectorAll('.md-content h2')) {
    if (!/exercise/i.test(h.textContent)) continue;
    const seen = [];
    for (let e = h.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling) {
      if (e.tagName !== 'OL') continue;
      const start = e.hasAttribute('start') ? parseInt(e.getAttribute('start')) : 1;
      [...e.children].filter(li => li.tagName === 'LI').forEach((li, i) => seen.push(start + i));
    }
    out[h.textContent.replace(/[¶\s]+$/, '')] = seen;
  }
  return out;
}"""


@pytest.fixture(scope="module")
def tab(site: Path, server: str, browser):
    """One tab for the page-by-page checks; it records problems per page. Its pages get
    an empty search index (see Visit); the search tests below load the real one."""
    visit = Visit(browser, server, empty_search=_empty_search_indexes(site))
    yield visit
    visit.close()


# The Zensical build is checked page by page on a sample: its HTML is compared with the
# MkDocs build's on every page, feature by feature (tests/test_zensical.py), so what the
# browser adds here is the run time (scripts, KaTeX, images), which the sample covers
# with pages of each kind: the home page, chapters' openings and long pages, math,
# API entries, the generated coverage page, the notebook. A page load costs 1-3 s.
ZENSICAL_PAGES = [
    "",
    "ch01/",
    "ch02/strides/",
    "ch03/gpt/",
    "ch04/autodiff/",
    "ch04/attention/",
    "part3/",
    "ch07/zero/",
    "api/tensor/",
    "api/coverage/",
    "notebooks/hello/",
    "projects/",
]
assert set(ZENSICAL_PAGES) <= set(PAGES), set(ZENSICAL_PAGES) - set(PAGES)
PAGE_CASES = [("mkdocs", p) for p in PAGES] + [("zensical", p) for p in ZENSICAL_PAGES]


# Everything the page-by-page check measures, in one call into the page (each locator
# count is a round trip to the browser). It first waits, up to wait_ms, for KaTeX to have
# typeset every formula (katex.js runs on Material's document$, at the page's load), so a
# slow render is waited for and a formula that never renders is reported.
PAGE_FACTS = r"""async (wait_ms) => {
  const raw = () => document.querySelectorAll('.arithmatex:not(:has(.katex))').length;
  for (let waited = 0; raw() && waited < wait_ms; waited += 50)
    await new Promise(r => setTimeout(r, 50));
  const errors = document.querySelectorAll('.katex-error');
  const code = '.md-content div.highlight pre > code';
  const copy = ".md-content div.highlight pre button[data-md-type='copy'],"
             + '.md-content div.highlight pre > button.md-clipboard';
  return {
    math: document.querySelectorAll('.arithmatex').length,
    raw: raw(),
    katex_errors: errors.length,
    first_error: errors.length ? errors[0].getAttribute('title') : null,
    broken: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))
      .map(i => i.currentSrc.slice(0, 100) || i.alt),
    blocks: document.querySelectorAll(code).length,
    copy_buttons: document.querySelectorAll(copy).length,
    wide: [...document.querySelectorAll(code + ', .md-content .jp-InputArea pre')]
      .filter(c => c.scrollWidth > c.clientWidth + 1)
      .map(c => `${c.scrollWidth} > ${c.clientWidth} px: ` + c.textContent.slice(0, 60)),
    continuations: document.querySelectorAll('.md-content .continuation > .filename').length,
    exercises: (EXERCISE_NUMBERS)(),
  };
}""".replace("EXERCISE_NUMBERS", EXERCISE_NUMBERS)


@pytest.mark.parametrize(
    "build,path", PAGE_CASES, ids=[f"{b}-{p or '/'}" for b, p in PAGE_CASES], indirect=["build"]
)
def test_page_loads_clean_with_math_images_and_copy_buttons(tab: Visit, build: str, path: str):
    tab.problems.clear()
    facts = tab.open(path, settle=False).evaluate(PAGE_FACTS, 5000)
    found = list(tab.problems)
    # Math: pymdownx.arithmatex leaves \( \) and \[ \] in span/div.arithmatex and
    # katex.js renders each one. None may stay raw or be rendered as an error.
    if facts["raw"]:
        found.append(f"{facts['raw']} of {facts['math']} formulas not typeset by KaTeX")
    if facts["katex_errors"]:
        found.append(
            f"KaTeX could not parse {facts['katex_errors']} formulas, first: {facts['first_error']}"
        )
    # Images: each one loaded and decoded (a broken one has naturalWidth 0).
    found += [f"image did not load: {src}" for src in facts["broken"]]
    # Code blocks: Material puts a copy button in each highlighted block.
    if facts["copy_buttons"] < facts["blocks"]:
        found.append(f"{facts['blocks']} code blocks, {facts['copy_buttons']} copy buttons")
    # Layout at 1280 px: no code block scrolls sideways (long lines wrap; the font keeps
    # its size), in chapters' blocks and in notebooks' cells alike.
    found += [f"code block scrolls sideways: {w}" for w in facts["wide"]]
    # Continuation fences: each one carries the mark hooks/book.py adds.
    expected = CONTINUATIONS.get(path, 0)
    if facts["continuations"] != expected:
        found.append(
            f"{expected} continuation fences in the source, {facts['continuations']} marked"
        )
    # Numbered exercises count 1, 2, 3, ... across the solution blocks between them.
    for heading, seen in facts["exercises"].items():
        if seen != list(range(1, len(seen) + 1)):
            found.append(f"exercises under {heading!r} are numbered {seen}")
    assert not found, f"/{path}: {len(found)} problems in the browser:\n" + "\n".join(found)


def test_the_page_by_page_tab_gets_an_empty_search_index(site: Path, tab: Visit):
    """The page-by-page check's shortcut applies to this build's index (a renamed index
    would be fetched and built again at every page), and the theme's search worker
    starts on it without an error."""
    assert _empty_search_indexes(site), f"no search index under {site}: {list(SEARCH_INDEXES)}"
    tab.problems.clear()
    served = tab.empty_search_served
    tab.open("ch01/")
    assert tab.empty_search_served > served
    assert not tab.problems, tab.problems


def test_math_is_typeset_by_katex(tab: Visit):
    """KaTeX itself runs: a page with formulas has KaTeX's rendered elements."""
    page = tab.open("ch04/autodiff/")
    assert page.locator(".arithmatex .katex").count() >= 10


# The search box of each build: Material's is in the header; Zensical's opens from a
# button, in a dialog of its own (a shadow root, which Playwright's locators enter).
SEARCH_UI = {
    "mkdocs": {
        "open": "input.md-search__input",
        "box": "input.md-search__input",
        "result": ".md-search-result__item",
        "link": ".md-search-result__item a",
    },
    "zensical": {
        "open": ".md-search__button",
        "box": "input[role=combobox]",
        "result": "a[role=option]",
        "link": "a[role=option]",
    },
}


def _search(visit, query: str, build: str):
    """The home page with ``query`` typed into the search box and its results shown."""
    ui = SEARCH_UI[build]
    page = visit.open("")
    page.locator(ui["open"]).first.click()
    page.locator(ui["box"]).first.press_sequentially(query, delay=20)
    page.locator(ui["result"]).first.wait_for(timeout=15_000)
    return page


@pytest.mark.parametrize("query,expected", SEARCHES, ids=[q for q, _ in SEARCHES])
def test_search_finds_the_chapter(server: str, browser, build: str, query: str, expected: str):
    visit = Visit(browser, server)
    try:
        page = _search(visit, query, build)
        # The list fills as the query is typed and the index answers: wait (up to 15 s)
        # for the chapter's link, then read what is listed, so a slow answer is not a miss.
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        wanted = page.locator(f'{SEARCH_UI[build]["link"]}[href*="{expected}"]').first
        try:
            wanted.wait_for(timeout=15_000)
        except PlaywrightTimeout:
            pass  # the assertion below names what was listed instead
        hrefs = page.locator(SEARCH_UI[build]["link"]).evaluate_all(
            "links => links.map(a => a.getAttribute('href'))"
        )
        assert any(expected in (href or "") for href in hrefs), (query, hrefs)
        assert not visit.problems, visit.problems
    finally:
        visit.close()


@pytest.mark.parametrize("query", ["attention", "softmax", "gradient"])
def test_search_previews_show_no_raw_latex(server: str, browser, build: str, query: str):
    """The index holds each page's source text; hooks/book.py turns its math into text
    (scripts/zensical_build.py, in Zensical's index)."""
    visit = Visit(browser, server)
    try:
        page = _search(visit, query, build)
        previews = page.locator(SEARCH_UI[build]["result"]).all_inner_texts()
        raw = [
            t[:200]
            for t in previews
            if re.search(r"\\[()\[\]]|\\(?:frac|times|sum|text|sqrt|mathbb)\b", t)
        ]
        assert previews and not raw, raw
    finally:
        visit.close()


def test_notebook_page_has_the_chapters_width_and_a_toc(server: str, browser):
    visit = Visit(browser, server)
    measure = """() => {
      const w = s => {
        const e = document.querySelector(s);
        return e ? Math.round(e.getBoundingClientRect().width) : null;
      };
      return {text: w('.md-content__inner'), cell: w('.jp-Cell') || w('.md-content__inner > p'),
              toc: document.querySelectorAll('.md-sidebar--secondary .md-nav__link').length};
    }"""
    try:
        chapter = visit.open("ch02/strides/").evaluate(measure)
        for path in [p for p in PAGES if p.startswith("notebooks/")]:
            notebook = visit.open(path).evaluate(measure)
            assert notebook["text"] == chapter["text"], (path, notebook, chapter)
            assert abs(notebook["cell"] - chapter["text"]) <= 2, (path, notebook, chapter)
            assert notebook["toc"] >= 2, (path, notebook)
    finally:
        visit.close()


def test_palette_toggle_switches_light_and_dark(server: str, browser, shots: tuple[Path, str]):
    folder, prefix = shots
    visit = Visit(browser, server, color_scheme="light")
    try:
        page = visit.open("")
        scheme = "() => document.body.getAttribute('data-md-color-scheme')"
        assert page.evaluate(scheme) == "default"
        page.locator("form[data-md-component='palette'] label:visible").click()
        page.wait_for_function(f"({scheme})() === 'slate'")
        page.screenshot(path=str(folder / f"{prefix}home-dark.png"))
        page.locator("form[data-md-component='palette'] label:visible").click()
        page.wait_for_function(f"({scheme})() === 'default'")
        assert not visit.problems, visit.problems
    finally:
        visit.close()


def test_notebook_page_shows_its_plots(server: str, browser, build: str):
    notebooks = [p for p in PAGES if p.startswith("notebooks/")]
    assert notebooks, "no notebook pages in the site"
    visit = Visit(browser, server)
    try:
        for path in notebooks:
            page = visit.open(path)
            sizes = page.evaluate(
                "selector => [...document.querySelectorAll(selector)].map(i => i.naturalWidth)",
                NOTEBOOK_IMAGES[build],
            )
            assert sizes and all(w > 0 for w in sizes), (path, sizes)
        assert not visit.problems, visit.problems
    finally:
        visit.close()


def test_screenshots_of_key_pages(server: str, browser, shots: tuple[Path, str]):
    folder, prefix = shots
    visit = Visit(browser, server, color_scheme="light")
    try:
        for path in SCREENSHOT_PAGES:
            page = visit.open(path)
            name = path.strip("/").replace("/", "-") or "home"
            page.screenshot(path=str(folder / f"{prefix}{name}.png"))
        assert not visit.problems, visit.problems
    finally:
        visit.close()
    assert (folder / f"{prefix}home.png").stat().st_size > 10_000


def test_the_checks_catch_errors_and_other_hosts(tmp_path: Path, browser):
    """The recorder itself: a console error, a missing file and another host are caught."""
    (tmp_path / "index.html").write_text(
        "<!doctype html><title>t</title>"
        "<script>console.error('boom')</script>"
        '<img src="missing.png"><img src="http://example.org/x.png">'
    )
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    visit = Visit(browser, f"http://127.0.0.1:{httpd.server_address[1]}/")
    try:
        visit.open("")
        found = "\n".join(visit.problems)
    finally:
        visit.close()
        httpd.shutdown()
        httpd.server_close()
    assert "console error: boom" in found, found
    assert "HTTP 404" in found and "missing.png" in found, found
    assert "request to another host: http://example.org/x.png" in found, found


def test_the_page_facts_see_raw_math_broken_images_and_missing_buttons(tmp_path: Path, browser):
    """The page-by-page check's measurements, on a page that fails each of them: a
    formula KaTeX never typesets (after waiting for it), one it could not parse, a
    broken image, a code block without a copy button that scrolls sideways."""
    (tmp_path / "index.html").write_text(
        "<!doctype html><title>t</title><div class='md-content'>"
        "<span class='arithmatex'>\\(x\\)</span>"
        "<span class='arithmatex'><span class='katex katex-error' title='bad'>y</span></span>"
        "<img src='missing.png' alt='gone'>"
        "<div class='highlight' style='width:100px'><pre><code style='display:block;overflow:auto;white-space:pre'>"
        + "x" * 400
        + "</code></pre></div></div>"
    )
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    visit = Visit(browser, f"http://127.0.0.1:{httpd.server_address[1]}/")
    try:
        facts = visit.open("", settle=False).evaluate(PAGE_FACTS, 200)
    finally:
        visit.close()
        httpd.shutdown()
        httpd.server_close()
    assert facts["math"] == 2 and facts["raw"] == 1, facts
    assert facts["katex_errors"] == 1 and facts["first_error"] == "bad", facts
    assert facts["broken"] == ["gone"] or facts["broken"][0].endswith("missing.png"), facts
    assert facts["blocks"] == 1 and facts["copy_buttons"] == 0, facts
    assert len(facts["wide"]) == 1 and facts["continuations"] == 0, facts
