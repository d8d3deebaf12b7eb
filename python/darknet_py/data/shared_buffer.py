"""Shared memory whose NumPy views may outlive it (the loader's batch ring, its image cache)."""
from __future__ import annotations

from multiprocessing import shared_memory


class SharedBuffer(shared_memory.SharedMemory):
    """Shared memory whose arrays may outlive it: an array handed out keeps its mapping alive, and
    closing it meanwhile is put off (BufferError) instead of reported at collection."""

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, BufferError):
            pass
