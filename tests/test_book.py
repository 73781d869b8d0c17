"""Tests of the book's machinery: every fence is tested, the site and CI are wired up.

The fences themselves are executed by pytest-markdown-docs (``make test`` passes
``--markdown-docs docs``); these tests make sure that nothing escapes it.
"""

from __future__ import annotations

import doctest
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hooks.fences import PYTHON_LANGS, make_parser, parsed_fences, scan_fences

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
SNIPPET = re.compile(r"^\s*-{1,}8<-{1,}\s", re.MULTILINE)


def page_id(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


def test_there_are_pages():
    assert len(PAGES) >= 10


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_python_fence_is_executed_or_a_snippet_include(page: Path):
    """A Python fence on a page is run by the tests, or shows package code by --8<--.

    Compares a line-based scan of the page with what pytest-markdown-docs collects
    through the hooked markdown-it parser (the one the root conftest.py hands it), so a
    fence in a construct the parser does not understand fails here instead of being
    skipped in silence.
    """
    from pytest_markdown_docs.plugin import FenceSyntax, extract_fence_tests

    text = page.read_text(encoding="utf-8")
    rel = page.relative_to(ROOT)
    scanned = [f for f in scan_fences(text) if f.lang in PYTHON_LANGS]
    parsed = {f.line: f for f in parsed_fences(text) if f.lang in PYTHON_LANGS}
    collected = {
        t.start_line
        for t in extract_fence_tests(
            make_parser(), text, 0, page, fence_syntax=FenceSyntax.superfences
        )
    }
    problems = []
    for fence in scanned:
        where = f"{rel}:{fence.line}"
        if fence.closing_line is None:
            problems.append(f"{where}: fence is never closed")
        if fence.line not in parsed:
            problems.append(
                f"{where}: the test runner's Markdown parser does not see this fence "
                "(is it in a block other than !!!/???/=== or a list, or badly indented?)"
            )
            continue
        is_snippet = bool(SNIPPET.search(fence.content))
        if "notest" in fence.options:
            if not is_snippet:
                problems.append(
                    f"{where}: `notest` is only for snippet includes (--8<--) of package "
                    "code; make the example run, or show output in a pycon block"
                )
        else:
            if is_snippet:
                problems.append(
                    f"{where}: a --8<-- include is not expanded by the test runner; "
                    "write the fence as ```{.python notest}"
                )
            if fence.line not in collected:
                problems.append(f"{where}: pytest-markdown-docs would not run this fence")
        for opt in fence.options - {"notest", "continuation"}:
            # attributes (title="...", hl_lines="2 3", #id, .class) are the site's business;
            # a bare word is an option for the test runner, and a typo must not pass
            if "=" in opt or '"' in opt or opt.startswith(("#", ".")):
                continue
            if not opt.startswith(("fixture:", "runner:", "retry:")):
                problems.append(f"{where}: unknown fence option {opt!r}")
        if fence.content.lstrip().startswith(">>>"):
            problems.append(f"{where}: a `>>>` session in a python fence; use ```pycon")
    extra = set(parsed) - {f.line for f in scanned}
    problems += [f"{rel}:{line}: parser sees a fence the scan does not" for line in extra]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_pycon_fences_are_doctests(page: Path):
    """```pycon blocks hold `>>>` examples and end with a blank line, for doctest."""
    text = page.read_text(encoding="utf-8")
    problems = []
    for fence in scan_fences(text):
        if fence.lang != "pycon":
            continue
        where = f"{page.relative_to(ROOT)}:{fence.line}"
        if not doctest.DocTestParser().get_examples(fence.content):
            problems.append(f"{where}: a pycon block without a `>>>` example")
        if not fence.content.endswith("\n\n"):
            problems.append(
                f"{where}: leave a blank line before the closing fence, or doctest "
                "reads the fence as expected output"
            )
    assert not problems, "\n".join(problems)


def test_fences_in_admonitions_and_tabs_are_collected(tmp_path):
    """The parser finds fences nested in !!!, ???+, === and lists (and not in ````md)."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\na = 1\n```\n\n"
        '!!! note "n"\n    text\n\n    ```python\n    b = 2\n    ```\n\n'
        '=== "A"\n\n    ```{.python continuation}\n    c = 3\n    ```\n\n'
        '???+ tip\n    !!! warning\n        ```py\n        d = 4\n        ```\n\n'
        "- item\n\n    ```python\n    e = 5\n    ```\n\n"
        "````markdown\n```python\nnot_a_fence\n```\n````\n",
        encoding="utf-8",
    )
    text = page.read_text()
    lines = [f.line for f in parsed_fences(text) if f.lang in PYTHON_LANGS]
    assert lines == [f.line for f in scan_fences(text) if f.lang in PYTHON_LANGS]
    assert lines == [1, 8, 14, 20, 26]


def test_the_scan_catches_a_fence_the_parser_misses():
    """A fence the parser reads as text (here: indented under a paragraph) is reported."""
    text = "Some text:\n    ```python\n    x = 1\n    ```\n"
    assert [f.line for f in scan_fences(text)] == [2]
    assert parsed_fences(text) == []


def test_a_failing_fence_in_a_tab_fails(pytester_markdown):
    """End to end: pytest-markdown-docs really runs a fence inside a content tab."""
    result = pytester_markdown(
        '=== "Tab"\n\n    ```python\n    raise RuntimeError("ran")\n    ```\n\n'
        '!!! note\n    ```python\n    assert 1 + 1 == 2\n    ```\n'
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError*ran*"])


@pytest.fixture
def pytester_markdown(pytester):
    """Run pytest-markdown-docs, with the book's conftest, on one Markdown page."""

    def run(markdown: str):
        pytester.makeconftest((ROOT / "conftest.py").read_text(encoding="utf-8"))
        shutil.copytree(ROOT / "hooks", pytester.path / "hooks")
        pytester.makefile(".md", page=markdown)
        return pytester.runpytest_subprocess(
            "--markdown-docs", "--markdown-docs-syntax=superfences", "-p", "no:xdist",
            "-p", "no:cacheprovider", "page.md",
        )

    return run


def test_no_placeholder_text_on_pages():
    words = re.compile(r"\b(TODO|TBD|FIXME)\b|lorem ipsum|coming soon", re.IGNORECASE)
    hits = []
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            m = words.search(line)
            if m and (m.group(0).isupper() or m.group(0).lower() in ("lorem ipsum", "coming soon")):
                hits.append(f"{page.relative_to(ROOT)}:{n}: {m.group(0)}")
    assert not hits, "\n".join(hits)


# --- the site -------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """mkdocs.yml uses tags such as !ENV; read them as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def mkdocs_config() -> dict:
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)


def nav_files(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            out += nav_files(value)
        else:
            out.append(value)
    return out


def test_nav_files_exist_and_every_page_is_in_nav():
    files = nav_files(mkdocs_config()["nav"])
    missing = [f for f in files if not (DOCS / f).is_file()]
    assert not missing, f"in nav but not in docs/: {missing}"
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*") if p.suffix in (".md", ".ipynb")}
    assert not pages - set(files), f"pages missing from nav: {sorted(pages - set(files))}"
    for part in ("ch01/index.md", "ch02/strides.md", "ch02/kernels.md", "ch02/blas.md",
                 "ch03/gpt.md", "ch04/attention.md", "part3/index.md", "projects.md"):
        assert part in files


def test_mkdocs_config_is_strict_and_offline():
    config = mkdocs_config()
    assert config["strict"] is True
    assert set(config["validation"]) >= {"omitted_files", "unrecognized_links", "anchors",
                                         "absolute_links"}
    assert config["theme"]["name"] == "material"
    exts = {next(iter(e)) if isinstance(e, dict) else e for e in config["markdown_extensions"]}
    assert {"pymdownx.superfences", "pymdownx.snippets", "pymdownx.arithmatex",
            "pymdownx.tabbed", "admonition", "pymdownx.details"} <= exts
    scripts = config["extra_javascript"] + config.get("extra_css", [])
    assert not [s for s in scripts if "//" in str(s)], "no CDN: the book must work offline"


def test_planned_pages_say_what_they_will_cover():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if '!!! note "Planned"' in text:
            body = text.split('!!! note "Planned"', 1)[1]
            assert len(body.split()) >= 40, f"{page}: say concretely what it will cover"


# --- continuous integration -----------------------------------------------------------

WORKFLOWS = ROOT / ".github" / "workflows"
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads `on:` as True
    return data


def steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def all_uses(data: dict) -> list[str]:
    return [s["uses"] for job in data["jobs"].values() for s in steps(job) if "uses" in s]


@pytest.mark.parametrize("name", ["ci.yml", "gpu.yml", "pages.yml"])
def test_workflow_pins_actions_and_limits_permissions(name):
    data = workflow(name)
    assert "permissions" in data
    for uses in all_uses(data):
        assert SHA_PIN.match(uses), f"{name}: pin {uses} to a full commit SHA"
    for job in data["jobs"].values():
        for step in steps(job):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False


def test_ci_workflow_runs_make_test_and_uploads_the_site():
    data = workflow("ci.yml")
    assert {"push", "pull_request"} <= set(data["on"])
    job = data["jobs"]["test"]
    runs = " ".join(s.get("run", "") for s in steps(job))
    assert "make test" in runs
    assert any("upload-artifact" in s.get("uses", "") and s["with"]["path"] == "site"
               for s in steps(job))


def test_gpu_workflow_never_runs_pull_requests_from_forks():
    data = workflow("gpu.yml")
    assert set(data["on"]) <= {"push", "workflow_dispatch"}
    job = data["jobs"]["gpu"]
    assert "gpu" in job["runs-on"] and "self-hosted" in job["runs-on"]
    assert "github.event_name" in job["if"] and "fork == false" in job["if"]
    runs = " ".join(s.get("run", "") for s in steps(job))
    assert "-m gpu" in runs and "gpu-gemm" in runs and "gpu-attention" in runs
    assert str(job.get("env", {}).get("NUMBA_ENABLE_CUDASIM")) == "0"


def test_pages_workflow_deploys_from_main():
    data = workflow("pages.yml")
    assert data["on"]["push"]["branches"] == ["main"]
    uses = all_uses(data)
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses)
    assert any(u.startswith("actions/deploy-pages@") for u in uses)
    assert data["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}


def test_ci_run_calls_make_test():
    script = ROOT / ".ci" / "run"
    assert script.stat().st_mode & 0o111, ".ci/run must be executable"
    assert re.search(r"^\s*(exec\s+)?make test\s*$", script.read_text(), re.MULTILINE)


def test_api_reference_fences_docstring_examples():
    """hooks/griffe_doctests.py: a docstring's ``>>>`` examples render as code, once."""
    from hooks.griffe_doctests import fence_doctests

    text = "Sum:\n\nExample:\n    >>> [1][0] + 1\n    2\n\nDone.\n```\n>>> kept\n```"
    assert fence_doctests(text) == (
        "Sum:\n\nExample:\n    ```pycon\n    >>> [1][0] + 1\n    2\n    ```\n\nDone.\n"
        "```\n>>> kept\n```"
    )


def test_api_reference_turns_sphinx_roles_into_markdown():
    from hooks.griffe_doctests import sphinx_roles

    assert sphinx_roles(r"See :func:`sitp.tensor` and :math:`1 - \lambda`.") == (
        r"See `sitp.tensor` and \(1 - \lambda\)."
    )


def test_api_reference_is_in_the_nav():
    nav = nav_files(mkdocs_config()["nav"])
    for page in ("tensor", "creation", "autograd", "nn", "functional", "optim", "data",
                 "models", "cuda"):
        assert f"api/{page}.md" in nav, (page, nav)
        assert (DOCS / "api" / f"{page}.md").read_text().count(":::") >= 1, page


def test_numbers_page_copies_the_chapters():
    """docs/numbers.md copies measured numbers: each must still be on the page it links to.

    Every line of the page that links to a chapter section, and every decimal number
    (two or more decimals) on that line must appear in the linked page's source. A
    chapter that re-measures makes this fail until the numbers page is updated.
    """
    text = (DOCS / "numbers.md").read_text(encoding="utf-8")
    problems = []
    for lineno, line in enumerate(text.splitlines(), 1):
        links = re.findall(r"\]\(((?:ch\d\d|projects)[^)#]*\.md)", line)
        if not links:
            continue
        sources = "".join((DOCS / link).read_text(encoding="utf-8") for link in set(links))
        for number in re.findall(r"(?<![\d.])\d+\.\d{2,}(?![\d.])", line):
            if number not in sources:
                problems.append(f"docs/numbers.md:{lineno}: {number} is not on {links[0]}")
    assert not problems, "\n".join(problems)


def test_make_serve_installs_only_the_docs_tools():
    """`make serve` sets up the package with the docs extra: no torch, no browser."""
    dry = subprocess.run(
        ["make", "-n", "-B", "serve"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in dry.splitlines() if "pip install" in line]
    assert installs and all('".[docs]"' in line for line in installs), installs
    assert "mkdocs serve" in dry and "-w " not in dry  # watched paths: mkdocs.yml's watch:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    assert {"src", "hooks"} <= set(config["watch"])


def test_serve_ignores_generated_files(tmp_path):
    """Bytecode and numba caches written while serving do not rebuild; a source edit does."""
    import time
    from types import SimpleNamespace

    from mkdocs.livereload import LiveReloadServer

    from hooks import book

    docs, src, cfg = tmp_path / "docs", tmp_path / "src", tmp_path / "mkdocs.yml"
    docs.mkdir()
    src.mkdir()
    cfg.write_text("site_name: x\n")
    (src / "m.py").write_text("x = 1\n")
    server = LiveReloadServer(builder=lambda: None, host="127.0.0.1", port=0, root=str(tmp_path))
    server.watch(str(docs))
    server.watch(str(cfg))
    book.on_serve(server, SimpleNamespace(docs_dir=str(docs), config_file_path=str(cfg)), None)
    server.watch(str(src))
    server.observer.start()
    try:
        (src / "__pycache__").mkdir()
        (src / "__pycache__" / "m.cpython-312.pyc").write_bytes(b"\0" * 16)
        (src / "__pycache__" / "m.f-1.py312.nbi").write_bytes(b"\0" * 16)
        (docs / "__pycache__").mkdir()
        (docs / "__pycache__" / "page.f-1.py312.1.nbc").write_bytes(b"\0" * 16)
        (src / "m.py").read_text()  # reading is no change either
        time.sleep(1.0)
        assert not server._want_rebuild
        (src / "m.py").write_text("x = 2\n")
        deadline = time.monotonic() + 10
        while not server._want_rebuild and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server._want_rebuild
    finally:
        server.observer.stop()
        server.observer.join()


def test_continuation_fences_get_a_visible_mark():
    """hooks/book.py turns the bare word into a class and a title bar; the test runner
    reads the page itself, so the fence stays a continuation for it."""
    from hooks.book import CONTINUATION_TITLE, mark_continuations

    page = (
        "```python\nx = 1\n```\n\n"
        "```{.python continuation}\ny = x\n```\n\n"
        '=== "Tab"\n\n    ```{.python continuation title="mine"}\n    z = y\n    ```\n\n'
        "```{.python notest}\n--8<-- \"src/sitp/tensor.py:views\"\n```\n"
    )
    marked = mark_continuations(page)
    assert f'```{{.python .continuation title="{CONTINUATION_TITLE}"}}\ny = x' in marked
    assert '    ```{.python title="mine" .continuation}\n    z = y' in marked
    assert "```{.python notest}" in marked and "```python\nx = 1" in marked
    import markdown

    html = markdown.markdown(
        marked,
        extensions=["pymdownx.superfences", "pymdownx.highlight"],
        extension_configs={"pymdownx.highlight": {"pygments_lang_class": True}},
    )
    assert html.count(
        f'class="language-python continuation highlight"><span class="filename">'
        f"{CONTINUATION_TITLE}</span>"
    ) == 1
