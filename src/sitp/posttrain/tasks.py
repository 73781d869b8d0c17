"""Tasks whose answers a program checks (chapter 8.2): generated problems and checkers.

Each task makes problems from a seeded random generator, asks each as a user's
message, writes the reference reply, and checks a model's reply. The train and
the held-out problems are disjoint by construction: a problem belongs to the
held-out split when the SHA-256 of its task name and arguments falls in the first
:data:`HELDOUT_PERCENT` percent, whatever seed drew it, so no train seed can ever
produce a held-out problem.

A checker is lenient about the form and strict about the answer: spaces, a closing
period, quotes and letter case do not matter; the answer must be the only one given
(a reply that lists "578 579" is wrong, even though one of them is right). The
chain-of-steps task (:class:`ChainAddition`) reads only what follows its last
``Answer:`` marker, so the steps before it can be written in any way.

Example:
    >>> task = Addition(2)
    >>> p = task.problems("heldout", 1, seed=0)[0]
    >>> task.check(p, task.reference(p)), task.check(p, "I think it is 1000.")
    (True, False)
    >>> set(task.problems("train", 50, seed=1)).isdisjoint(task.problems("heldout", 50, seed=2))
    True
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

HELDOUT_PERCENT = 10
SPLITS = ("train", "heldout")
IDENTITY_FILE = Path(__file__).with_name("identity.json")

_INTEGER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?!\d)|-?\d+")
_MARKER = re.compile(r"answer\s*:", re.IGNORECASE)


@dataclass(frozen=True)
class Problem:
    """One problem: the task's name and its arguments (hashable, so sets of them work)."""

    task: str
    args: tuple


def split_of(problem: Problem) -> str:
    """``"heldout"`` for the problems whose hash falls in the first HELDOUT_PERCENT %."""
    key = f"{problem.task}|{problem.args!r}".encode()
    bucket = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"


def _integers(text: str) -> list[int]:
    return [int(m.replace(",", "")) for m in _INTEGER.findall(text)]


def check_integer(text: str, expected: int) -> bool:
    """True when ``text`` states exactly one integer and it is ``expected`` (``1,234``
    with correct grouping counts as 1234)."""
    found = _integers(text)
    return len(found) == 1 and found[0] == expected


def check_word(text: str, expected: str) -> bool:
    """True when ``text`` is ``expected`` up to case, surrounding spaces and quotes, and
    a closing period."""
    word = text.strip().rstrip(".").strip().strip("'\"`").strip()
    return word.lower() == expected.lower()


class Task:
    """A family of problems: subclasses define ``draw``, ``prompt``, ``reference``, ``check``."""

    name = "task"

    def draw(self, rng: random.Random) -> tuple:
        raise NotImplementedError

    def prompt(self, problem: Problem) -> str:
        raise NotImplementedError

    def reference(self, problem: Problem) -> str:
        raise NotImplementedError

    def check(self, problem: Problem, answer_text: str) -> bool:
        raise NotImplementedError

    def problems(self, split: str, n: int, seed: int = 0, at_most: bool = False) -> list[Problem]:
        """``n`` distinct problems of ``split`` ("train" or "heldout"), the same for a seed.

        The draw gives up after 5,000 draws in a row that find no new problem: then
        ``at_most=True`` returns the fewer problems found (a small task's whole split,
        all but certainly), and otherwise it raises.

        Raises:
            ValueError: an unknown split, or (without ``at_most``) the split has fewer
                than ``n`` problems that the generator finds.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        rng = random.Random(f"{self.name}|{split}|{seed}")
        out, seen, misses = [], set(), 0
        while len(out) < n:
            problem = Problem(self.name, self.draw(rng))
            if problem in seen or split_of(problem) != split:
                misses += 1
                if misses > 5000:
                    if at_most:
                        break
                    raise ValueError(
                        f"{self.name}: found only {len(out)} distinct {split} problems of "
                        f"the {n} asked for; ask for fewer or make the task larger"
                    )
                continue
            misses = 0
            seen.add(problem)
            out.append(problem)
        return out

    def conversation(self, problem: Problem, answer: str | None = None) -> list[dict]:
        """The problem as a chat: the user's question and the reference (or ``answer``)."""
        reply = self.reference(problem) if answer is None else answer
        return [
            {"role": "user", "content": self.prompt(problem)},
            {"role": "assistant", "content": reply},
        ]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _Arithmetic(Task):
    symbol = "+"

    def __init__(self, digits: int):
        if not 1 <= digits <= self.max_digits:
            raise ValueError(f"digits must be 1..{self.max_digits}, got {digits}")
        self.digits = digits
        self.name = f"{self.kind}{digits}"

    def draw(self, rng):
        top = 10**self.digits
        return rng.randrange(top), rng.randrange(top)

    def prompt(self, problem):
        a, b = problem.args
        return f"What is {a}{self.symbol}{b}?"

    def reference(self, problem):
        return str(self.value(*problem.args))

    def check(self, problem, answer_text):
        return check_integer(answer_text, self.value(*problem.args))


class Addition(_Arithmetic):
    """``digits``-digit addition: "What is 47+85?" -> "132"."""

    kind, symbol, max_digits = "addition", "+", 12

    @staticmethod
    def value(a, b):
        return a + b


class Multiplication(_Arithmetic):
    """``digits``-digit multiplication (small ``digits``): "What is 7*8?" -> "56"."""

    kind, symbol, max_digits = "multiplication", "*", 4

    @staticmethod
    def value(a, b):
        return a * b


_CONSONANTS, _VOWELS = "bcdfghjklmnprstvwz", "aeiou"


def make_word(rng: random.Random, syllables: tuple[int, int] = (1, 4)) -> str:
    """A pronounceable made-up word of consonant-vowel syllables (a closing consonant
    half the time): the word list of the letter tasks, generated, not downloaded."""
    n = rng.randint(*syllables)
    word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(n))
    return word + rng.choice(_CONSONANTS) if rng.random() < 0.5 else word


class CountLetter(Task):
    """How many times a letter occurs in a word: "How many r in barrar?" -> "3"."""

    name = "count"

    def draw(self, rng):
        word = make_word(rng)
        letter = rng.choice(word) if rng.random() < 0.8 else rng.choice(_CONSONANTS + _VOWELS)
        return word, letter

    def prompt(self, problem):
        word, letter = problem.args
        return f"How many {letter} in {word}?"

    def reference(self, problem):
        word, letter = problem.args
        return str(word.count(letter))

    def check(self, problem, answer_text):
        word, letter = problem.args
        return check_integer(answer_text, word.count(letter))


class _WordTask(Task):
    def draw(self, rng):
        return (make_word(rng),)

    def prompt(self, problem):
        return f"{self.verb} {problem.args[0]}"

    def reference(self, problem):
        return self.transform(problem.args[0])

    def check(self, problem, answer_text):
        return check_word(answer_text, self.transform(problem.args[0]))


class Reverse(_WordTask):
    """A word's letters in reverse order: "Reverse kalum" -> "mulak"."""

    name, verb = "reverse", "Reverse"

    @staticmethod
    def transform(word):
        return word[::-1]


class SortLetters(_WordTask):
    """A word's letters in alphabetical order: "Sort kalum" -> "aklmu"."""

    name, verb = "sort", "Sort"

    @staticmethod
    def transform(word):
        return "".join(sorted(word))


class ChainAddition(Task):
    """Three numbers added in two written steps before the answer:
    "What is 12+34+5?" -> "12+34=46, 46+5=51. Answer: 51". The checker reads only
    what follows the last ``Answer:`` (the steps may be wrong or written otherwise;
    a reply with no marker is wrong)."""

    def __init__(self, digits: int = 2):
        if not 1 <= digits <= 12:
            raise ValueError(f"digits must be 1..12, got {digits}")
        self.digits = digits
        self.name = f"chain{digits}"

    def draw(self, rng):
        top = 10**self.digits
        return rng.randrange(top), rng.randrange(top), rng.randrange(top)

    def prompt(self, problem):
        a, b, c = problem.args
        return f"What is {a}+{b}+{c}?"

    def reference(self, problem):
        a, b, c = problem.args
        return f"{a}+{b}={a + b}, {a + b}+{c}={a + b + c}. Answer: {a + b + c}"

    def check(self, problem, answer_text):
        marks = list(_MARKER.finditer(answer_text))
        if not marks:
            return False
        return check_integer(answer_text[marks[-1].end() :], sum(problem.args))


class Mixture(Task):
    """Several tasks as one: its problems come from each task in turn, and each problem
    is asked, answered and checked by the task it belongs to (``problem.task``).

    ``get_task("addition3,reverse")`` builds one; ``sitp rl --task addition3,reverse``
    trains on both at once. A task whose split runs out (``at_most=True``) leaves the
    rest of the ``n`` problems to the others.

    Example:
        >>> mix = get_task("addition2,reverse")
        >>> [p.task for p in mix.problems("train", 4)]
        ['addition2', 'reverse', 'addition2', 'reverse']
    """

    def __init__(self, tasks):
        tasks = list(tasks)
        names = [t.name for t in tasks]
        if len(tasks) < 2 or len(set(names)) < len(names):
            raise ValueError(f"a mixture needs two or more different tasks, got {names}")
        self.tasks = dict(zip(names, tasks))
        self.name = ",".join(names)

    def _task(self, problem: Problem) -> Task:
        try:
            return self.tasks[problem.task]
        except KeyError:
            raise ValueError(f"{problem.task!r} is not a task of the mixture {self.name}") from None

    def prompt(self, problem):
        return self._task(problem).prompt(problem)

    def reference(self, problem):
        return self._task(problem).reference(problem)

    def check(self, problem, answer_text):
        return self._task(problem).check(problem, answer_text)

    def problems(self, split, n, seed=0, at_most=False):
        """``n`` problems, taken from the tasks in turn (as many as ``n`` from each, so that
        a task with a small split leaves its share to the others)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        lists = [t.problems(split, n, seed, at_most=True) for t in self.tasks.values()]
        out = [p for row in itertools.zip_longest(*lists) for p in row if p is not None][:n]
        if len(out) < n and not at_most:
            raise ValueError(
                f"{self.name}: found only {len(out)} distinct {split} problems of the {n} asked for"
            )
        return out


def lenient_check(task: Task, problem: Problem, answer_text: str) -> bool:
    """A checker that is too lenient, kept to show reward hacking (chapters 8.3, 8.5): it
    accepts any reply that contains the reference answer somewhere, so "0 1 2 3 4 5"
    passes every letter count below 6. A policy trained against it learns to list."""
    return task.reference(problem).lower() in answer_text.lower()


def get_task(name: str) -> Task:
    """A task by its name: ``addition<N>``, ``multiplication<N>``, ``chain<N>``,
    ``count``, ``reverse``, ``sort``; names joined by commas make a :class:`Mixture`."""
    if "," in name:
        return Mixture(get_task(part.strip()) for part in name.split(",") if part.strip())
    fixed = {"count": CountLetter, "reverse": Reverse, "sort": SortLetters}
    if name in fixed:
        return fixed[name]()
    for prefix, cls in (("addition", Addition), ("multiplication", Multiplication),
                        ("chain", ChainAddition)):  # fmt: skip
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            return cls(int(name[len(prefix) :]))
    raise ValueError(
        f"unknown task {name!r}; the tasks are addition<N>, multiplication<N>, chain<N> "
        "(N digits, e.g. addition2), count, reverse, sort"
    )


def identity_conversations() -> list[list[dict]]:
    """The hand-written identity and small-talk conversations (identity.json)."""
    data = json.loads(IDENTITY_FILE.read_text(encoding="utf-8"))
    return data["conversations"]


__all__ = [
    "HELDOUT_PERCENT",
    "Addition",
    "ChainAddition",
    "CountLetter",
    "Mixture",
    "Multiplication",
    "Problem",
    "Reverse",
    "SortLetters",
    "Task",
    "check_integer",
    "check_word",
    "get_task",
    "identity_conversations",
    "lenient_check",
    "make_word",
    "split_of",
]
