"""Environment settings that must be in place before numba compiles anything.

``sitp/__init__.py`` imports this module before anything that imports numba.

numba's SLP vectorizer (the LLVM pass that merges independent scalar operations
into vector instructions) is off by default; the register-blocked GEMM micro-kernel
in ``sitp.blas`` needs it to turn its 6 x 16 accumulator tile into 12 AVX2
registers (about 25x faster). numba reads ``NUMBA_SLP_VECTORIZE`` into
``numba.config`` when numba is first imported and consults ``numba.config`` each
time it builds a pass manager, so we set both. A user's explicit setting wins.

Beware: numba's on-disk cache does not record this flag. A kernel compiled and
cached with the vectorizer off stays slow until its ``__pycache__/*.nbi``/``*.nbc``
files are deleted.
"""
import os
import sys

_USER_SET_SLP = "NUMBA_SLP_VECTORIZE" in os.environ
os.environ.setdefault("NUMBA_SLP_VECTORIZE", "1")

if "numba" in sys.modules and not _USER_SET_SLP:  # numba was imported before sitp
    sys.modules["numba"].config.SLP_VECTORIZE = 1

# Freed tensor memory stays in the process for the next tensor (see _malloc.py).
from . import _malloc  # noqa: E402

_malloc.tune()
