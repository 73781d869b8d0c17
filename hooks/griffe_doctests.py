"""Griffe extension for docs/api/: doctest examples in docstrings are shown as code.

The package's docstrings carry runnable ``>>>`` examples (pytest runs them with
``--doctest-modules``), bare or under an ``Example:`` heading. Markdown would read them as
prose, and their output (``[0.1, 0.5]``, ``x[i][j]``) as reference links, which
mkdocs-autorefs reports as broken. This extension fences each example (a run of lines
from ``>>>`` to the next blank line) as a ``pycon`` code block before the docstring is
parsed. It also turns the Sphinx roles some docstrings use (``:func:`x` ``,
``:math:`x` ``) into Markdown (inline code, KaTeX math). Registered under ``extensions:``
of the python handler in mkdocs.yml.
"""

from __future__ import annotations

import re

import griffe

_PROMPT = re.compile(r"^(\s*)>>>( |$)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_ROLE = re.compile(r":(?:py:)?(func|meth|class|mod|data|attr|obj|exc|const|math):`~?([^`]+)`")


def sphinx_roles(text: str) -> str:
    """``:func:`sitp.tensor` `` -> `` `sitp.tensor` ``; ``:math:`x^2` `` -> ``\\(x^2\\)``."""
    return _ROLE.sub(
        lambda m: f"\\({m.group(2)}\\)" if m.group(1) == "math" else f"`{m.group(2)}`", text
    )


def fence_doctests(text: str) -> str:
    """Wrap each ``>>>`` example of a docstring in a ``pycon`` code fence.

    An example runs from its first ``>>>`` line to the next blank line, as doctest reads
    it; the fence takes the indentation of its prompt. Existing fences are left alone.
    """
    out: list[str] = []
    lines = text.splitlines()
    i, in_fence = 0, False
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _PROMPT.match(line)
        if m is None:
            out.append(line)
            i += 1
            continue
        indent = m.group(1)
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    """Fences the doctest examples of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if ">>>" in text:
            text = fence_doctests(text)
        obj.docstring.value = sphinx_roles(text)
