"""sitp.compile: capture a tensor program, fuse it and generate numba kernels (chapter 6).

``sitp.compile(fn)`` returns a callable that traces ``fn`` on its first call
(``capture.py``), builds a graph of backend calls (``graph.py``), runs the passes
(``passes.py``: dead code, common subexpressions, constant folding, fusion, memory
planning), generates numba kernels for the fused groups (``codegen.py``) and replays the
program on later calls with the same guarded signature (``api.py``, ``runtime.py``).
"""

from sitp.compile.api import CompiledFunction, cache_size_limit, compile, explain  # noqa: A004

__all__ = ["CompiledFunction", "cache_size_limit", "compile", "explain"]
