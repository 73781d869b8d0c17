"""``sitp.cuda``: the GPU device (the Numba CUDA backend is chapter 4.3's work).

This build runs every op on the CPU; ``is_available()`` says so, and asking
for ``device="cuda"`` raises a clear error rather than silently using the CPU.
"""


def is_available() -> bool:
    """Whether sitp can run ops on a CUDA device in this build: not yet."""
    return False


def device_count() -> int:
    return 0


def synchronize() -> None:
    """Nothing to wait for on the CPU."""


def manual_seed(seed: int) -> None:
    """Accepted for compatibility; the CPU generator is seeded by ``sitp.manual_seed``."""


def manual_seed_all(seed: int) -> None:
    """Accepted for compatibility."""
