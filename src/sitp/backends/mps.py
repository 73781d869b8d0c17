"""``sitp.backends.mps``: Apple's Metal GPUs, which sitp does not drive (its GPU backend
is CUDA): not available and not built, on any machine."""

from __future__ import annotations


def is_available() -> bool:
    """Whether an MPS device can be used: never in sitp."""
    return False


def is_built() -> bool:
    """Whether sitp was built with MPS support: no."""
    return False


__all__ = ["is_available", "is_built"]
