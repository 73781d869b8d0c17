"""Numbers quoted across the book agree with their source.

``tests/test_book.py::test_numbers_page_copies_the_chapters`` checks that the numbers page
copies the chapters. This file checks the other quotes: a number one page takes from
another (the CPU bandwidth of 4.3's cost model, from 2.3's roofline; a GPT step's
operations, from 4.2's recorded output) or from its own table or recorded output, the numbers the
prose reads off a figure's recorded data (``src/sitp/examples/*.json``), and the claims
about GPU timings, which must match what the numbers page says has been measured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "src" / "sitp" / "examples"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def section_pages() -> dict[str, str]:
    """Section number ("2.3") -> page ("ch02/blas.md"), from each page's first heading."""
    found = {}
    for path in sorted(DOCS.rglob("*.md")):
        m = re.match(r"#\s+(\d+\.\d+)\s", path.read_text(encoding="utf-8"))
        if m:
            found[m.group(1)] = path.relative_to(DOCS).as_posix()
    return found


def numbers_in(text: str) -> list[str]:
    """The decimal numbers of ``text``, with ``44.9e9`` read as ``44.9``."""
    return re.findall(r"(?<![\w.])\d+\.\d+(?=e\d|\b)", text)


# --- one page quoting another -------------------------------------------------------


def roofline_triad_two_threads() -> str:
    m = re.search(
        r"^\| triad bandwidth, DRAM, GB/s \| ([\d.]+) \| ([\d.]+) \|$",
        page("ch02/blas.md"),
        re.MULTILINE,
    )
    assert m, "2.3's roofline table has no triad DRAM row"
    return m.group(2)


def microkernel_shipped(isa: str) -> str:
    """GFLOP/s of the shipped micro-kernel in 2.3's table for ``isa`` ("AVX-512", "AVX2")."""
    table = page("ch02/blas.md").split(f"{isa} code (", 1)[1].split("\n\n", 2)[1]
    m = re.search(r"^\| explicit vectors \(shipped\) \| ([\d.]+) \|", table, re.MULTILINE)
    assert m, f"2.3's micro-kernel table has no shipped row for {isa}"
    return m.group(1)


def recorded(name: str, line_prefix: str) -> str:
    """The line of a page's recorded output (docs/_outputs) that starts with ``line_prefix``."""
    outputs = json.loads((DOCS / "_outputs" / f"{name}.json").read_text(encoding="utf-8"))
    lines = [
        line
        for block in outputs["blocks"]
        for line in block["stdout"].splitlines()
        if line.startswith(line_prefix)
    ]
    assert len(lines) == 1, (name, line_prefix, lines)
    return lines[0]


def gpt_step_operations() -> str:
    """The operations of one GPT training step, as 4.2's fence counts them."""
    line = recorded("ch04/primitives", "one GPT step:")
    return str(sum(int(n) for n in re.findall(r"(\d+) (?:operations|backward|in AdamW)", line)))


def innovation_at_half() -> str:
    """The projects page's 200-step model: its innovation rate at temperature 0.5, printed."""
    return re.search(r"innovation rate (\d+)%", recorded("projects", "temperature 0.5:")).group(1)


def ladder_gap(split: str) -> str:
    """How far 3.5's GPT ends below the GRU on ``split`` (ladder-names.json), to 4 decimals."""
    runs = load("ladder-names.json")["runs"]
    return f"{runs['gru']['final'][split] - runs['gpt']['final'][split]:.4f}".rstrip("0")


# (page, regex whose group 1 is the quoted number, the source's number)
QUOTES = [
    ("ch04/gpu.md", r"\((\d+\.\d+) GB/s with two threads\)", roofline_triad_two_threads),
    ("ch04/gpu.md", r"cpu_Bps = (\d+\.\d+)e9", roofline_triad_two_threads),
    (
        "ch04/gpu.md",
        r"launch_s, pcie_Bps, gpu_Bps, cpu_Bps = .*, (\d+\.\d+)e9",
        roofline_triad_two_threads,
    ),
    ("ch02/blas.md", r"peak, bandwidth = [\d.]+, (\d+\.\d+)", roofline_triad_two_threads),
    (
        "ch02/blas.md",
        r"^\s*bandwidth = (\d+\.\d+)  # GB/s, triad, 2 threads",
        roofline_triad_two_threads,
    ),
    (
        "ch02/blas.md",
        r"micro-kernel's peak is (\d+\.\d) GFLOP/s",
        lambda: microkernel_shipped("AVX2"),
    ),
    (
        "ch02/blas.md",
        r"micro-kernel's peak is [\d.]+ GFLOP/s against\s+(\d+\.\d)",
        lambda: microkernel_shipped("AVX-512"),
    ),
    (
        "ch02/blas.md",
        r"the micro-kernel, which runs at (\d+\.\d) GFLOP/s",
        lambda: microkernel_shipped("AVX-512"),
    ),
    ("ch03/gpt.md", r"(\d+) operations per step", gpt_step_operations),
    ("ch03/gpt.md", r"the GPT is (\d\.\d+) nats below the GRU on", lambda: ladder_gap("val")),
    (
        "ch03/gpt.md",
        r"the GPT is [\d.]+ nats below the GRU on\s+validation and (\d\.\d+) on test",
        lambda: ladder_gap("test"),
    ),
    ("projects.md", r"innovation rate is already (\d+)% at", innovation_at_half),
]


@pytest.mark.parametrize(
    "name, pattern, source", QUOTES, ids=[f"{q[0]}:{q[1][:24]}" for q in QUOTES]
)
def test_a_quoted_number_matches_its_source(name, pattern, source):
    text = page(name)
    hits = [
        (text.count("\n", 0, m.start()) + 1, m.group(1))
        for m in re.finditer(pattern, text, re.MULTILINE)
    ]
    assert hits, f"docs/{name}: no line matches {pattern!r}"
    want = source()
    wrong = [
        f"docs/{name}:{line}: {got}, the source says {want}" for line, got in hits if got != want
    ]
    assert not wrong, "\n".join(wrong)


def test_a_line_that_cites_a_measuring_section_quotes_it():
    """On a line that says "measured in section N.M", every decimal is on page N.M."""
    sections = section_pages()
    problems = []
    for path in sorted(DOCS.rglob("*.md")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(
                r"measured in section (\d+\.\d+)|section (\d+\.\d+) measured", line
            ):
                target = sections.get(m.group(1) or m.group(2))
                name = f"{path.relative_to(ROOT).as_posix()}:{lineno}"
                if target is None:
                    problems.append(f"{name}: no page is section {m.group(1) or m.group(2)}")
                    continue
                source = page(target)
                problems += [
                    f"{name}: {n} is not on {target}" for n in numbers_in(line) if n not in source
                ]
    assert not problems, "\n".join(problems)


# --- figures' data ------------------------------------------------------------------


def test_figure_data_in_the_docs_is_the_packaged_data():
    """docs/assets keeps copies of the recorded runs that sitp.examples ships: the same."""
    copies = sorted(DOCS.glob("assets/**/*.json"))
    assert copies
    for copy in copies:
        original = EXAMPLES / copy.name
        assert original.exists(), f"{copy.relative_to(ROOT)} has no src/sitp/examples/{copy.name}"
        assert json.loads(copy.read_text()) == json.loads(original.read_text()), copy


def load(name: str):
    return json.loads((EXAMPLES / name).read_text(encoding="utf-8"))


def figure_quotes():
    """(pages, the text each must contain, where it comes from) for numbers read off data."""
    ffn = load("ffn-loss.json")["eval"][-1]
    yield ["ch03/ffn.md", "numbers.md"], f"{ffn[1]:.3f}", "ffn-loss.json train"
    yield ["ch03/ffn.md", "numbers.md"], f"{ffn[2]:.3f}", "ffn-loss.json val"
    runs = load("cnn-runs.json")
    for model, pages_ in [
        ("mlp", ["ch03/ffn.md", "ch03/index.md"]),
        ("wavenet", ["ch03/cnn.md", "ch03/index.md"]),
    ]:
        final = runs[model]["final"]
        for split in ("val", "test"):
            yield pages_, f"{final[split]:.4f}", f"cnn-runs.json {model} {split}"
        yield [pages_[0]], f"{final['train']:.4f}", f"cnn-runs.json {model} train"
        for split in ("train", "val"):
            yield ["numbers.md"], f"{final[split]:.3f}", f"cnn-runs.json {model} {split}"
    opt = {k: v["val_loss"][-1] for k, v in load("mlp-optimizers.json")["runs"].items()}
    cosine = opt.pop("AdamW, lr 0.01, warmup 100 + cosine")
    yield ["ch03/optimization.md", "numbers.md"], f"{cosine:.3f}", "mlp-optimizers.json cosine"
    span = f"{min(opt.values()):.2f}–{max(opt.values()):.2f}"
    yield ["ch03/optimization.md", "numbers.md"], span, "mlp-optimizers.json constant rates"
    gru, gpt = load("names-innovation-gru.json"), load("names-innovation-gpt.json")
    for r, g in zip(gru["rows"], gpt["rows"]):
        cells = [
            r["innovation"],
            r["new_but_real"],
            g["innovation"],
            g["new_but_real"],
            g["distinct"],
        ]
        row = " | ".join(f"{100 * c:.1f}%" for c in cells)
        yield ["projects.md"], f"| {r['temperature']} | {row} |", "names-innovation rows"


@pytest.mark.parametrize(
    "pages_, text, origin", list(figure_quotes()), ids=lambda v: v if isinstance(v, str) else None
)
def test_prose_quotes_the_figure_data(pages_, text, origin):
    missing = [name for name in pages_ if text not in page(name)]
    assert not missing, f"{text!r} ({origin}) is not on {', '.join(missing)}"


# --- claims about GPU timings -------------------------------------------------------


def gpu_timed() -> bool:
    """Whether the numbers page reports GPU timings of the book's kernels."""
    section = page("numbers.md").split("## Kernels on the GPU", 1)[1].split("\n## ", 1)[0]
    return "**Not yet measured.**" not in section


GPU_CLAIMS = [
    r"measured against cuBLAS",
    r"timings? (come|comes) from a (real )?GPU",
    r"measured on (a|an|the|one) (real )?(GPU|A100|H100|H200|A6000)",
    r"\bour (GPU )?(timings|measurements) on",
]


def test_no_page_claims_gpu_timings_the_numbers_page_does_not_have():
    if gpu_timed():
        pytest.skip("the numbers page reports GPU timings")
    claim = re.compile("|".join(c.replace(" ", r"\s+") for c in GPU_CLAIMS), re.IGNORECASE)
    problems = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        for m in claim.finditer(text):
            before = text[max(0, m.start() - 40) : m.start()].lower()
            if re.search(r"\bnot( yet)?\s*$|\bnever\s*$", before):
                continue  # "not yet measured on a GPU"
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{path.relative_to(ROOT).as_posix()}:{line}: {m.group()!r}")
    assert not problems, "the numbers page says no GPU timing exists:\n" + "\n".join(problems)


def test_the_gpu_scoreboard_agrees_with_the_numbers_page():
    """4.4's sitp column is 'not yet measured' exactly while the numbers page says so."""
    rows = [
        line
        for line in page("ch04/gemm-gpu.md").splitlines()
        if re.match(r"\| \d+s? \| `\w+`", line)
    ]
    assert len(rows) >= 8
    cells = [row.split("|")[5].strip() for row in rows]
    if gpu_timed():
        assert not any("not yet measured" in c for c in cells), cells
    else:
        assert all(c.startswith("not yet measured") for c in cells), cells


def test_the_launch_cost_cites_its_source():
    """4.3's launch cost is a published figure: it names the measurement and links it."""
    text = page("ch04/gpu.md")
    bullet = text.split("* **launch**", 1)[1].split("\n* ", 1)[0]
    assert "7–15 µs" in bullet and "bibliography.md#" in bullet, bullet
    bib = page("bibliography.md")
    for author, url in [("Markall", "numba-cuda/pull/288"), ("Besard", "CUDAdrv.jl/pull/15")]:
        assert author in bullet and author in bib and url in bib, author
