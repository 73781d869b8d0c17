"""MkDocs hooks for the SITP book (registered under ``hooks:`` in mkdocs.yml).

1. Math is rendered in the reader's browser by KaTeX, which set-up installs from the npm
   registry (package.json). The hook publishes its files from node_modules/katex/dist as
   part of the site, so the book needs no network and no third-party file is committed.
2. A published page never says "TODO", "TBD", "Lorem ipsum" or "coming soon": an
   unwritten section is marked as planned, with what it will cover.
3. A built page loads no script, style sheet or image from another host. Notebook pages
   come with a MathJax <script> from a CDN (nbconvert's template); it is removed, and
   KaTeX renders their math like every other page's.
4. A notebook draws its figures inline (MPLBACKEND is unset for its kernel).
5. Search previews show math as text: the search index gets ``T × T`` where the page
   has ``\\(T \\times T\\)`` (KaTeX renders the page; the index has only the source).
6. `mkdocs serve` ignores generated files under what it watches (bytecode, numba's
   caches, notebook checkpoints, editors' swap files) and events that change nothing
   (a file opened or read), so running code while serving never triggers a rebuild.
7. Every page with Python blocks offers its code as a script and as a notebook: the
   hook adds the two files to the site (``downloads/``, generated from the blocks by
   ``hooks/pagecode.py``, the script the copy-run test runs, never committed).

What a page shows beyond its Markdown (outputs beneath the blocks, continuation marks,
the line of downloads under the title) is not done here but by the Markdown extension
``hooks/book_markdown.py``, which Zensical runs too; its names are re-exported here.

Problems are logged as warnings, which `mkdocs build --strict` turns into a failed build.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

# mkdocs.yml's markdown_extensions load hooks.book_markdown, so the repository's root is
# on sys.path (`python -m mkdocs`, as make runs it) before this hook is loaded.
from hooks.book_markdown import (  # noqa: F401 - re-exported: tests/test_book.py
    CONTINUATION_TITLE,
    DOWNLOADS_INTRO,
    OUTPUT_LABEL,
    VOLATILE_LABEL,
    add_downloads_line,
    download_uri,
    downloads,
    downloads_line,
    insert_output_marks,
    log,
    mark_continuations,
    output_html,
    render_outputs,
)

ROOT = Path(__file__).resolve().parent.parent
KATEX_DIST = ROOT / "node_modules" / "katex" / "dist"
KATEX_DEST = "assets/katex"
# The parts of KaTeX's distribution the site loads (see extra_javascript/extra_css).
KATEX_FILES = ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js")


# Notebooks are executed by a kernel that inherits this environment (without a GPU,
# `import sitp` switches numba's CUDA simulator on by itself, sitp.cuda).
# A notebook draws its figures with matplotlib's inline backend, which ipykernel selects
# only when MPLBACKEND is unset (with MPLBACKEND=Agg the figures silently vanish).
os.environ.pop("MPLBACKEND", None)

PLACEHOLDERS = re.compile(r"\b(TODO|TBD|FIXME|XXX)\b|lorem ipsum|coming soon", re.IGNORECASE)
_CASE_SENSITIVE = {"todo", "tbd", "fixme", "xxx"}  # "todo" in prose is a fine word

# What nbconvert's template puts in a notebook page that would reach for a CDN: MathJax,
# and a module that imports Mermaid when the notebook has diagrams (ours have none).
NBCONVERT_CDN = (
    re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL),
    re.compile(r'<script type="module">(?:(?!</script>).)*?jp-Mermaid.*?</script>', re.DOTALL),
)
_REMOTE = r"""(?:https?:)?//[^\s"'>]+"""
EXTERNAL_ASSET = re.compile(
    # scripts, images, frames, media, and dynamic imports of modules
    rf"""<(?:script|img|iframe|source|video|audio|embed)\b[^>]*?\bsrc=["']?{_REMOTE}"""
    rf"""|\bimport\(\s*["']{_REMOTE}"""
    # style sheets, fonts, icons (not <link rel="canonical">, which only names a URL)
    rf"""|<link\b(?=[^>]*\brel=["']?(?:stylesheet|preload|modulepreload|icon|manifest))"""
    rf"""[^>]*?\bhref=["']?{_REMOTE}""",
    re.IGNORECASE,
)


# Files that running code or an editor leaves beside the sources: never a reason to rebuild.
GENERATED = re.compile(
    r"(^|/)(__pycache__|\.ipynb_checkpoints|\.pytest_cache|\.hypothesis|\.cache)(/|$)"
    r"|\.(py[cod]|nbi|nbc|swp|swx|tmp)$|~$|(^|/)\.#[^/]*$|(^|/)4913$"
)
# watchdog also reports files opened and closed without writing: reading is no change.
_NO_CHANGE = {"opened", "closed_no_write", "attrib"}


def is_generated(path: str) -> bool:
    """Whether a changed path is a generated file that must not trigger a rebuild."""
    return bool(GENERATED.search(str(path).replace(os.sep, "/")))


def _ignores_generated(event) -> bool:
    if event.event_type in _NO_CHANGE:
        return True
    paths = [event.src_path, getattr(event, "dest_path", "") or ""]
    return all(not p or is_generated(os.fsdecode(p)) for p in paths)


def on_serve(server, config, builder):
    """Filter what `mkdocs serve` watches: generated files never trigger a rebuild.

    mkdocs schedules one watchdog handler per watched path; each handler is wrapped so
    that events on generated files are dropped. docs/ and mkdocs.yml are already watched
    when this hook runs, so they are watched again through the filter; the `watch:`
    paths of mkdocs.yml are scheduled after it and go through the filter directly.
    """
    schedule = server.observer.schedule

    def filtered_schedule(handler, path, *args, **kwargs):
        react = handler.on_any_event

        def on_any_event(event):
            if not _ignores_generated(event):
                react(event)

        handler.on_any_event = on_any_event
        return schedule(handler, path, *args, **kwargs)

    server.observer.schedule = filtered_schedule
    for path in [config.docs_dir, config.config_file_path]:
        if path:
            server.unwatch(path)
            server.watch(path)
    return server


# Math in the search index: LaTeX commands as the characters they stand for.
_TEX_SYMBOLS = {
    "times": "×",
    "cdot": "·",
    "cdots": "⋯",
    "ldots": "…",
    "dots": "…",
    "approx": "≈",
    "le": "≤",
    "leq": "≤",
    "ge": "≥",
    "geq": "≥",
    "ne": "≠",
    "neq": "≠",
    "ll": "≪",
    "gg": "≫",
    "in": "∈",
    "to": "→",
    "rightarrow": "→",
    "leftarrow": "←",
    "mapsto": "↦",
    "infty": "∞",
    "partial": "∂",
    "nabla": "∇",
    "sum": "Σ",
    "prod": "Π",
    "pm": "±",
    "odot": "⊙",
    "oplus": "⊕",
    "otimes": "⊗",
    "ast": "∗",
    "mid": "|",
    "top": "ᵀ",
    "sqrt": "√",
    "propto": "∝",
    "equiv": "≡",
    "sim": "~",
    "circ": "∘",
    "ell": "ℓ",
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "delta": "δ",
    "epsilon": "ε",
    "varepsilon": "ε",
    "zeta": "ζ",
    "eta": "η",
    "theta": "θ",
    "kappa": "κ",
    "lambda": "λ",
    "mu": "μ",
    "nu": "ν",
    "xi": "ξ",
    "pi": "π",
    "rho": "ρ",
    "sigma": "σ",
    "tau": "τ",
    "phi": "φ",
    "varphi": "φ",
    "chi": "χ",
    "psi": "ψ",
    "omega": "ω",
    "Gamma": "Γ",
    "Delta": "Δ",
    "Theta": "Θ",
    "Lambda": "Λ",
    "Sigma": "Σ",
    "Phi": "Φ",
    "Omega": "Ω",
    "lVert": "‖",
    "rVert": "‖",
    "Vert": "‖",
    "lvert": "|",
    "rvert": "|",
    "lceil": "⌈",
    "rceil": "⌉",
    "lfloor": "⌊",
    "rfloor": "⌋",
    "langle": "⟨",
    "rangle": "⟩",
    "quad": " ",
    "qquad": "  ",
    "bmod": " mod ",
    "colon": ":",
    "{": "{",
    "}": "}",
}
# Fonts and accents: their argument is the text.
_TEX_SYMBOLS.update(
    dict.fromkeys(
        "text textrm texttt textit textbf mathrm mathit mathbf mathcal mathbb mathsf mathtt "
        "operatorname boldsymbol bm hat bar tilde dot ddot vec widehat widetilde overline "
        "underline begin end".split(),
        "",
    )
)
# Sizes, spacing and styles that have no text of their own.
_TEX_SILENT = re.compile(
    r"\\(?:[Bb]igg?[lr]?|left|right|displaystyle|textstyle|limits|nolimits|[,;:!> ])"
)
_TEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEX_COMMAND = re.compile(r"\\([A-Za-z]+|[{}])")
_TEX_ARG = re.compile(r"\\(?![dt]?frac\b)([A-Za-z]+)\s*\{([^{}]*)\}")
_SEARCH_MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)


def plain_math(tex: str) -> str:
    """LaTeX as plain text for a search preview: ``\frac{a}{b} \times c`` -> ``a/b × c``."""
    for _ in range(4):  # innermost braces first: \frac{1}{\sqrt{D}}
        tex = _TEX_FRAC.sub(lambda m: f"{m[1]}/{m[2]}", tex)
        tex = _TEX_ARG.sub(lambda m: _TEX_SYMBOLS.get(m[1], m[1]) + m[2], tex)
    tex = _TEX_SILENT.sub("", tex)
    tex = tex.replace("\\\\", " ")
    tex = re.sub(r"(?<!\\)[{}]", "", tex)
    tex = _TEX_COMMAND.sub(lambda m: _TEX_SYMBOLS.get(m[1], m[1] if len(m[1]) > 1 else ""), tex)
    return re.sub(r"\s+", " ", tex).strip()


def plain_search_text(text: str) -> str:
    return _SEARCH_MATH.sub(lambda m: plain_math(m[1] if m[1] is not None else m[2]), text)


def on_post_build(config):
    """Rewrite the search index: previews show math as text, not LaTeX, and a page's
    preview starts with its first paragraph, not with the line of its downloads."""
    index = Path(config.site_dir) / "search" / "search_index.json"
    if not index.is_file():
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    for doc in data.get("docs", []):
        if "text" in doc:
            doc["text"] = _SEARCH_DOWNLOADS.sub("", doc["text"], count=1)
        for key in ("title", "text"):
            if key in doc:
                doc[key] = plain_search_text(doc[key])
    index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def on_files(files, config):
    _add_downloads(files, config)
    if not (KATEX_DIST / "katex.min.js").is_file():
        log.warning(
            "KaTeX is not installed (%s is missing): run `npm ci` (make does it), "
            "or the book's math will not render.",
            KATEX_DIST,
        )
        return files
    wanted = [KATEX_DIST / name for name in KATEX_FILES]
    wanted += sorted((KATEX_DIST / "fonts").glob("*.woff2"))
    for path in wanted:
        uri = f"{KATEX_DEST}/{path.relative_to(KATEX_DIST).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


# --- downloads: the page's code as a script and a notebook ------------------------------

# src_uri -> (source text, {"py": script, "ipynb": notebook}); a warm `mkdocs serve`
# rebuild regenerates only the pages whose source changed.
_DOWNLOADS: dict[str, tuple[str, dict[str, str]]] = {}


def _add_downloads(files, config) -> None:
    for f in list(files.documentation_pages()):
        if not f.src_uri.endswith(".md"):
            continue
        text = f.content_string
        cached = _DOWNLOADS.get(f.src_uri)
        if cached is None or cached[0] != text:
            _DOWNLOADS[f.src_uri] = cached = (text, downloads(f.src_uri, text))
        for ext, content in cached[1].items():
            files.append(File.generated(config, download_uri(f.src_uri, ext), content=content))


# The downloads line as the search index has it: not a page's preview text.
_SEARCH_DOWNLOADS = re.compile(rf"\s*<p>{re.escape(DOWNLOADS_INTRO)}.*?</p>", re.DOTALL)


def on_page_markdown(markdown, page, config, files):
    for lineno, line in enumerate(markdown.splitlines(), 1):
        for m in PLACEHOLDERS.finditer(line):
            word = m.group(0)
            if word.lower() in _CASE_SENSITIVE and not word.isupper():
                continue
            log.warning(
                "%s:%d: placeholder %r on a published page; mark the section as "
                'planned (!!! note "Planned") and say what it will cover.',
                page.file.src_uri,
                lineno,
                word,
            )
    return markdown


def on_post_page(output, page, config):
    for pattern in NBCONVERT_CDN:
        output = pattern.sub("", output)
    for m in EXTERNAL_ASSET.finditer(output):
        log.warning(
            "%s loads a file from another host (%s): the book must work offline; "
            "install it with a package manager and serve it from the site.",
            page.file.src_uri,
            m.group(0)[:160],
        )
    return output
