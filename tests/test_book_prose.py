"""The book's prose states what is true and how to measure it, not the story of our runs.

Commit hashes, "the first version of this section", "a second run a minute later",
"the machine that wrote this section", "in that run", "chapters 5 to 8 are written",
"shared with other jobs" (say the recorded load instead), dates of runs and "we tried"
belong on ``docs/numbers.md``, which keeps dated measurements with the machine and the
command. Every other page is scanned, code fences included (a comment can tell a story
too).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DIARY_ALLOWED = {"numbers.md"}

# Each phrase matches across line breaks: a space in it stands for any whitespace.
DIARY_PHRASES = [
    # a commit hash in backticks: 7 to 40 hex digits with at least one letter and one digit
    r"`(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}`",
    r"\bat commit\b",
    r"\b(the|a|an) (first|earlier|previous|old) version of (this|the) "
    r"(section|chapter|page|table|book|kernel|code)\b",
    r"\bwhile writing\b",
    r"\btime of writing\b",
    r"\bwhen this (section|chapter|page|book) was (written|built)\b",
    r"\bmachine that (wrote|built|builds|produced|ran)\b",
    r"\bthis machine\b",
    r"\bthe book's machine\b",
    r"\b(a|the) second run\b",
    r"\b(an|the) earlier (run|measurement)\b",
    r"\b(a|one|two|a few) (minute|minutes|hour|hours|day|days) (later|after)\b",
    r"\bwe (measured|ran|timed|saw|got|found|observed)\b",
    r"\bour (own )?runs?\b",
    r"\bhas no GPU\b",
    # the story of one run told as the page's evidence, and the book's own progress
    r"\bin that run\b",
    r"\bthe same command (at|wrote|gave|ended|printed|reached|took|scored)\b",
    r"\b(chapters?|sections?|parts?) [\dIVX.]+( (to|and) [\dIVX.]+|–[\dIVX.]+)? (is|are) "
    r"(now )?written\b",
    r"\b(measured|timed|run|tested)\b[^.]{0,40}\bfor this book\b",
    # the machine's neighbours of the day: state the recorded load instead
    r"\bshared with other jobs\b",
    r"\bthe other jobs\b",
    r"\bother jobs (were |are )?(running|using|sharing|share|shared)\b",
    # dates and before/after of the project's history
    r"\b(trained|measured|ran|run|recorded|taken) on \d{4}-\d{2}-\d{2}\b",
    r"\bwe (tried|changed|rewrote|fixed|replaced)\b",
    r"\bsitp, (before|after)\b",
    r"\b(halved|doubled|tripled) the\b",
]
DIARY = re.compile(
    "|".join("(?:" + p.replace(" ", r"\s+") + ")" for p in DIARY_PHRASES), re.IGNORECASE
)


# Sections being rewritten by their owners when this test was added (the GEMM
# micro-kernel and scoreboard of 2.3). Each entry must still match:
# delete it when its page is fixed, and the test then holds the page to the rule.
PENDING: set[tuple[str, str]] = set()


def diary_lines(text: str) -> list[tuple[int, str]]:
    """(line number, matched phrase) for every diary phrase in ``text``."""
    return [
        (text.count("\n", 0, m.start()) + 1, " ".join(m.group().split()))
        for m in DIARY.finditer(text)
    ]


def pages() -> list[Path]:
    return sorted(
        p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).as_posix() not in DIARY_ALLOWED
    )


@pytest.mark.parametrize(
    "sentence",
    [
        "at commit `58f316c` of the repository",
        "the first version of this chapter measured 7.68 steps/s",
        "(the first version of this\nsection, on a machine crowded",
        "in a second run a few minutes after",
        "0.90 in a second\nrun a minute later",
        "The machine that wrote this\nsection has no GPU.",
        "which is what we measured while writing this section.",
        "When we ran this fence on the two-core virtual machine",
        "On our run the 200-step model's innovation rate",
        "more than threads will ever give on this machine.",
        "On the book's machine the sliced kernel ran faster",
        "(an earlier measurement, on a busy machine, had it a tenth faster)",
        "This source was never measured on a GPU for this book, and it is not tuned",
        "In that run (the same Intel Xeon), the sampled reward fell from 0.50",
        "The same command at the demo's `--lr 1e-4\n--temperature 0.7` ended at 0.737",
        "Chapters 5 to 8 are written. The order is compiling first",
        "On the 2-core Intel Xeon of the earlier chapters, shared with other jobs during the run",
        "(the wall times moved with the load of the other\njobs on it)",
        "a 2-core machine that other jobs were using at the same time",
        "the runs of 3.5's GPT as it was trained on 2026-11-29 (3,000 steps)",
        "its threads that skip the barrier simply run to the end; we tried",
        "| $T$ | sitp, before: three products and a softmax kernel (ms) |",
        "Selecting 0 for those keys halved the forward pass.",
        "about 2 for `exp` on an idle machine (up to 7 when other jobs share it)",
    ],
)
def test_the_scan_catches_diary_sentences(sentence):
    assert diary_lines(sentence), sentence


@pytest.mark.parametrize(
    "sentence",
    [
        "On one thread of an idle 2-core AMD EPYC virtual machine, it prints",
        "`python -m sitp.bench gpu-gemm` measures it on any machine with an NVIDIA GPU",
        "No GPU is needed, and no environment variable.",
        "`make test` builds the book strictly",
        "makemore's `names.txt` (SHA-256 0a30b555…cc4d)",
        "the tile is `6x16`; the run printed `1234567` steps",
        "a second-order method; the first version of Adam",
        "we measure the loss on the validation split",
        "When other jobs keep the cores busy, elapsed time measures the scheduler",
        "the noise of a machine shared with other work",
        "The first 256 merges halve the number of tokens",
        "(the variance of the noise we added)",
        "Every test fails until its function is written.",
        "the same command on the same machine trains the same weights",
        "the 2-core Xeon at load averages of 3.7 to 7.6 (other programs were running)",
        "numpy 2.4.6 with OpenBLAS kernel 'SkylakeX', 2026-12-01; CPU clock",
        "Section 8.3 derives the policy gradient; its demo is REINFORCE with a group baseline",
    ],
)
def test_the_scan_leaves_plain_statements_alone(sentence):
    assert not diary_lines(sentence), sentence


def test_no_development_diary_outside_the_numbers_page():
    """No page but docs/numbers.md tells the story of our runs or names a commit."""
    problems, pending_seen = [], set()
    for page in pages():
        name = page.relative_to(ROOT).as_posix()
        for lineno, phrase in diary_lines(page.read_text(encoding="utf-8")):
            if (name, phrase) in PENDING:
                pending_seen.add((name, phrase))
            else:
                problems.append(f"{name}:{lineno}: {phrase!r}")
    problems += [
        f"{name}: {phrase!r} is fixed; remove it from PENDING"
        for name, phrase in sorted(PENDING - pending_seen)
    ]
    assert not problems, (
        "state what is true and how to measure it; dated runs go on docs/numbers.md:\n"
        + "\n".join(problems)
    )


# --- fences that demonstrate an error ----------------------------------------------


def silent_excepts(code: str) -> list[int]:
    """Lines of ``try`` statements whose handlers only print: a missing error passes.

    A fence that shows an error should use ``pytest.raises`` (or assert in the handler
    and ``raise`` in an ``else:``); a handler that computes something (``x = None``) is
    control flow, not a demonstration, and so is an optional import (``except
    ImportError: pass``); both are left alone.
    """
    import ast

    lines = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Try) and not node.orelse:
            for handler in node.handlers:
                caught = ast.unparse(handler.type) if handler.type else ""
                if caught in ("ImportError", "ModuleNotFoundError"):
                    continue
                if all(isinstance(s, (ast.Expr, ast.Pass)) for s in handler.body):
                    lines.append(node.lineno)
                    break
    return lines


def test_the_try_scan_flags_a_print_only_handler():
    assert silent_excepts("try:\n    f()\nexcept ValueError as e:\n    print(e)\n") == [1]
    assert not silent_excepts("try:\n    f()\nexcept ValueError:\n    x = None\n")
    assert not silent_excepts("try:\n    import torch\nexcept ImportError:\n    pass\n")
    assert not silent_excepts(
        "try:\n    f()\nexcept ValueError as e:\n    print(e)\nelse:\n    raise AssertionError\n"
    )


def test_error_demonstrations_fail_when_the_error_is_missing():
    from hooks.fences import PYTHON_LANGS, parsed_fences

    problems = []
    for page in sorted(DOCS.rglob("*.md")):
        for fence in parsed_fences(page.read_text(encoding="utf-8")):
            if fence.lang not in PYTHON_LANGS or "--8<--" in fence.content:
                continue
            if fence.lang == "pycon":
                continue
            try:
                found = silent_excepts(fence.content)
            except SyntaxError:
                continue
            problems += [
                f"{page.relative_to(ROOT).as_posix()}:{fence.line + n}: try/except "
                "that only prints; use pytest.raises"
                for n in found
            ]
    assert not problems, "\n".join(problems)


# --- exercises ----------------------------------------------------------------------

EXERCISE = re.compile(r"^(?:\*\*)?(\d+)\. (.*)")
TAG = re.compile(r"^(★{1,3}) ")
TAGS_PENDING: set[str] = set()


def exercises(text: str) -> list[tuple[int, int, str]]:
    """(line, number, text) of each exercise under a page's ``## Exercises`` heading."""
    found, inside = [], False
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            inside = line.strip() == "## Exercises"
        elif inside and (m := EXERCISE.match(line)):
            found.append((lineno, int(m.group(1)), m.group(2)))
    return found


def test_every_exercise_has_a_difficulty_tag_and_its_number():
    """★, ★★ or ★★★ (explained on docs/notation.md) after the number, numbered 1, 2, ..."""
    assert "★★★" in (DOCS / "notation.md").read_text(encoding="utf-8")
    problems, tagged = [], 0
    for page in sorted(DOCS.rglob("*.md")):
        name = page.relative_to(DOCS).as_posix()
        found = exercises(page.read_text(encoding="utf-8"))
        for k, (lineno, number, rest) in enumerate(found, 1):
            where = f"docs/{name}:{lineno}"
            if number != k:
                problems.append(f"{where}: exercise {number}, expected {k}")
            if TAG.match(rest):
                tagged += 1
            elif name not in TAGS_PENDING:
                problems.append(f"{where}: no difficulty tag (★, ★★ or ★★★)")
    for admonition in re.finditer(
        r'^\?\?\? \w+ "Exercise(.*)',
        (DOCS / "projects.md").read_text(encoding="utf-8"),
        re.MULTILINE,
    ):
        if not re.match(r" ★{1,3}:", admonition.group(1)):
            problems.append(f"docs/projects.md: exercise without a tag: {admonition.group()}")
    assert tagged >= 50 and not problems, "\n".join(problems)


# --- shell fences: the command, not a pasted transcript of what it printed -------------

SHELL_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?:text|console|bash|shell|sh)\b[^\n]*\n(?P<body>.*?)^(?P=indent)```",
    re.MULTILINE | re.DOTALL,
)
COMMAND = re.compile(r"^(\$ |python\b|[A-Z_]+=\S+ |for |done\b|#|make\b|pip\b|cd\b|export\b)")
DECIMAL = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")


def pasted_output(text: str) -> list[tuple[int, str]]:
    """Lines of shell fences that follow a command and carry a measured figure (a decimal
    number): what a run printed, pasted where a fence that reads the run's record belongs.

    A fence counts as a shell fence when its first line is a command; continuation lines
    (after a backslash) and indented commands (a loop's body) are commands too. A text
    fence without a command, without code (no ``=``) and with two or more lines of
    decimals is a transcript too: a run's output pasted on its own.
    """
    found = []
    for m in SHELL_FENCE.finditer(text):
        indent = m.group("indent")
        lines = [line[len(indent) :] for line in m.group("body").splitlines()]
        start = text.count("\n", 0, m.start("body")) + 1
        figures = [(start + k, line) for k, line in enumerate(lines) if DECIMAL.search(line)]
        if not lines:
            continue
        if not COMMAND.match(lines[0]):
            if len(figures) >= 2 and not any("=" in line for line in lines):
                found += figures
            continue
        continued = False
        for k, line in enumerate(lines):
            command = continued or COMMAND.match(line.lstrip())
            continued = line.rstrip().endswith("\\")
            if not command and DECIMAL.search(line):
                found.append((start + k, line))
    return found


@pytest.mark.parametrize(
    "fence, pasted",
    [
        ("```text\n$ python run.py\nloss 2.0751, 21.4 s\n```\n", True),
        ("```text\npython -m sitp train --model mlp\nstep 1000: train loss 2.2704\n```\n", True),
        ("```bash\npython a.py --lr 0.01 \\\n    --wd 0.1\nSITP_X=1 python b.py\n```\n", False),
        (
            "```console\n$ python -m sitp chat runs/pt/rl --web\nserving on http://127.0.0.1:8008/\n```\n",
            False,
        ),
        ("```text\noptimizer = SGD(lr=0.1)\n```\n", False),
        ("```text\nstep 1000: train loss 2.2704\ntest loss 2.0406\n```\n", True),
        ("```text\n$ python b.py\n   512 |   0.301  0.637\n```\n", True),
        (
            "```text\nfor m in a b; do\n  python -m sitp train --lr 0.01 --model $m\ndone\n```\n",
            False,
        ),
    ],
)
def test_the_transcript_scan(fence, pasted):
    assert bool(pasted_output(fence)) == pasted


def test_no_pasted_transcript_of_a_run():
    """A run's printed figures reach a page through a fence that reads its recorded file
    (``sitp.examples``), so that a test can compare them with the prose; a shell fence
    shows only the command."""
    problems = [
        f"{page.relative_to(ROOT).as_posix()}:{lineno}: {line.strip()!r}"
        for page in pages()
        for lineno, line in pasted_output(page.read_text(encoding="utf-8"))
    ]
    assert not problems, "\n".join(problems)
