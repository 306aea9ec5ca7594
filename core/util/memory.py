"""Handing freed memory back to the operating system after a burst (glibc only; elsewhere a no-op).

glibc keeps memory that Python freed inside its heaps for reuse, so after thousands of short-lived
connections (a flood, a crowd of newcomers) the process stays as large as at the peak although
nothing uses that memory. ``malloc_trim`` returns the free pages. Other C libraries (macOS, Windows,
musl) return memory on their own terms and have no such call: there this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def release_free_memory() -> bool:
    """Collect cyclic garbage, then return free heap pages to the OS; False where the C library
    cannot (the garbage is collected anyway).

    Connections are cycles of objects that only the cyclic collector frees, and it runs rarely in a
    quiet process, so a burst's connections would hold their memory for minutes without it. Takes
    some milliseconds to a few hundred (a large heap): call it after bursts, not in loops."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
