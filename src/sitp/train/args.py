"""The command lines' argparse pieces (``sitp`` and chapter 8's ``sitp sft|rl|eval|chat``):
one-line errors with exit status 2, and number types with their bounds."""

from __future__ import annotations

import argparse
import math
import sys


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block), exit status 2."""

    def error(self, message):
        raise SystemExit(fail(f"{self.prog}: error: {message}"))


def fail(line: str) -> int:
    print(" ".join(line.split()), file=sys.stderr)
    return 2


def number(kind, low=None, low_open=False):
    """An argparse ``type=``: parses ``kind`` (int or float), finite, at least ``low``
    (above it when ``low_open``); a bad value is argparse's one-line error, exit 2."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if low is not None and (value <= low if low_open else value < low):
            bound = (
                f"greater than {low:g}"
                if low_open
                else "positive"
                if low == 1 and kind is int
                else f"at least {low:g}"
            )
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse
