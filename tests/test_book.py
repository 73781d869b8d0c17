"""Tests of the book's machinery: every fence is tested, the site and CI are wired up.

The fences themselves are executed by pytest-markdown-docs (``make test`` passes
``--markdown-docs docs``); these tests make sure that nothing escapes it.
"""

from __future__ import annotations

import doctest
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hooks import pagecode
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
        for opt in fence.options - {"notest", "continuation", "volatile-output"}:
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
        "???+ tip\n    !!! warning\n        ```py\n        d = 4\n        ```\n\n"
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
        "!!! note\n    ```python\n    assert 1 + 1 == 2\n    ```\n"
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
            "--markdown-docs",
            "--markdown-docs-syntax=superfences",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "page.md",
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
    pages = {
        p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*") if p.suffix in (".md", ".ipynb")
    }
    assert not pages - set(files), f"pages missing from nav: {sorted(pages - set(files))}"
    for part in (
        "ch01/index.md",
        "ch02/strides.md",
        "ch02/kernels.md",
        "ch02/blas.md",
        "ch03/gpt.md",
        "ch04/attention.md",
        "part3/index.md",
        "projects.md",
    ):
        assert part in files


def test_mkdocs_config_is_strict_and_offline():
    config = mkdocs_config()
    assert config["strict"] is True
    assert set(config["validation"]) >= {
        "omitted_files",
        "unrecognized_links",
        "anchors",
        "absolute_links",
    }
    assert config["theme"]["name"] == "material"
    exts = {next(iter(e)) if isinstance(e, dict) else e for e in config["markdown_extensions"]}
    assert {
        "pymdownx.superfences",
        "pymdownx.snippets",
        "pymdownx.arithmatex",
        "pymdownx.tabbed",
        "admonition",
        "pymdownx.details",
    } <= exts
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
    # one leg a make target: every check, and the pages' outputs on another vector width
    assert 'make "$CHECK"' in runs
    assert set(job["strategy"]["matrix"]["check"]) == {"test", "test-other-isa"}
    assert any(
        "upload-artifact" in s.get("uses", "") and s["with"]["path"] == "site" for s in steps(job)
    )
    cache = [s for s in steps(job) if s.get("uses", "").startswith("actions/cache@")]
    assert cache and "src/sitp/**/*.py" in cache[0]["with"]["key"]  # numba's, keyed on sources


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
    for page in (
        "tensor",
        "creation",
        "autograd",
        "nn",
        "functional",
        "optim",
        "data",
        "models",
        "cuda",
    ):
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

    from hooks import book
    from mkdocs.livereload import LiveReloadServer

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
        '```{.python notest}\n--8<-- "src/sitp/_tensor/tensor.py:views"\n```\n'
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
    assert (
        html.count(
            f'class="language-python continuation highlight"><span class="filename">'
            f"{CONTINUATION_TITLE}</span>"
        )
        == 1
    )


# --- what the blocks print, and the page's code to take away ------------------------------


@pytest.mark.parametrize(
    "page", [p for p in PAGES if pagecode.blocks(p.read_text("utf-8"))], ids=page_id
)
def test_every_block_has_its_current_output_recorded(page: Path):
    """docs/_outputs/<page>.json holds an output for the current code of every block.

    The hash of a record covers the block's code and that of the blocks it continues, so
    editing a block (or one it builds on) without `make outputs` fails here, at once;
    the copy-run test then checks that the recorded text is what the block prints.
    """
    rel = page_id(page)
    blocks = pagecode.blocks(page.read_text(encoding="utf-8"))
    recorded = pagecode.load_outputs(rel)
    stale = [
        f"docs/{rel}:{b.line}"
        for b in blocks
        if pagecode.recorded_output(b, blocks, recorded) is None
    ]
    assert not stale, (
        "no output recorded for the current code of "
        + ", ".join(stale)
        + f"; run `make outputs PAGE={rel}` and commit docs/_outputs/"
    )
    assert [r["hash"] for r in recorded] == [b.hash for b in blocks], (
        f"docs/_outputs/{Path(rel).with_suffix('.json')} has records of blocks the page no "
        f"longer has; run `make outputs PAGE={rel}`"
    )
    assert [r["volatile"] for r in recorded] == [b.volatile for b in blocks]


def test_no_outputs_recorded_for_pages_that_are_gone():
    pages = {page_id(p) for p in PAGES}
    orphans = [
        p.relative_to(ROOT).as_posix()
        for p in pagecode.OUTPUTS.rglob("*.json")
        if p.relative_to(pagecode.OUTPUTS).with_suffix(".md").as_posix() not in pages
    ]
    assert not orphans, orphans


SAMPLE = (
    "# 9.9 A page\n\nText.\n\n"
    "```python\nx = 1\nprint(x)\n```\n\n"
    "## Going on\n\n"
    '!!! note "In a box"\n    ```{.python continuation}\n    print(x + 1)\n    ```\n\n'
    "```{.python volatile-output}\nprint('took 12.5 ms on 2 threads <b>')\n```\n\n"
    "```python\ny = 2  # prints nothing\n```\n\n"
    '```{.python notest}\n--8<-- "src/sitp/strides.py:strided_index"\n```\n'
)


def test_blocks_hash_their_chain_and_mark_volatile_ones():
    blocks = pagecode.blocks(SAMPLE)
    assert [(b.line, b.continuation, b.volatile) for b in blocks] == [
        (5, False, False),
        (13, True, False),
        (17, False, True),
        (21, False, False),
    ]
    assert [b.heading for b in blocks] == ["9.9 A page", "Going on", "Going on", "Going on"]
    # a continuation's hash covers the block it continues: editing that one makes it stale
    edited = pagecode.blocks(SAMPLE.replace("x = 1", "x = 10"))
    assert edited[0].hash != blocks[0].hash and edited[1].hash != blocks[1].hash
    assert edited[2].hash == blocks[2].hash
    assert pagecode.masked("took 12.5 ms on 2 threads at 0x7f3a") == "took # ms on # threads at #"
    cached = "cached in /root/.cache/sitp/numba/e6a6e98a33ca/kernels/cpu"
    elsewhere = "cached in /tmp/xdg/sitp/numba/ec3c87d1c5d5/kernels/cpu"
    assert (
        pagecode.masked(cached)
        == pagecode.masked(elsewhere)
        == ("cached in <cache>/sitp/numba/#/kernels/cpu")
    )
    assert pagecode.masked("in /root/.cache/other/x") == "in ~/.cache/other/x"
    assert pagecode.same_output(blocks[2], "took 1.0 ms\n", "took 33.25 ms\n")
    assert not pagecode.same_output(blocks[0], "1\n", "2\n")
    assert not pagecode.same_output(blocks[2], "took 1.0 ms\n", "took 1.0 s\n")


@pytest.mark.parametrize(
    ("recorded", "fresh", "tolerance", "same"),
    [
        ("loss 2.246", "loss 2.247", None, True),  # one unit of the last digit
        ("loss 2.246", "loss 2.248", None, False),
        ("loss 2.246", "loss 2.253", 0.01, True),  # the block declares 1%
        ("loss 2.246", "loss 2.290", 0.01, False),
        ("max error 1.4e-06", "max error 1.5e-06", None, True),  # relative to 1e-06
        ("max error 1.4e-06", "max error 1.9e-06", None, False),
        ("max error 3.2e-07", "max error 1.5e-01", None, False),  # the exponent counts
        ("gap -2.8e-17", "gap 0.0e+00", None, False),  # a zero in e-notation: no unit
        ("gap 0.0e+00", "gap 9.9e-01", None, False),
        ("0.0", "0.04", None, True),
        ("ran 2000 steps", "ran 2001 steps", None, False),  # integers are exact
        ("ran 2000 steps", "ran 2001 steps", 0.01, True),  # ... unless a tolerance says
        ("loss 2.246", "loss: 2.246", None, False),  # the words must match
    ],
)
def test_outputs_compare_numbers_to_their_printed_precision(recorded, fresh, tolerance, same):
    block = pagecode.blocks("```python\nprint(1)\n```\n")[0]
    block.tolerance = tolerance
    assert pagecode.same_output(block, recorded, fresh) is same
    assert pagecode.same_output(block, fresh, recorded) is same


def test_the_site_says_how_far_a_blocks_numbers_may_move():
    """A block with ``tolerance=`` has the option taken off its fence's attributes and
    said in its output's label."""
    from hooks import book

    assert "hold to 1% on other machines" in book.output_html("loss 2.246\n", False, 0.01)
    assert "hold to" not in book.output_html("loss 2.246\n", False, None)
    marked = book.mark_continuations("```{.python continuation tolerance=1%}\nprint(1)\n```\n")
    assert "tolerance" not in marked and ".continuation" in marked


def test_a_fence_declares_its_tolerance():
    page = (
        "```{.python tolerance=2%}\nprint(1)\n```\n\n```{.python tolerance=0.005}\nprint(2)\n```\n"
    )
    assert [b.tolerance for b in pagecode.blocks(page)] == [0.02, 0.005]
    with pytest.raises(ValueError, match="line 1: tolerance='2'"):
        pagecode.blocks("```{.python tolerance=2}\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="a fraction"):
        pagecode.blocks("```{.python tolerance=two}\nprint(1)\n```\n")


def test_the_page_shows_recorded_outputs_beneath_their_blocks(tmp_path, monkeypatch):
    """hooks/book.py: an output under its block (also in an admonition), escaped, with
    its label; none for a block that prints nothing or whose record is stale."""
    import markdown
    from hooks import book

    blocks = pagecode.blocks(SAMPLE)
    monkeypatch.setattr(pagecode, "OUTPUTS", tmp_path)
    record = pagecode.outputs_record("x/page.md", blocks, ["1\n", "2\n", "took 1 ms <b>\n", ""])
    record["blocks"][1]["hash"] = "0" * 16  # stale: the continuation's code changed since
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "page.json").write_text(json.dumps(record))
    with pytest.MonkeyPatch.context() as m:
        warnings = []
        m.setattr(book.log, "warning", lambda *a: warnings.append(a[0] % a[1:]))
        marked, outputs = book.insert_output_marks(SAMPLE, "x/page.md")
    assert warnings and "line(s) 13" in warnings[0] and "make outputs" in warnings[0]
    assert set(outputs) == {0, 2}
    html = markdown.markdown(
        book.mark_continuations(marked),
        extensions=["admonition", "pymdownx.superfences", "pymdownx.highlight"],
    )
    html = book.render_outputs(html, outputs)
    assert "sitp-output" not in html.split("</code></pre>")[0]  # after the code, not in it
    assert html.count('<div class="sitp-output') == 2
    assert html.index('<pre class="sitp-output__text">1</pre>') > html.index("print</span>")
    assert (
        f'{book.VOLATILE_LABEL}</span><pre class="sitp-output__text">took 1 ms &lt;b&gt;</pre>'
        in html
    )
    assert "volatile-output" not in book.mark_continuations(marked)
    assert "<!--" not in html


def test_downloads_script_and_notebook_hold_the_blocks(tmp_path):
    """The page's script runs the blocks in order and compiles as one file; the notebook
    is valid and has the same code cells; the page links both under its title."""
    import nbformat
    from hooks import book

    script, cells = pagecode.page_script("ch09/page.md", SAMPLE)
    compile(script, "page.py", "exec")
    lines = script.split("\n")
    blocks = pagecode.blocks(SAMPLE)
    assert [c["line"] for c in cells] == [b.line for b in blocks]
    for cell, block in zip(cells, blocks):
        assert "\n".join(lines[cell["start"] - 1 : cell["end"]]) + "\n" == block.code
        assert lines[cell["start"] - 2 - block.continuation].startswith("# %% Block")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True
    ).stdout
    assert out == "1\n2\ntook 12.5 ms on 2 threads <b>\n"
    nb = nbformat.reads(pagecode.page_notebook("ch09/page.md", SAMPLE), as_version=4)
    nbformat.validate(nb)
    assert [c.source + "\n" for c in nb.cells if c.cell_type == "code"] == [b.code for b in blocks]
    assert [c.source for c in nb.cells if c.cell_type == "markdown"][1:] == ["## Going on"]
    assert pagecode.download_name("ch09/page.md") == "sitp-ch09-page"
    assert pagecode.download_name("ch09/index.md") == "sitp-ch09"
    page = book.add_downloads_line(SAMPLE, "ch09/page.md")
    assert page.split("\n")[:3] == [
        "# 9.9 A page",
        "",
        book.downloads_line("ch09/page.md").split("\n")[0],
    ]
    assert '(../downloads/sitp-ch09-page.ipynb){download="sitp-ch09-page.ipynb"}' in page


def test_search_previews_skip_the_downloads_line(tmp_path):
    """A page's search preview starts with its first paragraph, and shows math as text."""
    from types import SimpleNamespace

    from hooks import book

    (tmp_path / "search").mkdir()
    line = book.downloads_line("ch09/page.md").split("\n")[0]
    text = f" <p>{line.split(': ')[0]}: notebook (.ipynb) · script (.py)</p> <p>A \\(T \\times T\\) grid.</p>"
    (tmp_path / "search" / "search_index.json").write_text(
        json.dumps({"docs": [{"location": "ch09/page/", "title": "Page", "text": text}]})
    )
    book.on_post_build(SimpleNamespace(site_dir=str(tmp_path)))
    doc = json.loads((tmp_path / "search" / "search_index.json").read_text())["docs"][0]
    assert doc["text"] == " <p>A T × T grid.</p>"


@pytest.mark.site
def test_built_pages_show_their_outputs_and_downloads(built_site: Path):
    """In the built site, each page shows every recorded output of its current blocks,
    in order, after its block's code (none left as a mark or escaped into a listing),
    and links its two downloads, which hold the page's blocks."""
    import html as html_lib

    problems = []
    for page in PAGES:
        rel = page_id(page)
        blocks = pagecode.blocks(page.read_text(encoding="utf-8"))
        if not blocks:
            continue
        recorded = pagecode.load_outputs(rel)
        want = [
            r["stdout"].rstrip("\n")
            for b in blocks
            if (r := pagecode.recorded_output(b, blocks, recorded)) and r["stdout"]
        ]
        stem = rel[: -len("index.md")] if rel.endswith("index.md") else rel[:-3] + "/"
        text = (built_site / stem / "index.html").read_text(encoding="utf-8")
        got = [
            html_lib.unescape(m)
            for m in re.findall(r'<pre class="sitp-output__text">(.*?)</pre>', text, re.DOTALL)
        ]
        if got != want:
            problems.append(f"{rel}: {len(got)} outputs shown, {len(want)} recorded")
        if "sitp-output " in text.replace('"sitp-output no-copy', ""):
            problems.append(f"{rel}: an output mark left in the page")
        name = pagecode.download_name(rel)
        for ext in ("py", "ipynb"):
            if f'download="{name}.{ext}"' not in text:
                problems.append(f"{rel}: no link to its .{ext}")
        script = (built_site / "downloads" / f"{name}.py").read_text(encoding="utf-8")
        if script != pagecode.page_script(rel, page.read_text(encoding="utf-8"))[0]:
            problems.append(f"{rel}: downloads/{name}.py is not the page's script")
    assert not problems, "\n".join(problems)
