"""Downloading makemore's ``names.txt`` once, checking it, and caching it.

The file lives at :data:`MAKEMORE_URL`. It is saved under the sitp cache
directory (:func:`cache_dir`) as ``makemore/names.txt`` and read from there
on every later call, so only the first call needs the network.

What is checked. :data:`MAKEMORE_FACTS` pins the file's size (228,145 bytes), its
number of lines (32,033), that every line is a name of the letters a–z, and its
SHA-256 digest (``0a30b555…cc4d``). A downloaded, cached or local copy that
disagrees with any of them is rejected with :class:`ChecksumError`.

Where it is looked for, in order: ``$SITP_DATA_DIR/names.txt`` if that variable is
set (the tests and CI, which have no network, point it at a shared copy; the file
is checked and read in place, never copied); the cache; the network.

The file is written atomically: the bytes go to a temporary file in the
cache directory, which :func:`os.replace` then renames onto ``names.txt``.
A reader never sees half a file, even if the download is interrupted.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sitp.serialization import write_atomically as _write_atomically

#: Where makemore's names live.
MAKEMORE_URL = "https://raw.githubusercontent.com/karpathy/makemore/master/names.txt"


@dataclass(frozen=True)
class FileFacts:
    """What a good copy of a names file must satisfy.

    Attributes:
        num_bytes: its exact size in bytes.
        num_lines: its number of names (lines, as ``str.splitlines`` counts them).
        sha256: its SHA-256 hex digest, or None to skip the digest check.
    """

    num_bytes: int
    num_lines: int
    sha256: str | None = None


#: The facts of makemore's names.txt.
MAKEMORE_FACTS = FileFacts(
    num_bytes=228_145,
    num_lines=32_033,
    sha256="0a30b5557f192f32ab962680889aac5f6fda0f4cecf40a6d0b5694f58ea8cc4d",
)

_NAME_LINE = re.compile(rb"[a-z]+")


class DownloadError(ConnectionError):
    """The names file is not cached and could not be downloaded."""


class OfflineError(DownloadError):
    """The names file is not cached and the server could not be reached."""


class ChecksumError(RuntimeError):
    """A downloaded or cached file is not the file we expected."""


def cache_dir() -> Path:
    """The directory where sitp caches downloads.

    ``$SITP_CACHE`` if set; else ``$XDG_CACHE_HOME/sitp``; else ``~/.cache/sitp``.
    """
    if os.environ.get("SITP_CACHE"):
        return Path(os.environ["SITP_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "sitp"


def makemore_names_path() -> Path:
    """Where the cached copy of makemore's names.txt is (or will be) stored.

    >>> makemore_names_path().relative_to(cache_dir()).as_posix()
    'makemore/names.txt'
    """
    return cache_dir() / "makemore" / "names.txt"


def data_dir_copy() -> Path | None:
    """``$SITP_DATA_DIR/names.txt`` if the variable is set and the file exists, else None."""
    root = os.environ.get("SITP_DATA_DIR")
    if not root:
        return None
    candidate = Path(root).expanduser() / "names.txt"
    return candidate if candidate.is_file() else None


def check_facts(data: bytes, facts: FileFacts) -> None:
    """Raises :class:`ChecksumError` unless ``data`` satisfies ``facts``.

    >>> check_facts(b"ava\\nemma\\n", FileFacts(num_bytes=9, num_lines=2))
    >>> try:
    ...     check_facts(b"ava\\nEmma\\n", FileFacts(num_bytes=9, num_lines=2))
    ... except ChecksumError as error:
    ...     print(error)
    line 2 is not a lower-case name: b'Emma'
    """
    if len(data) != facts.num_bytes:
        raise ChecksumError(f"expected {facts.num_bytes:,} bytes, got {len(data):,}")
    lines = data.splitlines()
    if len(lines) != facts.num_lines:
        raise ChecksumError(f"expected {facts.num_lines:,} lines, got {len(lines):,}")
    for number, line in enumerate(lines, start=1):
        if not _NAME_LINE.fullmatch(line):
            raise ChecksumError(f"line {number} is not a lower-case name: {line[:40]!r}")
    if facts.sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != facts.sha256.lower():
            raise ChecksumError(f"expected SHA-256 {facts.sha256}, got {digest}")


def write_atomically(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` so that ``path`` is either old or complete.

    Creates the directory, then uses the checkpoints' writer
    (:func:`sitp.serialization.write_atomically`: temporary file, fsync, rename).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, data)


def _manual_message(url: str, path: Path, what: str) -> str:
    return (
        f"could not download {url}: {what}.\n"
        f"To use it offline, download names.txt on a machine with internet access "
        f"and place it at\n    {path}\n"
        f"(or set SITP_CACHE to a directory holding makemore/names.txt), or use "
        f'load_names("offline"), the census names that install with sitp.'
    )


def download_makemore_names(
    *,
    url: str | None = None,
    facts: FileFacts = MAKEMORE_FACTS,
    path: str | os.PathLike | None = None,
    force: bool = False,
    timeout: float = 30.0,
) -> Path:
    """Returns the path of a checked local copy of makemore's names.txt.

    With ``$SITP_DATA_DIR`` set and holding ``names.txt``, that copy is checked and
    returned. Otherwise the first call downloads the file and caches it; later calls
    only check the cached copy. A cached copy that fails the check is downloaded again.

    Args:
        url: where to download from; defaults to :data:`MAKEMORE_URL`.
        facts: what the file must satisfy (see :data:`MAKEMORE_FACTS`).
        path: where to cache it; defaults to :func:`makemore_names_path`.
        force: download even if a good cached copy exists.
        timeout: seconds to wait for the server.

    Returns:
        The path of the cached file.

    Raises:
        OfflineError: if the file must be downloaded and the server cannot
            be reached; the message says where to place the file by hand.
        DownloadError: if the server answers with an HTTP error.
        ChecksumError: if the downloaded bytes fail the check (nothing is written).
    """
    default_source = url is None and path is None and facts is MAKEMORE_FACTS
    url = url or MAKEMORE_URL
    local = data_dir_copy() if default_source and not force else None
    if local is not None:  # $SITP_DATA_DIR: checked, read in place
        try:
            check_facts(local.read_bytes(), facts)
        except ChecksumError as error:
            raise ChecksumError(
                f"{local} (from SITP_DATA_DIR) is not makemore's names.txt: {error}"
            ) from None
        return local
    path = Path(path) if path is not None else makemore_names_path()
    problem = None
    if path.exists() and not force:
        try:
            check_facts(path.read_bytes(), facts)
            return path
        except ChecksumError as error:
            problem = f"the cached copy at {path} is damaged: {error}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except urllib.error.HTTPError as error:
        what = f"the server answered HTTP {error.code} {error.reason}"
        raise DownloadError(_manual_message(url, path, what)) from error
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        what = f"{getattr(error, 'reason', error)}; you seem to be offline"
        if problem:
            what += f", and {problem}"
        raise OfflineError(_manual_message(url, path, what)) from error
    try:
        check_facts(data, facts)
    except ChecksumError as error:
        raise ChecksumError(
            f"the file downloaded from {url} is not the expected one: {error}"
        ) from None
    write_atomically(path, data)
    return path
