"""Decoded training images kept in shared memory: each file is decoded once per run, not once per draw.

Darknet decodes an image every time it is drawn, and so does this loader without the cache: decoding a
416x416 JPEG was 0.66-0.70 ms of a 1.8-2.3 ms sample on the 16-core H100 host, a third of the loader's CPU
(benchmarks/RESULTS_GPU.md, "The loader alone"). With the cache a file is decoded by the first worker that
draws it; every later draw, in any worker thread or process, reads the decoder's pixels back. They are the
same bytes, so the batches do not change (src-test/test_image_cache.py).

One region of memory holds a table with an entry per training image and `capacity` bytes of pixels;
src-lib/loader_image_cache.cpp coordinates the workers through atomics in it, and nobody waits on anyone.
Images that do not fit are decoded at each draw as before. For worker processes the region is shared
memory: the loader's process creates it and a worker attaches to it by name (pickling an ImageCache sends
the name). For threads it is the process's own anonymous memory, which no /dev/shm size limits. Either
way pages are taken only as images are stored. A cached image is handed out as a read-only view:
augmentation never writes into its source image.
"""
from __future__ import annotations

import mmap
import os
import sys
import weakref
from multiprocessing import shared_memory
from typing import Any, Dict, Optional

import numpy as np

from .. import _core
from .shared_buffer import SharedBuffer, shared_memory_free

AUTO_MEMORY_SHARE = 4  # auto: at most a quarter of the memory available when training starts


def available_memory() -> Optional[int]:
    """Bytes of memory available now (Linux's MemAvailable; elsewhere the physical memory), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def auto_capacity(ranks_on_host: int = 1, shared: bool = True) -> int:
    """The cache's size by default: a quarter of the available memory, shared among this host's
    data-parallel ranks (each keeps its own cache); a shared cache also at most half of Linux's /dev/shm
    free space (a write past a full tmpfs kills the writer with SIGBUS). Pages are taken only as images are
    stored, so a dataset smaller than this costs its own decoded size, not the whole budget. 0 on Windows,
    which commits such memory in full when it is made."""
    if sys.platform == "win32":
        return 0
    capacity = (available_memory() or 0) // AUTO_MEMORY_SHARE // max(1, ranks_on_host)
    free = shared_memory_free() if shared else None
    if free is not None:
        capacity = min(capacity, free // 2)
    return max(0, capacity)


class ImageCache:
    """Decoded images of a training list (index = the image's position in the list), up to `capacity`
    bytes of pixels; shared=True: in shared memory that worker processes attach to, else in this
    process's memory (for threads)."""

    def __init__(self, images: int, capacity: int, shared: bool = True, name: Optional[str] = None) -> None:
        if images < 0 or capacity < 0:
            raise ValueError(f"an image cache needs non-negative images and capacity, got {images}, {capacity}")
        size = max(1, _core.image_cache_region_bytes(images, capacity))
        if shared:  # name: one that other processes know (data-parallel ranks); default a fresh one
            self._memory: "shared_memory.SharedMemory | mmap.mmap" = SharedBuffer(create=True, size=size, name=name)
            self._buf = self._memory.buf
            # the creator unlinks the name; attached processes only unmap
            self._finalizer = weakref.finalize(self, _unlink, self._memory)
        else:
            self._memory = mmap.mmap(-1, size)  # anonymous: zero pages, taken as they are written
            self._buf = memoryview(self._memory)
            self._finalizer = weakref.finalize(self, _close, self._memory, self._buf)
        self._foreign = False  # made here: this process frees it
        _core.image_cache_init(self._buf, images, capacity)

    @property
    def name(self) -> Optional[str]:
        """The shared memory's name, or None for a cache in this process's memory."""
        return getattr(self._memory, "name", None)

    def __getstate__(self) -> Dict[str, Any]:
        if self.name is None:
            raise TypeError("an image cache in a process's own memory (shared=False) cannot go to another process")
        return {"name": self.name, "foreign": self._foreign}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._memory = SharedBuffer(name=state["name"])
        self._buf = self._memory.buf
        self._finalizer = weakref.finalize(self, _close, self._memory)
        self._foreign = state.get("foreign", False)
        if self._foreign:
            _untrack(self._memory)

    @classmethod
    def attach(cls, name: str) -> "ImageCache":
        """The cache another process made under `name` (a data-parallel rank's on this host), mapped here;
        its maker frees it. (A worker process gets its loader's cache by pickling instead.)"""
        cache = cls.__new__(cls)
        cache.__setstate__({"name": name, "foreign": True})
        return cache

    def get(self, index: int) -> Optional[np.ndarray]:
        """Image `index` as it was stored (a read-only view), or None."""
        found = _core.image_cache_find(self._buf, index)
        if found is None:
            return None
        offset, rows, cols, channels = found
        image = np.ndarray((rows, cols, channels) if channels else (rows, cols), np.uint8, self._buf, offset)
        image.flags.writeable = False
        return image

    def put(self, index: int, image: np.ndarray) -> bool:
        """Stores a decoded image (uint8, HxW or HxWxC, C-contiguous) unless it is stored or being stored, or
        does not fit; whether this call stored it."""
        return _core.image_cache_store(self._buf, index, image)

    def stats(self) -> Dict[str, int]:
        """images (the entries it indexes), capacity and used (bytes of pixels), stored (images), hits and
        misses (lookups) so far, all workers together."""
        return _core.image_cache_stats(self._buf)

    def close(self) -> None:
        """Unmaps it here (and, in the process that created it, frees it)."""
        self._finalizer()


def _untrack(shm: shared_memory.SharedMemory) -> None:
    """Python before 3.13 registers an attached segment with this process's resource tracker (shared with
    the worker processes it spawns), which unlinks it when they end: not ours to free when another process
    made it (a data-parallel rank's cache: its maker frees it)."""
    try:
        from multiprocessing import resource_tracker

        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        pass


def _close(memory: "shared_memory.SharedMemory | mmap.mmap", view: Optional[memoryview] = None) -> None:
    try:
        if view is not None:
            view.release()
        memory.close()
    except BufferError:  # a view of a cached image still lives: the mapping goes with it
        pass


def _unlink(shm: shared_memory.SharedMemory) -> None:
    try:
        shm.unlink()
    except FileNotFoundError:
        pass
    _close(shm)
