"""Shared memory whose NumPy views may outlive it (the loader's batch ring, its image cache), and the room
left for it."""
from __future__ import annotations

import os
import shutil
from multiprocessing import shared_memory
from typing import Optional

SHM_FOLDER = "/dev/shm"  # where Linux keeps POSIX shared memory (a tmpfs; Docker's default is 64 MB)


def shared_memory_free() -> Optional[int]:
    """Bytes free in Linux's /dev/shm (a write past a full tmpfs kills the writer with SIGBUS); None
    elsewhere, where nothing is checked."""
    if not os.path.isdir(SHM_FOLDER):
        return None
    return shutil.disk_usage(SHM_FOLDER).free


class SharedBuffer(shared_memory.SharedMemory):
    """Shared memory whose arrays may outlive it: an array handed out keeps its mapping alive, and
    closing it meanwhile is put off (BufferError) instead of reported at collection."""

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, BufferError):
            pass
