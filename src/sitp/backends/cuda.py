"""``sitp.backends.cuda``: torch's switches for GPU matrix products.

``matmul.allow_tf32`` lets torch's float32 GEMMs run on the tensor cores in TF32 (10-bit
mantissas); ``matmul.allow_fp16_reduced_precision_reduction`` and its bf16 twin let
half-precision GEMMs add partial sums in half precision. sitp's GPU GEMMs (chapter 4.4)
are its own numba kernels, which multiply and add float32 on the CUDA cores, and sitp
has no half-precision dtypes: the switches are kept, checked and read back as in torch,
and they change no result. ``is_built()`` is True: sitp's CUDA backend is part of every
install (``sitp.cuda.is_available()`` says whether a GPU is there to run it).
"""

from __future__ import annotations

from sitp.backends._flags import BoolFlag


class _Matmul:
    """``sitp.backends.cuda.matmul``: the precision switches of GPU matrix products."""

    __slots__ = ()
    allow_tf32 = BoolFlag(False, "set_allow_tf32_cublas")
    allow_fp16_reduced_precision_reduction = BoolFlag(True, "", pair=True)
    allow_bf16_reduced_precision_reduction = BoolFlag(True, "", pair=True)

    def __setattr__(self, name, value):
        if not hasattr(type(self), name):
            raise AttributeError(f"Unknown attribute {name}")
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        raise AttributeError(f"Unknown attribute {name}")


matmul = _Matmul()


def is_built() -> bool:
    """Whether sitp has a CUDA backend: always (it is numba code, not a separate build)."""
    return True


__all__ = ["is_built", "matmul"]
