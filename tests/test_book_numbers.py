"""Every figure a page states in prose agrees with the data it comes from.

FIGURES is one table: a page, a pattern whose groups are the figures as the prose writes
them, and where the data says they come from: a block's recorded output
(``docs/_outputs``), a run that ``sitp.examples`` ships (``src/sitp/examples/*.json``), a
script's recorded output in ``docs/assets``, another page's table, or the package itself
(a parameter count, the census split). The test compares each figure at the precision the
prose states it. Summaries (Part III's overview, the chapter openings, the home page and
the numbers page) are rows of the same table, checked against the data of the pages they
summarise. ``figure_quotes`` checks whole table rows read off recorded data.
``tests/test_book.py::test_numbers_page_copies_the_chapters`` checks that the numbers page
copies the chapters; the last tests here check the claims about GPU timings, which must
match what the numbers page says has been measured.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
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


def ladder_gap(split: str) -> float:
    """How far 3.5's GPT ends below the GRU on ``split``, mean over the seeds of each
    (ladder-names-seeds.json)."""
    runs = load("ladder-names-seeds.json")["runs"]
    return runs["gru"]["summary"][split]["mean"] - runs["gpt"]["summary"][split]["mean"]


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
    (
        "ch03/gpt.md",
        r"the GPT's mean validation loss is (\d\.\d+) nats above the GRU's and its mean test "
        r"loss (\d\.\d+) above",
        lambda: (-ladder_gap("val"), -ladder_gap("test")),
    ),
    (
        "ch03/gpt.md",
        r"the difference is (\d\.\d) times the larger standard deviation, within",
        lambda: -ladder_gap("val") / max(ladder_spread(m, "val")[1] for m in ("gru", "gpt")),
    ),
    (
        "ch03/gpt.md",
        r"seed 42 alone puts the GPT (\d\.\d+) nats below the GRU",
        lambda: seed_run("gru", 42)["val"] - seed_run("gpt", 42)["val"],
    ),
    (
        "ch03/gpt.md",
        r"On test the three GRU runs end within (\d\.\d+) of each other and all below the three "
        r"GPT runs, a difference (\d\.\d) times the larger standard deviation: three seeds make "
        r"that suggestive, not settled, and it is (\d\.\d+) nats",
        lambda: (
            (
                ex("ladder-names-seeds.json")["runs"]["gru"]["summary"]["test"]["max"]
                - ex("ladder-names-seeds.json")["runs"]["gru"]["summary"]["test"]["min"],
                -ladder_gap("test") / max(ladder_spread(m, "test")[1] for m in ("gru", "gpt")),
                -ladder_gap("test"),
            )
            if ex("ladder-names-seeds.json")["runs"]["gpt"]["summary"]["test"]["min"]
            > ex("ladder-names-seeds.json")["runs"]["gru"]["summary"]["test"]["max"]
            else (math.nan,) * 3
        ),
    ),
    (
        "ch03/gpt.md",
        r"the GPT ends at validation (\d\.\d+) against the table's (\d\.\d+), the dropout run at "
        r"(\d\.\d+) against (\d\.\d+)\.",
        lambda: tuple(
            x
            for key in ("gpt", "gpt-dropout")
            for x in (
                long_runs(key)[0]["final"]["val"],
                ex("ladder-names-long.json")["runs"][key]["final"]["val"],
            )
        ),
    ),
    (
        "ch03/gpt.md",
        r"weight decay's seed 42 ends at\s+validation (\d\.\d+) against the table's (\d\.\d+):",
        lambda: (
            long_runs("gpt-wd")[0]["final"]["val"],
            ex("ladder-names-long.json")["runs"]["gpt-wd"]["final"]["val"],
        ),
    ),
    (
        "ch03/gpt.md",
        r"The standard deviations over the three seeds of each are (\d\.\d+) \(GRU\) and "
        r"(\d\.\d+) \(GPT\) on validation",
        lambda: (ladder_spread("gru", "val")[1], ladder_spread("gpt", "val")[1]),
    ),
    (
        "ch03/gpt.md",
        r"the gap between the training and validation losses is (\d\.\d+) nats for the GPT "
        r"\(means over its seeds, (\d\.\d+) against (\d\.\d+)\) and (\d\.\d+) for the GRU",
        lambda: (
            ladder_train_val_gap("gpt"),
            ladder_spread("gpt", "train")[0],
            ladder_spread("gpt", "val")[0],
            ladder_train_val_gap("gru"),
        ),
    ),
    (
        "ch03/gpt.md",
        r"Each rung but the last is below the one before it by more than (\w+) times the larger",
        lambda: ladder_rungs_apart(),
    ),
    (
        "ch03/gpt.md",
        r"would leave the step at (\d\.\d\d) \(Amdahl's law",
        lambda: ex("thread-profile-intel.json")["amdahl_bound"],
    ),
    (
        "ch03/gpt.md",
        r"The other fused layers' calls\s+gain between (\d\.\d\d) and (\d\.\d\d), not 2",
        lambda: (
            min(g for k, g in thread_gains(fused=True).items() if k != "LayerNorm.backward"),
            max(thread_gains(fused=True).values()),
        ),
    ),
    (
        "ch03/gpt.md",
        r"gain little or nothing: the optimizer's kernels \((\d\.\d\d)\) and the copies of "
        r"`assign`\s+\((\d\.\d\d)\), whose arrays are small\. Layer norm's backward gains "
        r"(\d\.\d\d)",
        lambda: (
            thread_gains()["AdamW (adam_update)"],
            thread_gains()["assign"],
            thread_gains()["LayerNorm.backward"],
        ),
    ),
    (
        "ch03/gpt.md",
        r"The linear layers' backward\s+gets its (\d\.\d\d) from splitting",
        lambda: thread_gains()["Linear.backward"],
    ),
    (
        "ch06/compiled.md",
        r"On the Zen 4 \(the fourth and fifth records; other programs took under (\d)% of the CPUs\),"
        r"\s+the compiled anchor step is the fastest of the four arms on both thread counts\. On one"
        r"\s+thread it takes ([\d.]+) ms against torch eager's ([\d.]+), (\d\.\d\d) of its time "
        r"\((\d\.\d\d) to (\d\.\d\d)\), and\s+(\d\.\d\d) of torch.compile's \((\d\.\d\d) to "
        r"(\d\.\d\d)\); on two, ([\d.]+) ms against ([\d.]+), (\d\.\d\d) \((\d\.\d\d) to\s+"
        r"(\d\.\d\d)\), and (\d\.\d\d) of torch.compile's \((\d\.\d\d) to (\d\.\d\d)\)",
        lambda: (math.ceil(zen4_anchor()[0]),) + zen4_anchor()[1:],
    ),
    (
        "ch06/compiled.md",
        r"Compiling gains less there than on\s+the Xeon, (\d\.\d\d) on one thread and (\d\.\d\d) on "
        r"two, since eager sitp is already ahead of\s+PyTorch on that machine \(([\d.]+) ms a step "
        r"against ([\d.]+) on one thread\)",
        lambda: (
            train_ratio("gpt", "eager/compiled", record=TRAIN_AMD[0]),
            train_ratio("gpt", "eager/compiled", threads="2", record=TRAIN_AMD[1]),
            train_ms("gpt", "eager", record=TRAIN_AMD[0]),
            train_ms("gpt", "torch", record=TRAIN_AMD[0]),
        ),
    ),
    (
        "ch06/compiled.md",
        r"On one thread the ladder gains (\d\.\d\d) \(the RNN\), (\d\.\d\d) \(the GRU\) and "
        r"(\d\.\d\d) \(the CNN\); on\s+two, (\d\.\d\d), (\d\.\d\d) and (\d\.\d\d)\.",
        lambda: tuple(
            train_ratio(m, "eager/compiled", threads=t, record=rec)
            for t, rec in zip("12", TRAIN_AMD)
            for m in LADDER
        ),
    ),
    (
        "ch06/compiled.md",
        r"the compiled\s+step's fixed arm in 6\.3's beam record took ([\d.]+), ([\d.]+) and ([\d.]+) ms",
        lambda: tuple(1e3 * r["arms"]["fixed"]["median"] for r in tune_runs("gpt", "2", BEAM)),
    ),
    (
        "ch04/primitives.md",
        r"\(`a \+ b`, `a \* 2\.0`, `x\.tanh\(\)`, `x \*\* 2`\) takes (\d\.\d\d) to (\d\.\d\d) times "
        r"PyTorch's\s+time without a graph and (\d\.\d\d) to (\d\.\d\d) times with one, and the short "
        r"chain forward and\s+backward (\d\.\d\d) times \((\d\.\d\d) on the Xeon\)",
        lambda: (
            *spread(overhead("op-overhead-amd-second.json", op) for op in ELEMENTWISE),
            *spread(overhead("op-overhead-amd-second.json", op + "+grad") for op in ELEMENTWISE),
            overhead("op-overhead-amd-second.json", "chain fwd+bwd"),
            overhead("op-overhead-intel.json", "chain fwd+bwd"),
        ),
    ),
    (
        "ch04/primitives.md",
        r"`x\.view\(8, 4\)` that records took (\d\.\d\d) µs there and takes (\d\.\d\d) now, against "
        r"PyTorch's\s+(\d\.\d\d), and `x\.transpose\(0, 1\)` (\d\.\d\d) µs, now (\d\.\d\d), against "
        r"(\d\.\d\d)",
        lambda: overheads(
            "op-overhead-amd-second.json",
            ("view+grad", "transpose+grad"),
            ("sitp_before", "sitp", "torch"),
        ),
    ),
    (
        "ch04/primitives.md",
        r"the \(8, 8\) product: (\d\.\d\d) times PyTorch's time on the Zen 4 and (\d\.\d\d) on the "
        r"Xeon",
        lambda: (
            overhead("op-overhead-amd-second.json", "matmul"),
            overhead("op-overhead-intel.json", "matmul"),
        ),
    ),
    (
        "ch04/primitives.md",
        r"on one thread\s+the RNN runs at (\d\.\d\d) of its speed and the GRU at (\d\.\d\d), and the "
        r"GPT files at (\d\.\d\d) \(spelled\s+out\) and (\d\.\d\d) \(nanoGPT's\)\. The makemore "
        r"models' median is (\d\.\d\d) there, and no program\s+of the seven is below (\d\.\d\d) of "
        r"PyTorch's speed on either thread count",
        lambda: (
            *(
                plain_speed("plain-torch-amd-second.json", m)
                for m in ("rnn", "gru", "gpt", "nanogpt")
            ),
            statistics.median(plain_speed("plain-torch-amd-second.json", m) for m in MAKEMORE),
            min(
                plain_speed(rec, m)
                for rec in ("plain-torch-amd-second.json", "plain-torch-amd-2t.json")
                for m in MAKEMORE + ("gpt", "nanogpt")
            ),
        ),
    ),
    (
        "ch04/primitives.md",
        r"leaves the GRU at (\d\.\d\d) on the Xeon\. Both libraries take longer on the Zen 4, "
        r"PyTorch by\s+more: its GRU iteration takes (\d\.\d\d) ms there against (\d\.\d\d) on the "
        r"Xeon, sitp's (\d\.\d\d)\s+against (\d\.\d\d)",
        lambda: (
            plain_speed("plain-torch-intel-fourth.json", "gru"),
            *(
                1e3 * ex(rec)["seconds_per_iteration"]["gru"][arm]
                for arm in ("torch", "sitp")
                for rec in ("plain-torch-amd-second.json", "plain-torch-intel-fourth.json")
            ),
        ),
    ),
    (
        "numbers.md",
        r"On a second AMD EPYC, a Zen 4, sitp/PyTorch is (\d\.\d\d) on\s+one thread and (\d\.\d\d) on "
        r"two; a second thread speeds sitp's step up by (\d\.\d\d) there and\s+PyTorch's by (\d\.\d\d)",
        lambda: (
            *(ex(f"compare-torch-znver4-{t}t.json")["throughput"]["ratio"] for t in (1, 2)),
            *(
                ex("compare-torch-znver4-2t.json")["throughput"][k]
                / ex("compare-torch-znver4-1t.json")["throughput"][k]
                for k in ("sitp", "torch")
            ),
        ),
    ),
    (
        "ch03/gpt.md",
        r"On the Zen 4 the step gains (\d\.\d\d) \(rounds (\d\.\d\d) to (\d\.\d\d)\) against a "
        r"bound of (\d\.\d\d)",
        lambda: (
            *(ex("thread-profile-amd.json")["speedup"][k] for k in ("median", "min", "max")),
            ex("thread-profile-amd.json")["amdahl_bound"],
        ),
    ),
    (
        "ch03/gpt.md",
        r"sitp's step gains (\d\.\d\d) from a second\s+thread where PyTorch's gains (\d\.\d\d)",
        lambda: tuple(
            ex("compare-torch-znver4-2t.json")["throughput"][k]
            / ex("compare-torch-znver4-1t.json")["throughput"][k]
            for k in ("sitp", "torch")
        ),
    ),
    (
        "ch03/gpt.md",
        r"attention and GELU gain (\d\.\d\d) to (\d\.\d\d), layer norm's backward\s+(\d\.\d\d)",
        lambda: (
            min(
                thread_gains(record="thread-profile-amd.json", fused=True, but="LayerNorm").values()
            ),
            max(
                thread_gains(record="thread-profile-amd.json", fused=True, but="LayerNorm").values()
            ),
            thread_gains(record="thread-profile-amd.json")["LayerNorm.backward"],
        ),
    ),
    (
        "ch03/gpt.md",
        r"The Zen 4 lies between: the twelve products take (\d\.\d\d) times as long",
        lambda: (
            sum(g["torch_ms"] for g in ex("compare-torch-znver4-1t.json")["gemms"])
            / sum(g["sitp_ms"] for g in ex("compare-torch-znver4-1t.json")["gemms"])
        ),
    ),
    (
        "ch03/gpt.md",
        r"steps are close on one thread \(sitp/PyTorch (\d\.\d\d)\), with\s+sitp ahead on two "
        r"\((\d\.\d\d)\)",
        lambda: tuple(ex(f"compare-torch-znver4-{t}t.json")["throughput"]["ratio"] for t in (1, 2)),
    ),
    (
        "ch04/primitives.md",
        r"there `a \+ b` that records takes (\d\.\d\d) µs against PyTorch's (\d\.\d\d), "
        r"(\d\.\d\d)\s+times",
        lambda: overheads("op-overhead-intel.json", ("add+grad",), ("sitp", "torch", "sitp/torch")),
    ),
    (
        "ch04/primitives.md",
        r"`x\.tanh\(\)` takes (\d\.\d\d) µs against (\d\.\d\d), (\d\.\d\d) times \((\d\.\d\d) µs "
        r"before item 4\), and (\d\.\d\d) µs against (\d\.\d\d) when it records, (\d\.\d\d) times "
        r"\((\d\.\d\d) µs before\)",
        lambda: overheads(
            "op-overhead-intel.json",
            ("tanh", "tanh+grad"),
            ("sitp", "torch", "sitp/torch", "sitp_before"),
        ),
    ),
    ("projects.md", r"innovation rate is already (\d+)% at", innovation_at_half),
    # 6.3's autotuning, against tune.json (scripts/bench_tune.py --repeat)
    (
        "ch06/codegen.md",
        r"in each of (\d+) runs the tuner times (\d+) of the anchor GPT's kernels [^)]*\) and "
        r"keeps the serial twin for (\d+) of them, in (\d\.\d\d) to (\d\.\d\d) s",
        lambda: (
            len(tune_runs("gpt")),
            same(r["arms"]["tuned"]["info"]["tune"]["timed"] for r in tune_runs("gpt")),
            same(r["arms"]["tuned"]["info"]["tune"]["serial"] for r in tune_runs("gpt")),
            *spread(r["arms"]["tuned"]["info"]["tune"]["seconds"] for r in tune_runs("gpt")),
        ),
    ),
    (
        "ch06/codegen.md",
        r"the 17\s+kernels' medians come to (\d\.\d) to (\d\.\d) ms for the parallel versions and "
        r"(\d\.\d) to (\d\.\d) ms for\s+the serial twins",
        lambda: tuple(
            1e3 * v
            for k in ("parallel_s", "serial_s")
            for v in spread(r["arms"]["tuned"]["info"]["tune"][k] for r in tune_runs("gpt"))
        ),
    ),
    (
        "ch06/codegen.md",
        r"The runs' medians of fixed/tuned go from (\d\.\d\d) to (\d\.\d\d), their rounds\s+from "
        r"(\d\.\d\d) to (\d\.\d\d), with other programs at (\d+)% of the CPUs",
        lambda: (
            *spread(r["ratios"]["fixed/tuned"]["median"] for r in tune_runs("gpt")),
            min(r["ratios"]["fixed/tuned"]["min"] for r in tune_runs("gpt")),
            max(r["ratios"]["fixed/tuned"]["max"] for r in tune_runs("gpt")),
            100
            * max(
                r["load"]["other_share"] for m in ("gpt", "wavenet", "gru") for r in tune_runs(m)
            ),
        ),
    ),
    # 6.3's beam search, against tune-beam-amd.json (scripts/bench_tune.py --threads 1,2)
    (
        "ch06/codegen.md",
        r"The search times (\d+) to (\d+)\s+of their (\d+) configurations, keeps more than one "
        r"block per task for (\d+) to (\d+) of them",
        lambda: (
            *spread(beam_stats("1", "configs")),
            same(beam_stats("1", "space")),
            *spread(beam_stats("1", "rows")),
        ),
    ),
    (
        "ch06/codegen.md",
        r"the product apart for none, and the winners' medians add up to (\d\.\d) to "
        r"(\d\.\d)% less than\s+the fixed rule's\. The runs' medians of fixed/tuned are "
        r"(\d\.\d\d) to (\d\.\d\d)\.",
        lambda: (*beam_gain("1"), *beam_ratios("1")),
    ),
    (
        "ch06/codegen.md",
        r"the search times (\d+) to (\d+) of the (\d+) configurations of (\d+) kernels,\s+"
        r"keeps one thread for (\d+) to (\d+) of them",
        lambda: (
            *spread(beam_stats("2", "configs")),
            same(beam_stats("2", "space")),
            same(beam_stats("2", "timed")),
            *spread(beam_stats("2", "fewer")),
        ),
    ),
    (
        "ch06/codegen.md",
        r"the medians add up to (\d\.\d) to (\d\.\d)% less, and fixed/tuned is "
        r"(\d\.\d\d)\s+to (\d\.\d\d)\.",
        lambda: (*beam_gain("2"), *beam_ratios("2")),
    ),
    (
        "ch06/codegen.md",
        r"only the anchor GPT's (\d+) GEMMs with an epilogue have anything to choose",
        lambda: (same(beam_stats("1", "timed")),),
    ),
    (
        "ch06/codegen.md",
        r"has nothing to search; its identical arms read (\d\.\d\d) to (\d\.\d\d)",
        lambda: spread(
            r["ratios"]["fixed/tuned"]["median"]
            for t in ("1", "2")
            for r in tune_runs("gru", t, BEAM)
            if r["arms"]["tuned"]["info"]["tune"]["timed"] == 0
        ),
    ),
    (
        "ch06/codegen.md",
        r"their two identical arms read (\d\.\d\d) to (\d\.\d\d)",
        lambda: spread(
            r["ratios"]["fixed/tuned"]["median"] for m in ("wavenet", "gru") for r in tune_runs(m)
        ),
    ),
]


# --- every figure a page states, against its data ------------------------------------
#
# A row of FIGURES is (page, pattern, source). Each group of the pattern is a figure as the
# prose writes it ("1,115,394", "4.20", "−0.270", "twelve"); the source returns the data's
# value for each group, in order, and the test compares them at the precision the prose
# states: 4.20 against 4.2031 passes, 4.21 fails; "twelve" is 12. A space in a pattern
# matches any run of whitespace, line breaks included. Every match on the page is checked,
# and a pattern that no longer matches fails, so a reworded sentence gets its row updated.

WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"twice": 2, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "hundred": 100}


def as_figure(text: str) -> tuple[float, int]:
    """A figure of the prose: its value and its number of decimals."""
    word = text.lower()
    if word in WORDS:
        return float(WORDS[word]), 0
    digits = text.replace(",", "").replace("{,}", "").replace("−", "-")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits), decimals


def agrees(prose: str, value) -> bool:
    """Whether the data's ``value`` rounds to the figure ``prose`` writes."""
    number, decimals = as_figure(prose)
    return f"{float(value):.{decimals}f}" == f"{number:.{decimals}f}"


def grab(text: str, pattern: str, where: str):
    """The numbers that the groups of ``pattern``'s one match in ``text`` capture."""
    hits = list(re.finditer(pattern, text, re.MULTILINE))
    assert len(hits) == 1, f"{where}: {len(hits)} matches of {pattern!r}, want 1"
    values = tuple(float(g.replace(",", "")) for g in hits[0].groups())
    return values[0] if len(values) == 1 else values


@functools.cache
def printed(name: str) -> str:
    """What the blocks of page ``name`` print, as docs/_outputs/<name>.json records it."""
    outputs = json.loads((DOCS / "_outputs" / f"{name}.json").read_text(encoding="utf-8"))
    return "\n".join(block["stdout"] for block in outputs["blocks"])


def out(name: str, pattern: str):
    """Number(s) from the recorded output of page ``name`` ("ch05/tokens")."""
    return grab(printed(name), pattern, f"docs/_outputs/{name}.json")


def asset(path: str, pattern: str):
    """Number(s) from a recorded text file in docs/assets ("part3/ablate-gpt.txt")."""
    return grab((DOCS / "assets" / path).read_text(encoding="utf-8"), pattern, path)


def grad_overhead_range() -> tuple[float, float]:
    """The least and the largest sitp/torch of the per-op rows that record a graph, over
    both machines' op-overhead records."""
    ratios = [
        row["sitp/torch"]["median"]
        for name in ("op-overhead.json", "op-overhead-intel.json")
        for op, row in ex(name)["us_per_call"].items()
        if op.endswith("+grad")
    ]
    return min(ratios), max(ratios)


ELEMENTWISE = ("add", "mul_scalar", "tanh", "pow")  # op_overhead.py's small elementwise rows
MAKEMORE = ("bigram", "mlp", "bow", "rnn", "gru")  # plain_torch_bench.py's makemore models


def overhead(record: str, op: str) -> float:
    """op_overhead.py's record: sitp's time over PyTorch's for one row (the median)."""
    return ex(record)["us_per_call"][op]["sitp/torch"]["median"]


def overheads(record: str, ops, arms) -> tuple:
    """op_overhead.py's record: the medians of ``arms`` (µs, or a ratio such as
    "sitp/torch") for each of ``ops`` in turn."""
    rows = ex(record)["us_per_call"]
    return tuple(rows[op][arm]["median"] for op in ops for arm in arms)


def thread_gains(fused=False, record="thread-profile-intel.json", but=None) -> dict:
    """scripts/thread_profile.py's record: each part's one-thread time over its two-thread
    time (with ``fused``, the fused layers' calls of 0.3 ms a step or more; ``but``: leave
    out the parts whose name starts so)."""
    parts = ex(record)["parts"]
    return {
        k: p["ms_1t"] / p["ms_2t"]
        for k, p in parts.items()
        if not fused or (k.endswith((".forward", ".backward")) and p["ms_1t"] >= 0.3)
        if but is None or not k.startswith(but)
    }


def ex(name: str):
    """A recorded run that sitp.examples ships ("bpb-budget.json")."""
    return json.loads((EXAMPLES / name).read_text(encoding="utf-8"))


def roofline(row: str, threads: int) -> float:
    """2.3's roofline table: ``row`` ("DRAM", "L2") with 1 or 2 threads, in GB/s."""
    m = re.search(
        rf"^\| triad bandwidth, {row}, GB/s \| ([\d.]+) \| ([\d.]+) \|$",
        page("ch02/blas.md"),
        re.MULTILINE,
    )
    return float(m.group(threads))


def kv_gqa(n_kv_head: int) -> dict:
    """5.4's run of grouped-query attention: the row of ``n_kv_head`` key/value heads."""
    return next(r for r in ex("kv-cache-features.json")["gqa"] if r["n_kv_head"] == n_kv_head)


def kv_val(n_kv_head: int) -> float:
    return statistics.mean(kv_gqa(n_kv_head)["val"])


def kv_spec_rows(temperature) -> list[dict]:
    """5.4's speculative decoding rows at ``temperature`` (None: all of them)."""
    rows = ex("kv-cache-features.json")["speculative"]["rows"]
    return [r for r in rows if temperature is None or r["temperature"] == temperature]


def roofline_peak(threads: int) -> float:
    """2.3's roofline table: the micro-kernel's peak with 1 or 2 threads, in GFLOP/s."""
    m = re.search(
        r"^\| peak \(micro-kernel in L1\), GFLOP/s \| ([\d.]+) \| ([\d.]+) \|$",
        page("ch02/blas.md"),
        re.MULTILINE,
    )
    return float(m.group(threads))


def scoreboard_ratios() -> list[float]:
    """2.3's scoreboard (the host's code): the ratios to numpy of the packed kernel on one
    thread and of the parallel one on two, at N = 256, 512 and 1024."""
    table = page("ch02/blas.md").split("<!-- --8<-- [start:scoreboard] -->")[1]
    table = table.split("\n\n", 3)[2]
    cells = {}
    for name in ("packed + micro-kernel", "packed, parallel"):
        m = re.search(rf"^\| {re.escape(name)} \|(.*)\|$", table, re.MULTILINE)
        cells[name] = [float(r) for r in re.findall(r"\(([\d.]+)\)", m.group(1))]
    return cells["packed + micro-kernel"][0::2] + cells["packed, parallel"][1::2]


def compile_run() -> dict:
    """6.4's benchmark: the latest run of compile-bench.json (rounds through sitp.bench.ab)."""
    return ex("compile-bench.json")["runs"][-1]


def compile_ratio(block: str, key: str = "eager/compiled", stat: str = "median") -> float:
    """6.4: a time ratio of two arms of ``block`` ("compiled/torch"), its median over the
    rounds or its ``stat`` "min" or "max"."""
    return compile_run()["rows"][block]["ratios"][key][stat]


def compile_ms(block: str, key: str) -> float:
    """6.4: the median over the rounds of ``block`` for arm ``key`` ("eager", "torch"), ms."""
    return compile_run()["rows"][block][key]


def compile_range(block: str, key: str) -> tuple[float, float]:
    """6.4: the fastest and the slowest round of arm ``key`` on ``block``, ms."""
    return tuple(compile_run()["rows"][block]["range_ms"][key])


TRAIN_INTEL = "compile-train-intel.json"  # 6.4's second record (the Xeon, the GRU's rule)
TRAIN_INTEL_2T = "compile-train-intel-2t.json"  # its third (the Xeon on two threads)
TRAIN_AMD = ("compile-train-amd.json", "compile-train-amd-2t.json")  # the Zen 4, 1 and 2 threads


def zen4_anchor() -> tuple:
    """6.4's Zen 4 records: other programs' largest share (%), then per thread count the
    anchor's compiled and torch ms and its ratios to torch and torch.compile (median,
    min, max)."""
    share = max(
        train_run(m, t, rec)["load"]["other_share"]
        for rec, t in zip(TRAIN_AMD, "12")
        for m in LADDER + ("gpt",)
    )
    out = [100 * share]
    for rec, t in zip(TRAIN_AMD, "12"):
        out += [train_ms("gpt", "compiled", t, rec), train_ms("gpt", "torch", t, rec)]
        out += [train_ratio("gpt", "compiled/torch", st, t, rec) for st in STATS]
        out += [train_ratio("gpt", "compiled/torch.compile", st, t, rec) for st in STATS]
    return tuple(out)


def train_run(model: str, threads: str = "1", record: str = "compile-train.json") -> dict:
    """6.4's training steps (compile-train.json, or ``record``): the harness's result for
    ``model``."""
    return ex(record)["runs"][threads][model]


def tune_runs(model: str, threads: str = "2", record: str = "tune.json") -> list:
    """6.3's autotuning record (tune.json, or the beam search's): the harness's results for
    ``model``, one a run."""
    return ex(record)["runs"][threads][model]


def beam_stats(threads: str, key: str) -> list:
    """The beam search's counts (tune-beam-amd.json) for the anchor GPT, one a run."""
    return [r["arms"]["tuned"]["info"]["tune"][key] for r in tune_runs("gpt", threads, BEAM)]


def beam_gain(threads: str) -> tuple:
    """How much less the winners' medians add up to than the fixed rule's, in %: range."""
    fixed, tuned = beam_stats(threads, "fixed_s"), beam_stats(threads, "tuned_s")
    return spread(100 * (1 - t / f) for f, t in zip(fixed, tuned))


def beam_ratios(threads: str, model: str = "gpt") -> tuple:
    return spread(r["ratios"]["fixed/tuned"]["median"] for r in tune_runs(model, threads, BEAM))


BEAM = "tune-beam-amd.json"


def same(values) -> float:
    """The one value that every run gives (nan where they differ)."""
    values = set(values)
    return values.pop() if len(values) == 1 else math.nan


def spread(values) -> tuple:
    values = list(values)
    return min(values), max(values)


def train_ms(model: str, arm: str, threads: str = "1", record: str = "compile-train.json"):
    return 1e3 * train_run(model, threads, record)["arms"][arm]["median"]


def train_ratio(
    model: str, key: str, stat: str = "median", threads: str = "1", record="compile-train.json"
) -> float:
    return train_run(model, threads, record)["ratios"][key][stat]


def train_report(model: str, record: str = "compile-train.json") -> dict:
    return train_run(model, record=record)["arms"]["compiled"]["info"]["report"]


LADDER = ("rnn", "gru", "wavenet")
ARMS = ("eager", "compiled", "torch", "torch.compile")  # bench_train_compile.py's, in order
STATS = ("median", "min", "max")


def two_threads_figures() -> tuple:
    """6.4's third record (the Xeon on two threads): other programs' largest share, the
    anchor's compiled and torch eager ms, its ratios to torch and torch.compile, eager's
    ms and eager/compiled, then the ladder's eager/compiled."""
    rec = TRAIN_INTEL_2T
    share = max(train_run(m, "2", rec)["load"]["other_share"] for m in LADDER + ("gpt",))
    return (
        100 * share,
        train_ms("gpt", "compiled", "2", rec),
        train_ms("gpt", "torch", "2", rec),
        *(
            train_ratio("gpt", k, s, "2", rec)
            for k in ("compiled/torch", "compiled/torch.compile")
            for s in STATS
        ),
        train_ms("gpt", "eager", "2", rec),
        *(train_ratio("gpt", "eager/compiled", s, "2", rec) for s in STATS),
        *(train_ratio(m, "eager/compiled", "median", "2", rec) for m in LADDER),
    )


_ROW = (
    r" \| (\d+\.\d) \| (\d+\.\d) \| (\d+\.\d) \| (\d+\.\d) \| "
    r"(\d\.\d\d) \((\d\.\d\d)–(\d\.\d\d)\) \|"
)
# numbers.md's table of 6.4's compiled step: the day of each record, then its row
NUMBERS_COMPILE_TABLE = (
    r"\| AMD EPYC \| 2026-12-(\d\d) \| 1, CPU time" + _ROW + r"\n"
    r"\| Intel Xeon \| 2026-12-(\d\d) \| 1, CPU time" + _ROW + r"\n"
    r"\| Intel Xeon \| 2026-12-(\d\d) \| 2, wall clock" + _ROW + r"\n"
    r"\| AMD EPYC, Zen 4 \| 2026-12-(\d\d) \| 1, CPU time" + _ROW + r"\n"
    r"\| AMD EPYC, Zen 4 \| 2026-12-(\d\d) \| 2, wall clock" + _ROW
)


def compile_table_figures() -> tuple:
    """numbers.md's rows of 6.4's five records: the day, the four arms' ms, and the
    compiled step's time over PyTorch eager's (median and range over the rounds)."""
    figures = []
    for record, threads in (
        ("compile-train.json", "1"),
        (TRAIN_INTEL, "1"),
        (TRAIN_INTEL_2T, "2"),
        (TRAIN_AMD[0], "1"),
        (TRAIN_AMD[1], "2"),
    ):
        figures.append(float(train_run("gpt", threads, record)["machine"]["date"][8:10]))
        figures += [train_ms("gpt", a, threads, record) for a in ARMS]
        figures += [train_ratio("gpt", "compiled/torch", s, threads, record) for s in STATS]
    return tuple(figures)


def plain_median(record: str, model: str, key: str = "sitp/torch") -> float:
    """A plain_torch_bench.py record of 4.2: the median over the rounds of ``key`` for
    ``model``."""
    return ex(record)["seconds_per_iteration"][model][key]["median"]


def plain_third(model: str, key: str) -> float:
    """4.2's third plain-torch run."""
    return plain_median("plain-torch-intel-third.json", model, key)


def plain_fourth(model: str, key: str) -> float:
    """4.2's fourth plain-torch run."""
    return plain_median("plain-torch-intel-fourth.json", model, key)


def plain_2t(model: str) -> float:
    """4.2's two-thread plain-torch run: sitp/torch."""
    return plain_median("plain-torch-intel-2t.json", model)


def plain_speed(record: str, program: str) -> float:
    """plain_torch_bench.py's record: sitp's speed against PyTorch's (the median)."""
    return 1 / plain_median(record, program)


def below_one(value: float) -> float:
    """``value`` where it is below 1 (a claim that one side wins every round), else nan."""
    return value if value < 1 else math.nan


def anchor():
    return ex("shakespeare-anchor.json")


def bpb(i: int) -> dict:
    """5.3's bits-per-byte run, row ``i`` (0 gpt2 char, 1 modern char, 2 BPE 512, 3 BPE 1024)."""
    return ex("bpb-budget.json")["rows"][i]


ABLATION = "ablate-gpt-seeds.json"


def ablation(option: str, key: str = "val") -> list[float]:
    """5.3's ablation over seeds (ablate-gpt-seeds.json): ``key`` ("train", "val",
    "ms_per_step", "params") of ``option``'s run for each seed, in the order of the seeds."""
    run = ex(ABLATION)
    rows = {(r["option"], r["seed"]): r for r in run["rows"]}
    return [rows[option, seed][key] for seed in run["args"]["seeds"]]


def ablation_gain(option: str) -> list[float]:
    """5.3: ``option``'s validation loss less GPT-2's, seed by seed (paired by seed)."""
    return [a - b for a, b in zip(ablation(option), ablation("gpt2"))]


def mean_sd(values) -> tuple[float, float]:
    """The mean and the sample sd of ``values``."""
    return statistics.mean(values), statistics.stdev(values)


def seed_spread() -> float:
    """How far apart the GPT-2 baseline's validation losses land over 5.3's seeds."""
    return max(ablation("gpt2")) - min(ablation("gpt2"))


def seed_sd() -> float:
    """The sd of the GPT-2 baseline's validation loss over 5.3's seeds."""
    return statistics.stdev(ablation("gpt2"))


def gain_sd(option: str) -> tuple[float, float]:
    """5.3: how much ``option`` lowers the validation loss, mean over the seeds, and the sd
    of its paired differences."""
    m, sd = mean_sd(ablation_gain(option))
    return -m, sd


def all_less_muon() -> list[float]:
    """5.3: every option together less Muon alone, validation loss, seed by seed."""
    return [a - m for a, m in zip(ablation("all"), ablation("muon"))]


def all_less_sum() -> list[float]:
    """5.3: the gain of every option together less the sum of Muon's and rotary's single
    gains, seed by seed (positive: all together gain less than the sum)."""
    return [
        a - m - r
        for a, m, r in zip(ablation_gain("all"), ablation_gain("muon"), ablation_gain("rope"))
    ]


def exercise_option() -> str:
    """The option 5.3's exercise 3 asks about."""
    return re.search(r"In the table, `([^`]+)` moves the loss by", page("ch05/modern-gpt.md"))[1]


def ablation_loads() -> list[float]:
    """5.3's ablation: the one-minute load average before and after each run."""
    rows = ex(ABLATION)["rows"]
    return [r["load_average"][k][0] for r in rows for k in ("before", "after")]


def demo(stage: str, key: str = "pass@1", name: str = "posttrain-demo.json"):
    """8.2's demo run: ``key`` of ``stage`` ("pretrain", "sft", "rl")."""
    return next(s for s in ex(name)["stages"] if s["stage"] == stage)[key]


def demo_seeds(stage: str, name: str = "posttrain-demo-seeds.json") -> list[float]:
    """8.2's demo over seeds: held-out pass@1 of ``stage`` for each seed."""
    return ex(name)["summary"][stage]["values"]


def demo_half_width(stage: str, name: str = "posttrain-demo-seeds.json") -> float:
    """8.2's demo over seeds: the mean half-width of ``stage``'s Wilson intervals."""
    cis = [
        next(s for s in r["stages"] if s["stage"] == stage)["pass@1_ci"] for r in ex(name)["runs"]
    ]
    return statistics.mean((hi - lo) / 2 for lo, hi in cis)


def demo_rl_gains() -> list[float]:
    """8.2's demo over seeds: each seed's RL pass@1 less its own SFT model's."""
    return [b - a for a, b in zip(demo_seeds("sft"), demo_seeds("rl"))]


COUNT_SEEDS = "posttrain-demo-count-seeds.json"


def count_all_equal_groups() -> list[float]:
    """8.5's count demo: for each seed, the mean over its RL steps of the groups whose
    samples all got the same reward."""
    return [
        statistics.mean(h["zero_groups"] for h in r["rl_history"]) for r in ex(COUNT_SEEDS)["runs"]
    ]


def chain1_seeds(value) -> tuple[float, float]:
    """8.3's runs (rl-runs.json): the mean and sd over the seeds of ``value(run)``."""
    values = [value(r) for r in ex("rl-runs.json")["runs"]]
    return statistics.mean(values), statistics.stdev(values)


def chain1_gains() -> list[float]:
    """8.3's runs: each RL variant's held-out pass@1 less its own seed's SFT model's."""
    return [v["pass@1"] - r["chain1"]["stages"][1]["pass@1"]
            for r in ex("rl-runs.json")["runs"] for v in r["chain1"]["rl"].values()]  # fmt: skip


def pipeline(stage: str, task: str) -> float:
    """8.4's pipeline: held-out pass@1 of ``task`` after ``stage``."""
    run = ex("posttrain-pipeline.json")
    return next(s for s in run["stages"] if s["stage"] == stage)["pass@1"][task]["pass@1"]


def pipeline_seeds(kind: str, stage: str, task: str = "chain1") -> dict:
    """8.5's three runs of the pipeline (``--collect``): ``kind`` "pass@1", "rl_gain" (no
    stage) or "win_rate", each ``{"values", "mean", "sd"}``."""
    data = ex("posttrain-pipeline-seeds.json")
    if kind == "rl_gain":
        return data["rl_gain"][task]
    return data[kind][stage][task] if kind == "pass@1" else data[kind][stage]


def seeds_gains() -> tuple:
    """8.5's three runs: RL's gain over SFT on reverse (every run positive), on sort (every
    run positive, mean within two sds of zero: "in sign, not in size") and chain1 (within
    one sd of zero: "no gain"); and the reverse levels' range, "a third"."""
    rev, srt, ch = (pipeline_seeds("rl_gain", "", t) for t in ("reverse", "sort", "chain1"))
    assert min(rev["values"]) > 0 and min(srt["values"]) > 0
    assert srt["mean"] < 2 * srt["sd"] and abs(ch["mean"]) < ch["sd"]
    levels = pipeline_seeds("pass@1", "sft", "reverse")["values"]
    assert round(3 * (max(levels) - min(levels))) == 1
    return (
        min(rev["values"]),
        max(rev["values"]),
        rev["mean"],
        rev["sd"],
        min(srt["values"]),
        max(srt["values"]),
        srt["mean"],
        srt["sd"],
        ch["mean"],
        ch["sd"],
    )


def seeds_preferences() -> tuple:
    """8.5's three runs, the preference stages: win rates (every run's interval above 0.5),
    the check, chain1 solved by the policies and by SFT, and the shortest replies."""
    data = ex("posttrain-pipeline-seeds.json")
    for run in data["runs"]:
        assert run["win_ci"]["rl-rm"][0] > 0.5 and run["win_ci"]["dpo"][0] > 0.5
    solved = pipeline_seeds("pass@1", "rl-rm")["values"] + pipeline_seeds("pass@1", "dpo")["values"]
    assert min(solved) == 0
    chars = [run["sampled"]["rl-rm"]["chars"] for run in data["runs"][1:]]
    assert max(chars) - min(chars) < 1
    w = data["win_rate"]
    return (
        w["rl-rm"]["mean"],
        w["rl-rm"]["sd"],
        w["dpo"]["mean"],
        w["dpo"]["sd"],
        w["sft"]["mean"],
        w["sft"]["sd"],
        max(solved),
        min(pipeline_seeds("pass@1", "sft")["values"]),
        max(pipeline_seeds("pass@1", "sft")["values"]),
        sum(chars) / len(chars),
    )


def pipeline_preferences() -> tuple:
    """8.5's pipeline, its preference stages: the SFT model's win rate against itself, RL
    against the reward model's and DPO's (each asserted above 0.5 by its interval), their
    sampled replies' characters and share right, and the SFT model's."""
    prefs = ex("posttrain-pipeline.json")["preferences"]
    sft = prefs["sft_against_itself"]
    rl, dpo = (next(s for s in prefs["stages"] if s["stage"] == n) for n in ("rl-rm", "dpo"))
    assert rl["win"]["ci"][0] > 0.5 and dpo["win"]["ci"][0] > 0.5
    return (
        sft["win"]["win_rate"],
        rl["win"]["win_rate"],
        dpo["win"]["win_rate"],
        rl["sampled"]["chars"],
        dpo["sampled"]["chars"],
        sft["sampled"]["chars"],
        sft["sampled"]["right"],
        rl["sampled"]["right"],
        dpo["sampled"]["right"],
    )


def recorded_run(name: str, key: str) -> tuple[float, float, int]:
    """A run of ``sitp train`` that sitp.examples keeps: validation and test loss, steps."""
    data = ex(name)
    run = data["runs"][key] if "runs" in data else data[key]
    return run["final"]["val"], run["final"]["test"], run["train_config"]["steps"]


def gpt_parameters(**fields) -> int:
    """The parameters of sitp's GPT with ``fields`` (strings as a command line gives them)."""
    from sitp.models.gpt import GPT, GPTConfig  # late: the package, for parameter counts

    def value(v: str):
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return {"true": True, "false": False}.get(v, v)

    config = {k: value(v) for k, v in fields.items() if k in GPTConfig.__dataclass_fields__}
    return sum(p.numel() for p in GPT(GPTConfig(**config)).parameters())


def train_command(name: str) -> str:
    """The ``python -m sitp train`` command of a page's bash fence, continuation lines joined."""
    m = re.search(r"^python -m sitp train (?:.*\\\n)*.*$", page(name), re.MULTILINE)
    return m.group(0)


def pretrain_defaults() -> dict[str, str]:
    """``sitp pretrain``'s defaults: the model's fields and the batch size."""
    from sitp.train.cli import PRETRAIN_DEFAULTS  # late: as above

    found = dict(
        a[len("--set=") :].split("=", 1) for a in PRETRAIN_DEFAULTS if a.startswith("--set=")
    )
    found["batch_size"] = PRETRAIN_DEFAULTS[PRETRAIN_DEFAULTS.index("--batch-size") + 1]
    return found


def cnn(model: str) -> dict:
    """The ``sitp train`` run of 3.1 ("mlp") or 3.3 ("wavenet"), as cnn-runs.json keeps it."""
    return ex("cnn-runs.json")[model]


def cnn_row(model: str) -> tuple:
    """A table row of those runs: parameters, steps, train, val and test loss."""
    run = cnn(model)
    f = run["final"]
    return run["num_params"], run["train_config"]["steps"], f["train"], f["val"], f["test"]


def bigram_val() -> float:
    """Chapter 1's add-0.1 bigram on the census validation names, as its fence prints it."""
    return out("ch01/index", r"^alpha +0\.1: train [\d.]+ +val ([\d.]+)$")


def constant_rates() -> list[float]:
    """3.2: the final validation losses of the three optimizers at a constant rate."""
    runs = ex("mlp-optimizers.json")["runs"]
    return [r["val_loss"][-1] for k, r in runs.items() if "cosine" not in k]


def lit(text: str) -> str:
    """``text`` as a pattern of FIGURES: special characters escaped, spaces left to match
    any whitespace."""
    return re.escape(text).replace("\\ ", " ")


def ladder(key: str) -> tuple:
    """3.5's ladder on makemore's names (ladder-names.json): parameters, wall seconds,
    train, validation and test loss of model ``key``."""
    run = ex("ladder-names.json")["runs"][key]
    f = run["final"]
    return run["num_params"], run["wall_s"], f["train"], f["val"], f["test"]


def ladder_spread(key: str, split: str) -> tuple[float, float]:
    """3.5's ladder over seeds (ladder-names-seeds.json): the mean and the sample sd of
    model ``key``'s final ``split`` loss."""
    s = ex("ladder-names-seeds.json")["runs"][key]["summary"][split]
    return s["mean"], s["sd"]


def ladder_apart(a: str, b: str, split: str) -> float:
    """3.5's ladder over seeds: how many times the larger sd model ``b``'s mean ``split``
    loss ends below model ``a``'s; nan where the seeds' ranges of the two overlap."""
    runs = ex("ladder-names-seeds.json")["runs"]
    sa, sb = runs[a]["summary"][split], runs[b]["summary"][split]
    if not sb["max"] < sa["min"]:
        return math.nan
    return (sa["mean"] - sb["mean"]) / max(sa["sd"], sb["sd"])


def ladder_row(key: str) -> tuple:
    """3.5's table row of ``key``: parameters, runs, seed 42's wall seconds, then the mean
    and sd of the train, validation and test losses over the seeds."""
    run = ex("ladder-names-seeds.json")["runs"][key]
    spreads = (ladder_spread(key, split) for split in ("train", "val", "test"))
    return (run["num_params"], len(run["seeds"]), ladder(key)[1], *sum(spreads, ()))


def long_val(key: str) -> float:
    """3.5's ablation (ladder-names-long.json): run ``key``'s final validation loss."""
    return ex("ladder-names-long.json")["runs"][key]["final"]["val"]


def long_spread(key: str, split: str) -> tuple[float, float]:
    """3.5's ablation over seeds (ladder-names-long-seeds.json): the mean and the sample sd
    of run ``key``'s final ``split`` loss ("best_val": its lowest validation loss)."""
    s = ex("ladder-names-long-seeds.json")["runs"][key]["summary"][split]
    return s["mean"], s["sd"]


def long_row(key: str) -> tuple:
    """3.5's ablation table over seeds: runs, then the mean and sd of the best validation,
    train, validation and test losses of ``key``."""
    run = ex("ladder-names-long-seeds.json")["runs"][key]
    spreads = (long_spread(key, split) for split in ("best_val", "train", "val", "test"))
    return (len(run["seeds"]), *sum(spreads, ()))


def long_apart(a: str, b: str, split: str = "val") -> float:
    """How many times the larger sd run ``b``'s mean ``split`` loss ends below run ``a``'s,
    over the ablation's seeds; nan where the seeds' ranges of the two overlap."""
    runs = ex("ladder-names-long-seeds.json")["runs"]
    sa, sb = runs[a]["summary"][split], runs[b]["summary"][split]
    if not sb["max"] < sa["min"]:
        return math.nan
    return (sa["mean"] - sb["mean"]) / max(sa["sd"], sb["sd"])


def long_gain(a: str, b: str, split: str = "val") -> float:
    """How far run ``b``'s mean ``split`` loss ends below run ``a``'s, when every seed of
    ``b`` ends below every seed of ``a``; nan otherwise."""
    if math.isnan(long_apart(a, b, split)):
        return math.nan
    return long_spread(a, split)[0] - long_spread(b, split)[0]


def long_runs(key: str) -> list[dict]:
    """3.5's ablation over seeds: the runs of ``key``, each with its seed, finals, evals."""
    return ex("ladder-names-long-seeds.json")["runs"][key]["runs"]


def long_best_steps(key: str) -> list[int]:
    """The step of each run of ``key`` at which its validation loss was lowest."""
    return [min(run["eval"], key=lambda e: e[2])[0] for run in long_runs(key)]


def long_last_moves(key: str) -> list[float]:
    """How far each run of ``key``'s validation loss fell over its last evaluation interval."""
    return [run["eval"][-2][2] - run["eval"][-1][2] for run in long_runs(key)]


def seed_run(key: str, seed: int) -> dict:
    """3.5: the final losses of model ``key``'s run of ``seed`` (ladder-names-seeds.json)."""
    runs = ex("ladder-names-seeds.json")["runs"][key]["runs"]
    return next(r["final"] for r in runs if r["seed"] == seed)


def ladder_train_val_gap(key: str) -> float:
    """3.5: mean over ``key``'s seeds of the validation loss less the training loss."""
    return ladder_spread(key, "val")[0] - ladder_spread(key, "train")[0]


def ladder_rungs_apart() -> int:
    """3.5: the least ratio, over the rungs but the last, of how far a rung's mean
    validation loss is below the one before to the larger of their sds, rounded down; 0
    where the seeds' ranges of two rungs overlap."""
    runs = ex("ladder-names-seeds.json")["runs"]
    names = list(runs)
    ratios = []
    for a, b in zip(names[:-2], names[1:-1]):
        sa, sb = runs[a]["summary"]["val"], runs[b]["summary"]["val"]
        apart = sb["max"] < sa["min"]
        ratios.append((sa["mean"] - sb["mean"]) / max(sa["sd"], sb["sd"]) if apart else 0)
    return math.floor(min(ratios))


def heads(kind: str):
    """3.5's attention record (gpt-attention.json): each head's mean weight on the
    previous character, itself or the first position, as an (L, H) list."""
    return ex("gpt-attention.json")["heads"][kind]


def ffn_layer(layer: int) -> dict:
    """3.5's MLP probe (gpt-ffn-memory.json): block ``layer``'s share of cells whose value
    promotes what follows their triggers, own ("agreement") and shuffled."""
    return ex("gpt-ffn-memory.json")["layers"][layer]


def ffn_seeds(layer: int) -> dict:
    """3.5's MLP probe over the GPTs of three seeds (gpt-ffn-memory.json's ``seeds``):
    block ``layer``'s mean, sd, least and greatest share, own ("agreement") and shuffled."""
    return ex("gpt-ffn-memory.json")["seeds"]["summary"][layer]


def ffn_model(seed: int) -> dict:
    """The probe's shares for the GPT of ``seed``."""
    return next(m for m in ex("gpt-ffn-memory.json")["seeds"]["models"] if m["seed"] == seed)


def attention_model(seed: int) -> dict:
    """3.5's attention record over seeds (gpt-attention.json's ``seeds``): the model of
    ``seed``, with its heads' statistics and its strongest previous-character head."""
    return next(m for m in ex("gpt-attention.json")["seeds"]["models"] if m["seed"] == seed)


def ffn_table_rows() -> list[str]:
    """3.5's table of the loudest MLP cells, each row as the page writes it, from
    gpt-ffn-memory.json."""
    rows = []
    for c in ex("gpt-ffn-memory.json")["cells"]:
        rows.append(
            f"| {c['layer']} | {c['unit']} | "
            + ", ".join(f"`{p}`" for p, _ in c["triggers"][:5])
            + " | "
            + ", ".join(f"{letter} {n}" for letter, n in c["next"])
            + " | "
            + ", ".join(f"{letter} +{v:.2f}" for letter, v in c["value_top"][:3])
            + " |"
        )
    return rows


def census_gpt() -> dict:
    return ex("gpt-census.json")["runs"]["census-gpt"]


def census_seeds() -> dict:
    """3.5's census GPT over seeds (gpt-census.json's ``seeds``): seeds, summary, runs."""
    return ex("gpt-census.json")["seeds"]


def census_spread(split: str) -> tuple[float, float]:
    """The mean and sample sd over the census GPT's seeds of its final ``split`` loss
    ("best_val": its lowest validation loss)."""
    s = census_seeds()["summary"][split]
    return s["mean"], s["sd"]


def census_best_step() -> float:
    """The step at which every seed's validation loss was lowest; nan if they differ, or if
    a seed's loss does not rise after it."""
    runs = census_seeds()["runs"]
    steps = {min(r["eval"], key=lambda e: e[2])[0] for r in runs}
    rises = all(r["eval"][-1][2] > min(v for _, _, v in r["eval"]) for r in runs)
    return steps.pop() if len(steps) == 1 and rises else math.nan


def cnn_seeds(model: str, split: str) -> tuple[float, float]:
    """3.3's runs over seeds (cnn-runs-seeds.json): mean and sd of ``model``'s final
    ``split`` loss."""
    s = ex("cnn-runs-seeds.json")["runs"][model]["summary"][split]
    return s["mean"], s["sd"]


def cnn_lead(split: str) -> tuple[float, float]:
    """3.3: how far the WaveNet's mean ``split`` loss ends below the MLP's, and that in
    larger sds; nan where the seeds' ranges overlap."""
    runs = ex("cnn-runs-seeds.json")["runs"]
    m, w = runs["mlp"]["summary"][split], runs["wavenet"]["summary"][split]
    gap = m["mean"] - w["mean"]
    return gap, gap / max(m["sd"], w["sd"]) if w["max"] < m["min"] else math.nan


def optimizer_seeds() -> dict:
    """3.2's four runs over seeds (mlp-optimizers-seeds.json), by run name."""
    return ex("mlp-optimizers-seeds.json")["runs"]


def constant_seeds() -> dict:
    return {k: r for k, r in optimizer_seeds().items() if "cosine" not in k}


def seed_spreads() -> list[float]:
    """3.2: per seed, how far apart the three constant-rate runs end."""
    runs = list(constant_seeds().values())
    return [
        max(r["val"][i] for r in runs) - min(r["val"][i] for r in runs)
        for i in range(len(runs[0]["val"]))
    ]


def innovation_gaps() -> list[tuple[float, float]]:
    """The projects page: at each temperature, how many points the GRU's innovation rate
    is above the GPT's, and that in standard errors of a difference of two shares."""
    gru, gpt = (ex(f"names-innovation-{m}.json") for m in ("gru", "gpt"))
    out = []
    for a, b in zip(gru["rows"], gpt["rows"]):
        assert a["temperature"] == b["temperature"]
        p, q = a["innovation"], b["innovation"]
        se = math.sqrt(p * (1 - p) / gru["num"] + q * (1 - q) / gpt["num"])
        out.append((100 * (p - q), (p - q) / se, 100 * se))
    return out


def census_split() -> tuple[int, int, int]:
    """Train, validation and test names of the census corpus, split as every run splits it."""
    from sitp.data import load_names  # late: the package, for the split's sizes
    from sitp.data.datasets import split_words

    return tuple(len(part) for part in split_words(load_names()))


def census_letters() -> int:
    """The letters of all census names (a name of n letters makes n + 1 bigrams)."""
    from sitp.data import load_names  # late: as above

    return sum(len(w) for w in load_names())


def entropy_at(t: float) -> float:
    """Chapter 1: the first-letter row's entropy at temperature ``t``, as its fence prints it."""
    table = out_text("ch01/index", r"^(\{0\.25: .*\})$")
    return float(re.search(rf"\b{t}: ([\d.]+)", table)[1])


def special_tokens() -> tuple[str, ...]:
    """The chat format's special tokens (8.1)."""
    from sitp.posttrain.chat import SPECIAL_TOKENS  # late: the package, for one count

    return SPECIAL_TOKENS


def longest_identity_conversation() -> int:
    """Tokens of the longest hand-written conversation, rendered with the byte tokenizer."""
    from sitp.data.tokens import ByteTokenizer  # late: the package, for two counts only
    from sitp.posttrain.chat import ChatTokenizer, render
    from sitp.posttrain.tasks import identity_conversations

    tok = ChatTokenizer(ByteTokenizer())
    return max(len(render(c, tok)[0]) for c in identity_conversations())


def longest_chain1_reply() -> int:
    """Bytes of chain1's longest reference reply, over all its 1,000 problems."""
    from sitp.posttrain.tasks import ChainAddition, Problem  # late: as above

    task = ChainAddition(1)
    return max(
        len(task.reference(Problem("chain1", (a, b, c))).encode())
        for a in range(10)
        for b in range(10)
        for c in range(10)
    )


CH1 = "ch01/index"
TOK, TOKENS, MODERN, EAGER, COMPILED = (
    "ch05/tokenizer",
    "ch05/tokens",
    "ch05/modern-gpt",
    "ch06/eager",
    "ch06/compiled",
)
COMPILE_BLOCKS = ("gelu(xW+b)", "layernorm(x+r)", "attention softmax")  # 6.4, beside the GPT step


# --- 5.5's sweep (scaling-sweep.json) ------------------------------------------------


@functools.cache
def sweep_cells() -> dict[tuple[str, int], list[float]]:
    """5.5's validation losses by (size, token budget), one per seed."""
    cells: dict[tuple[str, int], list[float]] = {}
    for point in ex("scaling-sweep.json")["points"]:
        cells.setdefault((point["size"], point["tokens"]), []).append(point["val_loss"])
    return cells


def sweep_range(budgets) -> tuple[float, float]:
    """The lowest and the highest loss of the sweep's runs (every seed) at ``budgets``."""
    losses = [x for (_, t), v in sweep_cells().items() if t in budgets for x in v]
    return min(losses), max(losses)


def sweep_budgets() -> list[int]:
    return sorted({t for _, t in sweep_cells()})


def sweep_seed_sds() -> tuple[float, float]:
    """The smallest and the largest sd over seeds of the sweep's repeated points."""
    sds = [statistics.stdev(v) for v in sweep_cells().values() if len(v) > 1]
    return min(sds), max(sds)


@functools.cache
def bpe_arms() -> dict[tuple[int, int], tuple[list[float], list[float]]]:
    """5.5's two arms by (N, D), in bits per letter: (the letters' seeds, the BPE's seeds)."""
    arms: dict[tuple[int, int], tuple[list[float], list[float]]] = {}
    for point in ex("scaling-sweep.json")["points"]:
        arms.setdefault((point["N"], point["D"]), ([], []))[0].append(
            point["val_loss"] / math.log(2)
        )
    for point in ex("scaling-sweep-bpe.json")["points"]:
        arms[point["N"], point["D"]][1].append(point["val_bits"])
    return arms


def bpe_budget(i: int) -> dict[int, tuple[list[float], list[float]]]:
    """The two arms at the ``i``-th token budget (-1: the largest), by N."""
    D = sorted({d for _, d in bpe_arms()})[i]
    return {n: arms for (n, d), arms in sorted(bpe_arms().items()) if d == D}


def bpe_gaps(i: int) -> list[float]:
    """BPE minus letters (means over seeds) at the ``i``-th budget, smallest N first."""
    return [statistics.mean(b) - statistics.mean(c) for c, b in bpe_budget(i).values()]


def bpe_sds() -> list[float]:
    """The BPE arm's seeds' standard deviations at its repeated points, smallest first."""
    return sorted(statistics.stdev(b) for _, b in bpe_arms().values() if len(b) > 1)


def bpe_tokenizer() -> dict:
    """What the BPE arm's record says of its tokenizer."""
    return ex("scaling-sweep-bpe.json")["source"]["tokenizer"]


def left_out(record: str) -> tuple[float, float]:
    """The least and the largest (head + attention scores) / 6N over a sweep's sizes, in %."""
    run = ex(record)
    V = run["source"].get("tokenizer", run["source"]["config"])["vocab_size"]
    T, N = run["train"]["block_size"], {p["size"]: p["N"] for p in run["points"]}
    shares = [
        100 * (V + s["n_layer"] * T) * s["n_embd"] / N[name] for name, s in run["sizes"].items()
    ]
    return min(shares), max(shares)


# 6.1's first explain fence: its second entry (a dynamic one since 6.1's dynamic sizes)
LN_KERNELS = (
    r"^signature 1: compiled[^,\n]*, 12 ops -> \d+ steps \((\d+) generated kernels\)\n2 programs"
)


FIGURES = QUOTES + [
    # 5.5: the sweep's grid and its losses, against scaling-sweep.json
    (
        "ch05/scaling.md",
        r"the truth is (\d\.\d+)",
        lambda: ex("scaling-sweep.json")["source"]["window_floor"],
    ),
    (
        "ch05/scaling.md",
        r"The largest run, ([\d,]+) parameters on (\d\.\d) million letters",
        lambda: (
            max(p["N"] for p in ex("scaling-sweep.json")["points"]),
            max(sweep_budgets()) / 1e6,
        ),
    ),
    (
        "ch05/scaling.md",
        r"The two smallest budgets leave every model between (\d\.\d+) and (\d\.\d+) nats",
        lambda: sweep_range(sweep_budgets()[:2]),
    ),
    (
        "ch05/scaling.md",
        r"at the largest, the five sizes end between (\d\.\d+) and (\d\.\d+), (\d\.\d+)\s+to (\d\.\d+) above the floor",
        lambda: (
            *sweep_range(sweep_budgets()[-1:]),
            sweep_range(sweep_budgets()[-1:])[0]
            - ex("scaling-sweep.json")["source"]["window_floor"],
            sweep_range(sweep_budgets()[-1:])[1]
            - ex("scaling-sweep.json")["source"]["window_floor"],
        ),
    ),
    (
        "ch05/scaling.md",
        r"The seeds' standard deviations run from (\d\.\d+) to (\d\.\d+) nats",
        sweep_seed_sds,
    ),
    # 5.5's BPE arm, against scaling-sweep-bpe.json and scaling-sweep.json
    (
        "ch05/scaling.md",
        r"the (\d\.\d) million letters its shards are encoded from, and has (\d+)\s+ids, the "
        r"(\d+) letters and (\d+) merges",
        lambda: (
            ex("scaling-sweep-bpe.json")["source"]["train_letters"] / 1e6,
            bpe_tokenizer()["vocab_size"],
            bpe_tokenizer()["letters"],
            len(bpe_tokenizer()["merges"]),
        ),
    ),
    (
        "ch05/scaling.md",
        r"The pre-split is pieces of up to (\d+) letters",
        lambda: float(re.fullmatch(r"\.\{1,(\d+)\}", bpe_tokenizer()["pattern"])[1]),
    ),
    (
        "ch05/scaling.md",
        r"the (\d+) byte values that it never writes",
        lambda: 256 - bpe_tokenizer()["letters"],
    ),
    (
        "ch05/scaling.md",
        r"Why (\d+): (\w+) times the\s+alphabet buys tokens of (\d\.\d+) letters on average",
        lambda: (
            bpe_tokenizer()["vocab_size"],
            bpe_tokenizer()["vocab_size"] / bpe_tokenizer()["letters"],
            bpe_tokenizer()["val_letters_per_token"],
        ),
    ),
    (
        "ch05/scaling.md",
        r"At the second budget the BPE is lower at\s+every size, by (\d\.\d+) to (\d\.\d+) bits",
        lambda: (-max(bpe_gaps(1)), -min(bpe_gaps(1))) if max(bpe_gaps(1)) < 0 else math.nan,
    ),
    (
        "ch05/scaling.md",
        r"lead shrinks as the models grow, from (\d\.\d+) bits at ([\d,]+) parameters to "
        r"(\d\.\d+) at\s+([\d,]+)",
        lambda: (
            (bpe_gaps(-1)[0], min(bpe_budget(-1)), bpe_gaps(-1)[-1], max(bpe_budget(-1)))
            if min(bpe_gaps(-1)) > 0 and bpe_gaps(-1) == sorted(bpe_gaps(-1), reverse=True)
            else math.nan
        ),
    ),
    (
        "ch05/scaling.md",
        r"Every gap at the second budget is at least (\d\.\d+) times",
        lambda: min(
            abs(statistics.mean(b) - statistics.mean(c))
            / max(statistics.stdev(c), statistics.stdev(b))
            for c, b in bpe_budget(1).values()
        ),
    ),
    (
        "ch05/scaling.md",
        r"that point's deviations are\s+(\d\.\d+) and (\d\.\d+) bits",
        lambda: next(
            (statistics.stdev(c), statistics.stdev(b))
            for c, b in bpe_budget(-1).values()
            if len(c) > 1 and len(b) > 1
        ),
    ),
    (
        "ch05/scaling.md",
        r"the smallest budget, (\d\.\d+) bits, where one seed of three",
        lambda: bpe_sds()[-1],
    ),
    (
        "ch05/scaling.md",
        r"the other seven repeated points of that arm move by (\d\.\d+) to (\d\.\d+)",
        lambda: (bpe_sds()[0], bpe_sds()[-2]) if len(bpe_sds()) == 8 else math.nan,
    ),
    (
        "ch05/scaling.md",
        r"it read\s+(\d\.\d+) times the letters",
        lambda: statistics.mean(
            p["letters"] / p["D"] for p in ex("scaling-sweep-bpe.json")["points"]
        ),
    ),
    (
        "ch05/scaling.md",
        r"over a table of token pairs (\w+) times the size of the letters'",
        lambda: (bpe_tokenizer()["vocab_size"] / bpe_tokenizer()["letters"]) ** 2,
    ),
    (
        "ch05/scaling.md",
        r"in both fits \((\d\.\d+) bits on every\s+run, (\d\.\d+) without the smallest budget\), "
        r"where dropping that budget lifted the letters'\s+\$E\$ to (\d\.\d+) bits",
        lambda: (
            out("ch05/scaling", r"^BPE, every run +([\d.]+) \["),
            out("ch05/scaling", r"^BPE, without the smallest budget +([\d.]+) \["),
            out("ch05/scaling", r"^letters, without the smallest budget +([\d.]+) \["),
        ),
    ),
    (
        "ch05/scaling.md",
        r"\$h\$ = (\d\.\d+) bits per letter",
        lambda: ex("scaling-sweep-bpe.json")["source"]["entropy_rate"] / math.log(2),
    ),
    (
        "ch05/scaling.md",
        r"its bootstrap intervals reach (\d\.\d+) and (\d\.\d+) bits at most",
        lambda: (
            out("ch05/scaling", r"^BPE, every run +[\d.]+ \[[\d.]+, ([\d.]+)\]"),
            out("ch05/scaling", r"^BPE, without the smallest .* \[[\d.]+, ([\d.]+)\]"),
        ),
    ),
    (
        "ch05/scaling.md",
        r"Its residual, (\d\.\d+) bits, is larger than the seeds'\s+spread at (\w+) of the "
        r"arm's (\w+) repeated points",
        lambda: (
            out("ch05/scaling", r"^BPE, every run .* ([\d.]+)$"),
            sum(sd < out("ch05/scaling", r"^BPE, every run .* ([\d.]+)$") for sd in bpe_sds()),
            len(bpe_sds()),
        ),
    ),
    (
        "ch05/scaling.md",
        r"the\s+generator's loss on the letters of the BPE windows, is (\d\.\d+) bits, a little "
        r"under the\s+letters' (\d\.\d+)",
        lambda: (
            ex("scaling-sweep-bpe.json")["source"]["val_oracle_letter_loss"] / math.log(2),
            ex("scaling-sweep.json")["source"]["window_floor"] / math.log(2),
        ),
    ),
    (
        "ch05/scaling.md",
        r"the best BPE run ends at\s+(\d\.\d+), the best letters run at (\d\.\d+)",
        lambda: (
            min(x for _, b in bpe_arms().values() for x in b),
            min(x for c, _ in bpe_arms().values() for x in c),
        ),
    ),
    (
        "ch05/scaling.md",
        r"\((\d+)% to\s+(\d+)% of \$6N\$ against the letters' (\d+)% to (\d+)%",
        lambda: (*left_out("scaling-sweep-bpe.json"), *left_out("scaling-sweep.json")),
    ),
    # Part III's overview, against the chapters and runs it summarises
    (
        "part3/index.md",
        r"on a layer norm \((\w+) kernels and (\w+) times the bytes",
        lambda: (
            out(EAGER, r"^(\d+) ops, [\d.]+ MB moved"),
            out(EAGER, r"([\d.]+) MB moved") / out(EAGER, r"alone are ([\d.]+) MB"),
        ),
    ),
    (
        "part3/index.md",
        r"gains the least \((\d\.\d+) times, against (\d\.\d) to (\d\.\d) for the blocks, on one "
        r"thread of an AMD EPYC\)",
        lambda: (
            compile_ratio("GPT train step"),
            min(compile_ratio(b) for b in COMPILE_BLOCKS),
            max(compile_ratio(b) for b in COMPILE_BLOCKS),
        ),
    ),
    (
        "part3/index.md",
        r"a (\d)-layer GPT of ([\d,]+) parameters goes from pass@1 (\d) after pre-training to "
        r"(\d\.\d+) ± (\d\.\d+) after SFT and (\d\.\d+) ± (\d\.\d+) after (\d+) steps of GRPO",
        lambda: (
            ex("posttrain-demo.json")["config"]["n_layer"],
            ex("posttrain-demo.json")["config"]["parameters"],
            max(r["chain1"]["stages"][0]["pass@1"] for r in ex("rl-runs.json")["runs"]),
            *chain1_seeds(lambda r: r["chain1"]["stages"][1]["pass@1"]),
            *chain1_seeds(lambda r: r["chain1"]["rl"]["grpo"]["pass@1"]),
            ex("rl-runs.json")["config"]["rl_steps"],
        ),
    ),
    ("part3/index.md", r"with (\w+) special tokens that frame", lambda: len(special_tokens())),
    ("ch08/chat.md", r"framed by (\w+) special tokens:", lambda: len(special_tokens())),
    (
        "part3/index.md",
        r"(\d) layers, (\d) heads, width (\d+), block (\d+), batch (\d+), ([\d,]+) iterations",
        lambda: tuple(
            anchor()["config"][k]
            for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "iters")
        ),
    ),
    (
        "part3/index.md",
        r"from (\d\.\d+) at step 0 to (\d\.\d+) at step ([\d,]+);",
        lambda: (
            anchor()["results"]["sitp"]["curve"][0][1],
            anchor()["results"]["sitp"]["curve"][-1][1],
            anchor()["results"]["sitp"]["curve"][-1][0],
        ),
    ),
    (
        "part3/index.md",
        r"Then the two take turns, (\d+) steps of one and then (\d+) of the other",
        lambda: (anchor()["config"]["round_steps"],) * 2,
    ),
    (
        "part3/index.md",
        r"sitp is the faster of the two: (\d\.\d+) times PyTorch's speed in the median of the "
        r"(\d+) rounds, and faster in every round \((\d\.\d+) to (\d\.\d+)\)",
        lambda: (
            anchor()["speed_ratio"],
            anchor()["rounds"],
            anchor()["speed_ratio_range"][0] if anchor()["speed_ratio_range"][0] > 1 else math.nan,
            anchor()["speed_ratio_range"][1],
        ),
    ),
    # 5.1
    (
        "ch05/tokenizer.md",
        r"tinyshakespeare's (\d\.\d) million bytes",
        lambda: out(TOK, r"^([\d,]+) bytes, [\d,]+ chunks") / 1e6,
    ),
    (
        "ch05/tokenizer.md",
        r"from (\d\.\d) at 256 tokens to about (\d\.\d) at 4,352",
        lambda: (
            out(TOK, r"^vocab +256: .* ([\d.]+) bytes per token$"),
            out(TOK, r"^vocab +4352: .* ([\d.]+) bytes per token$"),
        ),
    ),
    (
        "ch05/tokenizer.md",
        r"The first 256 merges remove (\d+)% of the tokens; the last 1,024 take off (\d\.\d)%",
        lambda: out(
            TOK,
            r"^the first 256 merges remove (\d+)% of the tokens, the last 1,024 "
            r"([\d.]+)%$",
        ),
    ),
    (
        "ch05/tokenizer.md",
        r"GPT-4's pattern gives (\d\.\d+) bytes per token at 1,280 tokens, GPT-2's (\d\.\d+): "
        r"(\d+)% fewer",
        lambda: (
            out(TOK, r"^GPT-4: .* ([\d.]+) bytes per token$"),
            out(TOK, r"^GPT-2: .* ([\d.]+) bytes per token$"),
            100
            * (
                1
                - out(TOK, r"^GPT-4: [\d,]+ chunks, ([\d,]+) tokens")
                / out(TOK, r"^GPT-2: [\d,]+ chunks, ([\d,]+) tokens")
            ),
        ),
    ),
    (
        "ch05/tokenizer.md",
        r"without a letter or a digit fall from ([\d,]+) to ([\d,]+)",
        lambda: out(TOK, r"^tokens on punctuation and space: GPT-2 ([\d,]+), GPT-4 ([\d,]+)$"),
    ),
    (
        "ch05/tokenizer.md",
        r"spends slightly more tokens \(([\d,]+) against ([\d,]+)\)",
        lambda: out(TOK, r"^tokens on words: GPT-2 ([\d,]+), GPT-4 ([\d,]+)$")[::-1],
    ),
    (
        "ch05/tokenizer.md",
        r"All ([\d,]+) merges come back",
        lambda: out(TOK, r"^(\d+) merges rec"),
    ),
    (
        "ch05/tokenizer.md",
        r"Of the ([\d,]+) merged tokens, ([\d,]+) can be split",
        lambda: out(TOK, r"^([\d,]+) of ([\d,]+) merged tokens split")[::-1],
    ),
    (
        "ch05/tokenizer.md",
        r"are a quarter of a million chunks, but only some (\w+) thousand distinct ones",
        lambda: out(TOK, r"^[\d,]+ bytes, [\d,]+ chunks, ([\d,]+) distinct$") / 1000,
    ),
    # 5.2
    (
        "ch05/tokens.md",
        r"tinyshakespeare: ([\d,]+) bytes of plays",
        lambda: out(TOKENS, r"^[\d,]+ characters, ([\d,]+) bytes"),
    ),
    (
        "ch05/tokens.md",
        r"tinyshakespeare is (\d) MiB of `uint16`",
        lambda: 2 * out(TOKENS, r"^[\d,]+ characters, ([\d,]+) bytes") / 2**20,
    ),
    (
        "ch05/tokens.md",
        r"The training shards hold ([\d,]+) characters",
        lambda: out(TOKENS, r"^train: \d+ shards, ([\d,]+) tokens$"),
    ),
    (
        "ch05/tokens.md",
        r"last shard holds the remaining ([\d,]+) characters",
        lambda: out(TOKENS, r"^val: \d+ shards, ([\d,]+) tokens$"),
    ),
    ("ch05/tokens.md", r"The first uses the (\d+)\b", lambda: out(TOKENS, r'^(\d+) "')),
    (
        "ch05/tokens.md",
        r"would score \$\\log_2 65 \\approx (\d\.\d+)\$ bits per byte",
        lambda: out(TOKENS, r"^characters V = +65, .* uniform ([\d.]+),"),
    ),
    ("ch05/tokens.md", r"\$1\.4697/\\ln 2 \\approx (\d\.\d+)\$", lambda: 1.4697 / math.log(2)),
    (
        "ch05/tokens.md",
        r"it spends probability on (\d+) byte values that never occur",
        lambda: 256 - out(TOKENS, r"^characters V = +(\d+),"),
    ),
    (
        "ch05/tokens.md",
        r"a uniform choice of two characters costs (\d+\.\d+)",
        lambda: 2 * out(TOKENS, r"^characters V = +65, .* uniform ([\d.]+),"),
    ),
    (
        "ch05/tokens.md",
        r"The ([\d,]+) training windows cover (\d\.\d) million characters of a text of (\d\.\d) "
        r"million",
        lambda: (
            anchor()["config"]["iters"] * anchor()["config"]["batch_size"],
            anchor()["config"]["iters"]
            * anchor()["config"]["batch_size"]
            * anchor()["config"]["block_size"]
            / 1e6,
            out(TOKENS, r"^[\d,]+ characters, ([\d,]+) bytes") / 1e6,
        ),
    ),
    (
        "ch05/tokens.md",
        r"Per token, the pair model looks much worse: (\d\.\d) bits against (\d\.\d)\. Per byte "
        r"it is better, (\d\.\d+) against (\d\.\d+)\.",
        lambda: (
            out(TOKENS, r"^PairTokenizer .* = ([\d.]+) bits/token"),
            out(TOKENS, r"^CharTokenizer .* = ([\d.]+) bits/token"),
            out(TOKENS, r"^PairTokenizer .* ([\d.]+) bits/byte$"),
            out(TOKENS, r"^CharTokenizer .* ([\d.]+) bits/byte$"),
        ),
    ),
    (
        "ch05/tokens.md",
        r"scores (\d) bits per byte on bytes and \$\\log_2 65 = (\d\.\d+)\$ on characters",
        lambda: (
            out(TOKENS, r"^bytes +V = +256, .* uniform ([\d.]+),"),
            out(TOKENS, r"^characters V = +65, .* uniform ([\d.]+),"),
        ),
    ),
    (
        "ch05/tokens.md",
        r"On BPE 512 it scores (\d\.\d+), and on BPE 1,024 (\d\.\d+), better than a unigram "
        r"over characters \((\d\.\d+)\)",
        lambda: (
            out(TOKENS, r"^BPE 512 .* uniform ([\d.]+),"),
            out(TOKENS, r"^BPE 1024 .* uniform ([\d.]+),"),
            out(TOKENS, r"^characters .* unigram ([\d.]+) bits"),
        ),
    ),
    (
        "ch05/tokens.md",
        r"The unigram gains in the same way \((\d\.\d+), (\d\.\d+), (\d\.\d+)\)",
        lambda: tuple(
            out(TOKENS, rf"^{n} .* unigram ([\d.]+) bits")
            for n in ("characters", "BPE 512 ", "BPE 1024")
        ),
    ),
    (
        "ch05/tokens.md",
        r"characters give the unigram the same (\d\.\d+)",
        lambda: out(TOKENS, r"^bytes .* unigram ([\d.]+) bits"),
    ),
    (
        "ch05/tokens.md",
        r"so most positions have been trained on, some several times: (\d+)% of the validation",
        lambda: out(TOKENS, r"split by window ([\d.]+)%"),
    ),
    (
        "ch05/tokens.md",
        r"split by position the share is (\d+)%",
        lambda: out(TOKENS, r"split by position ([\d.]+)%"),
    ),
    (
        "ch05/tokens.md",
        r"For \$T = 64\$ that is (\d\.\d+) pages, and a batch of 12 reads about (\d+) KiB of the "
        r"gigabyte, (\d\.\d+)%",
        lambda: (
            out(TOKENS, r"^T = +64: .* on ([\d.]+) pages"),
            out(TOKENS, r"^T = +64: .* read (\d+) KiB$"),
            100 * out(TOKENS, r"^T = +64: .* read (\d+) KiB$") / 2**20,
        ),
    ),
    # 5.3: the ablation over seeds (its table is checked in figure_quotes, its verdicts in
    # test_a_verdict_in_prose_matches_its_data) and the budget run
    (
        "ch05/modern-gpt.md",
        r"--seeds (\d+) (\d+) (\d+) (\d+) (\d+) --threads (\d)",
        lambda: (*ex(ABLATION)["args"]["seeds"], ex(ABLATION)["machine"]["threads"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"config`\), (\w+) thread, (\w+) seeds \((\d+), (\d+), (\d+), (\d+) and (\d+)\)",
        lambda: (
            ex(ABLATION)["machine"]["threads"],
            len(ex(ABLATION)["args"]["seeds"]),
            *ex(ABLATION)["args"]["seeds"],
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"The whole ablation ran once per seed, for (\w+) seeds,",
        lambda: len(ex(ABLATION)["args"]["seeds"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"recorded before and after every run, was (\d\.\d) to (\d\.\d) on its (\w+) vCPUs",
        lambda: (
            min(ablation_loads()),
            max(ablation_loads()),
            ex(ABLATION)["machine"]["logical_cpus"],
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"The baseline's validation loss lies (\d\.\d+) apart between its best and its worst "
        r"seed \(sd (\d\.\d+)\)",
        lambda: (max(ablation("gpt2")) - min(ablation("gpt2")), seed_sd()),
    ),
    (
        "ch05/modern-gpt.md",
        r"paired differences over the (\w+) seeds\.",
        lambda: len(ex(ABLATION)["args"]["seeds"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"Muon takes the GPT-2 architecture from (\d\.\d+) to (\d\.\d+) in (\d+) steps \(a "
        r"gain of (\d\.\d+) ± (\d\.\d+)\),",
        lambda: (
            statistics.mean(ablation("gpt2")),
            statistics.mean(ablation("muon")),
            ex(ABLATION)["args"]["steps"],
            -mean_sd(ablation_gain("muon"))[0],
            mean_sd(ablation_gain("muon"))[1],
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"Rotary embeddings give (\d\.\d+) ± (\d\.\d+):",
        lambda: gain_sd("rope"),
    ),
    (
        "ch05/modern-gpt.md",
        r"QK-norm is \w+ \((\d\.\d+) ± (\d\.\d+)\)",
        lambda: gain_sd("qk-norm"),
    ),
    (
        "ch05/modern-gpt.md",
        r"ReLU² gains (\d\.\d+) ± (\d\.\d+), \w+ the spread, and the untied head (\d\.\d+) ± "
        r"(\d\.\d+), \w+ the spread",
        lambda: (*gain_sd("relu2"), *gain_sd("untied")),
    ),
    (
        "ch05/modern-gpt.md",
        r"soft-capping each move the loss by (\d\.\d+) or less",
        lambda: max(
            abs(mean_sd(ablation_gain(o))[0])
            for o in ("rmsnorm", "rmsnorm, no gain", "no bias", "softcap 15")
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"All options together reach (\d\.\d+), (\d\.\d+) ± (\d\.\d+) (?:below|above) Muon alone",
        lambda: (
            statistics.mean(ablation("all")),
            abs(mean_sd(all_less_muon())[0]),
            mean_sd(all_less_muon())[1],
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"gain of (\d\.\d+) (?:falls short of|exceeds) the sum of Muon's and rotary's single "
        r"gains \((\d\.\d+) and (\d\.\d+)\) by (\d\.\d+) ± (\d\.\d+),",
        lambda: (
            gain_sd("all")[0],
            gain_sd("muon")[0],
            gain_sd("rope")[0],
            abs(mean_sd(all_less_sum())[0]),
            mean_sd(all_less_sum())[1],
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"on the same ([\d,]+) held-out bytes",
        lambda: ex("bpb-budget.json")["val_bytes"],
    ),
    (
        "ch05/modern-gpt.md",
        r"token of BPE 512 covers (\d\.\d+) bytes of the training text and one of BPE 1,024 "
        r"covers (\d\.\d+)\.",
        lambda: (bpb(2)["bytes_per_token"], bpb(3)["bytes_per_token"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"a BPE model would read (\d+) to (\d+) bytes",
        lambda: tuple(round(64 * bpb(i)["bytes_per_token"], -1) for i in (2, 3)),
    ),
    (
        "ch05/modern-gpt.md",
        r"blocks of 64 characters, (\d+) tokens of BPE 512 and (\d+) of BPE 1,024",
        lambda: (bpb(2)["block_size"], bpb(3)["block_size"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"at load averages of (\d\.\d) to (\d\.\d) \(other programs were running\), with (\d+) s",
        lambda: (
            min(budget_loads()),
            max(budget_loads()),
            ex("bpb-budget.json")["config"]["budget"],
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"A modern step costs about (\w+) a GPT-2 step on one thread \(([\d,]+) steps in the "
        r"budget against ([\d,]+):",
        lambda: (bpb(0)["steps"] / bpb(1)["steps"], bpb(1)["steps"], bpb(0)["steps"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"still ends (\d\.\d+) bits per byte lower, (\d\.\d+) against (\d\.\d+)\.",
        lambda: (bpb(0)["val_bpb"] - bpb(1)["val_bpb"], bpb(1)["val_bpb"], bpb(0)["val_bpb"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"BPE 512 takes another (\d\.\d+) off, to (\d\.\d+)\.",
        lambda: (bpb(1)["val_bpb"] - bpb(2)["val_bpb"], bpb(2)["val_bpb"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"it takes ([\d,]+) steps and reads ([\d,]+) bytes of text a second against the "
        r"character model's ([\d,]+),",
        lambda: (bpb(2)["steps"], bpb(2)["bytes_per_s"], bpb(1)["bytes_per_s"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"\(([\d,]+) steps, ([\d,]+) bytes a second\) and ends at (\d\.\d+),",
        lambda: (bpb(3)["steps"], bpb(3)["bytes_per_s"], bpb(3)["val_bpb"]),
    ),
    (
        "ch05/modern-gpt.md",
        r"baseline lies (\d\.\d+) nats per character apart over its (\w+) seeds, (\d\.\d+) bits "
        r"per byte, and the gap of the modern options \((\d\.\d+)\)",
        lambda: (
            seed_spread(),
            len(ex(ABLATION)["args"]["seeds"]),
            seed_spread() / math.log(2),
            bpb(0)["val_bpb"] - bpb(1)["val_bpb"],
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"between BPE 512 and 1,024 \((\d\.\d+)\) is",
        lambda: bpb(3)["val_bpb"] - bpb(2)["val_bpb"],
    ),
    (
        "ch05/modern-gpt.md",
        r"In the table, `[^`]+` moves the loss by\s+([+−-]\d\.\d+), within the spread",
        lambda: mean_sd(ablation_gain(exercise_option()))[0],
    ),
    (
        "ch05/modern-gpt.md",
        r"baseline's sd over the seeds above is about (\d\.\d+), and \$n\$ independent seeds "
        r"per option give a standard error of the mean difference of about "
        r"\$(\d\.\d+)\\sqrt\{2/n\}\$, (\d\.\d+) for (\w+) seeds",
        lambda: (
            seed_sd(),
            seed_sd(),
            seed_sd() * math.sqrt(2 / len(ex(ABLATION)["args"]["seeds"])),
            len(ex(ABLATION)["args"]["seeds"]),
        ),
    ),
    (
        "ch05/modern-gpt.md",
        r"its sd over the (\w+) seeds is (\d\.\d+), so the standard error of the mean "
        r"difference is \$(\d\.\d+)/\\sqrt\{n\}\$, and a mean gap of (\d\.\d+) lies two standard "
        r"errors from zero once \$n\$ reaches \$[^$]*\$, about (\d+) seeds here",
        lambda: (
            len(ex(ABLATION)["args"]["seeds"]),
            mean_sd(ablation_gain(exercise_option()))[1],
            mean_sd(ablation_gain(exercise_option()))[1],
            abs(mean_sd(ablation_gain(exercise_option()))[0]),
            math.ceil(
                (
                    2
                    * mean_sd(ablation_gain(exercise_option()))[1]
                    / abs(mean_sd(ablation_gain(exercise_option()))[0])
                )
                ** 2
            ),
        ),
    ),
    # 5.4: the decode step's arithmetic, against its fence and 2.3's roofline table
    (
        "ch05/inference.md",
        r"its (\d) MiB\s+of weights stream from the caches .* and its (\d) million\s+operations",
        lambda: (
            out("ch05/inference", r"^[\d,]+ matrix weights \(([\d.]+) MiB\)"),
            out("ch05/inference", r"MiB\), ([\d.]+) MFLOP per token$"),
        ),
    ),
    (
        "ch05/inference.md",
        r"ridge point near (\d+) operations per byte on one core \((\d+\.\d) GFLOP/s over "
        r"(\d+\.\d) GB/s\)",
        lambda: (
            roofline_peak(1) / roofline("DRAM", 1),
            roofline_peak(1),
            roofline("DRAM", 1),
        ),
    ),
    # 5.4: grouped-query attention and speculative decoding, trained briefly
    (
        "ch05/inference.md",
        r"Fewer key/value heads cost (\d\.\d+) \(grouped\) and (\d\.\d+) \(multi-query\)",
        lambda: tuple(kv_val(g) - kv_val(4) for g in (2, 1)),
    ),
    (
        "ch05/inference.md",
        r"They have (\d+)% and (\d+)% fewer parameters",
        lambda: tuple(100 * (1 - kv_gqa(g)["params"] / kv_gqa(4)["params"]) for g in (2, 1)),
    ),
    (
        "ch05/inference.md",
        r"At temperature 1 the model kept (\d+)% of the draft's proposals",
        lambda: 100 * statistics.mean(v for r in kv_spec_rows(1.0) for v in r["kept_share"]),
    ),
    (
        "ch05/inference.md",
        r"came (\d\.\d) to (\d\.\d) times as fast",
        lambda: (
            min(statistics.mean(r["speedup"]) for r in kv_spec_rows(None)),
            max(statistics.mean(r["speedup"]) for r in kv_spec_rows(None)),
        ),
    ),
    (
        "ch05/inference.md",
        r"learns its (\d+) merges from the ([\d,]+) bytes and encodes the corpus at (\d\.\d+) "
        r"bytes per token",
        lambda: (
            512 - 256,
            out(TOKENS, r"^[\d,]+ characters, ([\d,]+) bytes"),
            out(TOK, r"^vocab +512: .* ([\d.]+) bytes per token$"),
        ),
    ),
    (
        "ch05/inference.md",
        r"ends at (\d\.\d+) nats per character on the whole validation split after ([\d,]+) "
        r"steps, which on this ASCII text is \$(\d\.\d+) / \\ln 2 = (\d\.\d+)\$",
        lambda: (
            anchor()["results"]["sitp"]["val"],
            anchor()["config"]["iters"],
            anchor()["results"]["sitp"]["val"],
            anchor()["results"]["sitp"]["val"] / math.log(2),
        ),
    ),
    (
        "ch05/inference.md",
        r"where 64 of these tokens cover about (\d+)\.",
        lambda: (
            64
            * out(TOKENS, r"^[\d,]+ characters, ([\d,]+) bytes")
            / out(TOK, r"^vocab +512: +([\d,]+) tokens")
        ),
    ),
    (
        "ch05/inference.md",
        r"(\d+) MiB per sequence",
        lambda: out("ch05/inference", r"^(\d+) MiB"),
    ),
    (
        "ch05/inference.md",
        r"The training command above builds a GPT of ([\d,]+) parameters",
        lambda: gpt_parameters(
            vocab_size=int(re.search(r"--vocab-size (\d+)", page("ch05/inference.md")).group(1)),
            **dict(re.findall(r"--set (\w+)=(\w+)", train_command("ch05/inference.md"))),
        ),
    ),
    # 6.1 to 6.4
    (
        "ch06/eager.md",
        r"(\w+) kernels for one layer norm, and (\d\.\d) MB moved where (\d\.\d) MB would do",
        lambda: out(
            EAGER,
            r"^(\d+) ops, ([\d.]+) MB moved; the inputs and the output alone are "
            r"([\d.]+) MB$",
        ),
    ),
    (
        "ch06/eager.md",
        r"one thread \((\d+\.\d) GB/s from DRAM, (\d+\.\d) GB/s from the L2",
        lambda: (roofline("DRAM", 1), roofline("L2", 1)),
    ),
    (
        "ch06/eager.md",
        r"(\w+) pointwise ops follow the product, each reading one or two 1 MB arrays and "
        r"writing a third: about (\d+) MB\. One kernel reads `h` and `b` once and writes its "
        r"result once, about (\d+) MB, some (\w+) times less",
        lambda: (
            out(EAGER, r"^(\d+) ops; after the product") - 1,
            *out(EAGER, r"after the product ([\d.]+) MB, one kernel ([\d.]+) MB \((\d+)x"),
        ),
    ),
    (
        "ch06/passes.md",
        r"The layer norm of 6\.1 became (\w+) kernels",
        lambda: out(EAGER, LN_KERNELS),
    ),
    (
        "ch06/passes.md",
        r"Two layer norms make (\w+) kernels",
        lambda: out("ch06/passes", r"^two_blocks: \d+ ops -> (\d+) kernels;"),
    ),
    (
        "ch06/passes.md",
        r"Three blocks make\s+(\w+) kernels",
        lambda: out("ch06/passes", r"^three_blocks: \d+ ops -> (\d+) kernels;"),
    ),
    (
        "ch06/codegen.md",
        r"several times faster, about (\w+) in the run shown",
        lambda: (
            out("ch06/codegen", r"^serial, Python's error model +([\d.]+) ms")
            / out("ch06/codegen", r"^serial, numpy's error model +([\d.]+) ms")
        ),
    ),
    (
        "ch06/compiled.md",
        r"GELU falls from about (\d+) to (\d), layer norm from (\d\.\d) to (\d\.\d), softmax "
        r"from (\d\.\d) to (\d\.\d)\.",
        lambda: tuple(
            v
            for b in ("gelu\\(xW\\+b\\)", "layernorm\\(x\\+r\\)", "attention softmax")
            for v in out(COMPILED, rf"^{b} +\d+ -> .*\) +([\d.]+) -> +([\d.]+) ")
        ),
    ),
    (
        "ch06/compiled.md",
        r"Compiled sitp is (\d\.\d) times faster than eager sitp on GELU\(x W \+ b\) \((\d\.\d) "
        r"to (\d+\.\d) over the rounds\): the (\w+) pointwise ops become one kernel, and the bytes "
        r"moved fall by (\w+) times, (\d+\.\d) MB to (\d\.\d) MB",
        lambda: (
            compile_ratio("gelu(xW+b)"),
            compile_ratio("gelu(xW+b)", stat="min"),
            compile_ratio("gelu(xW+b)", stat="max"),
            out(COMPILED, r"^gelu\(xW\+b\) +(\d+) ->") - 1,
            gelu_bytes()[0] / gelu_bytes()[1],
            *gelu_bytes(),
        ),
    ),
    (
        "ch06/compiled.md",
        r"Layer norm gains (\d\.\d) times \((\d\.\d) to (\d\.\d)\) and the softmax chain (\d\.\d) "
        r"times \((\d\.\d) to (\d\.\d)\): (\w+) ops become (\w+) kernels, and (\w+) become (\w+) "
        r"kernels and a `fill`",
        lambda: (
            *(
                compile_ratio(b, stat=s)
                for b in ("layernorm(x+r)", "attention softmax")
                for s in ("median", "min", "max")
            ),
            *out(COMPILED, r"^layernorm\(x\+r\) +(\d+) -> +\d+ \( *(\d+)\)"),
            *out(COMPILED, r"^attention softmax +(\d+) -> +\d+ \( *(\d+)\)"),
        ),
    ),
    (
        "ch06/compiled.md",
        r"its rounds are the shortest \((\d+) calls of about (\d\.\d+) ms\), and other programs "
        r"took (\d+)% of the CPUs while they ran",
        lambda: (
            compile_run()["reps"],
            compile_ms("layernorm(x+r)", "compiled"),
            100 * compile_run()["harness"]["load"]["layernorm(x+r)"]["other_share"],
        ),
    ),
    (
        "ch06/compiled.md",
        r"faster than eager sitp, by about (\d\.\d) times on layer norm, (\d\.\d) on GELU and "
        r"(\d\.\d) on softmax",
        lambda: tuple(
            compile_ms(b, "eager") / compile_ms(b, "torch")
            for b in ("layernorm(x+r)", "gelu(xW+b)", "attention softmax")
        ),
    ),
    (
        "ch06/compiled.md",
        r"pays Python's dispatch, some (\d+) microseconds in 6\.1's run",
        lambda: out(EAGER, r"(\d+) us per op"),
    ),
    (
        "ch06/compiled.md",
        r"its time is (\d\.\d+) of torch eager's on GELU, (\d\.\d+) on layer norm and (\d\.\d+) on "
        r"softmax\. No round\s+reaches 1; the widest range is layer norm's \((\d\.\d+) to "
        r"(\d\.\d+)\)",
        lambda: (
            *(
                below_one(compile_ratio(b, "compiled/torch", "max"))
                and compile_ratio(b, "compiled/torch")
                for b in ("gelu(xW+b)", "layernorm(x+r)", "attention softmax")
            ),
            compile_ratio("layernorm(x+r)", "compiled/torch", "min"),
            compile_ratio("layernorm(x+r)", "compiled/torch", "max"),
        ),
    ),
    (
        "ch06/compiled.md",
        r"which takes (\d\.\d+) times inductor's time in the median \((\d\.\d+) against (\d\.\d+) "
        r"ms\), though not in every round \((\d\.\d+) to (\d\.\d+)\)",
        lambda: (
            below_one(compile_ratio("layernorm(x+r)", "compiled/inductor")),
            compile_ms("layernorm(x+r)", "compiled"),
            compile_ms("layernorm(x+r)", "inductor"),
            compile_ratio("layernorm(x+r)", "compiled/inductor", "min"),
            # "not in every round": the slowest round's ratio is above 1
            compile_ratio("layernorm(x+r)", "compiled/inductor", "max")
            if compile_ratio("layernorm(x+r)", "compiled/inductor", "max") > 1
            else math.nan,
        ),
    ),
    (
        "ch06/compiled.md",
        r"compiled sitp is the faster in every round \((\d\.\d+) to (\d\.\d+) of inductor's "
        r"time\), and on GELU it takes (\d\.\d+) of inductor's time",
        lambda: (
            compile_ratio("attention softmax", "compiled/inductor", "min"),
            below_one(compile_ratio("attention softmax", "compiled/inductor", "max")),
            compile_ratio("gelu(xW+b)", "compiled/inductor"),
        ),
    ),
    (
        "ch06/compiled.md",
        r"torch eager (\d\.\d+) to (\d\.\d+) ms, torch\.compile (\d\.\d+) to (\d\.\d+) ms",
        lambda: (
            *compile_range("gelu(xW+b)", "torch"),
            *compile_range("gelu(xW+b)", "inductor"),
        ),
    ),
    (
        "ch06/compiled.md",
        r"compiled sitp takes (\d\.\d+) of torch eager's time \((\d\.\d+) to (\d\.\d+)\) and "
        r"(\d\.\d+) of torch\.compile's \((\d\.\d+) to (\d\.\d+)\), and even eager sitp's step, "
        r"at (\d+\.\d) ms, is faster than PyTorch's (\d+\.\d) ms on one thread of the AMD EPYC; "
        r"torch\.compile's step, (\d+\.\d) ms, gains little",
        lambda: (
            *(
                compile_ratio("GPT train step", k, s)
                for k in ("compiled/torch", "compiled/inductor")
                for s in ("median", "min", "max")
            ),
            compile_ms("GPT train step", "eager"),
            compile_ms("GPT train step", "torch")
            if compile_ms("GPT train step", "eager") < compile_ms("GPT train step", "torch")
            else math.nan,
            compile_ms("GPT train step", "inductor"),
        ),
    ),
    (
        "ch06/compiled.md",
        r"sitp's compile costs (\d\.\d) to (\d\.\d) s a block",
        lambda: (min(compile_seconds()), max(compile_seconds())),
    ),
    (
        "ch06/compiled.md",
        r"its column \((\d\.\d) to (\d\.\d) s a block, (\d+\.\d) s for the GPT step\)",
        lambda: (
            min(compile_run()["rows"][b]["inductor_compile_s"] for b in COMPILE_BLOCKS),
            max(compile_run()["rows"][b]["inductor_compile_s"] for b in COMPILE_BLOCKS),
            compile_run()["rows"]["GPT train step"]["inductor_compile_s"],
        ),
    ),
    (
        "ch06/compiled.md",
        r"gains the least of the four rows: (\d\.\d+) times \((\d\.\d+) to (\d\.\d+) over the "
        r"rounds\), where the blocks gained (\d\.\d) to (\d\.\d)\.",
        lambda: (
            compile_ratio("GPT train step"),
            compile_ratio("GPT train step", stat="min"),
            compile_ratio("GPT train step", stat="max"),
            min(compile_ratio(b) for b in COMPILE_BLOCKS),
            max(compile_ratio(b) for b in COMPILE_BLOCKS),
        ),
    ),
    (
        "ch06/compiled.md",
        r"already runs at (\d\.\d+) to (\d\.\d+) of numpy's speed",
        lambda: (min(scoreboard_ratios()), max(scoreboard_ratios())),
    ),
    (
        "ch06/compiled.md",
        r"the compiled anchor step takes (\d+\.\d) ms against eager's (\d+\.\d) ms, (\d\.\d+) "
        r"times faster \((\d\.\d+) to (\d\.\d+) over the rounds\)",
        lambda: (
            train_ms("gpt", "compiled"),
            train_ms("gpt", "eager"),
            *(train_ratio("gpt", "eager/compiled", s) for s in ("median", "min", "max")),
        ),
    ),
    (
        "ch06/compiled.md",
        r"PyTorch's time: (\d\.\d+) of torch eager's \((\d\.\d+) to (\d\.\d+)\) and (\d\.\d+) "
        r"of torch\.compile's \((\d\.\d+) to (\d\.\d+)\)",
        lambda: tuple(
            train_ratio("gpt", k, s)
            for k in ("compiled/torch", "compiled/torch.compile")
            for s in ("median", "min", "max")
        ),
    ),
    (
        "ch06/compiled.md",
        r"Other programs took (\d+)% of the machine's CPUs while it ran",
        lambda: 100 * train_run("gpt")["load"]["other_share"],
    ),
    (
        "ch06/compiled.md",
        r"the RNN's step gains (\d\.\d+) times \((\d\.\d+) to (\d\.\d+)\) and the CNN's "
        r"(\d\.\d+) \((\d\.\d+) to (\d\.\d+)\)",
        lambda: tuple(
            train_ratio(m, "eager/compiled", s)
            for m in ("rnn", "wavenet")
            for s in ("median", "min", "max")
        ),
    ),
    (
        "ch06/compiled.md",
        r"\((\d+) of each in the step's graph\)",
        lambda: train_report("rnn")["epilogues"] / 2,
    ),
    (
        "ch06/compiled.md",
        r"which fuse \((\d+) ops become (\d+) steps\)",
        lambda: (train_report("wavenet")["ops_before"], train_report("wavenet")["steps_after"]),
    ),
    (
        "ch06/compiled.md",
        r"whose step there gains (\d\.\d+) \((\d\.\d+) to (\d\.\d+)\)",
        lambda: tuple(train_ratio("gru", "eager/compiled", s) for s in ("median", "min", "max")),
    ),
    (
        "ch06/compiled.md",
        r"\((\d+) layer nodes decomposed, (\d+) GEMM epilogues in the step's graph against the "
        r"EPYC record's (\d+)\)",
        lambda: (
            train_report("gru", TRAIN_INTEL)["decomposed"],
            train_report("gru", TRAIN_INTEL)["epilogues"],
            train_report("gru")["epilogues"],
        ),
    ),
    (
        "ch06/compiled.md",
        r"other programs took (\d+)% of its CPUs during the GRU's rounds",
        lambda: 100 * train_run("gru", record=TRAIN_INTEL)["load"]["other_share"],
    ),
    (
        "ch06/compiled.md",
        r"the GRU's step takes (\d\.\d) ms against eager's (\d\.\d) ms, (\d\.\d+) times faster "
        r"\((\d\.\d+) to (\d\.\d+) over the rounds\); the RNN's gains (\d\.\d+) \((\d\.\d+) to "
        r"(\d\.\d+)\) and the CNN's (\d\.\d+) \((\d\.\d+) to (\d\.\d+)\)\. The anchor gains "
        r"(\d\.\d+) \((\d\.\d+) to (\d\.\d+)\)",
        lambda: (
            train_ms("gru", "compiled", record=TRAIN_INTEL),
            train_ms("gru", "eager", record=TRAIN_INTEL),
            *(
                train_ratio(m, "eager/compiled", s, record=TRAIN_INTEL)
                for m in ("gru", "rnn", "wavenet", "gpt")
                for s in ("median", "min", "max")
            ),
        ),
    ),
    (
        "ch06/compiled.md",
        r"the twelve products now\s+take (\d\.\d+) ms against `torch\.mm`'s (\d\.\d+)",
        lambda: tuple(
            sum(g[k] for g in ex("compare-torch-intel-1t.json")["gemms"])
            for k in ("sitp_ms", "torch_ms")
        ),
    ),
    (
        "ch06/compiled.md",
        r"the compiled step takes (\d\.\d+) of torch eager's time \((\d\.\d+) to (\d\.\d+)\) and "
        r"(\d\.\d+) of torch\.compile's \((\d\.\d+) to (\d\.\d+)\)",
        lambda: tuple(
            train_ratio("gpt", k, s, record=TRAIN_INTEL)
            for k in ("compiled/torch", "compiled/torch.compile")
            for s in ("median", "min", "max")
        ),
    ),
    (
        "ch06/compiled.md",
        r"On two threads \(the third record; other programs took (\d+)% of the CPUs\), the "
        r"compiled\s+anchor step takes (\d+\.\d) ms, as long as torch eager's (\d+\.\d): "
        r"(\d\.\d\d) of its time \((\d\.\d\d) to (\d\.\d\d)\s+over the rounds\), and (\d\.\d\d) of "
        r"torch\.compile's \((\d\.\d\d) to (\d\.\d\d)\)\. Eager sitp takes (\d+\.\d) ms,\s+so "
        r"compiling gains (\d\.\d\d) \((\d\.\d\d) to (\d\.\d\d)\)\. The ladder keeps its gains on "
        r"two threads: the\s+RNN (\d\.\d\d), the GRU (\d\.\d\d) and the CNN (\d\.\d\d)",
        two_threads_figures,
    ),
    ("numbers.md", NUMBERS_COMPILE_TABLE, compile_table_figures),
    ("ch06/compiled.md", r"measured in 2\.3 \((\d+\.\d) GB/s\)", lambda: roofline("DRAM", 1)),
    (
        "ch06/compiled.md",
        r"L2's bandwidth \((\d+\.\d) GB/s on 2\.3's machine\)",
        lambda: roofline("L2", 1),
    ),
    # 7.1 to 7.4
    (
        "ch07/collectives.md",
        r"the target for large messages is a ratio of at least (\d\.\d)",
        lambda: (
            0.9
            if min(
                float(x)
                for line in re.findall(
                    r"messages of 16 MB and more: mpi4py time / sitp time (.*)$",
                    printed("ch07/collectives"),
                    re.MULTILINE,
                )
                for x in line.split(", ")
            )
            >= 0.9
            else math.nan
        ),
    ),
    (
        "ch07/collectives.md",
        r"the one line through all sizes is off by (\d+) % \(sitp\) to (\d+) % \(mpi4py\) at "
        r"16 KB, where the times rise steeply, and by (\d+) % at 64 MB",
        lambda: (
            -collectives_fit_error("sitp", 16 * 2**10),
            -collectives_fit_error("raw", 16 * 2**10),
            # one figure for both: it must hold for each
            max(-collectives_fit_error(who, 64 * 2**20) for who in ("raw", "sitp"))
            if len({round(collectives_fit_error(w, 64 * 2**20)) for w in ("raw", "sitp")}) == 1
            else math.nan,
        ),
    ),
    (
        "ch07/collectives.md",
        r"its medians agree with this page's within (\d+) % up to 1 MB but differ by (\d+) % to "
        r"(\d+) % from 4 MB up",
        lambda: (
            max(rerun_changes(lambda m: m <= 2**20)),
            min(rerun_changes(lambda m: m >= 4 * 2**20)),
            max(rerun_changes(lambda m: m >= 4 * 2**20)),
        ),
    ),
    (
        "ch07/collectives.md",
        r"rank 1's values (\w+) times rank 0's",
        lambda: (
            out("ch07/collectives", r"^rank 1:\n +x = \[([\d.]+),")
            / out("ch07/collectives", r"^rank 0:\n +x = \[([\d.]+),")
        ),
    ),
    (
        "ch07/collectives.md",
        r"leaves rank 0 with the first half of the sum, (\d+) and (\d+), and rank 1 with the "
        r"second, (\d+) and (\d+);",
        lambda: out(
            "ch07/collectives",
            r"reduce_scatter +\[([\d.]+), ([\d.]+)\]\n(?:.*\n)*?"
            r" +reduce_scatter +\[([\d.]+), ([\d.]+)\]",
        ),
    ),
    (
        "ch07/ddp.md",
        r"they end close together: both near (\d\.\d) times one thread, (\d\.\d+) \((\d\.\d+) to "
        r"(\d\.\d+) over the rounds\) for the two threads and (\d\.\d+) \((\d\.\d+) to (\d\.\d+)\) "
        r"for the two ranks",
        lambda: (
            sum(ddp_speedups()) / 2,
            *(
                ex("ddp-bench.json")["results"][i]["speedup"][s]
                for i in (1, 2)
                for s in ("median", "min", "max")
            ),
        ),
    ),
    (
        "ch07/ddp.md",
        r"The process of two threads is the faster in each of the (\w+) rounds",
        lambda: (
            ex("ddp-bench.json")["rounds"]
            if all(
                a > b
                for a, b in zip(
                    *(ex("ddp-bench.json")["results"][i]["speedup"]["rounds"] for i in (1, 2))
                )
            )
            else math.nan
        ),
    ),
    (
        "ch07/ddp.md",
        r"the CPU time they use per step says so: (\d\.\d+) s against (\d\.\d+) s",
        lambda: tuple(ex("ddp-bench.json")["results"][i]["cpu_seconds_per_step"] for i in (2, 1)),
    ),
    (
        "ch07/ddp.md",
        r"every step adds an all-reduce of (\d\.\d) MB of gradients",
        lambda: 4 * ex("ddp-bench.json")["config"]["params"] / 1e6,
    ),
    (
        "ch07/ddp.md",
        r"\((\d+\.\d) against (\d+\.\d) ms a step in the table above, at twice the batch\)",
        lambda: tuple(r["median_step_ms"] for r in ex("ddp-bench.json")["results"][:2]),
    ),
    (
        "ch07/ddp.md",
        r"The model is small, (\d) MB of gradients",
        lambda: out("ch07/ddp", r"N = ([\d.]+) MB of float32 gradients"),
    ),
    (
        "ch07/ddp.md",
        r"is what finally stops the speedup near (\d+) ranks",
        lambda: ddp_best_ranks("100 Gb/s"),
    ),
    (
        "ch07/zero.md",
        r"whatever \$p\$ is: about (\d) billion parameters in 80 GiB",
        lambda: out("ch07/zero", r"^8 ranks: ZeRO-0 ([\d.]+)B"),
    ),
    (
        "ch07/zero.md",
        r"\(([\d,]+) elements\) against ([\d,]+) in all",
        lambda: out("ch07/zero", r"^([\d,]+) parameters; the largest tensor has ([\d,]+)$")[::-1],
    ),
    # 8.1 to 8.4
    (
        "ch08/chat.md",
        r"\(the longest hand-written conversation is (\d+)\)",
        longest_identity_conversation,
    ),
    (
        "ch08/chat.md",
        r"tinyshakespeare's (\d+) characters have no digits but (\d)",
        lambda: (
            out(TOKENS, r'^(\d+) "'),
            float("".join(c for c in out_text(TOKENS, r'^\d+ "(.*)"$') if c.isdigit())),
        ),
    ),
    (
        "ch08/chat.md",
        r"options, (\w+) layers of width (\d+), a block of (\d+) tokens",
        lambda: tuple(float(pretrain_defaults()[k]) for k in ("n_layer", "n_embd", "block_size")),
    ),
    (
        "ch08/sft.md",
        r"on the (\d+) train problems of `addition1`",
        lambda: out("ch08/sft", r"^(\d+) train and \d+ held-out problems"),
    ),
    (
        "ch08/sft.md",
        r"Only the last (\w+) positions \(predicting \"5\" and `<\|assistant_end\|>`\) receive "
        r"gradient; the (\w+) before them",
        lambda: (
            len(out_text("ch08/sft", r"^targets \[(.*)\]$").split(", "))
            - out_text("ch08/sft", r"^targets \[(.*)\]$").count("-1"),
            out_text("ch08/sft", r"^targets \[(.*)\]$").count("-1"),
        ),
    ),
    (
        "ch08/sft.md",
        r"leaves pass@1 at (\w+) in every one of the (\w+) seeds",
        lambda: (max(demo_seeds("pretrain")), len(demo_seeds("pretrain"))),
    ),
    (
        "ch08/sft.md",
        r"the sums, (\d\.\d+) ± (\d\.\d+) of the held-out problems now come out right \(mean ± sd "
        r"over the (\w+) seeds; from (\d\.\d+) with seed (\d+) to (\d\.\d+) with seed (\d+)\)",
        lambda: (
            *mean_sd(demo_seeds("sft")),
            len(demo_seeds("sft")),
            min(demo_seeds("sft")),
            ex("posttrain-demo-seeds.json")["seeds"][
                demo_seeds("sft").index(min(demo_seeds("sft")))
            ],
            max(demo_seeds("sft")),
            ex("posttrain-demo-seeds.json")["seeds"][
                demo_seeds("sft").index(max(demo_seeds("sft")))
            ],
        ),
    ),
    (
        "ch08/sft.md",
        r"The seeds spread (\d\.\d+) apart, [a-z ]+ one run's 95 % Wilson interval \(±(\d\.\d+) on "
        r"average\): the interval measures the sample of (\d+) problems, not where another seed's "
        r"(\d+) steps of fine-tuning land",
        lambda: (
            max(demo_seeds("sft")) - min(demo_seeds("sft")),
            demo_half_width("sft"),
            ex("posttrain-demo-seeds.json")["runs"][0]["stages"][2]["n"],
            ex("posttrain-demo-seeds.json")["runs"][0]["config"]["sft_steps"],
        ),
    ),
    (
        "ch08/sft.md",
        r"python scripts/posttrain_demo.py --seeds (\d+) (\d+) (\d+) (\d+) (\d+)\s+--json "
        r"src/sitp/examples/posttrain-demo-seeds.json",
        lambda: tuple(ex("posttrain-demo-seeds.json")["seeds"]),
    ),
    (
        "ch08/rl.md",
        r"in every one of (\d+) seeded runs",
        lambda: out("ch08/rl", r"^rewards \[0\. 1\.\], baseline none .* of (\d+) runs"),
    ),
    (
        "ch08/rl.md",
        r"Both estimates are centred on the exact gradient (\d\.\d+)\.",
        lambda: out("ch08/rl", r"^no baseline : .*\(exact \+([\d.]+)\)"),
    ),
    (
        "ch08/rl.md",
        r"The one right reply of eight gets \$\+(\d\.\d+)\$[\s\S]*? The one wrong reply among eight "
        r"right ones gets \$-(\d\.\d+)\$",
        lambda: (
            out("ch08/rl", r"^\[1, 0, 0, 0, 0, 0, 0, 0\] +-> \+([\d.]+)"),
            out("ch08/rl", r"^\[1, 1, 1, 1, 1, 1, 1, 0\] +-> .* -([\d.]+)$"),
        ),
    ),
    (
        "ch08/rl.md",
        r"its own SFT model, by (\d\.\d+) to (\d\.\d+), more than the half-width",
        lambda: (min(chain1_gains()), max(chain1_gains())),
    ),
    (
        "ch08/rl.md",
        r"so its pass@\$k\$ is the base rate (\d\.\d+) at every",
        lambda: ex("rl-count.json")["runs"][0]["count"]["stages"][1]["pass@1"],
    ),
    (
        "ch08/preferences.md",
        r"The SFT model against itself lands at (\d\.\d+),\s+(\d\.\d+) and (\d\.\d+)",
        lambda: tuple(
            r["policies"]["sft"]["win"]["win_rate"] for r in ex("preferences.json")["runs"]
        ),
    ),
    (
        "ch08/preferences.md",
        r"the win rates average (\d\.\d+) for DPO and (\d\.\d+) and (\d\.\d+) for the",
        lambda: tuple(
            statistics.mean(
                r["policies"][name]["greedy_win"]["win_rate"]
                for r in ex("preferences.json")["runs"]
            )
            for name in ("dpo", "rl-kl0.05", "rl-kl0")
        ),
    ),
    ("ch08/rl.md", r"chain1's longest reply, (\d+) tokens", longest_chain1_reply),
    (
        "ch08/evaluation.md",
        r"the plug-in is already low by (\d\.\d+) to (\d\.\d+)",
        lambda: (min(passk_gaps()), max(passk_gaps())),
    ),
    ("ch08/evaluation.md", r"a pass@1 of (\d\.\d+) on them", lambda: demo("sft")),
    (
        "ch08/evaluation.md",
        r"could still be up to about (\d+) %",
        lambda: 100 * out("ch08/evaluation", r"^ +0/95: .* Wilson \[0\.000, ([\d.]+)\]$"),
    ),
    (
        "ch08/evaluation.md",
        r"\((\d)-layer GPT of ([\d,]+) parameters on `chain1`, (\d+) held-out problems",
        lambda: (
            ex("posttrain-demo.json")["config"]["n_layer"],
            ex("posttrain-demo.json")["config"]["parameters"],
            demo("sft", "n"),
        ),
    ),
    (
        "ch08/evaluation.md",
        r"after (\d+) steps of pre-training on the task's plain text, after (\d+) steps of SFT, "
        r"after (\d+) steps of RL",
        lambda: tuple(
            ex("posttrain-demo.json")["config"][f"{s}_steps"] for s in ("pretrain", "sft", "rl")
        ),
    ),
    (
        "ch08/evaluation.md",
        r"Seed 0's SFT and RL intervals, (\d\.\d+)-(\d\.\d+) and (\d\.\d+)-(\d\.\d+), (?:do not )?overlap",
        lambda: (*demo("sft", "pass@1_ci"), *demo("rl", "pass@1_ci")),
    ),
    (
        "ch08/evaluation.md",
        r"was run with (\w+) seeds on an Intel Xeon; the figure shows every seed, their mean and "
        r"spread, and the Wilson intervals of one run, seed (\d+):",
        lambda: (len(demo_seeds("sft")), ex("posttrain-demo.json")["config"]["seed"]),
    ),
    (
        "ch08/evaluation.md",
        r"Over 8\.2's (\w+) seeds \(`posttrain-demo-seeds.json`\), SFT reaches (\d\.\d+) ± "
        r"(\d\.\d+) \(mean ± sd\) and RL (\d\.\d+) ± (\d\.\d+); RL's gain on its own seed's SFT "
        r"model is (-?\d\.\d+) ± (\d\.\d+), from (-?\d\.\d+) to (-?\d\.\d+)",
        lambda: (
            len(demo_seeds("sft")),
            *mean_sd(demo_seeds("sft")),
            *mean_sd(demo_seeds("rl")),
            *mean_sd(demo_rl_gains()),
            min(demo_rl_gains()),
            max(demo_rl_gains()),
        ),
    ),
    (
        "ch08/evaluation.md",
        r"--task count --seeds (\d+) (\d+) (\d+) (\d+) (\d+) --json "
        r"src/sitp/examples/posttrain-demo-count-seeds.json",
        lambda: tuple(ex(COUNT_SEEDS)["seeds"]),
    ),
    (
        "ch08/evaluation.md",
        r"the listing policy scores (\d\.\d+)",
        lambda: out("ch08/evaluation", r"^'0 1 2 3 4 5' +[\d.]+ +([\d.]+)$"),
    ),
    (
        "ch08/evaluation.md",
        r"In every one of the (\w+) seeds, fine-tuning reaches (\d\.\d+) by answering \"1\" to "
        r"everything, and (\d+) steps of RL leave it there: in most groups all eight samples "
        r"get the same reward \((\d\.\d) to (\d\.\d) of the (\d) groups a step",
        lambda: (
            len(demo_seeds("sft", COUNT_SEEDS)),
            # one figure for every seed, SFT and RL alike: nan where they differ
            demo_seeds("sft", COUNT_SEEDS)[0]
            if len(set(demo_seeds("sft", COUNT_SEEDS) + demo_seeds("rl", COUNT_SEEDS))) == 1
            else math.nan,
            ex(COUNT_SEEDS)["runs"][0]["config"]["rl_steps"],
            min(count_all_equal_groups()),
            max(count_all_equal_groups()),
            ex(COUNT_SEEDS)["runs"][0]["config"]["rl_prompts_per_step"],
        ),
    ),
    (
        "ch08/evaluation.md",
        r"the most common answer, here (\d\.\d+)\)",
        lambda: out("ch08/evaluation", r"^pass@1 of always answering '1': ([\d.]+)$"),
    ),
    (
        "ch08/evaluation.md",
        r"\((\d+) a task; `chain1`'s whole split of (\d+)\)",
        lambda: (
            ex("posttrain-pipeline.json")["heldout"],
            next(s for s in ex("posttrain-pipeline.json")["stages"])["pass@1"]["chain1"]["n"],
        ),
    ),
    (
        "ch08/evaluation.md",
        r"Pre-training is ([\d,]+) steps of (\d+) windows of (\d+) bytes of tinyshakespeare, on "
        r"a GPT of (\d) layers, width (\d+) and 5\.3's modern options \(([\d,]+) parameters, "
        r"with the byte tokenizer's (\d+) tokens\)",
        lambda: (
            float(
                re.search(r"--steps (\d+)", ex("posttrain-pipeline.json")["stages"][0]["command"])[
                    1
                ]
            ),
            *(
                float(pretrain_defaults()[k])
                for k in ("batch_size", "block_size", "n_layer", "n_embd")
            ),
            gpt_parameters(vocab_size=256, **pretrain_defaults()),
            256,
        ),
    ),
    (
        "ch08/evaluation.md",
        r"\(`chain1` has (\d+)\)",
        lambda: 10**3 - demo("sft", "n"),
    ),
    (
        "ch08/evaluation.md",
        r"the others between 0 and (\d\.\d+); after SFT reverse (\d\.\d+), sort (\d\.\d+), "
        r"chain1 (\d\.\d+); after RL reverse (\d\.\d+) and sort (\d\.\d+),",
        lambda: (
            max(
                pipeline("midtrain", t)
                for t in ex("posttrain-pipeline.json")["tasks"]
                if t != "count"
            ),
            pipeline("sft", "reverse"),
            pipeline("sft", "sort"),
            pipeline("sft", "chain1"),
            pipeline("rl", "reverse"),
            pipeline("rl", "sort"),
        ),
    ),
    (
        "ch08/evaluation.md",
        r"Counting jumps\s+straight to the base rate of \"always 1\" \((\d\.\d+), where always "
        r"answering 1 scores (\d\.\d+):",
        lambda: (
            pipeline("midtrain", "count"),
            out("ch08/evaluation", r"^pass@1 of always answering '1': ([\d.]+)$"),
        ),
    ),
    (
        "ch08/evaluation.md",
        r"RL\*\* improves reversing \((\d\.\d+) to (\d\.\d+)\) and sorting \((\d\.\d+) to "
        r"(\d\.\d+)\)",
        lambda: (
            pipeline("sft", "reverse"),
            pipeline("rl", "reverse"),
            pipeline("sft", "sort"),
            pipeline("rl", "sort"),
        ),
    ),
    (
        "ch08/evaluation.md",
        r"the problems RL gained outnumber those it lost (\d+) to (\d+) and (\d+) to (\d+)\. On "
        r"`chain1`, RL solved (\d+) problems that SFT did not and lost (\d+) others",
        lambda: tuple(
            v
            for t in ("reverse", "sort", "chain1")
            for v in out("ch08/evaluation", rf"^{t} +solved by RL only +(\d+), by SFT only +(\d+),")
        ),
    ),
    (
        "ch08/evaluation.md",
        r"The whole pipeline took (\d+\.\d) minutes on the two cores of the AMD EPYC named in "
        r"the\s+table, evaluations and the preference stages included: pre-training (\d\.\d), "
        r"mid-training\s+(\d\.\d), fine-tuning (\d\.\d), RL (\d\.\d), the reward model "
        r"(\d\.\d), RL against it (\d\.\d) and DPO (\d\.\d)\.",
        lambda: (
            ex("posttrain-pipeline.json")["minutes"],
            *(s["seconds"] / 60 for s in ex("posttrain-pipeline.json")["stages"]),
            *(s["seconds"] / 60 for s in ex("posttrain-pipeline.json")["preferences"]["stages"]),
        ),
    ),
    (
        "ch08/evaluation.md",
        r"The SFT model against itself\s+lands at (\d\.\d+), as a fair comparison should; RL "
        r"against the reward model wins (\d\.\d+) of\s+its comparisons and DPO (\d\.\d+), both "
        r"intervals above 0\.5, and both by being short \((\d+)\s+and (\d+) characters against "
        r"the SFT model's (\d+)\) while their share of right answers falls\s+from (\d\.\d+) "
        r"to (\d\.\d+) and (\d\.\d+)\.",
        lambda: pipeline_preferences(),
    ),
    (
        "ch08/evaluation.md",
        r"SFT\s+reverses (\d\.\d+) and (\d\.\d+) of the problems in two runs and (\d\.\d+) in the "
        r"third; sorting\s+after SFT lands between (\d\.\d+) and (\d\.\d+)\.",
        lambda: (
            *pipeline_seeds("pass@1", "sft", "reverse")["values"],
            min(pipeline_seeds("pass@1", "sft", "sort")["values"]),
            max(pipeline_seeds("pass@1", "sft", "sort")["values"]),
        ),
    ),
    (
        "ch08/evaluation.md",
        r"between \+(\d\.\d+) and\s+\+(\d\.\d+) in every run, (\d\.\d+) ± (\d\.\d+), where the "
        r"levels it starts from differ by a third\.\s+On sorting RL gains in every run too, but "
        r"by anything from (\d\.\d+) to (\d\.\d+) \((\d\.\d+) ±\s+(\d\.\d+)\): a gain in sign, "
        r"not in size\. On `chain1` it is (-?\d\.\d+) ± (\d\.\d+), no gain",
        lambda: seeds_gains(),
    ),
    (
        "ch08/evaluation.md",
        r"RL against\s+the reward model wins (\d\.\d+) ± (\d\.\d+) of its comparisons and DPO "
        r"(\d\.\d+) ± (\d\.\d+), while\s+the SFT model against itself, the check, lands at "
        r"(\d\.\d+) ± (\d\.\d+); both policies solve\s+between 0 and (\d\.\d+) of `chain1`'s "
        r"problems, where the SFT model solves between (\d\.\d+)\s+and (\d\.\d+)\. In the "
        r"second and third runs RL against the reward model went furthest: its\s+sampled "
        r"replies average about (\d+) characters\.",
        lambda: seeds_preferences(),
    ),
    (
        "ch08/evaluation.md",
        r"±0\.02 at \$p = 0\.5\$ needs about ([\d,]+) problems",
        lambda: out("ch08/evaluation", r"^about ([\d,]+) problems"),
    ),
    (
        "ch08/evaluation.md",
        r"of which the hash puts (\d+) in the held-out split",
        lambda: out("ch08/evaluation", r"chain1 has (\d+) held-out problems$"),
    ),
    (
        "ch08/evaluation.md",
        r"or the whole split when it is smaller \((\d+) for `chain1`\)",
        lambda: demo("sft", "n"),
    ),
    # chapter 3's overview, against the recorded runs
    (
        "ch03/index.md",
        r"\| MLP, context 3 \| (\d\.\d+) / (\d\.\d+) \(([\d,]+) steps\)",
        lambda: recorded_run("cnn-runs.json", "mlp"),
    ),
    (
        "ch03/index.md",
        r"val (\d\.\d+) with warmup \+ cosine \(([\d,]+) steps\)",
        lambda: (
            ex("mlp-optimizers.json")["runs"]["AdamW, lr 0.01, warmup 100 + cosine"]["val_loss"][
                -1
            ],
            ex("mlp-optimizers.json")["config"]["steps"],
        ),
    ),
    (
        "ch03/index.md",
        r"\| WaveNet-style CNN \| (\d\.\d+) / (\d\.\d+) \(([\d,]+) steps\)",
        lambda: recorded_run("cnn-runs.json", "wavenet"),
    ),
    (
        "ch03/index.md",
        r"\| GPT, 4 layers, 4 heads, width 64 \| (\d\.\d+) ± (\d\.\d+) / (\d\.\d+) ± (\d\.\d+) "
        r"\(([\d,]+) steps, mean ± sd over (\d) seeds,",
        lambda: (
            *census_spread("val"),
            *census_spread("test"),
            census_gpt()["train_config"]["steps"],
            len(census_seeds()["runs"]),
        ),
    ),
    # chapter 1, against its fences' recorded output
    (
        "ch01/index.md",
        r"`a\.` \(a name ending in \*a\*\) ([\d,]+) times",
        lambda: float(re.search(r"\[\('a\.', (\d+)\)", page("ch01/index.md"))[1]),
    ),
    (
        "ch01/index.md",
        r"has an NLL of \*\*(\d\.\d+)\*\* nats \(perplexity (\d+\.\d+)\), measured on the "
        r"([\d,]+) bigrams of all ([\d,]+) names",
        lambda: (
            *out(CH1, r"^NLL ([\d.]+) nats, perplexity ([\d.]+)$"),
            sum(census_split()) + census_letters(),
            sum(census_split()),
        ),
    ),
    (
        "ch01/index.md",
        r"^\| smoothing \$\\alpha\$ \| train NLL \(([\d,]+) names\) \| val NLL \((\d+) names\) \|$",
        lambda: census_split()[:2],
    ),
    (
        "ch01/index.md",
        r"^\| 0 \| (\d\.\d+) \| ∞ \|$",
        lambda: out(CH1, r"^alpha +0\.0: train ([\d.]+) +val inf$"),
    ),
    *(
        (
            "ch01/index.md",
            rf"^\| {a} \| (\d\.\d+) \| (\d\.\d+) \|$",
            lambda a=a: out(CH1, rf"^alpha +{float(a)}: train ([\d.]+) +val ([\d.]+)$"),
        )
        for a in ("0.1", "1", "10")
    ),
    (
        "ch01/index.md",
        r"has an entropy of (\d\.\d+) nats at \$T = 1\$ \(perplexity (\d+)\); at \$T = 0\.25\$ it "
        r"drops to (\d\.\d+), at \$T = 4\$ it rises to (\d\.\d+)",
        lambda: (entropy_at(1.0), math.exp(entropy_at(1.0)), entropy_at(0.25), entropy_at(4.0)),
    ),
    *(
        (
            "ch01/index.md",
            rf"^\| {t} \| (\d+)% \| (\d+\.\d) \|$",
            lambda t=t: out(CH1, rf"^T={t}: (\d+)% real names, mean length ([\d.]+)$"),
        )
        for t in ("0.5", "1.0", "2.0")
    ),
    (
        "ch01/index.md",
        r"The mean length at \$T = 1\$, (\d\.\d) letters, matches the corpus's own average "
        r"\(([\d,]+) names, ([\d,]+) letters\)",
        lambda: (
            out(CH1, r"^T=1\.0: .* mean length ([\d.]+)$"),
            sum(census_split()),
            census_letters(),
        ),
    ),
    (
        "ch01/index.md",
        r"the classifier labels (\d+)% of the points correctly \(loss (\d\.\d+)\)",
        lambda: out(CH1, r"^loss ([\d.]+), accuracy (\d+)%$")[::-1],
    ),
    (
        "ch01/index.md",
        r"After 500 steps the network's NLL is (\d\.\d+): it has passed the add-one counting "
        r"model \((\d\.\d+)\)",
        lambda: (out(CH1, r"^after 500 steps: ([\d.]+)$"), out(CH1, r"^NLL ([\d.]+) nats")),
    ),
    (
        "ch01/index.md",
        r"than the bigram's (\d\.\d+)\?",
        lambda: out(CH1, r"^NLL ([\d.]+) nats"),
    ),
    (
        "ch01/index.md",
        r"The training NLL rises, from (\d\.\d+) to (\d\.\d+) after 300 steps",
        lambda: out(CH1, r"^NLL without decay ([\d.]+), with decay ([\d.]+)$"),
    ),
    ("ch01/index.md", r"\\ell = \\log 27 \\approx (\d\.\d+)\$", lambda: math.log(27)),
    # 3.1 and 3.3: the runs of the command line, from their records
    (
        "ch03/ffn.md",
        r"After ([\d,]+) steps \((\d+) seconds on the 2-core machine, under a load that was not "
        r"recorded\) the MLP reaches a loss of \*\*(\d\.\d+)\*\* on the training split and "
        r"\*\*(\d\.\d+)\*\* on the validation split\.",
        lambda: (
            *ex("ffn-loss.json")["eval"][-1][:1],
            ex("ffn-loss.json")["seconds"],
            *ex("ffn-loss.json")["eval"][-1][1:],
        ),
    ),
    (
        "ch03/ffn.md",
        r"Chapter 1's bigram scored (\d\.\d+) on the same validation names: two more characters "
        r"of context are worth (\d\.\d+) nats per character",
        lambda: (bigram_val(), bigram_val() - ex("ffn-loss.json")["eval"][-1][2]),
    ),
    (
        "ch03/ffn.md",
        r"The gap between the two curves grows from (\d\.\d+) at step 1,000 to (\d\.\d+) at "
        r"the end",
        lambda: tuple(
            e[2] - e[1] for e in (ex("ffn-loss.json")["eval"][1], ex("ffn-loss.json")["eval"][-1])
        ),
    ),
    (
        "ch03/ffn.md",
        r"It ends at validation (\d\.\d+) and test (\d\.\d+), (\d\.\d+) above the SGD run's",
        lambda: (
            cnn("mlp")["final"]["val"],
            cnn("mlp")["final"]["test"],
            cnn("mlp")["final"]["val"] - ex("ffn-loss.json")["eval"][-1][2],
        ),
    ),
    (
        "ch03/ffn.md",
        r"\| MLP, SGD, ([\d,]+) steps \(figure above\) \| census \| (\d\.\d+) \| (\d\.\d+) \|",
        lambda: tuple(ex("ffn-loss.json")["eval"][-1]),
    ),
    (
        "ch03/ffn.md",
        r"\| MLP, `sitp train`, AdamW, ([\d,]+) steps \| census \| (\d\.\d+) \| (\d\.\d+) \|",
        lambda: cnn_row("mlp")[1:4],
    ),
    (
        "ch03/ffn.md",
        r"\| bigram, add-0\.1 counts \(chapter 1\) \| census, 4,130 / 516 names \| (\d\.\d+) \| "
        r"(\d\.\d+) \|",
        lambda: out("ch01/index", r"^alpha +0\.1: train ([\d.]+) +val ([\d.]+)$"),
    ),
    (
        "ch03/cnn.md",
        r"\| MLP, context 3 \(section 3\.1\) \| ([\d,]+) \| ([\d,]+) \| (\d\.\d+) \| "
        r"(\d\.\d+) \| (\d\.\d+) \|",
        lambda: cnn_row("mlp"),
    ),
    (
        "ch03/cnn.md",
        r"\| WaveNet, context 8 \| ([\d,]+) \| ([\d,]+) \| (\d\.\d+) \| (\d\.\d+) \| "
        r"(\d\.\d+) \|",
        lambda: cnn_row("wavenet"),
    ),
    (
        "ch03/cnn.md",
        r"In ([\d,]+) steps, (\d+)% of the MLP's, the WaveNet passes it by (\d\.\d+) nats on "
        r"the validation split and (\d\.\d+) on the test split",
        lambda: (
            cnn_row("wavenet")[1],
            100 * cnn_row("wavenet")[1] / cnn_row("mlp")[1],
            cnn_row("mlp")[3] - cnn_row("wavenet")[3],
            cnn_row("mlp")[4] - cnn_row("wavenet")[4],
        ),
    ),
    (
        "ch03/cnn.md",
        r"Its gap between train and validation, (\d\.\d+), is larger than the MLP's "
        r"(\d\.\d+): with (\w+) times the parameters",
        lambda: (
            cnn_row("wavenet")[3] - cnn_row("wavenet")[2],
            cnn_row("mlp")[3] - cnn_row("mlp")[2],
            cnn_row("wavenet")[0] / cnn_row("mlp")[0],
        ),
    ),
    (
        "numbers.md",
        r"\| MLP, context 3, SGD, ([\d,]+) steps \| census \| (\d\.\d+) \| (\d\.\d+) \|",
        lambda: tuple(ex("ffn-loss.json")["eval"][-1]),
    ),
    (
        "numbers.md",
        r"\| MLP, context 3, `sitp train` \(AdamW, ([\d,]+) steps\) \| census \| (\d\.\d+) \| "
        r"(\d\.\d+) \| (\d\.\d+) \|",
        lambda: cnn_row("mlp")[1:],
    ),
    (
        "numbers.md",
        r"\| WaveNet, context 8, ([\d,]+) params, `sitp train` \(AdamW, ([\d,]+) steps\) \| "
        r"census \| (\d\.\d+) \| (\d\.\d+) \| (\d\.\d+) \|",
        lambda: cnn_row("wavenet"),
    ),
    (
        "numbers.md",
        r"\| bigram, add-0\.1 counts \| census \| (\d\.\d+) \| (\d\.\d+) \|",
        lambda: out("ch01/index", r"^alpha +0\.1: train ([\d.]+) +val ([\d.]+)$"),
    ),
    (
        "numbers.md",
        r"the MLP has embedding 10 and 200 hidden units \(([\d,]+) parameters\)",
        lambda: cnn_row("mlp")[0],
    ),
    (
        "numbers.md",
        r"The MLP of 3\.1 for ([\d,]+) steps of (\d+) examples",
        lambda: (
            ex("mlp-optimizers.json")["config"]["steps"],
            ex("mlp-optimizers.json")["config"]["batch"],
        ),
    ),
    *(
        (
            "numbers.md",
            rf"{label}, sitp ([\d.]+) and\s+PyTorch\s+([\d.]+) \((?:sitp/PyTorch )?(\d\.\d+), "
            r"rounds (\d\.\d+)–(\d\.\d+)\)",
            lambda t=t: (
                ex(f"compare-torch-{t}t.json")["throughput"]["sitp"],
                ex(f"compare-torch-{t}t.json")["throughput"]["torch"],
                ex(f"compare-torch-{t}t.json")["throughput"]["ratio"],
                min(ex(f"compare-torch-{t}t.json")["throughput"]["ratios"]),
                max(ex(f"compare-torch-{t}t.json")["throughput"]["ratios"]),
            ),
        )
        for t, label in ((1, "one thread"), (2, "two threads"))
    ),
    (
        "numbers.md",
        r"SGD, SGD with momentum and AdamW end within (\d\.\d+) of each other",
        lambda: max(constant_rates()) - min(constant_rates()),
    ),
    # 3.4 and 3.5: the ladder on makemore's names, and 3.5's census run
    *(
        (
            "ch03/rnn.md",
            rf"^\| {lit(label)} \| ([\d,]+) \| (\d) \| (\d\.\d+) ± (\d\.\d+) \| (\d\.\d+) ± "
            r"(\d\.\d+) \| (\d\.\d+) ± (\d\.\d+) \|$",
            lambda key=key: ladder_row(key)[:2] + ladder_row(key)[3:],
        )
        for label, key in [
            ("bigram, neural (chapter 1)", "bigram"),
            ("MLP, context 3 (section 3.1)", "mlp"),
            ("RNN (tanh), emb 64, state 64", "rnn"),
            ("GRU, emb 64, state 64", "gru"),
        ]
    ),
    (
        "ch03/rnn.md",
        r"The GRU's mean ends (\d\.\d+) nats lower than the RNN's on validation and (\d\.\d+) on "
        r"test, (\d+) and (\d+) times the larger standard deviation, and every GRU run ends below "
        r"every RNN run",
        lambda: (
            ladder_spread("rnn", "val")[0] - ladder_spread("gru", "val")[0],
            ladder_spread("rnn", "test")[0] - ladder_spread("gru", "test")[0],
            ladder_apart("rnn", "gru", "val"),
            ladder_apart("rnn", "gru", "test"),
        ),
    ),
    (
        "ch03/rnn.md",
        r"With (\d\.\d) times the parameters, the GRU's gap between training and validation is "
        r"(\d\.\d) times the RNN's \((\d\.\d+) against (\d\.\d+), means\)",
        lambda: (
            ladder("gru")[0] / ladder("rnn")[0],
            ladder_train_val_gap("gru") / ladder_train_val_gap("rnn"),
            ladder_train_val_gap("gru"),
            ladder_train_val_gap("rnn"),
        ),
    ),
    (
        "ch03/rnn.md",
        r"the ladder's GRU run of seed 42 ended at (\d\.\d+)",
        lambda: seed_run("gru", 42)["val"],
    ),
    (
        "ch03/rnn.md",
        r"The table's runs are the ladder's: seeds 42, 1, 2, 3 and 4 \(42, 1 and 2 for the GRU\)",
        lambda: (
            ()
            if ex("ladder-names-seeds.json")["runs"]["rnn"]["seeds"] == [42, 1, 2, 3, 4]
            and ex("ladder-names-seeds.json")["runs"]["gru"]["seeds"] == [42, 1, 2]
            else (math.nan,)
        ),
    ),
    *(
        (
            "ch03/gpt.md",
            rf"^\| {lit(label)} \| ([\d,]+) \| (\d) \| (\d+\.\d) s \| (\d\.\d+) ± (\d\.\d+) \| "
            r"\**(\d\.\d+) ± (\d\.\d+)\** \| \**(\d\.\d+) ± (\d\.\d+)\** \|",
            lambda key=key: ladder_row(key),
        )
        for label, key in [
            ("bigram, neural (chapter 1)", "bigram"),
            ("MLP, context 3, emb 10, hidden 200 (3.1)", "mlp"),
            ("WaveNet, emb 24, hidden 128 (3.3)", "wavenet"),
            ("RNN, emb 64, state 64 (3.4)", "rnn"),
            ("GRU, emb 64, state 64 (3.4)", "gru"),
            ("GPT, 4 layers, 4 heads, width 64", "gpt"),
        ]
    ),
    (
        "ch03/gpt.md",
        r"^\| bigram, counted \(\+1 smoothing\) \| 729 \| \| \| \| (\d\.\d+) \| (\d\.\d+) \| 2\.454 "
        r"\(all words; ours: (\d\.\d+)\) \|",
        lambda: tuple(
            ex("ladder-names.json")["count_bigram"][k] for k in ("val", "test", "all_words")
        ),
    ),
    *(
        (
            "ch03/gpt.md",
            rf"^\| {lit(label)} \| (\d) \| (\d\.\d+) ± (\d\.\d+) \| (\d\.\d+) ± (\d\.\d+) \| "
            r"(\d\.\d+) ± (\d\.\d+) \| (\d\.\d+) ± (\d\.\d+) \|$",
            lambda key=key: long_row(key),
        )
        for label, key in [
            ("GRU", "gru"),
            ("GPT", "gpt"),
            ("GPT, weight decay 0.1", "gpt-wd"),
            ("GPT, dropout 0.1", "gpt-dropout"),
            ("GPT, dropout 0.1, 40,000 steps", "gpt-dropout-40k"),
        ]
    ),
    (
        "ch03/gpt.md",
        r"its mean validation loss is (\d\.\d+) nats below the GRU's and its mean test loss "
        r"(\d\.\d+) below, and each of its three runs ends below each of the GRU's three\. "
        r"Against the spread the lead is small: (\d\.\d) times the larger standard deviation on "
        r"validation \(the GRU's, (\d\.\d+), most of it seed 42's (\d\.\d+)\) and (\d\.\d) "
        r"times on test",
        lambda: (
            long_spread("gru", "val")[0] - long_spread("gpt", "val")[0],
            long_spread("gru", "test")[0] - long_spread("gpt", "test")[0],
            long_apart("gru", "gpt"),
            long_spread("gru", "val")[1],
            long_val("gru"),
            long_apart("gru", "gpt", "test"),
        ),
    ),
    (
        "ch03/gpt.md",
        r"over its last 2,000 steps its three runs moved by (\d\.\d+) nats or less; it has "
        r"[\d,]+ parameters and fits the training names no better than (\d\.\d+) \(mean\)\. "
        r"The GPT's training loss goes to (\d\.\d+)\.",
        lambda: (
            max(abs(m) for m in long_last_moves("gru")),
            long_spread("gru", "train")[0],
            long_spread("gpt", "train")[0],
        ),
    ),
    (
        "ch03/gpt.md",
        r"lowest validation loss at step ([\d,]+), ([\d,]+) or ([\d,]+) \((\d\.\d+) ± (\d\.\d+)\) and "
        r"rises after it while the training loss keeps falling: at the end the gap is (\d\.\d+) "
        r"nats, (\w+) times the gap at step 5,000",
        lambda: (
            *(
                sorted(set(long_best_steps("gpt")))
                if len(set(long_best_steps("gpt"))) == 3
                else (math.nan,) * 3
            ),
            *long_spread("gpt", "best_val"),
            long_spread("gpt", "val")[0] - long_spread("gpt", "train")[0],
            (long_spread("gpt", "val")[0] - long_spread("gpt", "train")[0])
            / ladder_train_val_gap("gpt"),
        ),
    ),
    (
        "ch03/gpt.md",
        r"holds the validation loss down to (\d\.\d+) ± (\d\.\d+) at the end \((\w+) runs\), "
        r"(\d\.\d+) below the GPT's mean and every run below all three of the GPT's, with the "
        r"training loss where it was \((\d\.\d+) ± (\d\.\d+)\)",
        lambda: (
            *long_spread("gpt-wd", "val"),
            len(long_runs("gpt-wd")),
            long_gain("gpt", "gpt-wd"),
            *long_spread("gpt-wd", "train"),
        ),
    ),
    (
        "ch03/gpt.md",
        r"training names \((\d\.\d+) ± (\d\.\d+) at 20,000 steps instead of (\d\.\d+)\) and "
        r"brings validation to (\d\.\d+) ± (\d\.\d+) and test to (\d\.\d+) ± (\d\.\d+): "
        r"(\d\.\d+) nats below the GRU's mean on validation and (\d\.\d+) below the GPT's, (\d+) "
        r"and (\d+) times the larger standard deviation",
        lambda: (
            *long_spread("gpt-dropout", "train"),
            long_spread("gpt", "train")[0],
            *long_spread("gpt-dropout", "val"),
            *long_spread("gpt-dropout", "test"),
            long_spread("gru", "val")[0] - long_spread("gpt-dropout", "val")[0],
            long_spread("gpt", "val")[0] - long_spread("gpt-dropout", "val")[0],
            long_apart("gru", "gpt-dropout"),
            long_apart("gpt", "gpt-dropout"),
        ),
    ),
    (
        "ch03/gpt.md",
        r"the GPT reaches validation (\d\.\d+) ± (\d\.\d+) and test (\d\.\d+) ± (\d\.\d+), every "
        r"run below all three runs at 20,000 steps: (\d\.\d+) nats below the GRU's mean test loss "
        r"at 20,000 steps",
        lambda: (
            *long_spread("gpt-dropout-40k", "val"),
            *long_spread("gpt-dropout-40k", "test"),
            long_spread("gru", "test")[0] - long_spread("gpt-dropout-40k", "test")[0]
            if not math.isnan(long_apart("gpt-dropout", "gpt-dropout-40k"))
            else math.nan,
        ),
    ),
    (
        "ch03/gpt.md",
        r"over the last 8,000 steps its validation loss fell by (\d\.\d+) to (\d\.\d+) in each run",
        lambda: (
            min(r["eval"][-3][2] - r["eval"][-1][2] for r in long_runs("gpt-dropout-40k")),
            max(r["eval"][-3][2] - r["eval"][-1][2] for r in long_runs("gpt-dropout-40k")),
        ),
    ),
    (
        "ch03/gpt.md",
        r"none of its runs gained more than (\d\.\d+)\.",
        lambda: max(long_last_moves("gru")),
    ),
    (
        "ch03/gpt.md",
        r"best losses: test (\d\.\d+) ± (\d\.\d+) at 20,000 steps \(three runs\) and (\d\.\d+) ± "
        r"(\d\.\d+) at 40,000 \(three\)",
        lambda: (*long_spread("gpt-dropout", "test"), *long_spread("gpt-dropout-40k", "test")),
    ),
    (
        "ch03/gpt.md",
        r"GPT's gap between training and validation is (\d\.\d+) nats",
        lambda: ladder_train_val_gap("gpt"),
    ),
    (
        "ch03/gpt.md",
        r"run with (\w+) seeds, 42, 1, 2, 3 and 4 \(a run takes under (\w+) minutes",
        lambda: (
            len(census_seeds()["seeds"])
            if census_seeds()["seeds"] == [42, 1, 2, 3, 4]
            else math.nan,
            math.ceil(max(r["wall_s"] for r in census_seeds()["runs"]) / 60),
        ),
    ),
    (
        "ch03/gpt.md",
        r"Every seed has its lowest validation loss at step ([\d,]+) \((\d\.\d+) ± (\d\.\d+), mean "
        r"± sample standard deviation over the (\w+)\) and rises after it; the runs end at train "
        r"(\d\.\d+) ± (\d\.\d+), validation (\d\.\d+) ± (\d\.\d+) and test (\d\.\d+) ± "
        r"(\d\.\d+): a gap of (\d\.\d+) nats between training and validation after ([\d,]+) "
        r"steps, at least (\d\.\d+) in every run, where the 5,000 steps on `names.txt` leave "
        r"(\d\.\d+) \(mean over three seeds\)\.",
        lambda: (
            census_best_step(),
            *census_spread("best_val"),
            len(census_seeds()["runs"]),
            *census_spread("train"),
            *census_spread("val"),
            *census_spread("test"),
            census_spread("val")[0] - census_spread("train")[0],
            census_gpt()["train_config"]["steps"],
            math.floor(
                100 * min(r["final"]["val"] - r["final"]["train"] for r in census_seeds()["runs"])
            )
            / 100,
            ladder_train_val_gap("gpt"),
        ),
    ),
    # 3.1 to 3.3: the MLP, the optimizers and the WaveNet over seeds
    (
        "ch03/cnn.md",
        r"on the 2-core Intel Xeon of section 3\.5 \(one thread, one run at a time, (\d+) to (\d+) "
        r"seconds a run\)",
        lambda: (
            min(
                r["wall_s"]
                for m in ("mlp", "wavenet")
                for r in ex("cnn-runs-seeds.json")["runs"][m]["runs"]
            ),
            max(
                r["wall_s"]
                for m in ("mlp", "wavenet")
                for r in ex("cnn-runs-seeds.json")["runs"][m]["runs"]
            ),
        ),
    ),
    (
        "ch03/cnn.md",
        r"Over the (\w+) seeds the WaveNet ends at validation (\d\.\d+) ± (\d\.\d+) and test "
        r"(\d\.\d+) ± (\d\.\d+) \(mean ± sample standard deviation\), the MLP at (\d\.\d+) ± "
        r"(\d\.\d+) and (\d\.\d+) ± (\d\.\d+): the WaveNet's lead is (\d\.\d+) nats on "
        r"validation and (\d\.\d+) on test, (\d\.\d) and (\d\.\d) times the larger standard "
        r"deviation, and every WaveNet run ends below every MLP run on both splits\.",
        lambda: (
            len(ex("cnn-runs-seeds.json")["runs"]["wavenet"]["seeds"]),
            *cnn_seeds("wavenet", "val"),
            *cnn_seeds("wavenet", "test"),
            *cnn_seeds("mlp", "val"),
            *cnn_seeds("mlp", "test"),
            cnn_lead("val")[0],
            cnn_lead("test")[0],
            cnn_lead("val")[1],
            cnn_lead("test")[1],
        ),
    ),
    (
        "ch03/cnn.md",
        r"The gaps between train and validation, means over the seeds, are (\d\.\d+) for the "
        r"WaveNet and (\d\.\d+) for the MLP",
        lambda: tuple(
            cnn_seeds(m, "val")[0] - cnn_seeds(m, "train")[0] for m in ("wavenet", "mlp")
        ),
    ),
    (
        "ch03/optimization.md",
        r"on the 2-core Intel Xeon of section 3\.5, where a run takes (\w+) to (\w+) seconds",
        lambda: (
            min(t for r in optimizer_seeds().values() for t in r["seconds"]),
            max(t for r in optimizer_seeds().values() for t in r["seconds"]),
        ),
    ),
    (
        "ch03/optimization.md",
        r"Over the (\w+) seeds the three constant rates end at (\d\.\d+) ± (\d\.\d+) \(SGD\), "
        r"(\d\.\d+) ± (\d\.\d+) \(momentum\) and (\d\.\d+) ± (\d\.\d+) \(AdamW\): their means "
        r"lie within (\d\.\d+) of each other, less than the smallest of the three standard "
        r"deviations",
        lambda: (
            len(ex("mlp-optimizers-seeds.json")["seeds"]),
            *(x for r in constant_seeds().values() for x in (r["mean"], r["sd"])),
            max(r["mean"] for r in constant_seeds().values())
            - min(r["mean"] for r in constant_seeds().values())
            if max(r["mean"] for r in constant_seeds().values())
            - min(r["mean"] for r in constant_seeds().values())
            < min(r["sd"] for r in constant_seeds().values())
            else math.nan,
        ),
    ),
    (
        "ch03/optimization.md",
        r"\(momentum in (\w+) seeds of (\w+)\)\. That is a tie, and seed 0's \"within 0\.02\" is one "
        r"draw of it: in seed (\d) the three end (\d\.\d+) apart",
        lambda: (
            sum(
                min(constant_seeds(), key=lambda n: constant_seeds()[n]["val"][i]).startswith(
                    "SGD + momentum"
                )
                for i in range(len(seed_spreads()))
            ),
            len(seed_spreads()),
            ex("mlp-optimizers-seeds.json")["seeds"][
                max(range(len(seed_spreads())), key=seed_spreads().__getitem__)
            ],
            max(seed_spreads()),
        ),
    ),
    (
        "ch03/optimization.md",
        r"The schedule is not a tie: (\d\.\d+) ± (\d\.\d+), (\d\.\d+) below the best constant-rate "
        r"mean, (\d\.\d) times the largest standard deviation, and every one of its (\w+) runs "
        r"ends below every constant-rate run",
        lambda: (
            (sched := optimizer_seeds()["AdamW, lr 0.01, warmup 100 + cosine"])["mean"],
            sched["sd"],
            min(r["mean"] for r in constant_seeds().values()) - sched["mean"],
            (min(r["mean"] for r in constant_seeds().values()) - sched["mean"])
            / max(r["sd"] for r in optimizer_seeds().values()),
            len(sched["val"])
            if max(sched["val"]) < min(v for r in constant_seeds().values() for v in r["val"])
            else math.nan,
        ),
    ),
    (
        "numbers.md",
        r"the three constant rates' means lie within (\d\.\d+) of each other, less than the spread "
        r"between seeds, and the schedule ends at (\d\.\d+) ± (\d\.\d+), below every "
        r"constant-rate run",
        lambda: (
            max(r["mean"] for r in constant_seeds().values())
            - min(r["mean"] for r in constant_seeds().values()),
            optimizer_seeds()["AdamW, lr 0.01, warmup 100 + cosine"]["mean"],
            optimizer_seeds()["AdamW, lr 0.01, warmup 100 + cosine"]["sd"],
        ),
    ),
    (
        "ch03/ffn.md",
        r"Over (\w+) seeds each the SGD run ends at validation (\d\.\d+) ± (\d\.\d+) and the AdamW "
        r"run at (\d\.\d+) ± (\d\.\d+) \(mean ± sample standard deviation\): SGD's mean is "
        r"(\d\.\d+) lower, (\d\.\d) times the larger standard deviation, and the two ranges overlap",
        lambda: (
            len(ex("ffn-loss-seeds.json")["runs"]),
            ex("ffn-loss-seeds.json")["summary"]["val"]["mean"],
            ex("ffn-loss-seeds.json")["summary"]["val"]["sd"],
            *cnn_seeds("mlp", "val"),
            cnn_seeds("mlp", "val")[0] - ex("ffn-loss-seeds.json")["summary"]["val"]["mean"],
            (cnn_seeds("mlp", "val")[0] - ex("ffn-loss-seeds.json")["summary"]["val"]["mean"])
            / max(cnn_seeds("mlp", "val")[1], ex("ffn-loss-seeds.json")["summary"]["val"]["sd"]),
        ),
    ),
    # 3.5: the attention maps and the MLP probe of the ladder's seed-42 GPT
    (
        "ch03/gpt.md",
        r"puts its largest weight on the previous character at every position of the name, "
        r"and (\d\.\d+) of its weight on average",
        lambda: max(max(row) for row in heads("previous")),
    ),
    (
        "ch03/gpt.md",
        r"One, layer 3 head 3, almost never reads it \((\d\.\d+)\)",
        lambda: (
            heads("first")[3][3]
            if heads("first")[3][3] == min(sum(heads("first"), []))
            else math.nan
        ),
    ),
    (
        "ch03/gpt.md",
        r"for seed 2 it is layer (\d) head (\d) \((\d\.\d+)\); for seed 1 layer (\d) head (\d) "
        r"\((\d\.\d+)\), with layer 0 head (\d) close behind \((\d\.\d+)\)\. That some head of "
        r"layer 0 does it, above 0\.5, holds in all (\w+) models",
        lambda: (
            *(attention_model(2)["top_previous"][k] for k in ("layer", "head", "weight")),
            *(attention_model(1)["top_previous"][k] for k in ("layer", "head", "weight")),
            max(range(4), key=attention_model(1)["heads"]["previous"][0].__getitem__),
            max(attention_model(1)["heads"]["previous"][0]),
            len(ex("gpt-attention.json")["seeds"]["models"])
            if all(
                max(m["heads"]["previous"][0]) > 0.5
                for m in ex("gpt-attention.json")["seeds"]["models"]
            )
            else math.nan,
        ),
    ),
    (
        "ch03/gpt.md",
        r"in the other two the least weight any head puts there is (\d\.\d+) and (\d\.\d+)\.",
        lambda: tuple(
            min(min(row) for row in attention_model(seed)["heads"]["first"]) for seed in (1, 2)
        ),
    ),
    (
        "ch03/gpt.md",
        r"In block 0 of the ladder's GPT the memory reading holds for (\d+)% of the cells, (\w+) the "
        r"shuffle's (\d+)%",
        lambda: (
            100 * ffn_layer(0)["agreement"],
            ffn_layer(0)["agreement"] / ffn_layer(0)["shuffled"],
            100 * ffn_layer(0)["shuffled"],
        ),
    ),
    (
        "ch03/gpt.md",
        r"(\d+)% against (\d+)% in block 1, (\d+)% against (\d+)% in block 2, and (\d+)% against "
        r"(\d+)% in block 3, where (\w+) the shuffle is (\d+) cells of (\d+) against (\d+),",
        lambda: (
            *(100 * ffn_layer(i)[k] for i in (1, 2, 3) for k in ("agreement", "shuffled")),
            ffn_layer(3)["agreement"] / ffn_layer(3)["shuffled"],
            ffn_layer(3)["agreement"] * ex("gpt-ffn-memory.json")["cells_per_layer"],
            ex("gpt-ffn-memory.json")["cells_per_layer"],
            ffn_layer(3)["shuffled"] * ex("gpt-ffn-memory.json")["cells_per_layer"],
        ),
    ),
    (
        "ch03/gpt.md",
        r"0\.(\d\d) in block 0 against 0\.(\d\d) for shuffled values, and 0\.(\d\d) to 0\.(\d\d) in "
        r"blocks 1 to 3 against 0\.(\d\d) to 0\.(\d\d)\]",
        lambda: (
            100 * ffn_seeds(0)["agreement"]["mean"],
            100 * ffn_seeds(0)["shuffled"]["mean"],
            100 * min(ffn_seeds(i)["agreement"]["mean"] for i in (1, 2, 3)),
            100 * max(ffn_seeds(i)["agreement"]["mean"] for i in (1, 2, 3)),
            100 * min(ffn_seeds(i)["shuffled"]["mean"] for i in (1, 2, 3)),
            100 * max(ffn_seeds(i)["shuffled"]["mean"] for i in (1, 2, 3)),
        ),
    ),
    (
        "ch03/gpt.md",
        r"Block 0's reading holds in all (\w+): (\d+)% ± (\d+)% of the cells against (\d+)% ± (\d+)% "
        r"for the shuffle \(mean ± sample standard deviation over the three\), and every model's "
        r"own share is above every model's shuffle\. In blocks 1 to 3 it does not: their own "
        r"shares range from (\d+)% to (\d+)% and their shuffles from (\d+)% to (\d+)%, and block 3's "
        r"factor of two is seed 42's alone \(seed 1: (\d\.\d)% against (\d\.\d)%\)",
        lambda: (
            (
                len(ex("gpt-ffn-memory.json")["seeds"]["models"]),
                100 * ffn_seeds(0)["agreement"]["mean"],
                100 * ffn_seeds(0)["agreement"]["sd"],
                100 * ffn_seeds(0)["shuffled"]["mean"],
                100 * ffn_seeds(0)["shuffled"]["sd"],
                100 * min(ffn_seeds(i)["agreement"]["min"] for i in (1, 2, 3)),
                100 * max(ffn_seeds(i)["agreement"]["max"] for i in (1, 2, 3)),
                100 * min(ffn_seeds(i)["shuffled"]["min"] for i in (1, 2, 3)),
                100 * max(ffn_seeds(i)["shuffled"]["max"] for i in (1, 2, 3)),
                *(100 * ffn_model(1)["layers"][3][k] for k in ("agreement", "shuffled")),
            )
            if ffn_seeds(0)["agreement"]["min"] > ffn_seeds(0)["shuffled"]["max"]
            and ffn_model(1)["layers"][3]["agreement"] < 2 * ffn_model(1)["layers"][3]["shuffled"]
            else (math.nan,) * 11
        ),
    ),
    (
        "ch03/gpt.md",
        r"their triggers were followed by `g` (\w+) times of (\w+)\.",
        lambda: next(
            (c["next"][0][1], sum(k for _, k in c["next"]))
            for c in ex("gpt-ffn-memory.json")["cells"]
            if c["layer"] == 3 and c["unit"] == 30 and c["next"][0][0] == "g"
        ),
    ),
    (
        "ch03/index.md",
        r"RNN (\d\.\d+) ± (\d\.\d+) / (\d\.\d+) ± (\d\.\d+) \((\d) seeds\); GRU (\d\.\d+) ± "
        r"(\d\.\d+) / (\d\.\d+) ± (\d\.\d+) \((\d) seeds\) \|",
        lambda: tuple(
            x
            for key in ("rnn", "gru")
            for x in (
                *ladder_spread(key, "val"),
                *ladder_spread(key, "test"),
                len(ex("ladder-names-seeds.json")["runs"][key]["seeds"]),
            )
        ),
    ),
    *(
        (
            "numbers.md",
            rf"^\| {lit(label)}, emb 64, state 64, ([\d,]+) steps, (\d) seeds \| makemore "
            r"`names\.txt` \| (\d\.\d+) ± (\d\.\d+) \| (\d\.\d+) ± (\d\.\d+) \| (\d\.\d+) ± "
            r"(\d\.\d+) \|",
            lambda key=key: (
                ex("ladder-names.json")["runs"][key]["train_config"]["steps"],
                *ladder_row(key)[1:2],
                *ladder_row(key)[3:],
            ),
        )
        for label, key in [("RNN (tanh)", "rnn"), ("GRU", "gru")]
    ),
    (
        "projects.md",
        r"At 0\.5 to 1\.0 the gap is (\d+\.\d) to (\d+\.\d) points, (\d\.\d) to (\d\.\d) times its "
        r"sampling standard error \(the error of a difference of two shares of ([\d,]+) draws, "
        r"about (\d) points\); at 1\.2 to 2\.0 it is (\d\.\d) to (\d\.\d) points, (\d\.\d) to "
        r"(\d\.\d) standard errors",
        lambda: (
            (
                min(g for g, _, _ in innovation_gaps()[:3]),
                max(g for g, _, _ in innovation_gaps()[:3]),
                min(k for _, k, _ in innovation_gaps()[:3]),
                max(k for _, k, _ in innovation_gaps()[:3]),
                ex("names-innovation-gpt.json")["num"],
                statistics.fmean(se for _, _, se in innovation_gaps()[:3]),
                min(g for g, _, _ in innovation_gaps()[3:]),
                max(g for g, _, _ in innovation_gaps()[3:]),
                min(k for _, k, _ in innovation_gaps()[3:]),
                max(k for _, k, _ in innovation_gaps()[3:]),
            )
            if [r["temperature"] for r in ex("names-innovation-gpt.json")["rows"]]
            == [0.5, 0.8, 1.0, 1.2, 1.5, 2.0]
            and all(g > 0 for g, _, _ in innovation_gaps())
            else (math.nan,) * 10
        ),
    ),
    # the projects page: the draws of the names-innovation files
    (
        "projects.md",
        r"for a GRU of section 3\.4 trained for ([\d,]+) steps and for a GPT of section 3\.5's "
        r"size trained for ([\d,]+) steps",
        lambda: tuple(ex(f"names-innovation-{m}.json")["step"] for m in ("gru", "gpt")),
    ),
    (
        "projects.md",
        r"With ([\d,]+) draws per temperature \(`--seed (\d+)`\)",
        lambda: tuple(ex("names-innovation-gpt.json")[k] for k in ("num", "seed")),
    ),
    (
        "projects.md",
        r"at 0\.5 the GPT's ([\d,]+) names contain only (\d+) distinct ones",
        lambda: (
            ex("names-innovation-gpt.json")["num"],
            ex("names-innovation-gpt.json")["num"]
            * ex("names-innovation-gpt.json")["rows"][0]["distinct"],
        ),
    ),
    (
        "projects.md",
        r"highest at the coldest setting, around (\d+)%",
        lambda: (
            100
            * max(
                r["new_but_real"]
                for m in ("gru", "gpt")
                for r in ex(f"names-innovation-{m}.json")["rows"]
            )
        ),
    ),
    (
        "projects.md",
        r"With `seed=0` the same network stops at a loss of (\d\.\d+)",
        lambda: out("projects", r"^\[([\d.]+), [\d.]+, [\d.]+\]$"),
    ),
    (
        "ch08/evaluation.md",
        r"A model of ([\d,]+) parameters trained on one task",
        lambda: ex("posttrain-demo.json")["config"]["parameters"],
    ),
    (
        "ch08/evaluation.md",
        r"The demo's SFT pass@1 is (\d\.\d+) on (\d+) problems",
        lambda: (demo("sft"), demo("sft", "n")),
    ),
    # the census names: the split every chapter-3 run uses
    (
        "numbers.md",
        r"\(([\d,]+) names; ([\d,]+) train, (\d+) validation\)",
        lambda: (sum(census_split()), *census_split()[:2]),
    ),
    ("ch03/index.md", r"on the ([\d,]+) US-census first names", lambda: sum(census_split())),
    (
        "ch03/ffn.md",
        r"([\d,]+) parameters fitted to ([\d,]+) examples start to memorise",
        lambda: (cnn("mlp")["num_params"], out("ch03/ffn", r"^\d+ \((\d+), 3\)")),
    ),
    (
        "projects.md",
        r"held-out list of ([\d,]+) names",
        lambda: sum(census_split()[1:]),
    ),
    # 4.2's eager costs: the per-op overhead of both machines, the large ops' shapes
    (
        "ch04/primitives.md",
        r"rows that record a graph stay between (\d\.\d) and (\d\.\d) times PyTorch's",
        lambda: grad_overhead_range(),
    ),
    (
        "ch04/primitives.md",
        r"its activations are \(16, 32, 256\), ([\d,]+)\s+entries",
        lambda: ex("elementwise-intel.json")["ns_per_entry"]["tanh"]["entries"],
    ),
    # 4.2's third plain-torch run (the code since b21f011, in the same rounds)
    (
        "ch04/primitives.md",
        r"gain the most \(before/sitp (\d\.\d\d) for the RNN and (\d\.\d\d) for the GRU\)",
        lambda: tuple(plain_third(m, "sitp_before/sitp") for m in ("rnn", "gru")),
    ),
    (
        "ch04/primitives.md",
        r"the GPT files gain (\d\.\d\d) and (\d\.\d\d)\. Against PyTorch the RNN runs at "
        r"(\d\.\d\d) of its speed and\s+the GRU at (\d\.\d\d), the spelled-out GPT at (\d\.\d\d) "
        r"and nanoGPT's file at (\d\.\d\d)",
        lambda: (
            *(plain_third(m, "sitp_before/sitp") for m in ("gpt", "nanogpt")),
            *(1 / plain_third(m, "sitp/torch") for m in ("rnn", "gru", "gpt", "nanogpt")),
        ),
    ),
    (
        "ch04/primitives.md",
        r"At e0759b0 the RNN's iteration took (\d\.\d\d) times as long as now and the GRU's "
        r"(\d\.\d\d) times;\s+the MLP's took (\d\.\d\d) times as long",
        lambda: tuple(plain_fourth(m, "sitp_before/sitp") for m in ("rnn", "gru", "mlp")),
    ),
    (
        "ch04/primitives.md",
        r"and the GPT files'\s+(\d\.\d\d) and (\d\.\d\d) times\. Against PyTorch the RNN now "
        r"runs at (\d\.\d\d) of its speed and the GRU at (\d\.\d\d) \((\d\.\d\d) and\s+"
        r"(\d\.\d\d) in the third record\); the bigram at (\d\.\d\d) and the bag of words at "
        r"(\d\.\d\d), so the median of the five makemore models is (\d\.\d\d)\.",
        lambda: (
            *(plain_fourth(m, "sitp_before/sitp") for m in ("gpt", "nanogpt")),
            *(1 / plain_fourth(m, "sitp/torch") for m in ("rnn", "gru")),
            *(1 / plain_third(m, "sitp/torch") for m in ("rnn", "gru")),
            *(1 / plain_fourth(m, "sitp/torch") for m in ("bigram", "bow")),
            statistics.median(
                1 / plain_fourth(m, "sitp/torch") for m in ("bigram", "mlp", "bow", "rnn", "gru")
            ),
        ),
    ),
    (
        "ch04/primitives.md",
        r"The recurrent cells stay at (\d\.\d\d) and (\d\.\d\d) of PyTorch's speed, the "
        r"spelled-out GPT is at (\d\.\d\d), and the five makemore models' median is (\d\.\d\d)\.",
        lambda: (
            *(1 / plain_2t(m) for m in ("rnn", "gru", "gpt")),
            statistics.median(1 / plain_2t(m) for m in ("bigram", "mlp", "bow", "rnn", "gru")),
        ),
    ),
    # the home page and the numbers page
    ("index.md", r"\\log 27 \\approx (\d\.\d+)", lambda: math.log(27)),
    ("numbers.md", r"\$\\log 27 \\approx (\d\.\d+)\$", lambda: math.log(27)),
]


def collectives_fit_error(who: str, size: int) -> float:
    """7.1: the relative error, in percent, of the one alpha-beta line through every size of
    all_reduce's recorded times (``who`` "raw" for mpi4py, "sitp"), at ``size`` bytes."""
    from sitp.examples import distributed_figures as figs  # late: the page's own fit

    rows = ex("collectives-bench.json")["rows"]
    sizes = [r["bytes"] for r in rows]
    times = [r[f"ar_{who}"] for r in rows]
    alpha, beta, _ = figs.fit_regimes(sizes, times)["all"]
    t = times[sizes.index(size)]
    return 100 * ((alpha + beta * size) / t - 1)


def rerun_changes(keep) -> list[float]:
    """7.1 against 7.2: how far, in percent, the ring benchmark's medians of MPI's Allreduce
    and sitp's all_reduce land from 7.1's at each size ``keep(bytes)`` accepts."""
    ring = {r["bytes"]: r for r in ex("ring-bench.json")["runs"][0]["rows"]}
    return [
        100 * abs(ring[r["bytes"]][k] / r[f"ar_{who}"] - 1)
        for r in ex("collectives-bench.json")["rows"]
        if keep(r["bytes"])
        for k, who in (("mpi", "raw"), ("sitp", "sitp"))
    ]


def budget_loads() -> list[float]:
    """5.3's budget run: the load averages at its start, after each model and at its end."""
    run = ex("bpb-budget.json")
    return [run["load_average"]["start"][0], run["load_average"]["end"][0]] + [
        r["load_average"] for r in run["rows"]
    ]


def gelu_bytes() -> tuple[float, float]:
    return out(COMPILED, r"^gelu\(xW\+b\) +\d+ -> .*\) +([\d.]+) -> +([\d.]+) ")


def compile_seconds() -> list[float]:
    """6.4: sitp's compile time of each row (the GPT step included), s."""
    return [row["compile_s"] for row in compile_run()["rows"].values()]


def ddp_speedups() -> list[float]:
    """7.3: each way's speed-up over one thread, the median of the rounds' ratios."""
    return [r["speedup"]["median"] for r in ex("ddp-bench.json")["results"][1:]]


def ddp_best_ranks(link: str) -> float:
    """7.3's cost model: the number of ranks with the highest predicted speed-up on ``link``."""
    header = out_text("ch07/ddp", r"^link .* (p=2 .*)$")
    ps = [int(p) for p in re.findall(r"p=(\d+)", header)]
    speedups = out_text("ch07/ddp", rf"^{re.escape(link)} +[\d.]+ ms +[\d.]+ +(.*)$").split()
    return float(ps[max(range(len(ps)), key=lambda i: float(speedups[i]))])


def rl_running_mean() -> list[float]:
    """8.3's demo: the mean reward over steps k to k + 9, for each k."""
    r = ex("posttrain-demo.json")["rl_reward"]
    return [sum(r[k : k + 10]) / 10 for k in range(len(r) - 9)]


def rl_samples() -> int:
    cfg = ex("posttrain-demo.json")["config"]
    return cfg["rl_steps"] * cfg["rl_prompts_per_step"] * cfg["rl_group_size"]


def passk_gaps() -> list[float]:
    """8.4: how far the plug-in pass@5 falls below the unbiased one, for each p printed."""
    rows = re.findall(
        r"^ +[\d.]+ +[\d.]+ +([\d.]+) +([\d.]+)$", printed("ch08/evaluation"), re.MULTILINE
    )
    return [float(u) - float(p) for u, p in rows]


def out_text(name: str, pattern: str) -> str:
    """The text of group 1 of ``pattern``'s one match in page ``name``'s recorded output."""
    hits = re.findall(pattern, printed(name), re.MULTILINE)
    assert len(hits) == 1, (name, pattern, hits)
    return hits[0]


# --- 8.2's calculator tool: tool-runs.json (scripts/tool_runs.py) -----------------------


def tool_runs(task: str, arm: str) -> list[float]:
    """8.2's tool runs: held-out pass@1 of ``arm`` ("alone", "tool", "tool-off") on
    ``task`` for each seed."""
    return ex("tool-runs.json")["summary"][task][arm]["values"]


def tool_run(task: str, seed: int) -> dict:
    """8.2's tool runs: the record of ``task`` and ``seed``."""
    return next(r for r in ex("tool-runs.json")["runs"] if r["task"] == task and r["seed"] == seed)


def tool_off_either_task() -> tuple[float, float]:
    """8.2: the tool-off arm's mean and sd, the same on both tasks at 3 decimals (else nan)."""
    pairs = {tuple(round(x, 3) for x in mean_sd(tool_runs(t, "tool-off"))) for t in
             ("multiplication2", "addition3")}  # fmt: skip
    return pairs.pop() if len(pairs) == 1 else (math.nan, math.nan)


FIGURES += [
    (
        "ch08/sft.md",
        r"fine-tuned as above for (\d+) steps, the\s+same (\d+)-layer model gets almost none",
        lambda: (
            ex("tool-runs.json")["config"]["sft_steps"],
            ex("tool-runs.json")["config"]["n_layer"],
        ),
    ),
    (
        "ch08/sft.md",
        r"`<\|result\|>` and `<\|/result\|>`, ids (\d+) to (\d+) over\s+bytes\. The extension is "
        r"opt-in: a tokenizer made without `tools` keeps its (\d+) tokens",
        lambda: (
            tool_tokenizer().calc_start,
            tool_tokenizer().result_end,
            plain_chat_tokenizer().vocab_size,
        ),
    ),
    (
        "ch08/sft.md",
        r"takes the demo's model \((\d+) layers, width (\d+), pre-trained (\d+)\s+steps on the "
        r"task's plain lines\), copies it, and fine-tunes [\s\S]*? tool conversations, (\d+) steps each",
        lambda: tuple(
            ex("tool-runs.json")["config"][k]
            for k in ("n_layer", "n_embd", "pretrain_steps", "sft_steps")
        ),
    ),
    (
        "ch08/sft.md",
        r"(\w+) seeds each \(`python scripts/tool_runs.py --seeds (\d) (\d) (\d) (\d) (\d)\s+--json "
        r"src/sitp/examples/tool-runs.json`, (\d+) minutes on one core\)",
        lambda: (
            len(ex("tool-runs.json")["config"]["seeds"]),
            *ex("tool-runs.json")["config"]["seeds"],
            ex("tool-runs.json")["minutes"],
        ),
    ),
    (
        "ch08/sft.md",
        r"Alone, the model stays near zero on both tasks: (\d\.\d+) ± (\d\.\d+) on the products "
        r"and (\d\.\d+) ±\s+(\d\.\d+) on the sums \(mean ± sd over the (\w+) seeds\)",
        lambda: (
            *mean_sd(tool_runs("multiplication2", "alone")),
            *mean_sd(tool_runs("addition3", "alone")),
            len(tool_runs("addition3", "alone")),
        ),
    ),
    (
        "ch08/sft.md",
        r"With the tool the same weights reach\s+(\d\.\d+) ± (\d\.\d+) and (\d\.\d+) ± (\d\.\d+)\.",
        lambda: (
            *mean_sd(tool_runs("multiplication2", "tool")),
            *mean_sd(tool_runs("addition3", "tool")),
        ),
    ),
    (
        "ch08/sft.md",
        r"the worst seed with\s+the tool, (\d\.\d+), is far above the best seed without it, "
        r"(\d\.\d+)\.",
        lambda: (
            min(tool_runs("multiplication2", "tool") + tool_runs("addition3", "tool")),
            max(tool_runs("multiplication2", "alone") + tool_runs("addition3", "alone")),
        ),
    ),
    (
        "ch08/sft.md",
        r"\(seed (\d+)'s products make the right call on (\d+) of the (\d+) problems, seed (\d+)'s "
        r"sums on (\d+)\)",
        lambda: (
            1,
            tool_run("multiplication2", 1)["arms"][1]["right_call"],
            tool_run("multiplication2", 1)["arms"][1]["n"],
            3,
            tool_run("addition3", 3)["arms"][1]["right_call"],
        ),
    ),
    (
        "ch08/sft.md",
        r"Switched off, the tool-trained model scores (\d\.\d+) ± (\d\.\d+) on either task\.",
        tool_off_either_task,
    ),
]


# --- the GPU figures: one run of scripts/gpu_check.sh on an NVIDIA H200 ------------------
#
# Its records stay in docs/assets (gpu-h200-*.json, gpu-h200-run.txt, ch06's
# compile-cuda-h200.json): the pages quote them and no fence reads them, so the package
# does not ship them (test_figure_data_in_the_docs_is_the_packaged_data leaves them out).

GEMM_RECORD = "ch04/gpu-h200-gemm.json"
ATTENTION_RECORD = "ch04/gpu-h200-attention.json"
RUN_RECORD = "ch04/gpu-h200-run.txt"
COMPILE_CUDA_RECORD = "ch06/compile-cuda-h200.json"
TRAIN_CONFIGS = ("anchor", "char")  # bench_gpu_train.py's configurations, in the tables' order
TRAIN_ARMS = ("sitp GPT (fused layers)", "nanoGPT file on sitp", "nanoGPT file on PyTorch")
LARGE_TILES = ("blocktile2d", "transposed", "warptile", "swizzled")  # 128 x 128 tiles of C


def record(name: str):
    """A GPU record in docs/assets ("ch04/gpu-h200-gemm.json")."""
    return json.loads((DOCS / "assets" / name).read_text(encoding="utf-8"))


def gpu_records() -> dict[str, dict]:
    """docs/assets' records of runs on a real GPU: every JSON whose "device" names one and
    that is not marked as simulated, by its path under docs/assets."""
    found = {}
    for path in sorted(DOCS.glob("assets/**/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "device" in data and not data.get("simulated", False):
            assert "simulator" not in data["device"], path
            found[path.relative_to(DOCS / "assets").as_posix()] = data
    return found


def recorded_gpus() -> set[str]:
    """The GPU models the records name ("H200")."""
    return {re.search(r"NVIDIA (\S+)", d["device"]).group(1) for d in gpu_records().values()}


def gflops(kernel: str, n: int = 4096) -> float:
    """The H200's GFLOP/s of a rung of 4.4's ladder, or of cuBLAS, at square size ``n``."""
    data = record(GEMM_RECORD)
    return data["cublas"][str(n)] if kernel == "cuBLAS" else data["gflops"][kernel][str(n)]


def share(kernel: str, n: int = 4096) -> float:
    """A rung's GFLOP/s as a percentage of cuBLAS's at the same size."""
    return 100 * gflops(kernel, n) / gflops("cuBLAS", n)


def rungs() -> list[str]:
    return list(record(GEMM_RECORD)["gflops"])


def ladder_steps() -> dict[str, float]:
    """Each rung's GFLOP/s over the rung before it (rungs 2 to 8), N = 4096."""
    ladder = [k for k in rungs() if k != "swizzled"]
    return {k: gflops(k) / gflops(prev) for prev, k in zip(ladder, ladder[1:])}


def if_true(condition: bool, *values):
    """``values``, or nan (which no figure matches) when the prose's claim is false."""
    out_ = values if condition else (math.nan,) * len(values)
    return out_ if len(out_) > 1 else out_[0]


def attention(T: int, key: str) -> float:
    """4.6's record at length ``T``: seconds (``naive``, ``flash_bwd``, ...) or MiB."""
    return record(ATTENTION_RECORD)["results"][str(T)][key]


def lengths() -> list[int]:
    return [int(T) for T in record(ATTENTION_RECORD)["results"]]


def o_mib(T: int) -> float:
    """The output O of 4.6's benchmark, (B, H, T, D) float32, in MiB."""
    data = record(ATTENTION_RECORD)
    return data["B"] * data["H"] * T * data["D"] * 4 / 2**20


def launch_counts() -> tuple[float, float, float, float]:
    """docs/assets/ch04/gpu-launches.txt: a GPT step's launches before the backend's
    changes, the zip_k + assign_k + map_k among them, the launches after, adam_k's."""
    text = (DOCS / "assets" / "ch04" / "gpu-launches.txt").read_text(encoding="utf-8")
    before, after = text.split("# after:")
    total = r"launches in one training step of sitp's GPT \(.*\): (\d+)$"

    def kernel(part, name):
        return grab(part, rf"^  {name} +(\d+)$", "gpu-launches.txt")

    composed = sum(kernel(before, k) for k in ("zip_k", "assign_k", "map_k"))
    w = "gpu-launches.txt"
    return grab(before, total, w), composed, grab(after, total, w), kernel(after, "adam_k")


def compile_cuda_figures() -> tuple:
    """6.3's two compiled-CUDA cases as the pages quote them: the pointwise chain's size,
    eager and compiled ms, ratio and kernels, then the MLP step's sizes and the same."""
    out_ = []
    for case in ("pointwise", "step"):
        r = compile_cuda(case)
        out_ += [*map(float, re.findall(r"\d+", r["size"])), r["eager_ms"], r["compiled_ms"]]
        out_ += [compile_cuda_ratio(case), r["kernels"]]
    return tuple(out_)


def train_arm(config: str, arm: int) -> dict:
    """bench_gpu_train.py's record of ``config``: arm 0 sitp's GPT, 1 nanoGPT's file on
    sitp, 2 the file on PyTorch."""
    result = record(f"ch04/gpu-h200-train-{config}.json")["results"][arm]
    assert result["arm"] == TRAIN_ARMS[arm], result["arm"]
    return result


def file_ratio(config: str) -> float:
    """nanoGPT's file on sitp over the same file on PyTorch, ms per step."""
    return train_arm(config, 1)["ms"] / train_arm(config, 2)["ms"]


def compile_cuda(case: str) -> dict:
    return next(r for r in record(COMPILE_CUDA_RECORD)["results"] if r["case"] == case)


def compile_cuda_ratio(case: str) -> float:
    return compile_cuda(case)["eager_ms"] / compile_cuda(case)["compiled_ms"]


def gpu_train_rows() -> list[str]:
    """4.3's table of the GPU training step (copied on the numbers page), row by row."""
    rows = []
    for config in TRAIN_CONFIGS:
        c = record(f"ch04/gpu-h200-train-{config}.json")["config"]
        head = (
            f"| {c['n_layer']} layers, {c['n_head']} heads, width {c['n_embd']}, "
            f"block {c['block']}, batch {c['batch']} |"
        )
        cells = []
        for arm in range(3):
            r = train_arm(config, arm)
            digits = 2 if r["ms"] < 10 else 1 if r["ms"] < 1000 else 0
            cells.append(
                "{:,.{d}f} ({:,.{d}f}–{:,.{d}f})".format(
                    r["ms"], r["ms_min"], r["ms_max"], d=digits
                )
            )
        rows.append(f"{head} {' | '.join(cells)} | {file_ratio(config):.0f} |")
    return rows


def gpu_step_rates() -> tuple[float, ...]:
    """4.3's fence: the GFLOP/s it prints for each configuration, sitp then PyTorch."""
    return tuple(
        float(x.replace(",", ""))
        for line in re.findall(r"GFLOP a step; (.*)$", printed("ch04/gpu"), re.MULTILINE)
        for x in re.findall(r"([\d,]+) GFLOP/s", line)
    )


def ladder_blocks(kernel: str) -> tuple[float, ...]:
    """4.4's fence: the blocks of ``kernel``'s grid at N = 1024, 2048 and 4096."""
    line = out_text("ch04/gemm-gpu", rf"^{kernel} +(N=.*)$")
    return tuple(float(b.replace(",", "")) for b in re.findall(r"([\d,]+) blocks", line))


def gpu_section() -> str:
    """The numbers page's section on the GPU."""
    return page("numbers.md").split("## Kernels on the GPU", 1)[1].split("\n## ", 1)[0]


FIGURES += [
    # 4.4: the ladder on the H200 (its tables are checked in test_the_gpu_scoreboard_...)
    (
        "ch04/gemm-gpu.md",
        r"called through CuPy with TF32 off, which ran at ([\d,]+) GFLOP/s",
        lambda: gflops("cuBLAS"),
    ),
    (
        "ch04/gemm-gpu.md",
        r"Its\s+best rung, `doublebuffer`, reaches (\d+\.\d)% of cuBLAS",
        lambda: if_true(max(rungs(), key=gflops) == "doublebuffer", share("doublebuffer")),
    ),
    (
        "ch04/gemm-gpu.md",
        r"Rung 3, `shared`, is faster than rung 4 \(([\d,]+) GFLOP/s against ([\d,]+)\)",
        lambda: if_true(
            gflops("shared") > gflops("blocktile1d"), gflops("shared"), gflops("blocktile1d")
        ),
    ),
    (
        "ch04/gemm-gpu.md",
        r"At \$N = 1024\$ the order changes again: `shared` is the fastest rung \(([\d,]+) GFLOP/s\)",
        lambda: if_true(
            max(rungs(), key=lambda k: gflops(k, 1024)) == "shared"
            and all(gflops(k, 1024) < gflops("blocktile1d", 1024) for k in LARGE_TILES),
            gflops("shared", 1024),
        ),
    ),
    (
        "ch04/gemm-gpu.md",
        r"At \$N = 1024\$ the 128×128 tiles make (\d+) blocks, so at most (\d+) of the (\d+) SMs "
        r"have work, while rung 3's 32×32 tiles make ([\d,]+)\.",
        lambda: (
            ladder_blocks("blocktile2d")[0],
            ladder_blocks("blocktile2d")[0],
            grab(page("ch04/gemm-gpu.md"), r"^SMS = (\d+)", "ch04/gemm-gpu.md"),
            ladder_blocks("shared")[0],
        ),
    ),
    (
        "ch04/gemm-gpu.md",
        r"`doublebuffer` loses least \(([\d,]+) GFLOP/s\)",
        lambda: if_true(
            all(gflops("doublebuffer", 1024) > gflops(k, 1024) for k in LARGE_TILES),
            gflops("doublebuffer", 1024),
        ),
    ),
    (
        "ch04/gemm-gpu.md",
        r"From \$N = 2048\$ \((\d+) blocks\) the 2-D tiled rungs pass rung 3\.",
        lambda: if_true(
            all(
                gflops(k, n) > gflops("shared", n)
                for k in LARGE_TILES + ("doublebuffer",)
                for n in (2048, 4096)
            ),
            ladder_blocks("blocktile2d")[1],
        ),
    ),
    (
        "ch04/gemm-gpu.md",
        r"also runs slower at \$N = 1024\$: ([\d,]+) GFLOP/s, (\d+)% of its\s+rate at 4096",
        lambda: (gflops("cuBLAS", 1024), 100 * gflops("cuBLAS", 1024) / gflops("cuBLAS")),
    ),
    (
        "ch04/gemm-gpu.md",
        r"in\s+sitp's on the H200, (\d\.\d)× \(([\d,]+) GFLOP/s against (\d+) at \$N = 4096\$\)",
        lambda: (ladder_steps()["coalesced"], gflops("coalesced"), gflops("naive")),
    ),
    (
        "ch04/gemm-gpu.md",
        r"sitp's rung 3 gains (\d\.\d)× over its rung 2\s+\(([\d,]+) GFLOP/s at \$N = 4096\$\), "
        r"the largest step of its ladder",
        lambda: if_true(
            max(ladder_steps(), key=ladder_steps().get) == "shared",
            ladder_steps()["shared"],
            gflops("shared"),
        ),
    ),
    (
        "ch04/gemm-gpu.md",
        r"sitp's, on the H200, goes from\s+(\d+\.\d)% to (\d+\.\d)% to (\d+\.\d)%",
        lambda: (share("shared"), share("blocktile1d"), share("blocktile2d")),
    ),
    (
        "ch04/gemm-gpu.md",
        r"it gains nothing\s+on the H200: ([\d,]+) GFLOP/s at \$N = 4096\$, against rung 5's ([\d,]+)",
        lambda: if_true(
            gflops("transposed") <= gflops("blocktile2d"),
            gflops("transposed"),
            gflops("blocktile2d"),
        ),
    ),
    (
        "ch04/gemm-gpu.md",
        r"a step of\s+(\d\.\d)× over rung 6, to (\d+\.\d)%",
        lambda: (ladder_steps()["warptile"], share("warptile")),
    ),
    (
        "ch04/gemm-gpu.md",
        r"double buffering is\s+sitp's best rung on the H200, a Hopper GPU: ([\d,]+) GFLOP/s at "
        r"\$N = 4096\$, (\d\.\d) times rung\s+7 and (\d+\.\d)% of cuBLAS",
        lambda: if_true(
            max(rungs(), key=gflops) == "doublebuffer",
            gflops("doublebuffer"),
            ladder_steps()["doublebuffer"],
            share("doublebuffer"),
        ),
    ),
    # 4.5: the swizzle on the H200
    (
        "ch04/layouts.md",
        r"At \$N = 4096\$ it ran ([\d,]+) GFLOP/s against `transposed`'s ([\d,]+) and\s+rung 5's "
        r"([\d,]+), which does not transpose[\s\S]*?at\s+\$N = 2048\$, ([\d,]+) against ([\d,]+); at "
        r"\$N = 1024\$ it was the slower, ([\d,]+) against ([\d,]+)\.",
        lambda: (
            gflops("swizzled"),
            gflops("transposed"),
            gflops("blocktile2d"),
            gflops("swizzled", 2048),
            gflops("transposed", 2048),
            *if_true(
                gflops("swizzled", 1024) < gflops("transposed", 1024),
                gflops("swizzled", 1024),
                gflops("transposed", 1024),
            ),
        ),
    ),
    # 4.6: attention on the H200 (its table: test_the_gpu_attention_table_is_the_record)
    (
        "ch04/attention.md",
        r"The memory is the arithmetic above plus \$O\$, which is (\d+) MiB at \$T = 8192\$: "
        r"naive's\s+([\d,]+) MiB is ([\d,]+) for \$S\$ and \$P\$ and (\d+) for \$O\$, fused's "
        r"([\d,]+) is ([\d,]+) and (\d+), and\s+flash's (\d+) MiB is \$O\$ alone",
        lambda: (
            o_mib(8192),
            attention(8192, "naive_mib"),
            attention(8192, "naive_mib") - o_mib(8192),
            o_mib(8192),
            attention(8192, "fused_mib"),
            attention(8192, "fused_mib") - o_mib(8192),
            o_mib(8192),
            if_true(attention(8192, "flash_mib") == o_mib(8192), attention(8192, "flash_mib")),
        ),
    ),
    (
        "ch04/attention.md",
        r"Flash attention's forward beats naive at every length\s+measured, from (\d\.\d\d) of "
        r"its time at \$T = 512\$ to (\d\.\d\d) at 4096 \((\d\.\d\d) at 8192\)",
        lambda: if_true(
            all(attention(T, "flash") < attention(T, "naive") for T in lengths()),
            *(attention(T, "flash") / attention(T, "naive") for T in (512, 4096, 8192)),
        ),
    ),
    (
        "ch04/attention.md",
        r"it takes (\d\.\d\d) to (\d\.\d\d) times\s+naive's at every length",
        lambda: if_true(
            all(attention(T, "fused") > attention(T, "naive") for T in lengths()),
            *spread(attention(T, "fused") / attention(T, "naive") for T in lengths()),
        ),
    ),
    (
        "ch04/attention.md",
        r"spills registers, takes (\d\.\d) to (\d\.\d) times its forward",
        lambda: spread(attention(T, "flash_bwd") / attention(T, "flash") for T in lengths()),
    ),
    (
        "ch04/attention.md",
        r"Ours are (\d+\.\d) to (\d+\.\d) times\s+faster than the naive kernels of this section",
        lambda: spread(attention(T, "naive") / attention(T, "flash") for T in lengths()),
    ),
    (
        "ch04/attention.md",
        r"even at\s+\$T = 512\$, where flash runs in (\d\.\d\d) ms against naive's (\d\.\d\d)\.",
        lambda: (1e3 * attention(512, "flash"), 1e3 * attention(512, "naive")),
    ),
    # 4.3: the device's tests and a GPT's training step on it
    (
        "numbers.md",
        r"a 4-layer GPT's step from ([\d,]+) kernel launches to (\d+)\)",
        lambda: launch_counts()[::2],
    ),
    (
        "ch04/gpu.md",
        r"counts ([\d,]+) launches in one training step of the 4-layer GPT at e12ec37, "
        r"([\d,]+) of them\s+`zip_k`, `assign_k` and `map_k` \(most of those the optimizer's\), "
        r"and (\d+) with the\s+changes, (\d+) of them AdamW's one kernel",
        lambda: launch_counts(),
    ),
    (
        "ch04/gpu.md",
        r"the CUDA test files ran in\s+full with the simulator off, the tests marked `gpu` "
        r"among them: (\d+) passed and (\d+)\s+skipped",
        lambda: asset(RUN_RECORD, r"^(\d+) passed, (\d+) skipped"),
    ),
    (
        "ch04/gpu.md",
        r"PyTorch's CUDA build \((\d+)\.(\d+)\.(\d+), TF32 off",
        lambda: asset(RUN_RECORD, r"^torch (\d+)\.(\d+)\.(\d+)\+"),
    ),
    (
        "ch04/gpu.md",
        r"\((\d+) rounds of (\d+) steps for the first\s+configuration, (\d+) rounds of (\d+) for "
        r"the second\)",
        lambda: tuple(
            record(f"ch04/gpu-h200-train-{c}.json")[k]
            for c in TRAIN_CONFIGS
            for k in ("rounds", "reps")
        ),
    ),
    (
        "ch04/gpu.md",
        r"sitp's code is that of e12ec37 \((\d{4})-(\d\d)-(\d\d)\)",
        lambda: asset(RUN_RECORD, r"H200, (\d{4})-(\d\d)-(\d\d), sitp at e12ec37"),
    ),
    (
        "ch04/gpu.md",
        r"sitp's eager training on this GPU is (\d+) to (\d+) times slower than PyTorch's",
        lambda: tuple(file_ratio(c) for c in TRAIN_CONFIGS),
    ),
    (
        "ch04/gpu.md",
        r"eager step of the first configuration takes (\d+\.\d) ms on two threads of a 2-core "
        r"Intel\s+Xeon, against the H200's (\d+\.\d)\.",
        lambda: if_true(
            train_ms("gpt", "eager", "2", TRAIN_INTEL_2T) < train_arm("anchor", 0)["ms"],
            train_ms("gpt", "eager", "2", TRAIN_INTEL_2T),
            train_arm("anchor", 0)["ms"],
        ),
    ),
    (
        "ch04/gpu.md",
        r"not the tuned rungs that run up to ([\d,]+) GFLOP/s",
        lambda: max(gflops(k) for k in rungs()),
    ),
    (
        "ch04/gpu.md",
        r"\(dict\(n_layer=4, n_embd=128, block=64, batch=12\), (\d+\.\d), (\d\.\d\d)\)",
        lambda: (train_arm("anchor", 1)["ms"], train_arm("anchor", 2)["ms"]),
    ),
    (
        "ch04/gpu.md",
        r"\(dict\(n_layer=6, n_embd=384, block=256, batch=64\), (\d+\.\d), (\d+\.\d\d)\)",
        lambda: (train_arm("char", 1)["ms"], train_arm("char", 2)["ms"]),
    ),
    (
        "ch04/gpu.md",
        r"PyTorch's step sustains ([\d,]+) GFLOP/s, (\d+)% of cuBLAS's rate on a\s+square "
        r"product of 4096 in section 4\.4; sitp's sustains (\d+) GFLOP/s, (\d+)% of the\s+"
        r"ladder's `naive` rung",
        lambda: (
            gpu_step_rates()[3],
            100 * gpu_step_rates()[3] / gflops("cuBLAS"),
            gpu_step_rates()[2],
            100 * gpu_step_rates()[2] / gflops("naive"),
        ),
    ),
    (
        "ch04/gpu.md",
        r"trains the\s+GPT of \[section 3\.5\]\(\.\./ch03/gpt\.md\) \((\d) layers, width (\d+), "
        r"where the first\s+configuration has (\d+)\)",
        lambda: (
            gpt_defaults().n_layer,
            gpt_defaults().n_embd,
            record("ch04/gpu-h200-train-anchor.json")["config"]["n_embd"],
        ),
    ),
    (
        "ch04/gpu.md",
        r"at (\d\.\d) steps a second, evaluations\s+included, against (\d\.\d) for the first "
        r"configuration's step, and ends at a test loss of\s+(\d\.\d+)\. At these sizes even "
        r"PyTorch sustains only ([\d,]+) GFLOP/s\.",
        lambda: (
            asset(RUN_RECORD, r"\((\d\.\d) steps/s,"),
            1e3 / train_arm("anchor", 0)["ms"],
            asset(RUN_RECORD, r"^test loss (\d\.\d+)"),
            gpu_step_rates()[1],
        ),
    ),
    (
        "ch04/gpu.md",
        r"runs\s+a chain of six pointwise operations (\d\.\d\d) times faster than eager",
        lambda: compile_cuda_ratio("pointwise"),
    ),
    (
        "ch04/gpu.md",
        r"Its `matmul` sends a float32 product of at least\s+\$2\^\{(\d+)\}\$ multiply-adds",
        lambda: grab(
            (ROOT / "src" / "sitp" / "kernels" / "cuda" / "ops.py").read_text(encoding="utf-8"),
            r"^LADDER_MIN_MACS = 1 << (\d+)$",
            "src/sitp/kernels/cuda/ops.py",
        ),
    ),
    # chapter 4's opening, against the records
    (
        "ch04/index.md",
        r"the best rung\s+of the GEMM ladder reaches (\d+\.\d)% of cuBLAS at \$N = 4096\$, flash "
        r"attention's forward\s+takes (\d\.\d\d) of naive attention's time at \$T = 512\$ and "
        r"(\d\.\d\d) at 4096, and a GPT's eager\s+training step on the device is (\d+) to (\d+) "
        r"times slower than PyTorch's",
        lambda: (
            max(share(k) for k in rungs()),
            attention(512, "flash") / attention(512, "naive"),
            attention(4096, "flash") / attention(4096, "naive"),
            *(file_ratio(c) for c in TRAIN_CONFIGS),
        ),
    ),
    # 6.3: eager against compiled CUDA
    (
        "ch06/codegen.md",
        r"on a GPU \(each arm warmed, (\d+) rounds of (\d+) calls, the median",
        lambda: (record(COMPILE_CUDA_RECORD)["rounds"], record(COMPILE_CUDA_RECORD)["reps"]),
    ),
    (
        "ch06/codegen.md",
        r"on a (\d+)×(\d+)\s+tensor, `\(\(x - b\)[^`]*`, takes (\d\.\d+) ms eager and (\d\.\d+) "
        r"ms\s+compiled, (\d\.\d\d) times faster, as (\w+) generated kernel\. A small MLP's "
        r"training step\s+\(batch (\d+), (\d+)-(\d+)-(\d+), [\s\S]*?\) takes (\d\.\d+) ms eager and "
        r"(\d\.\d+) ms compiled, (\d\.\d\d) times faster, with (\w+)\s+generated kernels",
        compile_cuda_figures,
    ),
    (
        "ch06/codegen.md",
        r"equal eager's exactly \(the largest difference is (\d)\)",
        lambda: max(compile_cuda(c)["max_abs_diff"] for c in ("pointwise", "step")),
    ),
    # the numbers page's section on the GPU
    (
        "numbers.md",
        r"NVIDIA H200 \(driver (\d+)\.(\d+)\.(\d+), ([\d,]+) MiB;\s+Python (\d)\.(\d+)\.(\d+), "
        r"numba (\d)\.(\d+)\.(\d), numba-cuda (\d)\.(\d+)\.(\d), NumPy (\d)\.(\d)\.(\d), "
        r"PyTorch (\d)\.(\d+)\.(\d)\+cu130\),\s+(\d{4})-(\d\d)-(\d\d), sitp at e12ec37",
        lambda: (
            *asset(RUN_RECORD, r"^NVIDIA H200, (\d+)\.(\d+)\.(\d+), \d+ MHz, (\d+) MiB$"),
            *asset(
                RUN_RECORD, r"^(\d)\.(\d+)\.(\d+) numba (\d)\.(\d+)\.(\d) numpy (\d)\.(\d)\.(\d)$"
            )[:6],
            *asset(RUN_RECORD, r"^numba-cuda (\d)\.(\d+)\.(\d)$"),
            *asset(
                RUN_RECORD, r"^(\d)\.(\d+)\.(\d+) numba (\d)\.(\d+)\.(\d) numpy (\d)\.(\d)\.(\d)$"
            )[6:],
            *asset(RUN_RECORD, r"^torch (\d)\.(\d+)\.(\d)\+cu130"),
            *asset(RUN_RECORD, r"H200, (\d{4})-(\d\d)-(\d\d), sitp at e12ec37"),
        ),
    ),
    (
        "numbers.md",
        r"simulator off: (\d+) passed, (\d+) skipped\.",
        lambda: asset(RUN_RECORD, r"^(\d+) passed, (\d+) skipped"),
    ),
    (
        "numbers.md",
        r"trained 3\.5's GPT on the census\s+names at (\d\.\d) steps/s \(evaluations included\), "
        r"test loss (\d\.\d+)\.",
        lambda: (
            asset(RUN_RECORD, r"\((\d\.\d) steps/s,"),
            asset(RUN_RECORD, r"^test loss (\d\.\d+)"),
        ),
    ),
    (
        "numbers.md",
        r"a chain of six pointwise operations on (\d+)×(\d+),\s+(\d\.\d+) ms eager and "
        r"(\d\.\d+) ms compiled \((\d\.\d\d) times faster, (\w+) generated kernel\); an\s+MLP's "
        r"training step \(batch (\d+), (\d+)-(\d+)-(\d+)\), (\d\.\d+) ms eager and (\d\.\d+) ms "
        r"compiled\s+\((\d\.\d\d) times faster, (\w+) generated kernels\)",
        compile_cuda_figures,
    ),
    (
        "numbers.md",
        r"float32, \$B = (\d+)\$, \$H = (\d+)\$, \$D = (\d+)\$, not causal:",
        lambda: tuple(record(ATTENTION_RECORD)[k] for k in ("B", "H", "D")),
    ),
    (
        "ch04/attention.md",
        r"On an NVIDIA H200, float32, \$B = (\d+)\$, \$H = (\d+)\$, \$D = (\d+)\$, not causal,",
        lambda: if_true(
            not record(ATTENTION_RECORD)["causal"],
            *(record(ATTENTION_RECORD)[k] for k in ("B", "H", "D")),
        ),
    ),
]


def gpt_defaults():
    from sitp.models.gpt import GPTConfig  # late: the package, for its defaults

    return GPTConfig()


def tool_tokenizer():
    """The chat tokenizer over bytes with the tool tokens (8.2)."""
    from sitp.data.tokens import ByteTokenizer  # late: the package, for a few ids
    from sitp.posttrain.chat import ChatTokenizer

    return ChatTokenizer(ByteTokenizer(), tools=True)


def plain_chat_tokenizer():
    """The chat tokenizer over bytes without the tool tokens (8.1)."""
    from sitp.data.tokens import ByteTokenizer  # late: the package, for a few ids
    from sitp.posttrain.chat import ChatTokenizer

    return ChatTokenizer(ByteTokenizer())


@pytest.mark.parametrize(
    "name, pattern, source", FIGURES, ids=[f"{q[0]}:{q[1][:28]}" for q in FIGURES]
)
def test_a_figure_in_prose_matches_its_data(name, pattern, source):
    text = page(name)
    hits = list(re.finditer(pattern.replace(" ", r"\s+"), text, re.MULTILINE))
    assert hits, f"docs/{name}: no text matches {pattern!r}"
    want = source()
    want = want if isinstance(want, tuple) else (want,)
    wrong = []
    for m in hits:
        line = text.count("\n", 0, m.start()) + 1
        assert len(m.groups()) == len(want), (name, line, m.groups(), want)
        wrong += [
            f"docs/{name}:{line}: {got}, the data says {value:.6g}"
            for got, value in zip(m.groups(), map(float, want))
            if not agrees(got, value)
        ]
    assert not wrong, "\n".join(wrong)


def test_the_mlp_cells_table_is_the_recorded_probe():
    """3.5's table of the loudest MLP cells is gpt-ffn-memory.json's cells, row by row."""
    text = page("ch03/gpt.md")
    head = "| block | cell | strongest triggers | what came next | the value pushes up |\n|---|"
    assert text.count(head) == 1
    lines = text[text.index(head) :].splitlines()[2:]
    table = lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))]
    assert table == ffn_table_rows()


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
    """docs/assets keeps copies of the recorded runs that sitp.examples ships: the same.
    The records of a lent GPU (gpu_records) are the exception: pages quote them, no fence
    reads them, and they stay in docs/assets only."""
    device_runs = {DOCS / "assets" / name for name in gpu_records()}
    copies = sorted(set(DOCS.glob("assets/**/*.json")) - device_runs)
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
    # 5.3's ablation table, row by row from the record over seeds
    for option in ex(ABLATION)["args"]["options"]:
        train, val = mean_sd(ablation(option, "train")), mean_sd(ablation(option, "val"))
        vs = "" if option == "gpt2" else "{:+.3f} ± {:.3f} ".format(*mean_sd(ablation_gain(option)))
        cells = [
            "GPT-2 (baseline)" if option == "gpt2" else option,
            f"{ablation(option, 'params')[0]:,}",
            "{:.3f} ± {:.3f}".format(*train),
            "{:.3f} ± {:.3f}".format(*val),
            vs.replace("-", "−") + f"| {statistics.median(ablation(option, 'ms_per_step')):.0f}",
        ]
        yield ["ch05/modern-gpt.md"], "| " + " | ".join(cells) + " |", ABLATION
    # 4.3's GPU training step on the H200, copied on the numbers page
    for row in gpu_train_rows():
        yield ["ch04/gpu.md", "numbers.md"], row, "gpu-h200-train-*.json"


@pytest.mark.parametrize(
    "pages_, text, origin", list(figure_quotes()), ids=lambda v: v if isinstance(v, str) else None
)
def test_prose_quotes_the_figure_data(pages_, text, origin):
    missing = [name for name in pages_ if text not in page(name)]
    assert not missing, f"{text!r} ({origin}) is not on {', '.join(missing)}"


def option_set(text: str) -> set[str]:
    """The options a sentence names in backticks: "`rope`, `qk-norm` and `all`"."""
    return set(re.findall(r"`([^`]+)`", text))


def spread_word(values) -> str:
    return "beyond" if beyond(values) else "within"


def beyond(values) -> bool:
    """5.3's test: the mean of paired differences is more than twice their sd."""
    m, sd = mean_sd(values)
    return abs(m) > 2 * sd


def ablation_verdicts():
    """(pattern, what its groups must say) for 5.3's claims about the spread between seeds."""
    single = [o for o in ex(ABLATION)["args"]["options"] if o not in ("gpt2", "all")]
    others = [o for o in ex(ABLATION)["args"]["options"] if o != "gpt2"]
    mean = {o: mean_sd(ablation_gain(o))[0] for o in others}
    lower = {o for o in others if beyond(ablation_gain(o)) and mean[o] < 0}
    higher = {o for o in others if beyond(ablation_gain(o)) and mean[o] > 0}
    rank = sorted(single, key=mean.get).index("qk-norm") + 1
    ordinal = {1: "first", 2: "second", 3: "third", 4: "fourth"}.get(rank, str(rank))
    gap_bpb = bpb(3)["val_bpb"] - bpb(2)["val_bpb"]
    yield r"By that test, ([\s\S]*?) lower the\s+validation loss beyond the spread;", (lower,)
    yield r"beyond the spread; ([\s\S]*?) raises? it beyond the spread;", (higher,)
    yield (
        r"raises? it beyond the spread; ([\s\S]*?)\s+(?:is|are) within it\.",
        (set(others) - lower - higher,),
    )
    sd_val = {o: statistics.stdev(ablation(o)) for o in others}
    sd_gain = {o: mean_sd(ablation_gain(o))[1] for o in others}
    yield (
        r"much in common: for ([\s\S]*?) the sd of the paired differences is less than half",
        ({o for o in others if sd_gain[o] < sd_val[o] / 2},),
    )
    yield (
        r"sd of the losses, while for ([\s\S]*?) it is larger,",
        ({o for o in others if sd_gain[o] > sd_val[o]},),
    )
    yield r"QK-norm is (\w+) \(", (ordinal,)
    yield r"ReLU² gains [\d.]+ ± [\d.]+, (\w+) the spread", (spread_word(ablation_gain("relu2")),)
    yield (
        r"the untied head [\d.]+ ± [\d.]+, (\w+) the spread",
        (spread_word(ablation_gain("untied")),),
    )
    yield (
        r"± [\d.]+ (below|above) Muon alone \((\w+) the spread\)",
        (
            "below" if mean_sd(all_less_muon())[0] < 0 else "above",
            spread_word(all_less_muon()),
        ),
    )
    yield (
        r"gain of [\d.]+ (falls short of|exceeds) the sum[\s\S]*?± [\d.]+, (\w+) the spread",
        (
            "falls short of" if mean_sd(all_less_sum())[0] > 0 else "exceeds",
            spread_word(all_less_sum()),
        ),
    )
    yield (
        r"In the table, `[^`]+` moves the loss by\s+[+−-][\d.]+, (\w+) the spread",
        (spread_word(ablation_gain(exercise_option())),),
    )
    yield (
        r"and the gap of the modern options \([\d.]+\) is (well beyond) that",
        (
            "well beyond"
            if bpb(0)["val_bpb"] - bpb(1)["val_bpb"] > 2 * seed_spread() / math.log(2)
            else "not",
        ),
    )
    yield (
        r"between BPE 512 and 1,024 \([\d.]+\) is (not|beyond it too)\.",
        ("not" if gap_bpb < 2 * seed_spread() / math.log(2) else "beyond it too",),
    )


def demo_verdicts():
    """8.2: the demo's spread between seeds against one run's Wilson interval."""
    spread = max(demo_seeds("sft")) - min(demo_seeds("sft"))
    yield (
        "ch08/sft.md",
        r"The seeds spread [\d.]+ apart, (wider than|within) one run's 95 % Wilson interval",
        ("wider than" if spread > 2 * demo_half_width("sft") else "within",),
    )
    sft, rl = demo("sft", "pass@1_ci"), demo("rl", "pass@1_ci")
    yield (
        "ch08/evaluation.md",
        r"Seed 0's SFT and RL intervals, [\d.]+-[\d.]+ and [\d.]+-[\d.]+, (do not overlap|overlap)",
        ("overlap" if rl[0] <= sft[1] else "do not overlap",),
    )
    yield (
        "ch08/evaluation.md",
        r"RL's gain on its own seed's SFT model is [-\d.]+ ± [\d.]+, from [-\d.]+ to [\d.]+"
        r"(, positive in every seed|)\.",
        (", positive in every seed" if min(demo_rl_gains()) > 0 else "",),
    )


def verdicts():
    """(page, pattern, what its groups must say) for claims in words about seeded runs."""
    for pattern, want in ablation_verdicts():
        yield "ch05/modern-gpt.md", pattern, want
    yield from demo_verdicts()


@pytest.mark.parametrize("name, pattern, want", list(verdicts()))
def test_a_verdict_in_prose_matches_its_data(name, pattern, want):
    """Every claim that a difference is beyond or within the spread between seeds (5.3:
    the mean of the paired differences against twice their sd) agrees with the record."""
    text = page(name)
    hits = list(re.finditer(pattern.replace(" ", r"\s+"), text))
    assert len(hits) == 1, f"{len(hits)} matches of {pattern!r}"
    got = tuple(option_set(g) if "`" in g else g for g in hits[0].groups())
    assert got == want, (pattern, got, want)


# --- claims about GPU timings -------------------------------------------------------


def gpu_timed() -> bool:
    """Whether the numbers page reports GPU timings of the book's kernels."""
    return "**Not yet measured.**" not in gpu_section()


def test_gpu_timings_are_the_records_the_numbers_page_names():
    """The numbers page reports GPU timings exactly when docs/assets holds a GPU's records,
    and then names each record and the device it ran on."""
    records = gpu_records()
    assert gpu_timed() == bool(records), sorted(records)
    section = gpu_section()
    for name, data in records.items():
        assert name.rsplit("/", 1)[1] in section, f"the numbers page does not name {name}"
        model = re.search(r"NVIDIA \S+", data["device"]).group()
        assert model in section, f"the numbers page does not name {model} ({name})"


GPU_CLAIMS = [
    r"measured against cuBLAS",
    r"timings? (come|comes) from a (real )?GPU",
    r"measured on (a|an|the|one) (real )?(GPU|A100|H100|H200|A6000)",
    r"\bour (GPU )?(timings|measurements) on",
    r"\bspeeds? (come|comes) from",
]
GPU_MODELS = r"\b(A100|H100|H200|A6000|V100|L4|GH200|B200)\b"
NOT_YET = re.compile(
    r"not\s+yet\s+measured|\b(none|no\s+\w+)(\s+of\s+the\s+book's\s+kernels)?\s+has\s+been\s+"
    r"timed\s+on\s+a\s+GPU|no\s+GPU\s+has\s+run",
    re.IGNORECASE,
)


def paragraph_at(text: str, pos: int) -> str:
    start = text.rfind("\n\n", 0, pos)
    end = text.find("\n\n", pos)
    return text[start + 1 : end if end >= 0 else len(text)]


def test_a_page_claims_gpu_timings_only_from_a_recorded_gpu():
    """A claim that the book's kernels were timed on a GPU names, in its paragraph, a GPU of
    which docs/assets holds records, and names no other GPU as measured; with no records,
    no page claims a GPU timing. (Published figures say "published", "reports" or name
    their author instead.)"""
    recorded = recorded_gpus()
    claim = re.compile("|".join(c.replace(" ", r"\s+") for c in GPU_CLAIMS), re.IGNORECASE)
    problems = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        for m in claim.finditer(text):
            before = text[max(0, m.start() - 40) : m.start()].lower()
            if re.search(r"\bnot( yet)?\s*$|\bnever\s*$", before):
                continue  # "not yet measured on a GPU"
            where = f"{path.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, m.start()) + 1}"
            named = set(re.findall(GPU_MODELS, m.group()))
            if named - recorded:
                problems.append(f"{where}: {m.group()!r}: no record of {named - recorded}")
            elif not any(g in paragraph_at(text, m.start()) for g in recorded):
                problems.append(f"{where}: {m.group()!r} names no recorded GPU")
    assert not problems, "\n".join(problems)


def test_no_page_says_not_yet_measured_what_a_record_measured():
    """While docs/assets holds a GPU's records, no page says that the GPU kernels are
    untimed (what a new change leaves untimed is said as such: "has not been timed")."""
    if not gpu_records():
        pytest.skip("no GPU records: 'not yet measured' is the truth")
    problems = [
        f"{path.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, m.start()) + 1}: "
        f"{m.group()!r}"
        for path in sorted(DOCS.rglob("*.md"))
        for text in [path.read_text(encoding="utf-8")]
        for m in NOT_YET.finditer(text)
    ]
    assert not problems, "\n".join(problems)


def table_rows(text: str, section: str) -> list[list[str]]:
    """The cells of the rows of the table between ``[start:section]`` and
    ``[end:section]`` in ``text``, its header and rule left out."""
    body = text.split(f"--8<-- [start:{section}]", 1)[1].split(f"--8<-- [end:{section}]", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("|")][2:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_the_gpu_scoreboard_is_the_record():
    """4.4's scoreboard: its sitp columns are the H200's record at N = 4096, and the table of
    the three sizes (which the numbers page includes) is the record, cell by cell; with no
    record, every sitp cell says 'not yet measured'."""
    text = page("ch04/gemm-gpu.md")
    rows = [line for line in text.splitlines() if re.match(r"\| \d+s? \| `\w+`", line)]
    assert len(rows) >= 8
    if not gpu_timed():
        cells = [row.split("|")[5].strip() for row in rows]
        assert all(c.startswith("not yet measured") for c in cells), cells
        return
    wrong = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        kernel = re.match(r"`(\w+)`", cells[1]).group(1)
        want = (gflops(kernel), share(kernel))
        for got, value in zip((cells[4], cells[5].rstrip("%")), want):
            if not agrees(got, value):
                wrong.append(f"{kernel}: {got}, the record says {value:.6g}")
    assert sorted(re.match(r"\| \d+s? \| `(\w+)`", row).group(1) for row in rows) == sorted(rungs())
    sizes = (1024, 2048, 4096)
    table = table_rows(text, "h200")
    assert [r[0].strip("`") for r in table] == rungs() + ["cuBLAS (CuPy)"]
    for cells in table:
        kernel = "cuBLAS" if cells[0].startswith("cuBLAS") else cells[0].strip("`")
        for i, n in enumerate(sizes):
            for got, value in zip(
                cells[1 + 2 * i : 3 + 2 * i], (gflops(kernel, n), share(kernel, n))
            ):
                if not agrees(got.rstrip("%"), value):
                    wrong.append(f"{kernel}, N={n}: {got}, the record says {value:.6g}")
    assert not wrong, "\n".join(wrong)
    assert '--8<-- "docs/ch04/gemm-gpu.md:h200"' in gpu_section()


def test_the_gpu_attention_table_is_the_record():
    """4.6's table (which the numbers page includes) is the H200's record, cell by cell."""
    table = table_rows(page("ch04/attention.md"), "h200")
    assert [int(r[0]) for r in table] == lengths()
    wrong = []
    for cells in table:
        T = int(cells[0])
        want = [1e3 * attention(T, k) for k in ("naive", "fused", "flash", "flash_bwd")]
        want += [attention(T, k + "_mib") for k in ("naive", "fused", "flash")]
        want.append(attention(T, "flash") / attention(T, "naive"))
        wrong += [
            f"T={T}, column {i + 2}: {got}, the record says {value:.6g}"
            for i, (got, value) in enumerate(zip(cells[1:], want))
            if not agrees(got, value)
        ]
    assert len(table[0]) == 9 and not wrong, "\n".join(wrong)
    assert '--8<-- "docs/ch04/attention.md:h200"' in gpu_section()


def test_the_launch_cost_cites_its_source():
    """4.3's launch cost is a published figure: it names the measurement and links it."""
    text = page("ch04/gpu.md")
    bullet = text.split("* **launch**", 1)[1].split("\n* ", 1)[0]
    assert "7–15 µs" in bullet and "bibliography.md#" in bullet, bullet
    bib = page("bibliography.md")
    for author, url in [("Markall", "numba-cuda/pull/288"), ("Besard", "CUDAdrv.jl/pull/15")]:
        assert author in bullet and author in bib and url in bib, author


def test_the_beam_record_kept_no_product_apart():
    """6.3 says the beam search kept the product apart for none of the anchor GPT's GEMMs,
    at one thread and at two (tune-beam-amd.json): a word, not a figure, so checked here."""
    stated = (DOCS / "ch06" / "codegen.md").read_text().count("product apart for none")
    assert stated == 2  # one thread, two threads
    assert all(a == 0 for threads in ("1", "2") for a in beam_stats(threads, "apart"))
