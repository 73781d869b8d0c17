"""A page's code as the reader takes it away: its blocks, their outputs, its downloads.

Shared by the site's hook (``hooks/book.py``), which shows the outputs and offers the
downloads, and by the copy-run test (``tests/test_copy_run.py``), which runs the script
and records or checks the outputs, so that what the reader downloads and sees is what
the tests ran.

- :func:`blocks` are the Python fences a reader pastes: every Python fence of the page
  that is not a snippet include (``notest``), in order. A ``{.python continuation}``
  fence continues the namespace of the blocks before it.
- Each block has a :func:`chain_hash`: of its code and that of the blocks it continues
  (back to the last standalone one), so an edit of a block, or of one it builds on,
  makes its recorded output stale.
- :func:`page_script` is the page's code as one script (``# %%`` cells, one per block,
  that editors and jupytext read as cells); :func:`page_notebook` is the same cells as a
  notebook, with the page's headings between them.
- Outputs are recorded in ``docs/_outputs/<page>.json`` by ``make outputs`` (the
  copy-run test in recording mode); :func:`load_outputs` and :func:`recorded_output`
  read them. A block marked ``volatile-output`` prints something that varies from run
  to run (a timing): :func:`masked` is the text the test compares for such a block.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

try:
    from hooks.fences import PYTHON_LANGS, parsed_fences, scan_fences
except ImportError:  # loaded by mkdocs from hooks/, whose folder is then on sys.path
    from fences import PYTHON_LANGS, parsed_fences, scan_fences  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OUTPUTS = DOCS / "_outputs"
VOLATILE = "volatile-output"
TOLERANCE = "tolerance"
DOWNLOADS = "downloads"


@dataclasses.dataclass
class Block:
    """One Python block of a page: ``index`` counts the page's blocks from 0."""

    index: int
    line: int  # of the opening fence, 1-based, in the page's source
    code: str
    continuation: bool
    volatile: bool
    hash: str
    heading: str | None  # the nearest heading above the block
    tolerance: float | None = None  # relative, from a ``tolerance=1%`` option


def fence_tolerance(options: set[str]) -> float | None:
    """The relative tolerance a fence declares, ``tolerance=2%`` or ``tolerance=0.02``.

    A page's author writes it where a block prints what another summation order moves
    further than its last digit (a loss after hundreds of steps, say); the tests then
    compare that block's numbers to that fraction of their size (:func:`same_output`).
    """
    values = [o.split("=", 1)[1].strip("'\"") for o in options if o.startswith(TOLERANCE + "=")]
    if not values:
        return None
    (text,) = values
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"tolerance={text!r}: write a fraction (0.01) or a percentage (1%)")
    if not 0 < value < 1:
        raise ValueError(f"tolerance={text!r}: a relative tolerance lies between 0 and 1")
    return value


def chain_hash(codes: list[str]) -> str:
    """The hash of a block's code and that of the blocks it continues (first to last)."""
    digest = hashlib.sha256()
    for code in codes:
        digest.update(code.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()[:16]


_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*(?:\{[^}]*\})?[ \t]*$")


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line, level, title) of the page's ATX headings outside fences."""
    inside = set()
    for f in scan_fences(text):
        inside.update(range(f.line, (f.closing_line or f.line) + 1))
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _HEADING.match(line)
        if m and n not in inside:
            out.append((n, len(m[1]), m[2].strip()))
    return out


def blocks(text: str) -> list[Block]:
    """The Python blocks a reader pastes from a page (``text``), in order."""
    heads = headings(text)
    out: list[Block] = []
    chain: list[str] = []
    for f in parsed_fences(text):
        if f.lang not in PYTHON_LANGS or "notest" in f.options:
            continue
        continuation = "continuation" in f.options
        chain = chain + [f.content] if continuation and chain else [f.content]
        above = [title for line, _, title in heads if line < f.line]
        try:
            tolerance = fence_tolerance(f.options)
        except ValueError as e:
            raise ValueError(f"the fence at line {f.line}: {e}") from None
        out.append(
            Block(
                len(out),
                f.line,
                f.content,
                continuation and len(chain) > 1,
                VOLATILE in f.options,
                chain_hash(chain),
                above[-1] if above else None,
                tolerance,
            )
        )
    return out


def page_title(text: str) -> str:
    first = next((t for _, level, t in headings(text) if level == 1), None)
    return first or "SITP"


# --- recorded outputs -------------------------------------------------------------------


def outputs_path(page: str, outputs: Path | None = None) -> Path:
    """``docs/_outputs/ch02/strides.json`` for the page ``ch02/strides.md``."""
    return (outputs or OUTPUTS) / Path(page).with_suffix(".json")


def load_outputs(page: str, outputs: Path | None = None) -> list[dict]:
    """The recorded blocks of a page (``[]`` when none were recorded), from
    ``docs/_outputs`` or from the folder ``outputs`` (a copy of it that a build reads)."""
    path = outputs_path(page, outputs)
    if not path.is_file():
        return []
    return json.loads(path.read_text(encoding="utf-8"))["blocks"]


def recorded_output(block: Block, all_blocks: list[Block], recorded: list[dict]) -> dict | None:
    """The record of ``block`` whose hash is the block's current one, or None (stale).

    A record is matched by its hash; where the same code (and chain) occurs more than
    once on a page, the n-th occurrence matches the n-th record with that hash.
    """
    nth = sum(1 for b in all_blocks[: block.index] if b.hash == block.hash)
    same = [r for r in recorded if r["hash"] == block.hash]
    return same[nth] if nth < len(same) else None


def outputs_record(page: str, page_blocks: list[Block], stdouts: list[str]) -> dict:
    """What ``docs/_outputs/<page>.json`` holds after a run of the page's blocks."""
    return {
        "page": page,
        "note": "Recorded by `make outputs` (tests/test_copy_run.py); never edit by hand.",
        "blocks": [
            {
                "index": b.index,
                "line": b.line,
                "hash": b.hash,
                "volatile": b.volatile,
                "stdout": out,
            }
            for b, out in zip(page_blocks, stdouts, strict=True)
        ],
    }


_NUMBER = re.compile(
    r"0x[0-9a-fA-F]+|(?<![0-9A-Za-z])(?=[0-9a-f]*\d)[0-9a-f]{8,}(?![0-9A-Za-z])"  # hashes
    r"|[-+]?(?:\d[\d_,]*)?\.?\d+(?:[eE][-+]?\d+)?"
)
_HOME = re.compile(r"(?:/home/[^/\s]+|/Users/[^/\s]+|/root)(?=/)")
# Where sitp's caches live: ~/.cache, $XDG_CACHE_HOME or $NUMBA_CACHE_DIR, up to sitp's folder
_CACHE_ROOT = re.compile(r"(?<![\w~.])/[^\s]*?(?=/sitp[-/])")


def masked(text: str) -> str:
    """A volatile block's output as the tests compare it: numbers masked.

    Every number (and hexadecimal hash or address) becomes ``#``, a home directory
    ``~``, the folder that holds sitp's cache ``<cache>``, and runs of spaces one space
    (a column of timings widens with a digit more). Timings, speeds, thread counts and
    cache paths vary from run to run and machine to machine; the words, the lines and
    where the numbers stand must not.
    """
    text = _NUMBER.sub("#", _HOME.sub("~", _CACHE_ROOT.sub("<cache>", text)))
    return re.sub(r"[ \t]+", " ", text)


# The vector instruction set and LLVM's CPU name differ between the machines that run
# the book (section 2.3): a volatile block that prints them is compared without them.
_ISA = re.compile(
    r"\b(?:AVX-512|AVX2|AVX|SSE2|NEON|[xyz]mm|x86-64|generic|znver\d|bdver\d|btver\d"
    r"|[a-z]+lake(?:-[a-z0-9]+)?|skylake-avx512|cascadelake|cooperlake|sapphirerapids|emeraldrapids"
    r"|graniterapids(?:-d)?|diamondrapids|sandybridge|ivybridge|haswell|broadwell|knl|knm"
    r"|apple-[a-z0-9]+|neoverse-[a-z0-9]+|cortex-[a-z0-9]+)\b"
)
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _last_digit(number: str) -> float:
    """The value of the last printed digit: 1e-3 for ``2.246``, 1e-7 for ``1.4e-06``."""
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (int(exponent or 0) - decimals)


def _numbers_close(a: str, b: str, tolerance: float | None = None) -> bool:
    """Two printed numbers agree within one unit of the last digit printed.

    The unit is relative to each number's own magnitude, exponent included: ``2.246``
    and ``2.247`` agree, ``1.4e-06`` and ``1.5e-06`` agree, ``3.2e-07`` and
    ``1.5e-01`` do not. The same code computes in another order on another vector width
    (a GEMM tile of 6 x 16 or 14 x 32 sums its products differently), and a value that
    lies near a rounding boundary then prints one unit off; a block that prints more
    digits than its computation guarantees must print fewer, or a bound. Integers
    (counts, shapes, indices) must match exactly, unless the block declares a relative
    ``tolerance``, which then applies to every number it prints.
    """
    if a == b:
        return True
    x, y = float(a), float(b)
    if tolerance is not None and abs(x - y) <= tolerance * max(abs(x), abs(y)):
        return True
    if not any(c in a + b for c in ".eE"):
        return False
    # A zero in e-notation (0.0e+00) has no magnitude of its own: the other number's
    # last digit is the unit.
    units = [_last_digit(t) for t, v in ((a, x), (b, y)) if v != 0 or "e" not in t.lower()]
    return abs(x - y) <= max(units or [0.0]) * (1 + 1e-9)


def _close(recorded: str, fresh: str, tolerance: float | None = None) -> bool:
    """Equal text, with numbers compared by :func:`_numbers_close`."""
    ra, fa = _PLAIN_NUMBER.split(recorded), _PLAIN_NUMBER.split(fresh)
    if ra != fa:
        return False
    return all(
        _numbers_close(a, b, tolerance)
        for a, b in zip(_PLAIN_NUMBER.findall(recorded), _PLAIN_NUMBER.findall(fresh), strict=True)
    )


def same_output(block: Block, recorded: str, fresh: str) -> bool:
    """Whether a fresh run printed what the page shows (``recorded``).

    A volatile block's words and lines must match, its numbers may not; any other
    block's numbers agree by :func:`_numbers_close`, to its declared tolerance if any.
    """
    if block.volatile:
        return masked(_ISA.sub("<isa>", recorded)) == masked(_ISA.sub("<isa>", fresh))
    return recorded == fresh or _close(recorded, fresh, block.tolerance)


# --- downloads ----------------------------------------------------------------------------


def download_name(page: str) -> str:
    """``sitp-ch02-strides`` for ``ch02/strides.md``, ``sitp-ch02`` for ``ch02/index.md``.

    The hyphen keeps the name from being importable: a script run from its folder puts
    that folder first on ``sys.path``, where ``numbers.py`` would shadow the standard
    library's ``numbers``.
    """
    parts = list(Path(page).with_suffix("").parts)
    if len(parts) > 1 and parts[-1] == "index":
        parts.pop()
    return "-".join(["sitp", *parts])


def _cell_header(page: str, block: Block) -> str:
    where = f"docs/{page}, line {block.line}"
    section = f" - {block.heading}" if block.heading else ""
    return f"# %% Block {block.index + 1}{section} ({where})"


def page_script(page: str, text: str) -> tuple[str, list[dict]]:
    """The page's blocks as one script, and where each block is in it.

    Returns the script and, per block, ``{"index", "line", "start", "end",
    "continuation"}``: the first and last script lines (1-based) of its code, and whether
    it continues the block before it. The blocks run in one namespace, as
    they do when a reader pastes the page into one Python session.
    """
    page_blocks = blocks(text)
    title = page_title(text)
    lines = [
        f'"""{title}: the code of the page, block by block.',
        "",
        f"Generated from docs/{page} of the SITP book when the site was built; each",
        "`# %%` cell is one code block of the page, in the page's order. Run it with",
        f'`python {download_name(page)}.py` after `pip install "sitp[book]"`, from any',
        "directory; without a GPU, sitp runs its CUDA kernels in numba's simulator.",
        '"""',
    ]
    cells = []
    for b in page_blocks:
        lines += ["", "", _cell_header(page, b)]
        if b.continuation:
            lines.append("# (continues the code above)")
        code = b.code.rstrip("\n").split("\n")
        start = len(lines) + 1
        lines += code
        cells.append(
            {
                "index": b.index,
                "line": b.line,
                "start": start,
                "end": len(lines),
                "continuation": b.continuation,
            }
        )
    return "\n".join(lines) + "\n", cells


def page_notebook(page: str, text: str) -> str:
    """The page's blocks as a Jupyter notebook (JSON), with the page's headings."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    title = page_title(text)
    cells = [
        new_markdown_cell(
            f"# {title}\n\nThe code of this page of the SITP book (`docs/{page}`), block by "
            "block, generated when the site was built. Run the cells in order, after "
            '`pip install "sitp[book]"`; without a GPU, sitp runs its CUDA kernels in '
            "numba's simulator."
        )
    ]
    heading = title
    for b in blocks(text):
        if b.heading and b.heading != heading:
            cells.append(new_markdown_cell(f"## {b.heading}"))
            heading = b.heading
        cells.append(new_code_cell(b.code.rstrip("\n")))
    for n, cell in enumerate(cells):  # stable ids: the same page gives the same file
        cell["id"] = f"cell-{n}"
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"
