"""Build the book with Zensical (``make build-zensical``): build/zensical/site.

    python scripts/zensical_build.py            # stage, build, finish: build/zensical/site
    python scripts/zensical_build.py --stage    # only write build/zensical/{docs,mkdocs.yml}
    python scripts/zensical_build.py --out DIR  # DIR/docs, DIR/mkdocs.yml, DIR/site

MkDocs with Material stays the book's builder (``make serve``, ``make test``, Pages);
this is the second build, which ``tests/test_zensical.py`` compares with the first page
by page. Zensical reads mkdocs.yml and renders pages with Python-Markdown and the
extensions it lists, so ``hooks/book_markdown.py`` gives its pages their outputs,
continuation marks and lines of downloads, and it runs mkdocstrings itself. It runs no
MkDocs hook and neither mkdocs-gen-files nor mkdocs-jupyter. What those add to the MkDocs
build is done here, around ``zensical build``:

before the build, a copy of docs/ in build/zensical/docs, with
  - each notebook executed and written as a Markdown page by nbconvert (``hello.md``
    and its figures beside ``hello.ipynb``), where MkDocs has mkdocs-jupyter;
  - the coverage page's tables appended (scripts/coverage_page.py's job under MkDocs,
    through mkdocs-gen-files);
  - each page's downloads (``downloads/*.py``, ``*.ipynb``) and KaTeX's files
    (hooks/book.py's ``on_files``);
  and build/zensical/mkdocs.yml: mkdocs.yml with that docs_dir, the notebooks' Markdown
  pages in its nav, absolute paths, and without what Zensical does not run (hooks,
  gen-files, mkdocs-jupyter);
after the build, the search index's math as text (hooks/book.py's ``on_post_build``).

Zensical is run as ``python -m zensical`` from the repository's root, so that the
extension ``hooks.book_markdown`` imports, with ``--clean``: its cache keys a page on
the page's text, and a page's outputs live in docs/_outputs/.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hooks import book, book_markdown  # noqa: E402 - after the root is on sys.path

OUT = ROOT / "build" / "zensical"
DOCS = ROOT / "docs"
# What mkdocs.yml lists that Zensical does not run; this script does their work.
NOT_RUN = ("gen-files", "mkdocs-jupyter")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's YAML: ``!ENV [NAME, default]`` read as MkDocs reads it."""


def _env(loader, node):
    names = loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else []
    if not names:
        names = [loader.construct_scalar(node)]
    *variables, default = names if len(names) > 1 else (*names, None)
    return next((os.environ[v] for v in variables if v in os.environ), default)


_Loader.add_constructor("!ENV", _env)


def _name(entry) -> str:
    return next(iter(entry)) if isinstance(entry, dict) else entry


def _notebook_pages(nav):
    """The nav with each ``*.ipynb`` page as the Markdown page written for it."""
    if isinstance(nav, list):
        return [_notebook_pages(item) for item in nav]
    if isinstance(nav, dict):
        return {key: _notebook_pages(value) for key, value in nav.items()}
    if isinstance(nav, str) and nav.endswith(".ipynb"):
        return nav[: -len(".ipynb")] + ".md"
    return nav


def zensical_config(docs: Path) -> dict:
    """mkdocs.yml as Zensical builds the staged copy of docs/.

    Zensical takes docs_dir and site_dir relative to the config's folder (an absolute
    one stops it), so the config sits beside the staged docs/ and the site; the paths
    that Python code reads (mkdocstrings, the griffe extension, snippets, the book's
    extension, which is told to read the staged pages and outputs) are absolute.
    """
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    config["docs_dir"] = "docs"
    config["site_dir"] = "site"
    # Zensical's "classic" look is Material's, which the book's CSS was written for (its
    # default, "modern", is a new design).
    config["theme"]["variant"] = "classic"
    config.pop("hooks", None)
    config.pop("watch", None)
    config["nav"] = _notebook_pages(config["nav"])
    plugins = []
    for entry in config.get("plugins", []):
        if _name(entry) in NOT_RUN:
            continue
        if _name(entry) == "mkdocstrings":
            python = entry["mkdocstrings"]["handlers"]["python"]
            python["paths"] = [str(ROOT / p) for p in python["paths"]]
            options = python["options"]
            options["extensions"] = [
                str(ROOT / e) if isinstance(e, str) and ".py:" in e else e
                for e in options.get("extensions", [])
            ]
        plugins.append(entry)
    config["plugins"] = plugins
    extensions = []
    for entry in config["markdown_extensions"]:
        if _name(entry) == "pymdownx.snippets":
            snippets = entry["pymdownx.snippets"]
            snippets["base_path"] = [str((ROOT / p).resolve()) for p in snippets["base_path"]]
        if _name(entry) == "hooks.book_markdown":  # pages and outputs: the staged copy
            entry = {"hooks.book_markdown": {"docs_dir": str(docs)}}
        extensions.append(entry)
    config["markdown_extensions"] = extensions
    return config


def convert_notebook(source: Path, dest: Path) -> Path:
    """Execute a notebook and write it as a Markdown page, its figures in ``<stem>_files``.

    The kernel inherits this process's environment without MPLBACKEND (hooks/book.py
    removes it on import), so matplotlib draws inline and the figures are kept.
    """
    import nbformat
    from nbconvert import MarkdownExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    nb = nbformat.read(source, as_version=4)
    ExecutePreprocessor(timeout=600, kernel_name="python3").preprocess(
        nb, {"metadata": {"path": str(source.parent)}}
    )
    body, resources = MarkdownExporter().from_notebook_node(
        nb, resources={"output_files_dir": f"{source.stem}_files"}
    )
    page = dest.with_suffix(".md")
    page.write_text(body, encoding="utf-8")
    for name, data in resources.get("outputs", {}).items():
        path = page.parent / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return page


def _coverage_tables() -> str:
    spec = importlib.util.spec_from_file_location(
        "torch_coverage", ROOT / "scripts" / "torch_coverage.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return "\n" + module.render(module.load())


def stage(out: Path = OUT) -> Path:
    """Write the staged docs and config under ``out``; returns the config's path."""
    docs = out / "docs"
    if docs.exists():
        shutil.rmtree(docs)
    shutil.copytree(
        DOCS, docs, ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", ".ipynb_*")
    )
    for notebook in sorted(DOCS.rglob("*.ipynb")):
        if ".ipynb_checkpoints" not in notebook.parts:
            convert_notebook(notebook, docs / notebook.relative_to(DOCS))
    with open(docs / "api" / "coverage.md", "a", encoding="utf-8") as page:
        page.write(_coverage_tables())
    for path in sorted(docs.rglob("*.md")):  # the copy: what the build renders
        rel = path.relative_to(docs).as_posix()
        if rel.startswith("_") or path.with_suffix(".ipynb").exists():
            continue  # the outputs, or a notebook's Markdown page
        for ext, content in book_markdown.downloads(rel, path.read_text("utf-8")).items():
            target = docs / book_markdown.download_uri(rel, ext)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
    if (book.KATEX_DIST / "katex.min.js").is_file():
        wanted = [book.KATEX_DIST / name for name in book.KATEX_FILES]
        wanted += sorted((book.KATEX_DIST / "fonts").glob("*.woff2"))
        for path in wanted:
            target = docs / book.KATEX_DEST / path.relative_to(book.KATEX_DIST)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    else:
        print(f"KaTeX is not installed ({book.KATEX_DIST}): run `npm ci`", file=sys.stderr)
    config = out / "mkdocs.yml"
    config.write_text(
        "# Generated by scripts/zensical_build.py from mkdocs.yml; never edit.\n"
        + yaml.safe_dump(zensical_config(docs), sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )
    return config


def search_index(site: Path) -> Path | None:
    """Zensical's search index in a built site."""
    for candidate in (site / "search.json", site / "search" / "search_index.json"):
        if candidate.is_file():
            return candidate
    return None


def finish(site: Path) -> None:
    """The search index's math as text, and without the downloads line (as for MkDocs)."""
    index = search_index(site)
    if index is None:
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    for doc in data.get("items", data.get("docs", [])):
        if "text" in doc:
            doc["text"] = book._SEARCH_DOWNLOADS.sub("", doc["text"], count=1)
        for key in ("title", "text"):
            if isinstance(doc.get(key), str):
                doc[key] = book.plain_search_text(doc[key])
    index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def build(out: Path = OUT) -> Path:
    """Stage, build with Zensical, finish; returns the site's folder."""
    start = time.perf_counter()
    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)  # a failed build leaves no stale site behind
    config = stage(out)
    staged = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "zensical", "build", "--clean", "-f", str(config)],
        cwd=ROOT,
        check=True,
    )
    finish(site)
    print(
        f"zensical: staged in {staged - start:.1f} s, built in "
        f"{time.perf_counter() - staged:.1f} s: {site}"
    )
    return site


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", action="store_true", help="only stage the docs and config")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.stage:
        print(stage(args.out.resolve()))
    else:
        build(args.out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
