"""Process-level settings that make CPU training faster, each measured (docs/speed.md).

Kept apart from the model and the loop: they change how fast things run, never what is computed.
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory in the process instead of handing it back to the OS.

    A training step allocates and frees the same large tensors every time (a 64 MiB embedding gradient, Adam's
    temporaries, activations). By default glibc serves blocks above 32 MiB with mmap and returns them at free,
    and trims the heap, so every step page-faults its memory in again: on the base model that was ~15 % of a
    bf16 CPU step (zero-filling the embedding gradient alone took 146 ms). With mmap off and trimming off the
    memory is reused. The cost: the process keeps its peak memory until it exits. Returns False where this is
    not glibc (then nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
