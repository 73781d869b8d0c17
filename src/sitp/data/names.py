"""Corpora of names, one name a line, for the character-level models of the book.

Two corpora are built in:

* ``"offline"`` (the default) — the first names of the 1990 US census, as
  shipped in the package data of the PyPI package ``names``, which installs
  with sitp. It is read from disk, never downloaded: 5,163 distinct names.
* ``"makemore"`` (or ``"names"``) — the 32,033 names of Andrej Karpathy's
  makemore, ``names.txt``: read from ``$SITP_DATA_DIR`` when set, else downloaded
  once, checked against its SHA-256 and cached (see :mod:`sitp.data.download`).

Any other string or path is read as a text file with one name per line.
"""

from __future__ import annotations

import importlib.resources
import os
import re
from pathlib import Path

from sitp.data.download import download_makemore_names

# The census files of the ``names`` package; each line is
# ``NAME  percent-of-people  cumulative-percent  rank``, most frequent first.
_CENSUS_FILES = ("dist.female.first", "dist.male.first")
_LOWERCASE_WORD = re.compile(r"[a-z]+")


def census_first_names() -> list[str]:
    """The offline corpus: first names of the 1990 US census, most frequent first.

    The female and male lists are merged, lower-cased and deduplicated; a name
    found in both lists is ranked by the sum of its two percentages (a share
    of all people, counting men and women equally). Ties are broken
    alphabetically, so the order is the same on every machine. Only names made
    of the letters a–z are kept (in the 1990 files, that is all of them).

    Returns:
        A new list of 5,163 lower-case names.

    Example:
        >>> words = census_first_names()
        >>> len(words), words[:5]
        (5163, ['james', 'john', 'robert', 'michael', 'mary'])
    """
    percent: dict[str, float] = {}
    for filename in _CENSUS_FILES:
        text = importlib.resources.files("names").joinpath(filename).read_text(encoding="ascii")
        for line in text.splitlines():
            fields = line.split()
            if not fields:
                continue
            name = fields[0].lower()
            if _LOWERCASE_WORD.fullmatch(name):
                percent[name] = percent.get(name, 0.0) + float(fields[1])
    return sorted(percent, key=lambda name: (-percent[name], name))


def read_names_file(path: str | os.PathLike) -> list[str]:
    """Reads a text file with one name per line.

    Surrounding whitespace is stripped and blank lines are skipped; names are
    kept as written (no lower-casing), in file order.

    Args:
        path: the file to read (UTF-8).

    Returns:
        The names, in the order of the file.
    """
    text = Path(path).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def load_names(source: str | os.PathLike = "offline") -> list[str]:
    """Loads a corpus of names.

    Args:
        source: ``"offline"`` for the census names that install with sitp
            (no network); ``"makemore"`` or ``"names"`` for makemore's 32,033
            names (``$SITP_DATA_DIR/names.txt``, or downloaded on first use,
            checked and cached); or a path to a text file with
            one name per line.

    Returns:
        A list of names.

    Raises:
        sitp.data.download.OfflineError: for ``"makemore"`` when the file is
            not cached and cannot be downloaded; the message says where to
            place it by hand.
        FileNotFoundError: when ``source`` is a path that does not exist.

    Example:
        >>> words = load_names()
        >>> words[0], len(words)
        ('james', 5163)
    """
    if isinstance(source, str) and source == "offline":
        return census_first_names()
    if isinstance(source, str) and source in ("makemore", "names"):
        return read_names_file(download_makemore_names())
    return read_names_file(source)
