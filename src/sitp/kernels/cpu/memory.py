"""Keep freed tensor memory in the process, so the next tensor of that size reuses it.

Every op allocates its output, and a GPT step at batch 32 x block 32 makes dozens
of arrays of 0.25 to 1 MiB. glibc's ``malloc`` serves a request of that size with a
fresh ``mmap`` of zeroed pages (the default threshold is 128 KiB, rising only
as far as the largest block freed so far), and gives it back to the kernel with
``munmap`` when it is freed. So the next step's arrays of the same size start on
pages the kernel must map and zero again, one page fault per 4 KiB the first time
each is written: 5,655 faults and 16.6 ms of system time in an 82 ms step
(``scripts/page_faults.py``, one thread).

Two ``mallopt`` settings keep that memory in the process instead: requests below
32 MiB come from malloc's own heap, and the heap keeps up to 256 MiB of freed space
rather than trimming it. Freed blocks are then reused as they are: the same step
makes 3 page faults and takes 67 ms. This is what GPU frameworks do with a caching
allocator (section 4.3), here done by the C library. The price is that the
process's memory does not shrink after a large temporary is freed.

Only glibc (Linux) has ``mallopt``; elsewhere, or with ``SITP_MALLOC_TUNING=0`` in
the environment, nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# mallopt parameters, from glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024  # below this, malloc uses its heap, not mmap
TRIM_THRESHOLD = 256 * 1024 * 1024  # free heap space kept before returning memory

applied = False  # whether tune() changed the settings


def tune() -> bool:
    """Apply the two settings (once); returns whether they are in effect."""
    global applied
    if applied:
        return True
    if os.environ.get("SITP_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    applied = bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return applied
