"""Downloading the book's two corpora once, checking them, and caching them.

makemore's ``names.txt`` lives at :data:`MAKEMORE_URL` and is cached as
``makemore/names.txt``; tinyshakespeare (Part III) lives at :data:`TINYSHAKESPEARE_URL`
and is cached as ``tinyshakespeare/input.txt``, both under the sitp cache directory
(:func:`cache_dir`), and read from there on every later call, so only the first call
needs the network.

What is checked. :data:`MAKEMORE_FACTS` pins the file's size (228,145 bytes), its
number of lines (32,033), that every line is a name of the letters a–z, and its
SHA-256 digest (``0a30b555…cc4d``); :data:`TINYSHAKESPEARE_BYTES` and
:data:`TINYSHAKESPEARE_SHA256` pin tinyshakespeare's size (1,115,394 bytes) and
digest (``86c4e6aa…65ed``). A downloaded, cached or local copy that disagrees with any of them is rejected with
:class:`ChecksumError`.

Where a file is looked for, in order: ``$SITP_DATA_DIR/names.txt`` (or
``$SITP_DATA_DIR/tinyshakespeare.txt``) if that variable is set (the tests and CI,
which have no network, point it at a shared copy; the file is checked and read in
place, never copied); the cache; the network.

The file is written atomically: the bytes go to a temporary file in the
cache directory, which :func:`os.replace` then renames onto its name.
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
from typing import Callable

from sitp.serialization import write_atomically as _write_atomically

#: Where makemore's names live.
MAKEMORE_URL = "https://raw.githubusercontent.com/karpathy/makemore/master/names.txt"

#: Where tinyshakespeare lives: char-rnn's ``input.txt``, which nanoGPT downloads too.
TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)

#: What a good copy of tinyshakespeare is: its size and SHA-256 digest.
TINYSHAKESPEARE_BYTES = 1_115_394
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


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
    """A corpus is not cached and could not be downloaded."""


class OfflineError(DownloadError):
    """A corpus is not cached and the server could not be reached."""


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


def tinyshakespeare_path() -> Path:
    """Where the cached copy of tinyshakespeare is (or will be) stored.

    >>> tinyshakespeare_path().relative_to(cache_dir()).as_posix()
    'tinyshakespeare/input.txt'
    """
    return cache_dir() / "tinyshakespeare" / "input.txt"


def data_dir_copy(name: str = "names.txt") -> Path | None:
    """``$SITP_DATA_DIR/<name>`` if the variable is set and the file exists, else None."""
    root = os.environ.get("SITP_DATA_DIR")
    if not root:
        return None
    candidate = Path(root).expanduser() / name
    return candidate if candidate.is_file() else None


def check_digest(data: bytes, num_bytes: int, sha256: str) -> None:
    """Raises :class:`ChecksumError` unless ``data`` has this size and SHA-256 digest.

    >>> check_digest(b"abc", 3, hashlib.sha256(b"abc").hexdigest())
    >>> try:
    ...     check_digest(b"abcd", 3, "0" * 64)
    ... except ChecksumError as error:
    ...     print(error)
    expected 3 bytes, got 4
    """
    if len(data) != num_bytes:
        raise ChecksumError(f"expected {num_bytes:,} bytes, got {len(data):,}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256.lower():
        raise ChecksumError(f"expected SHA-256 {sha256}, got {digest}")


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


def _manual_message(url: str, path: Path, what: str, hint: str) -> str:
    return (
        f"could not download {url}: {what}.\n"
        f"To use it offline, download {Path(url).name} on a machine with internet access "
        f"and place it at\n    {path}\n{hint}"
    )


_NAMES_HINT = (
    "(or set SITP_CACHE to a directory holding makemore/names.txt), or use "
    'load_names("offline"), the census names that install with sitp.'
)
_SHAKESPEARE_HINT = (
    "(or set SITP_DATA_DIR to a directory holding it as tinyshakespeare.txt, or "
    "SITP_CACHE to one holding tinyshakespeare/input.txt)."
)


def _fetch(
    url: str,
    path: Path,
    check: Callable[[bytes], None],
    local: Path | None,
    hint: str,
    force: bool,
    timeout: float,
) -> Path:
    """The downloaders' common path: the local copy, else the cache, else the network."""
    if local is not None:  # $SITP_DATA_DIR: checked, read in place
        try:
            check(local.read_bytes())
        except ChecksumError as error:
            raise ChecksumError(
                f"{local} (from SITP_DATA_DIR) is not the expected file: {error}"
            ) from None
        return local
    problem = None
    if path.exists() and not force:
        try:
            check(path.read_bytes())
            return path
        except ChecksumError as error:
            problem = f"the cached copy at {path} is damaged: {error}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except urllib.error.HTTPError as error:
        what = f"the server answered HTTP {error.code} {error.reason}"
        raise DownloadError(_manual_message(url, path, what, hint)) from error
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        what = f"{getattr(error, 'reason', error)}; you seem to be offline"
        if problem:
            what += f", and {problem}"
        raise OfflineError(_manual_message(url, path, what, hint)) from error
    try:
        check(data)
    except ChecksumError as error:
        raise ChecksumError(
            f"the file downloaded from {url} is not the expected one: {error}"
        ) from None
    write_atomically(path, data)
    return path


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
    local = data_dir_copy("names.txt") if default_source and not force else None
    path = Path(path) if path is not None else makemore_names_path()
    return _fetch(
        url or MAKEMORE_URL,
        path,
        lambda data: check_facts(data, facts),
        local,
        _NAMES_HINT,
        force,
        timeout,
    )


def download_tinyshakespeare(
    *,
    url: str | None = None,
    path: str | os.PathLike | None = None,
    force: bool = False,
    timeout: float = 30.0,
    num_bytes: int = TINYSHAKESPEARE_BYTES,
    sha256: str = TINYSHAKESPEARE_SHA256,
) -> Path:
    """Returns the path of a checked local copy of tinyshakespeare (1,115,394 bytes).

    The same order as :func:`download_makemore_names`: ``$SITP_DATA_DIR/tinyshakespeare.txt``
    (checked, read in place), else the cached copy (checked), else a download, checked
    before it is written atomically to the cache.

    Args:
        url: where to download from; defaults to :data:`TINYSHAKESPEARE_URL`.
        path: where to cache it; defaults to :func:`tinyshakespeare_path`.
        force: download even if a good cached copy exists.
        timeout: seconds to wait for the server.
        num_bytes, sha256: the size and digest the file must have (tests change them).

    Returns:
        The path of the checked file.

    Raises:
        OfflineError: the file is nowhere on disk and the server cannot be reached; the
            message says where to place the file by hand.
        DownloadError: the server answers with an HTTP error.
        ChecksumError: a copy (downloaded, cached or in ``$SITP_DATA_DIR``) has another
            size or digest; a bad download writes nothing.
    """
    default_source = url is None and path is None and sha256 == TINYSHAKESPEARE_SHA256
    local = data_dir_copy("tinyshakespeare.txt") if default_source and not force else None
    path = Path(path) if path is not None else tinyshakespeare_path()
    return _fetch(
        url or TINYSHAKESPEARE_URL,
        path,
        lambda data: check_digest(data, num_bytes, sha256),
        local,
        _SHAKESPEARE_HINT,
        force,
        timeout,
    )


def load_tinyshakespeare() -> str:
    """The text of tinyshakespeare (downloaded once and checked; see above)."""
    return download_tinyshakespeare().read_text(encoding="utf-8")
