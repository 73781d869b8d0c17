"""Environment settings that must be in place before numba compiles anything.

``sitp/__init__.py`` imports this module before anything that imports numba.

* **The SLP vectorizer.** numba's SLP vectorizer (the LLVM pass that merges
  independent scalar operations into vector instructions) is off by default; the
  fused kernels of chapter 4 rely on it. numba reads ``NUMBA_SLP_VECTORIZE`` into
  ``numba.config`` when numba is first imported and consults ``numba.config`` each
  time it builds a pass manager, so we set both. A user's explicit setting wins.
* **A cache that cannot lie.** numba's on-disk cache checks a kernel's source and
  the CPU, but not the vectorizer flags, the optimisation level, nor constants
  imported from other modules (the GEMM tile shape). So sitp keeps numba's cache in
  a directory named by :func:`sitp._target.cache_key`, a hash of all of them:
  ``~/.cache/sitp/numba/<key>`` (``$XDG_CACHE_HOME`` is honoured), or
  ``$NUMBA_CACHE_DIR/sitp-<key>`` when the user names a cache directory. It lies
  outside the source tree, so editors and ``mkdocs serve`` never see it change.
  ``sitp.show_config()`` prints where it is.
* **One cache for every copy of the sources.** numba files a kernel's cache under a
  hash of its source file's absolute path and checks the file's modification time, so
  two copies of the same sources (the repository's ``src/`` and an installed wheel,
  or a reinstall) would each compile every kernel again. :class:`PackageCacheLocator`
  files sitp's kernels by their path inside the package and checks a hash of the
  file's bytes instead; the directory's key already changes with any kernel source.
* **Each kernel compiled by one process.** Processes that start together on an empty
  cache (pytest's workers, the ranks of chapter 7, a page's subprocesses) would each
  compile the same kernels at the same time, a waste of every core but one.
  :func:`_compile_once` makes a process that is about to compile one of sitp's cached
  kernels take a lock file for that kernel and signature first; a process that waits
  for it then finds the kernel in the cache and loads it.
"""

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from sitp import _target

_USER_SET_SLP = "NUMBA_SLP_VECTORIZE" in os.environ
os.environ.setdefault("NUMBA_SLP_VECTORIZE", "1")

if "numba" in sys.modules and not _USER_SET_SLP:  # numba was imported before sitp
    sys.modules["numba"].config.SLP_VECTORIZE = 1


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
        return True
    except OSError:
        return False


def _user_cache_root():
    """The cache directory the user asked for, or None (ours, inherited by a child, is not)."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given and given == os.environ.get("_SITP_NUMBA_CACHE_DIR"):  # set by sitp in a parent
        return os.environ.get("_SITP_USER_NUMBA_CACHE_DIR") or None
    return given or None


def _cache_dir(key: str) -> Path:
    user = _user_cache_root()
    candidates = [Path(user) / f"sitp-{key}"] if user else [_target.default_cache_root() / key]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    candidates.append(Path(tempfile.gettempdir()) / f"sitp-numba-{uid}" / key)
    for path in candidates:
        if _writable(path):
            return path
    return candidates[0]  # numba will say that it cannot cache there


def _prune(current: Path, days: float = 14.0) -> None:
    """Remove sibling cache directories of other keys not used for ``days`` days."""
    try:
        os.utime(current)  # marks this key as in use
        cutoff = time.time() - days * 86400
        for other in current.parent.iterdir():
            if other != current and other.is_dir() and other.stat().st_mtime < cutoff:
                shutil.rmtree(other, ignore_errors=True)
    except OSError:
        pass


_USER_CACHE_ROOT = _user_cache_root()
CACHE_DIR = str(_cache_dir(_target.cache_key()))
_prune(Path(CACHE_DIR))
os.environ["NUMBA_CACHE_DIR"] = os.environ["_SITP_NUMBA_CACHE_DIR"] = CACHE_DIR
if _USER_CACHE_ROOT:
    os.environ["_SITP_USER_NUMBA_CACHE_DIR"] = _USER_CACHE_ROOT
if "numba" in sys.modules:
    sys.modules["numba"].config.CACHE_DIR = CACHE_DIR


# isort: split
# numba is imported only now, after the settings above.
from numba.core import caching as _caching  # noqa: E402

_PACKAGE = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class PackageCacheLocator(_caching._SourceFileBackedLocatorMixin, _caching._CacheLocator):
    """numba's cache locator for functions defined in sitp's own files: the cache lives
    in CACHE_DIR under the file's folder inside the package, and a cached kernel is
    fresh while the file's bytes are the same (numba's own locators key on the absolute
    path and the modification time)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        inside = Path(py_file).resolve().relative_to(_PACKAGE)
        self._cache_path = os.path.join(CACHE_DIR, *inside.parent.parts)

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return _digest(self._py_file)

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            Path(py_file).resolve().relative_to(_PACKAGE)
        except (ValueError, OSError):
            return None  # not sitp's: numba's own locators decide
        return super().from_function(py_func, py_file)


if PackageCacheLocator not in _caching.CacheImpl._locator_classes:
    _caching.CacheImpl._locator_classes.insert(0, PackageCacheLocator)


# isort: split
from numba.core import dispatcher as _dispatcher  # noqa: E402
from numba.core import sigutils as _sigutils  # noqa: E402
from numba.core.compiler_lock import global_compiler_lock as _compiler_lock  # noqa: E402

try:
    import fcntl as _fcntl
except ImportError:  # Windows: no lock; at worst two processes compile the same kernel
    _fcntl = None


def compile_lock_path(dispatcher, sig) -> Path | None:
    """The lock file a process holds while it compiles ``dispatcher`` for ``sig``, or None
    for a function that is not one of sitp's cached kernels."""
    impl = getattr(getattr(dispatcher, "_cache", None), "_impl", None)
    locator = getattr(impl, "_locator", None)
    if not isinstance(locator, PackageCacheLocator):
        return None
    args, return_type = _sigutils.normalize_signature(sig)
    func = dispatcher.py_func
    name = f"{locator._py_file}:{func.__qualname__}:{args}:{return_type}"
    digest = hashlib.sha256(name.encode()).hexdigest()[:24]
    return Path(locator.get_cache_path()) / ".locks" / f"{func.__name__}-{digest}.lock"


@contextlib.contextmanager
def _held(path: Path):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a")  # noqa: SIM115 (closed below, which releases the lock)
    except OSError:  # an unwritable cache: numba will say so; compile unlocked
        yield
        return
    try:
        _fcntl.flock(f, _fcntl.LOCK_EX)
        yield
    finally:
        f.close()


# numba's method (the one this module wraps, if it is imported again)
_numba_compile = getattr(
    _dispatcher.Dispatcher.compile, "__wrapped__", _dispatcher.Dispatcher.compile
)


def _compile_once(self, sig):
    """numba's ``Dispatcher.compile``, holding the kernel's lock file around it.

    numba's own method first looks in the cache, so a process that waited for the lock
    loads what the other one saved. The lock is taken inside numba's compiler lock (one
    thread of a process compiles at a time). A kernel holds its lock while its callees
    take theirs, always down the call graph, which has no cycles: two processes cannot
    each wait for the other. The operating system releases the lock of a process that
    dies.
    """
    if _fcntl is None:
        return _numba_compile(self, sig)
    path = compile_lock_path(self, sig)
    if path is None or tuple(_sigutils.normalize_signature(sig)[0]) in self.signatures:
        return _numba_compile(self, sig)
    with _compiler_lock, _held(path):
        return _numba_compile(self, sig)


_compile_once.__wrapped__ = _numba_compile
_dispatcher.Dispatcher.compile = _compile_once
