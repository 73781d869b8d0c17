"""Environment settings that must be in place before numba is first imported.

``sitp/__init__.py`` imports this module before anything that imports numba.
Variables are only set when the user has not set them already.
"""
import os

# numba's SLP vectorizer is off by default; the register-blocked GEMM
# micro-kernel in ``sitp.blas`` relies on it to emit packed FMAs.
os.environ.setdefault("NUMBA_SLP_VECTORIZE", "1")
