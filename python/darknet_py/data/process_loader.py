"""The training batches prepared in worker processes: the loader's path that scales with cores.

In threads (loader._Engine) the Python between OpenCV's calls holds the GIL; in processes every
step runs in parallel. Each worker process runs the same SampleMaker.sample as the threads (same
seed rules, same code: the same bits) and writes its images straight into a batch buffer in shared
memory; a job is a few rows of a batch, and only the truths (a few boxes) and bad-file reports
travel back, each worker's through a pipe of its own. The batches are the caller's without a copy: a
ring of prefetch + 2 buffers, so the arrays of the last two batches handed out stay intact while the next ones are
prepared (train() uploads a batch before it asks for the next one). The buffers last across multi-scale
resizes (one is replaced only when too small), so train() page-locks them once for its GPU (pin_for):
the batches then go up by DMA straight from the memory the workers wrote. Workers start with `spawn`
(never `fork`: the parent may hold a GPU context and threads), so a script that trains through
processes needs the usual `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import time
from multiprocessing import shared_memory
from multiprocessing.connection import wait
from typing import Dict, List, Optional, Tuple

import cv2
import numpy as np

from .heap import keep_freed_memory
from .sampler import SampleMaker
from .shared_buffer import SHM_FOLDER, SharedBuffer, shared_memory_free

Batch = Tuple[np.ndarray, List[np.ndarray]]


class _ForwardingReporter:
    """A worker's reporter: bad files go to the parent, whose DataReporter reports each once."""

    def __init__(self, results) -> None:
        self.results = results

    def report(self, kind: str, path: str, message: str) -> bool:
        self.results.send(("report", kind, path, message))
        return True


def joined_truths(truths: List[np.ndarray]) -> Tuple[np.ndarray, List[int]]:
    """A job's truths as one (n, 5) float32 array and each row's count: one array to pickle (3 us) instead
    of eight (24 us), and on the parent's side one to unpickle."""
    if not truths:
        return np.zeros((0, 5), np.float32), []
    return np.concatenate(truths), [len(t) for t in truths]


def split_truths(joined: np.ndarray, counts: List[int]) -> List[np.ndarray]:
    """joined_truths undone: each row's truths, a view of the joined array."""
    out, start = [], 0
    for n in counts:
        out.append(joined[start:start + n])
        start += n
    return out


def _portable_error(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # an exception that does not pickle: its type and message
        return RuntimeError(f"{type(e).__name__}: {e}")


# OpenCV's threads per worker process. Its pool splits a 416x416 resize or colour conversion into pieces
# too small to pay for the hand-over: with 2 threads a worker took 4.3 ms of CPU per image against 3.1 ms
# with 1, at the same images/s (2-core AMD EPYC, one worker); on the 16-core H100 host one worker
# (16 threads) took 12.0 ms per image, 14 workers (1 thread each) 5.0 ms. The workers are the parallelism.
WORKER_CV_THREADS = 1


NICE_ENV = "DARKNET_PY_LOADER_NICE"
DEFAULT_NICE = 10


def worker_niceness() -> int:
    """How far workers lower their priority (DARKNET_PY_LOADER_NICE, default 10; 0 keeps the parent's)."""
    text = os.environ.get(NICE_ENV, "").strip()
    try:
        return max(0, min(19, int(text))) if text else DEFAULT_NICE
    except ValueError:
        raise ValueError(f"{NICE_ENV}={text!r} is not a whole number (0 to 19)") from None


def lower_priority(niceness: int) -> None:
    """Workers yield the CPU to the training process, whose loop (each batch's copy for the device, the
    step's launches) is the critical path. With a worker per core it waited for cores the workers held:
    bf16 `train` on one H100 with 14 workers on 16 cores went from 3356 / 3298 to 3884 / 3998 images/s
    (benchmarks/RESULTS_GPU.md, "Worker priority"). A worker lowers only its own priority, which any
    process may do."""
    if niceness and hasattr(os, "nice"):
        os.nice(niceness)


def _worker_main(maker: SampleMaker, jobs, results, current_gen, keep: int, parent: int, niceness: int,
                 dtype: str) -> None:
    """A worker process: jobs (buffer name, batch shape, gen, k, rows j0..j1) -> the images into the buffer,
    one message back per job, a job dropped by set_size included (the truths of its rows, joined_truths, or
    the first error; the parent rewrites a buffer only once every job of it has answered), written by this
    thread to `results`, its end of its own pipe to the parent. (A multiprocessing.Queue hands each message
    to a feeder thread: its wake-ups put the worker's CPU beyond sample() at 77-82 us per image on the
    2-core VM, 43-51 us with the pipe; benchmarks/RESULTS.md.)
    It keeps the `keep` buffers it used last attached (the parent's ring). OpenCV runs on this one thread
    (WORKER_CV_THREADS). Its results do not depend on the count.
    `parent`: the parent's pid, passed in (the parent may die while this process still starts); `niceness`:
    lower_priority's; `dtype`: the batch buffers' (the engine's, one for all its batches).
    Samples run in this process's main thread, whose heap glibc trims after every image: the thresholds
    are raised first (heap.py; without it a 416x416 sample spends as much in page faults as in decoding)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent handles it
    keep_freed_memory()
    cv2.setNumThreads(WORKER_CV_THREADS)
    lower_priority(niceness)
    maker.reporter = _ForwardingReporter(results)
    attached: Dict[str, shared_memory.SharedMemory] = {}
    while True:
        try:
            job = jobs.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:  # the parent was killed: do not linger as an orphan
                break
            continue
        if job is None:
            break
        name, shape, gen, k, j0, j1 = job
        truths: List[np.ndarray] = []
        error = None
        try:
            if gen == current_gen.value:  # else dropped by set_size before it started: answered without a row
                shm = attached.get(name)
                if shm is None:
                    if len(attached) >= keep:  # the oldest: most likely one the parent has replaced
                        attached.pop(next(iter(attached))).close()
                    shm = attached[name] = shared_memory.SharedMemory(name=name)
                images = np.ndarray(shape, dtype, buffer=shm.buf)
                for j in range(j0, j1):
                    if gen != current_gen.value:
                        break  # dropped by set_size while it ran: the rest is skipped
                    truths.append(maker.sample(k, j, shape[3], shape[2], out=images[j])[1])
        except BaseException as e:  # handed to the caller by next_batch
            error = _portable_error(e)
        try:
            results.send(("done", name, gen, k, j0, j1, *joined_truths(truths), error))
        except (BrokenPipeError, ConnectionResetError):  # the parent is gone
            break
    for shm in attached.values():
        shm.close()


MAX_ROWS_PER_JOB = 8  # a job is a few rows of a batch: one message each way per job, not per image


def rows_per_job(batch_size: int, workers: int) -> int:
    """Rows of a batch per job: up to MAX_ROWS_PER_JOB (one job per image cost the parent 0.16-0.21 ms of
    CPU per image, about a core at 5,000 images/s; 8 rows: 0.03-0.04 ms), and a job for every worker in
    each batch (the prefetched batches keep a worker that finishes early busy)."""
    return max(1, min(MAX_ROWS_PER_JOB, batch_size // workers))


PREFETCH_SLACK = 2  # buffers beyond `prefetch`: the batch in use and the one before it stay intact


def shared_memory_shortfall(nbytes: int) -> Optional[str]:
    """Why `nbytes` more of shared memory would not fit (a write past a full tmpfs kills the worker
    with SIGBUS), or None. Only Linux's /dev/shm is checked; elsewhere None."""
    free = shared_memory_free()
    if free is None or nbytes <= free:
        return None
    return (f"the loader's worker processes need {nbytes / 2 ** 20:.0f} MB of shared memory for their batches but "
            f"{SHM_FOLDER} has {free / 2 ** 20:.0f} MB free: enlarge it (docker run --shm-size=2g) or load in threads "
            "(--loader threads)")


def batch_ring_bytes(batch_size: int, channels: int, width: int, height: int, prefetch: int = 2,
                     itemsize: int = 4) -> int:
    """The shared memory of a ProcessEngine's batch buffers at this network size (itemsize: 4 float32,
    2 a half batch)."""
    return itemsize * (max(1, prefetch) + PREFETCH_SLACK) * batch_size * channels * width * height


class _Buffer:
    """One batch's shared memory (at least `nbytes`), page-locked for `pin_for`'s device where it can be
    (pin_host_memory), and the jobs sent for it that have not answered yet."""

    def __init__(self, nbytes: int, pin_for) -> None:
        self.shm = SharedBuffer(create=True, size=max(1, nbytes))
        self.pending = 0
        self.pin_for = pin_for if pin_for is not None and pin_for.pin_host_memory(self.shm.buf) else None

    @property
    def pinned(self) -> bool:
        return self.pin_for is not None


class _ProcessSlot:
    def __init__(self, gen: int, buffer: _Buffer, shape: Tuple[int, int, int, int]) -> None:
        self.gen, self.buffer, self.shape = gen, buffer, shape
        self.truths: List[Optional[np.ndarray]] = [None] * shape[0]
        self.remaining = shape[0]
        self.error: Optional[BaseException] = None


class ProcessEngine:
    """BatchLoader's engine with `workers` processes; the interface of loader._Engine."""

    def __init__(self, maker: SampleMaker, workers: int, prefetch: int, start: int = 0,
                 dtype: np.dtype = np.dtype(np.float32), pin_for=None) -> None:
        self.maker, self.reporter, self.dtype = maker, maker.reporter, np.dtype(dtype)
        self.pin_for = pin_for
        self.paths, self.batch_size, self.channels = maker.paths, maker.batch_size, maker.channels
        self.size = (int(maker.opts["width"]), int(maker.opts["height"]))
        self.prefetch = max(1, prefetch)
        self.ring: List[Optional[_Buffer]] = [None] * (self.prefetch + PREFETCH_SLACK)
        # the whole ring up front: tmpfs counts a buffer only once written, so one at a time would pass
        problem = shared_memory_shortfall(batch_ring_bytes(self.batch_size, self.channels, *self.size, self.prefetch,
                                                           self.dtype.itemsize))
        if problem:
            raise OSError(problem)
        self.retired: List[shared_memory.SharedMemory] = []  # unlinked, closed once no array uses them
        self.by_name: Dict[str, _Buffer] = {}  # the ring's buffers, by their shared memory's name
        self.slots: Dict[int, _ProcessSlot] = {}
        self.next_k = self.scheduled = start
        self.gen = 0
        self.closed = False
        ctx = mp.get_context("spawn")
        self.jobs = ctx.Queue()
        self.current_gen = ctx.RawValue("l", 0)
        workers = max(1, workers)
        self.rows_per_job = rows_per_job(self.batch_size, workers)
        self.procs, self.results = [], []  # each worker's process and the read end of its results pipe
        for i in range(workers):
            reader, writer = ctx.Pipe(duplex=False)
            args = (maker, self.jobs, writer, self.current_gen, len(self.ring), os.getpid(), worker_niceness(),
                    self.dtype.str)
            p = ctx.Process(target=_worker_main, args=args, name=f"darknet_py-loader-{i}", daemon=True)
            p.start()
            writer.close()  # the worker holds the only write end: its exit ends the pipe (EOFError here)
            self.procs.append(p)
            self.results.append(reader)

    def _buffer_for(self, k: int, nbytes: int) -> _Buffer:
        """Batch k's buffer: the ring's, once every job sent for it has answered (after set_size, the
        dropped batches' jobs still running or queued), replaced only when too small. So the buffers, and
        their page-locking, last across multi-scale resizes."""
        index = k % len(self.ring)
        buf = self.ring[index]
        while buf is not None and buf.pending:
            self._receive()
        if buf is None or buf.shm.size < nbytes:
            if buf is not None:  # the arrays of a batch of an old size may still be read
                self._retire(buf)
                self.ring[index] = None
            problem = shared_memory_shortfall(nbytes)
            if problem:
                raise OSError(problem)
            buf = self.ring[index] = _Buffer(nbytes, self.pin_for)
            self.by_name[buf.shm.name] = buf
        return buf

    @property
    def pinned(self) -> Optional[bool]:
        """Whether the batch buffers are page-locked for pin_for's device (None: not asked, or none made yet)."""
        made = [buf.pinned for buf in self.ring if buf is not None]
        return all(made) if self.pin_for is not None and made else None

    def _retire(self, buf: _Buffer) -> None:
        del self.by_name[buf.shm.name]
        if buf.pin_for is not None:  # before the memory is unmapped (uploads from it have returned)
            buf.pin_for.unpin_host_memory(buf.shm.buf)
        shm = buf.shm
        shm.unlink()
        self.retired.append(shm)
        still = []
        for s in self.retired:
            try:
                s.close()
            except BufferError:  # an array handed out still maps it
                still.append(s)
        self.retired = still

    def _schedule(self) -> None:
        while self.scheduled < self.next_k + self.prefetch:
            k = self.scheduled
            w, h = self.size
            shape = (self.batch_size, self.channels, h, w)
            buf = self._buffer_for(k, self.dtype.itemsize * int(np.prod(shape)))
            self.slots[k] = _ProcessSlot(self.gen, buf, shape)
            for j0 in range(0, self.batch_size, self.rows_per_job):
                self.jobs.put((buf.shm.name, shape, self.gen, k, j0, min(j0 + self.rows_per_job, self.batch_size)))
                buf.pending += 1
            self.scheduled += 1

    def _receive(self) -> None:
        """Handles the workers' messages that come within half a second."""
        for reader in wait(self.results, timeout=0.5):
            try:
                self._dispatch(reader.recv())
            except EOFError:  # its worker has exited, after the messages it had written
                raise self._stopped(self.procs[self.results.index(reader)]) from None

    def _dispatch(self, message) -> None:
        if message[0] == "report":
            self.reporter.report(*message[1:])
            return
        _, name, gen, k, j0, j1, joined, counts, error = message
        self.by_name[name].pending -= 1
        slot = self.slots.get(k)
        if slot is None or slot.gen != gen:
            return  # a batch dropped by set_size
        if error is not None and slot.error is None:
            slot.error = error
        slot.truths[j0:j0 + len(counts)] = split_truths(joined, counts)
        slot.remaining -= j1 - j0

    def _stopped(self, worker: mp.Process) -> RuntimeError:
        worker.join(1.0)  # its pipe has closed: its exit code comes once it is reaped
        codes = [p.exitcode for p in self.procs]
        return RuntimeError(f"a loader worker process has stopped (exit codes {codes})")

    def next_batch(self) -> Batch:
        if self.closed:
            raise RuntimeError("the loader is closed")
        self._schedule()
        k = self.next_k
        slot = self.slots[k]
        while slot.remaining > 0 and slot.error is None:
            self._receive()
        if slot.error is not None:
            raise slot.error
        del self.slots[k]
        self.next_k += 1
        self._schedule()
        images = np.ndarray(slot.shape, self.dtype, buffer=slot.buffer.shm.buf)
        return images, slot.truths  # type: ignore[return-value]

    def set_size(self, w: int, h: int) -> None:
        if (w, h) == self.size:
            return
        self.size = (w, h)
        self.gen += 1
        self.current_gen.value = self.gen  # workers skip the queued jobs of the old size
        self.slots.clear()
        self.scheduled = self.next_k
        if not self.closed:
            self._schedule()

    def close(self, timeout: float = 10.0) -> None:
        if self.closed:
            return
        self.closed = True
        self.current_gen.value = -1  # the queued jobs are skipped
        self.slots.clear()
        for _ in self.procs:
            self.jobs.put(None)
        deadline = time.monotonic() + timeout
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
                p.join(1.0)
        self.jobs.close()
        self.jobs.cancel_join_thread()
        for reader in self.results:
            reader.close()
        for buf in self.ring:
            if buf is not None:
                self._retire(buf)
        self.ring = []
