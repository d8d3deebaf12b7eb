"""The training batch loader: Darknet's load_data_detection in background threads.

    with BatchLoader.from_files("shapes.data", "net.cfg", batch_size=16, seed=1) as loader:
        for it in range(iterations):
            if opts["random"] and it % 10 == 0:
                loader.set_size(*random_network_size(w0, h0, rng))
            images, truths = loader.next_batch()   # (N, C, H, W) float32, N arrays (n_i, 5)

storage="fp16" / "bf16" writes the batches in a half network's input type instead (batch_storage.py):
the same values as the device's conversion of the float32 batch, in half the bytes.

Each sample is a function of (seed, batch index, index in batch, network size) only (sampler.py
holds these seed rules), so the batches are the same for a given seed whatever the number of
workers, their kind (threads, or processes with processes=True) or their timing. Workers prepare
`prefetch` batches ahead in a bounded pipeline; OpenCV decoding and resizing release the GIL, the
Python between them does not: threads stop scaling at a few cores, processes do not.
set_size() drops the batches prepared at the old size (as Darknet restarts its loader thread).

Bad images and labels are reported once each (labels.DataReporter) and skipped, see labels.py.
Mosaic and mixup are chosen as Darknet chooses them: its detector loads one iteration's images in
LOAD_THREADS groups (load_threads splits them), and each group gets mosaic (or mixup) with even odds
(load_data_detection's `random_gen() % 2`). mosaic wins over mixup (Darknet's net->mixup = 3).
cutmix is not applied: Darknet's detector refuses it too ("cutmix=1 - isn't supported for
Detector"). blur and gaussian_noise are drawn per image (augment.sample_pixel_noise).
"""
from __future__ import annotations

import os
import queue
import threading
import time
import warnings
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import augment as augmentation
from .batch_storage import batch_dtype
from .darknet_files import DataFileError, read_data_file, read_image_list
from .image_cache import ImageCache, auto_capacity
from .labels import DataReporter
from .process_loader import ProcessEngine
from .sampler import LOAD_THREADS, SampleMaker, load_group  # noqa: F401 (LOAD_THREADS, load_group: re-exported)

Batch = Tuple[np.ndarray, List[np.ndarray]]


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class _Slot:
    """One batch being prepared."""

    def __init__(self, gen: int, batch: int, channels: int, w: int, h: int, dtype: np.dtype) -> None:
        self.gen, self.w, self.h = gen, w, h
        self.images = np.empty((batch, channels, h, w), dtype)
        self.truths: List[Optional[np.ndarray]] = [None] * batch
        self.remaining = batch
        self.error: Optional[BaseException] = None


class _Engine:
    """The loader's state, shared with the worker threads. Kept apart from BatchLoader so that the
    threads do not keep the loader alive: when the loader is collected (or at interpreter exit)
    its finalizer stops them."""

    pinned: Optional[bool] = None  # threads' batches are fresh arrays, never page-locked (ProcessEngine.pinned)

    def __init__(self, maker: SampleMaker, workers: int, prefetch: int, start: int = 0,
                 dtype: np.dtype = np.dtype(np.float32)) -> None:
        self.maker, self.dtype = maker, dtype
        self.paths, self.batch_size, self.channels = maker.paths, maker.batch_size, maker.channels
        self.size = (int(maker.opts["width"]), int(maker.opts["height"]))
        self.prefetch = max(1, prefetch)
        self.cond = threading.Condition()
        self.jobs: "queue.SimpleQueue[Optional[Tuple[int, int, int]]]" = queue.SimpleQueue()
        self.slots: Dict[int, _Slot] = {}
        self.next_k = start  # the next batch handed out
        self.scheduled = start  # batches [next_k, scheduled) are being prepared
        self.gen = 0  # bumped by set_size: jobs of an older generation are dropped
        self.closed = False
        self.threads = [threading.Thread(target=self._work, name=f"darknet_py-loader-{i}", daemon=True)
                        for i in range(workers)]
        for t in self.threads:
            t.start()

    # ---- pipeline ---------------------------------------------------------------------------
    def _schedule(self) -> None:
        """Queues the jobs of the batches up to `prefetch` ahead (call with cond held)."""
        while self.threads and self.scheduled < self.next_k + self.prefetch:
            k = self.scheduled
            w, h = self.size
            self.slots[k] = _Slot(self.gen, self.batch_size, self.channels, w, h, self.dtype)
            for j in range(self.batch_size):
                self.jobs.put((self.gen, k, j))
            self.scheduled += 1

    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None or self.closed:
                return
            gen, k, j = job
            with self.cond:
                slot = self.slots.get(k)
            if slot is None or slot.gen != gen:
                continue  # dropped by set_size
            try:
                # outside the lock: each job owns its row
                slot.truths[j] = self.maker.sample(k, j, slot.w, slot.h, out=slot.images[j])[1]
                error = None
            except BaseException as e:  # handed to the caller by next_batch
                error = e
            with self.cond:
                if error is not None and slot.error is None:
                    slot.error = error
                slot.remaining -= 1
                if slot.remaining == 0 or error is not None:
                    self.cond.notify_all()

    def next_batch(self) -> Batch:
        if not self.threads:  # workers=0: in the calling thread
            if self.closed:
                raise RuntimeError("the loader is closed")
            w, h = self.size
            slot = _Slot(self.gen, self.batch_size, self.channels, w, h, self.dtype)
            for j in range(self.batch_size):
                slot.truths[j] = self.maker.sample(self.next_k, j, w, h, out=slot.images[j])[1]
            self.next_k += 1
            return slot.images, slot.truths  # type: ignore[return-value]
        with self.cond:
            if self.closed:
                raise RuntimeError("the loader is closed")
            self._schedule()
            k = self.next_k
            slot = self.slots[k]
            while slot.remaining > 0 and slot.error is None:
                if not any(t.is_alive() for t in self.threads):
                    raise RuntimeError("the loader's worker threads have stopped")
                self.cond.wait(0.5)
            if slot.error is not None:
                raise slot.error
            del self.slots[k]
            self.next_k += 1
            self._schedule()
        return slot.images, slot.truths  # type: ignore[return-value]

    def set_size(self, w: int, h: int) -> None:
        with self.cond:
            if (w, h) == self.size:
                return
            self.size = (w, h)
            self.gen += 1
            self.slots.clear()  # batches at the old size are dropped; their indices are reused
            self.scheduled = self.next_k
            if not self.closed:
                self._schedule()

    def close(self, timeout: float = 10.0) -> None:
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.slots.clear()
            self.cond.notify_all()
        for _ in self.threads:
            self.jobs.put(None)
        deadline = time.monotonic() + timeout
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))


def open_cache(images: int, capacity: "int | str | ImageCache", ranks: int = 1,
               shared: bool = True) -> Optional[ImageCache]:
    """The loader's image cache of `capacity` bytes ("auto": image_cache.auto_capacity for `ranks` ranks on
    this host), in shared memory for worker processes (shared) or in this process's, or None when that is 0
    or the memory cannot be had (a warning says so; the loader then decodes at each draw, as without a
    cache). An ImageCache is used as it is (shared, and closed by whoever made it)."""
    if isinstance(capacity, ImageCache):
        if capacity.stats()["images"] != images:
            raise ValueError(f"the image cache handed in indexes {capacity.stats()['images']} images, not these {images}")
        return capacity
    if capacity == "auto":
        capacity = auto_capacity(ranks, shared)
    elif isinstance(capacity, str) or int(capacity) < 0:
        raise ValueError(f"cache must be a number of bytes (0: off) or 'auto', got {capacity!r}")
    if int(capacity) <= 0:
        return None
    try:
        return ImageCache(images, int(capacity), shared)
    except OSError as e:
        warnings.warn(f"the loader's image cache ({int(capacity) / 2 ** 20:.0f} MB of memory) could not be "
                      f"made ({e}): images are decoded at each draw", stacklevel=3)
        return None


def _close_all(engine: "_Engine | ProcessEngine", cache: Optional[ImageCache]) -> None:
    engine.close()
    if cache is not None:
        cache.close()


class BatchLoader:
    """Training batches of `batch_size` images at the network size, prepared by `workers`
    background threads (default min(4, cores); 0 = in the calling thread) `prefetch` batches ahead.

    paths: the training images; classes: the number of classes (label ids outside are reported and
    skipped); options: augmentation options (augment.DEFAULT_OPTIONS keys, e.g. from
    augment_options_from_cfg; missing keys take the defaults); augment=False turns the random
    augmentation off (plain resize, or letterbox if the options say so); seed: see the module
    docstring; on_problem(kind, path, message): called once per bad file (default: a DataWarning);
    start: the index of the first batch (a resumed training passes the batches done so far, so
    that it draws the batches an uninterrupted run would have drawn); iteration_images: the images
    of one training iteration (Darknet's batch, when batch_size is its mini-batch; default
    batch_size), over which mosaic and mixup are chosen per loading group as Darknet does.
    processes=True: the workers are processes (process_loader.py), which scale with cores where
    threads stop at the GIL; the arrays of a batch are then valid until two more batches are taken
    (copy them to keep them longer). The batches are the same either way (sampler.py).
    shard: (rank, ranks) of a data-parallel training, whose rank draws its share of every iteration's batches
    (SampleMaker.global_index): the ranks' batches together are one process's.
    storage: the batches' type: "fp32" (float32), or the half input of a network training in "fp16"
    (float16) or "bf16" (uint16 holding bf16 bits): batch_storage.py.
    cache: bytes of decoded images the workers share (image_cache.py; shared memory for processes), so that
    a file is decoded once, not at every draw; "auto" (default): up to a quarter of the available memory
    (image_cache.auto_capacity; only what is stored takes memory); 0: off; or an ImageCache of these paths
    to use (train() gives a host's data-parallel ranks one). The batches are the same either way.
    pin_for: a network (_core.Net) whose device page-locks the worker processes' batch buffers
    (Net.pin_host_memory), so that its uploads of them go by DMA alone; see `pinned`. Threads ignore it.
    """

    def __init__(self, paths: Sequence[str], batch_size: int, classes: int,
                 options: Optional[Dict[str, float]] = None, *, seed: Optional[int] = 0,
                 workers: Optional[int] = None,
                 prefetch: int = 2, augment: bool = True,
                 on_problem: Optional[Callable[[str, str, str], None]] = None,
                 reporter: Optional[DataReporter] = None, start: int = 0,
                 iteration_images: Optional[int] = None, processes: bool = False,
                 shard: Tuple[int, int] = (0, 1), storage: str = "fp32", cache: "int | str" = "auto",
                 pin_for=None) -> None:
        if not paths:
            raise ValueError("no training images")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if classes < 1:
            raise ValueError(f"classes must be at least 1, got {classes}")
        dtype = batch_dtype(storage)
        self.storage = storage
        opts = dict(augmentation.DEFAULT_OPTIONS)
        opts.update(options or {})
        if not augment:
            opts = augmentation.no_augmentation(opts)
        if opts["mosaic"] and opts["letter_box"]:
            raise ValueError("mosaic=1 with letter_box=1 is not supported (Darknet refuses it too)")
        if opts.get("cutmix"):
            warnings.warn("cutmix=1 is not applied to detector training (Darknet's detector ignores it too: "
                          "it is for classifiers)", stacklevel=2)
        self.options = opts
        # None: a fresh random seed, kept in .seed so that the run can be repeated
        self.seed = int(np.random.SeedSequence().entropy % 2 ** 63) if seed is None else int(seed)
        self.reporter = reporter if reporter is not None else DataReporter(on_problem)
        workers = default_workers() if workers is None else workers
        self.processes = bool(processes and workers > 0)
        self.cache = open_cache(len(paths), cache, shard[1], shared=self.processes)
        own_cache = self.cache is not cache  # one handed in is its owner's to close
        maker = SampleMaker(paths, batch_size, classes, opts, self.seed, self.reporter, iteration_images or batch_size,
                            shard, self.cache)
        if self.processes:
            self._engine: "_Engine | ProcessEngine" = ProcessEngine(maker, workers, prefetch, start, dtype, pin_for)
        else:
            self._engine = _Engine(maker, workers, prefetch, start, dtype)
        self._finalizer = weakref.finalize(self, _close_all, self._engine, self.cache if own_cache else None)
        self.wait_seconds = 0.0  # total time next_batch() waited for the workers
        self.last_wait = 0.0

    @classmethod
    def from_files(cls, data: str, cfg: Optional[str] = None, batch_size: int = 1, *,
                   list_key: str = "train", options: Optional[Dict[str, float]] = None, **kwargs) -> "BatchLoader":
        """A loader for the `train` (or `list_key`) list of a .data file, with the augmentation
        options of `cfg` (overridden by `options`)."""
        d = read_data_file(data)
        opts = augmentation.augment_options_from_cfg(cfg) if cfg else dict(augmentation.DEFAULT_OPTIONS)
        classes = d.require("classes")
        if cfg and opts["classes"] and opts["classes"] != classes:
            raise DataFileError(f"{d.where('classes')}: classes = {classes} but the last head of {cfg} has "
                                f"classes={opts['classes']}")
        opts.update(options or {})
        list_path = d.require(list_key)
        if not os.path.exists(list_path):
            raise DataFileError(f"{d.where(list_key)}: the {list_key} list {list_path} does not exist")
        paths = read_image_list(list_path)
        if not paths:
            raise DataFileError(f"{list_path}: the {list_key} list named by {d.where(list_key)} is empty "
                                "(one image path per line)")
        return cls(paths, batch_size, classes, opts, **kwargs)

    # ---- the public interface ---------------------------------------------------------------
    @property
    def paths(self) -> List[str]:
        return self._engine.paths

    @property
    def sampler(self) -> SampleMaker:
        """What makes sample j of batch k (the seed rules)."""
        return self._engine.maker

    @property
    def batch_size(self) -> int:
        return self._engine.batch_size

    @property
    def size(self) -> Tuple[int, int]:
        """The network input size (width, height) of the next batch."""
        return self._engine.size

    @property
    def pinned(self) -> Optional[bool]:
        """Whether the batches are in memory page-locked for pin_for's device: None where not asked (no
        pin_for, threads) or before the first batch, False where the device offers none or refused."""
        return self._engine.pinned

    def set_size(self, width: int, height: int) -> None:
        """Batches from the next one on are made at width x height (`random=1` multi-scale)."""
        if width < 1 or height < 1:
            raise ValueError(f"bad network size {width} x {height}")
        self._engine.set_size(int(width), int(height))

    def next_batch(self) -> Batch:
        """(images (N, C, H, W) float32 RGB in [0, 1] (or in `storage`'s half type), truths: N float32
        arrays (n_i, 5) of class, cx, cy, w, h normalised to the network input)."""
        t0 = time.perf_counter()
        batch = self._engine.next_batch()
        self.last_wait = time.perf_counter() - t0
        self.wait_seconds += self.last_wait
        return batch

    def __iter__(self) -> "BatchLoader":
        return self

    def __next__(self) -> Batch:
        return self.next_batch()

    def close(self) -> None:
        """Stops the workers (idempotent); also done when the loader is collected or at exit."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._engine.closed or not self._finalizer.alive

    def __enter__(self) -> "BatchLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
