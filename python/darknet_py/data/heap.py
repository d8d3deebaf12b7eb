"""Freed memory kept in the process for the next image: the loader's cure for page faults.

Each sample allocates a few full-size 8-bit images (decode, crop, HSV; 0.5 MB at 416x416) and frees
them. glibc hands blocks of that size back to the kernel (mmap above its threshold, heap trimming
below it), so the next sample faults its pages in again: 620 minor faults and 1.5-2.8 ms of system
time per 416x416 sample measured on a 2-core machine, as much as the decoding itself. Raising the
mmap and trim thresholds keeps the blocks in the heap, where the next sample reuses them (0 faults).
It costs at most the trim threshold of unused heap per arena (a thread's arena, or a process).
"""
from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit): blocks up to 32 MB from the heap
TRIM_THRESHOLD = 128 << 20  # unused heap above this is returned to the kernel


def keep_freed_memory() -> bool:
    """Set the thresholds for this process (idempotent); False where the C library is not glibc's
    (macOS, musl: their allocators keep their own policy)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
