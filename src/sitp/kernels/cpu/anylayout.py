"""One compiled kernel for every layout of its arrays (section 2.3).

numba compiles a function once per combination of its arguments' types, and the type of
an array includes its layout: ``'C'`` (rows contiguous), ``'F'`` (columns contiguous,
a transposed view) or ``'A'`` (any strides). A GEMM called with A, B and C each in one of
three layouts, in two dtypes, with or without a bias, can be compiled some fifty times;
the register-tiled kernels take seconds each to compile, and a fresh numba cache spent
half of the test suite's compile time on them.

The kernels here read their operands through explicit strides (the tiles of
:func:`sitp.kernels.cpu.blas.packed.make_tile_fma` take a stride per operand), so
knowing a layout at compile time buys them nothing. :func:`any_layout` wraps such a
kernel so that it is compiled once per dtype, with every array typed ``'A'``:

* called from Python, the wrapper picks the compiled version for the arguments' dtypes
  and calls it directly (numba's own dispatch would compile a new version for a new
  layout);
* called from another numba function, it is typed as the kernel's own dispatcher, whose
  typing compiles (or loads) the ``'A'`` version for the arguments' dtypes and offers
  numba only that version: numba converts the caller's arrays to it, as it does for a
  function compiled ahead with an explicit signature. Every caller, of any layouts,
  calls the same machine code, and nothing is compiled per caller.
"""

from __future__ import annotations

import functools

import numba
from numba import types


def _any_type(t):
    return t.copy(layout="A") if isinstance(t, types.Array) else types.unliteral(t)


class AnyLayoutKernel:
    """A numba kernel compiled only with every array argument typed layout ``'A'``.

    Call it like the kernel. ``dispatcher`` is numba's dispatcher of the kernel, with
    compiling at call time switched off: numba's dispatch (in C) then passes arrays of
    any layout to the ``'A'`` version, converting their types. A call whose dtypes
    have no version yet compiles one (or loads it from numba's cache) and retries.
    """

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        functools.update_wrapper(self, dispatcher.py_func)

    def __call__(self, *args):
        try:
            return self.dispatcher(*args)
        except TypeError:
            sig = tuple(_any_type(numba.typeof(a)) for a in args)
            if sig in self.dispatcher.overloads:
                raise  # compiled already: the error is another one
            self.compile(sig)
            return self.dispatcher(*args)

    def compile(self, sig):
        """Compile the version for ``sig`` (argument types, arrays of layout ``'A'``)."""
        sig = tuple(_any_type(t) for t in sig)
        d = self.dispatcher
        if sig not in d.overloads:
            d._can_compile = True
            try:
                d.compile(sig)
            finally:
                d._can_compile = False
        return sig

    @property
    def signatures(self):
        return self.dispatcher.signatures

    @property
    def py_func(self):
        return self.dispatcher.py_func

    def inspect_asm(self, signature=None):
        return self.dispatcher.inspect_asm(signature)

    def inspect_llvm(self, signature=None):
        return self.dispatcher.inspect_llvm(signature)

    def __repr__(self) -> str:
        return f"any_layout({self.dispatcher.py_func.__qualname__})"

    @property
    def _numba_type_(self):
        """What numba code that calls the kernel sees: its dispatcher (:func:`any_layout`)."""
        return types.Dispatcher(self.dispatcher)


def any_layout(dispatcher) -> AnyLayoutKernel:
    """Decorator, above ``@njit``: compile the kernel once per dtype, for any layout.

    numba code that calls the wrapper sees the kernel's dispatcher (``_numba_type_``).
    Its typing compiles the ``'A'`` version for the call's dtypes if there is none yet,
    then offers numba the versions compiled so far, all ``'A'``: numba picks the one
    of the call's dtypes and converts the arguments to it (an array's layout, a
    constant's literal type).
    """
    kernel = AnyLayoutKernel(dispatcher)
    dispatcher._can_compile = False  # (numba's disable_compile wants a version first)
    typing = type(dispatcher).get_call_template

    def get_call_template(args, kws):
        kernel.compile(tuple(args) + tuple(kws.values()))
        return typing(dispatcher, args, kws)

    dispatcher.get_call_template = get_call_template
    return kernel
