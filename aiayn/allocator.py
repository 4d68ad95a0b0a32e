"""glibc's allocator: keep freed memory in the process, or hand it back now. Plain ctypes, no torch, so that a command
that runs without torch (`aiayn translate --engine ct2`) gets the setting too; runtime.configure_process applies it
for every other command (aiayn.fast's table lists it among the fast paths)."""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory in the process instead of handing it back to the OS.

    A training step allocates and frees the same large tensors every time; by default glibc serves blocks above
    32 MiB with mmap and returns them at free, and trims the heap, so every step page-faults its memory in again.
    With mmap off and trimming off the memory is reused; the process keeps its peak memory until it exits.
    Returns False where this is not glibc (then nothing changes)."""
    mallopt = _glibc("mallopt")
    return mallopt is not None and bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def _glibc(name: str):
    """glibc's function `name`, or None where this is not Linux with glibc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> bool:
    """Hand the memory glibc's malloc holds free back to the OS now (malloc_trim: the heap's top and every whole free
    page inside it), e.g. after a one-off conversion freed a model's worth of weights that `keep_freed_memory` would
    otherwise keep in the process. Pages used again later are faulted in then. False where this is not glibc."""
    malloc_trim = _glibc("malloc_trim")
    return malloc_trim is not None and bool(malloc_trim(0))
