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
* called from another numba function, it passes each argument through
  :func:`canonical` (arrays typed ``'A'``, constants as run-time values) to the kernel,
  so that every caller finds the same version instead of asking for a new one.
"""

from __future__ import annotations

import functools
import inspect

import numba
from numba import types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic, overload


@intrinsic
def canonical(typingctx, x):
    """``x`` as the kernel's one compiled version takes it: an array typed with layout
    ``'A'`` (no copy: in numba an array is the same structure whatever its layout), a
    constant such as ``False`` as a run-time value of its type (a literal would be a
    type of its own), anything else as it is."""
    if isinstance(x, types.Array):
        target = x.copy(layout="A")
    else:
        target = types.unliteral(x)
    sig = target(x)

    def codegen(context, builder, signature, args):
        if isinstance(x, types.Array):
            return impl_ret_borrowed(context, builder, signature.return_type, args[0])
        return context.cast(builder, args[0], x, target)

    return sig, codegen


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


def any_layout(dispatcher) -> AnyLayoutKernel:
    """Decorator, above ``@njit``: compile the kernel once per dtype, for any layout.

    Called from numba code, the wrapper is an overload inlined into the caller: it
    passes each argument through :func:`canonical` to the kernel, so every caller, of
    any layouts, calls the same compiled version (compiled, if need be, while the
    caller is typed).
    """
    kernel = AnyLayoutKernel(dispatcher)
    dispatcher._can_compile = False  # (numba's disable_compile wants a version first)
    params = ", ".join(inspect.signature(dispatcher.py_func).parameters)
    canon = ", ".join(f"canonical({p})" for p in params.split(", "))
    ns = {"dispatcher": dispatcher, "canonical": canonical, "kernel": kernel}
    # the typing function and the implementation take the kernel's own parameters
    exec(
        f"def typer({params}):\n    kernel.compile(({params},))\n    return impl\n"
        f"def impl({params}):\n    return dispatcher({canon})\n",
        ns,
    )
    overload(kernel, inline="always")(ns["typer"])
    return kernel
