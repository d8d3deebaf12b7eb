"""The training batch loader: Darknet's load_data_detection in background threads.

    with BatchLoader.from_files("shapes.data", "net.cfg", batch_size=16, seed=1) as loader:
        for it in range(iterations):
            if opts["random"] and it % 10 == 0:
                loader.set_size(*random_network_size(w0, h0, rng))
            images, truths = loader.next_batch()   # (N, C, H, W) float32, N arrays (n_i, 5)

Each sample is a function of (seed, batch index, index in batch, network size) only: its own
NumPy Generator draws the image(s) (at random with replacement, as Darknet's get_random_paths)
and every augmentation choice. So the batches are the same for a given seed whatever the number
of workers or their timing. Workers prepare `prefetch` batches ahead in a bounded pipeline; OpenCV
decoding and resizing release the GIL, so with spare cores the caller's compute does not wait.
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

import cv2
import numpy as np

from . import augment as augmentation
from .darknet_files import DataFileError, label_path_for, read_data_file, read_image_list
from .labels import DataReporter, read_labels

Batch = Tuple[np.ndarray, List[np.ndarray]]

# Darknet's train_detector loads with args.threads = 6 * ngpus; one GPU: six groups per iteration.
LOAD_THREADS = 6


def load_group(index: int, images: int, threads: int = LOAD_THREADS) -> int:
    """The loading thread (group) of image `index` among an iteration's `images`, as Darknet's
    load_threads splits them: thread t gets [t * images / threads, (t + 1) * images / threads)."""
    for t in range(threads - 1, -1, -1):
        if t * images // threads <= index:
            return t
    return 0


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class _Slot:
    """One batch being prepared."""

    def __init__(self, gen: int, batch: int, channels: int, w: int, h: int) -> None:
        self.gen, self.w, self.h = gen, w, h
        self.images = np.empty((batch, channels, h, w), np.float32)
        self.truths: List[Optional[np.ndarray]] = [None] * batch
        self.remaining = batch
        self.error: Optional[BaseException] = None


class _Engine:
    """The loader's state, shared with the worker threads. Kept apart from BatchLoader so that the
    threads do not keep the loader alive: when the loader is collected (or at interpreter exit)
    its finalizer stops them."""

    MAX_DRAWS = 1000  # consecutive unusable images before giving up

    def __init__(self, paths: Sequence[str], batch_size: int, classes: int, opts: Dict[str, float],
                 seed: int, workers: int, prefetch: int, reporter: DataReporter, start: int = 0,
                 iteration_images: int = 0, shard: Tuple[int, int] = (0, 1)) -> None:
        self.paths = list(paths)
        self.shard, self.shards = shard
        self.batch_size, self.classes, self.opts = batch_size, classes, opts
        # batches per iteration (Darknet's subdivisions): the groups span an iteration's images
        self.per_iteration = max(1, iteration_images // batch_size) if iteration_images else 1
        if not 0 <= self.shard < self.shards or self.per_iteration % self.shards:
            raise ValueError(f"shard {shard}: the {self.per_iteration} batches of an iteration do not divide among "
                             f"{self.shards} ranks")
        self.seed = seed % 2 ** 64  # SeedSequence takes non-negative integers
        self.channels = int(opts["channels"]) if int(opts["channels"]) == 1 else 3
        self.size = (int(opts["width"]), int(opts["height"]))
        self.prefetch = max(1, prefetch)
        self.reporter = reporter
        self.labels: Dict[str, np.ndarray] = {}
        self.bad: set = set()
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

    # ---- samples ----------------------------------------------------------------------------
    def _load_image(self, path: str) -> Optional[np.ndarray]:
        if path in self.bad:
            return None
        if not os.path.isfile(path):
            self.bad.add(path)
            self.reporter.report("missing-image", path, f"{path}: image not found: skipped")
            return None
        try:  # imdecode: no OpenCV warning on stderr for a bad file, and any path encoding works
            raw = np.fromfile(path, np.uint8)
            flag = cv2.IMREAD_COLOR if self.channels == 3 else cv2.IMREAD_GRAYSCALE
            img = cv2.imdecode(raw, flag) if raw.size else None
        except (OSError, cv2.error):
            img = None
        if img is None:
            self.bad.add(path)
            self.reporter.report("unreadable-image", path, f"{path}: cannot decode the image: skipped")
            return None
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if self.channels == 3 else img

    def _boxes(self, path: str) -> np.ndarray:
        boxes = self.labels.get(path)
        if boxes is None:  # read once: a bad label file is reported once; dict writes are atomic
            boxes = read_labels(label_path_for(path), self.classes, self.reporter)
            self.labels[path] = boxes
        return boxes

    def _draw(self, rng) -> Tuple[np.ndarray, np.ndarray]:
        """A random usable image and its boxes (another one is drawn for a bad image)."""
        for _ in range(self.MAX_DRAWS):
            path = self.paths[int(rng.integers(len(self.paths)))]
            img = self._load_image(path)
            if img is not None:
                return img, self._boxes(path)
            if len(self.bad) >= len(self.paths):
                break
        raise RuntimeError(f"no usable training image: {len(self.bad)} of {len(self.paths)} could not be read")

    def group_mixing(self, k: int, j: int) -> str:
        """"mosaic", "mixup" or "" for image j of batch k: one even-odds draw per loading group."""
        kind = "mosaic" if self.opts["mosaic"] else ("mixup" if self.opts.get("mixup") else "")
        if not kind:
            return ""
        iteration, sub = divmod(k, self.per_iteration)
        group = load_group(sub * self.batch_size + j, self.per_iteration * self.batch_size)
        return kind if np.random.default_rng([self.seed, iteration, group, 0x6D1C]).random() < 0.5 else ""

    def sample(self, k: int, j: int, w: int, h: int) -> Tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, k, j])
        mixing = self.group_mixing(k, j)
        if mixing == "mosaic":
            return augmentation.mosaic([self._draw(rng) for _ in range(4)], w, h, self.opts, rng)
        img, boxes = self._draw(rng)
        first = augmentation.augment_one(img, boxes, w, h, self.opts, rng)
        if mixing == "mixup":  # Darknet's second pass: another random image, blended over this one
            other, other_boxes = self._draw(rng)
            second = augmentation.augment_one(other, other_boxes, w, h, self.opts, rng)
            return augmentation.mixup(first, second, int(self.opts["max_boxes"]))
        return first

    def global_index(self, k: int) -> int:
        """This shard's k-th batch as the index of a batch of the whole run: data-parallel rank r of N
        takes passes [r x P, (r + 1) x P) of each iteration's N x P (per_iteration), so the N ranks
        together draw exactly the batches one process would."""
        if self.shards == 1:
            return k
        passes = self.per_iteration // self.shards
        iteration, p = divmod(k, passes)
        return iteration * self.per_iteration + self.shard * passes + p

    # ---- pipeline ---------------------------------------------------------------------------
    def _schedule(self) -> None:
        """Queues the jobs of the batches up to `prefetch` ahead (call with cond held)."""
        while self.threads and self.scheduled < self.next_k + self.prefetch:
            k = self.scheduled
            w, h = self.size
            self.slots[k] = _Slot(self.gen, self.batch_size, self.channels, w, h)
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
                image, truth = self.sample(self.global_index(k), j, slot.w, slot.h)
                slot.images[j] = image  # outside the lock: each job owns its row
                slot.truths[j] = truth
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
            slot = _Slot(self.gen, self.batch_size, self.channels, w, h)
            for j in range(self.batch_size):
                slot.images[j], slot.truths[j] = self.sample(self.global_index(self.next_k), j, w, h)
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
    batch_size), over which mosaic and mixup are chosen per loading group as Darknet does; shard:
    (rank, ranks) of a data-parallel training, whose rank draws its share of every iteration's batches
    (_Engine.global_index): the ranks' batches together are one process's.
    """

    def __init__(self, paths: Sequence[str], batch_size: int, classes: int,
                 options: Optional[Dict[str, float]] = None, *, seed: Optional[int] = 0,
                 workers: Optional[int] = None,
                 prefetch: int = 2, augment: bool = True,
                 on_problem: Optional[Callable[[str, str, str], None]] = None,
                 reporter: Optional[DataReporter] = None, start: int = 0,
                 iteration_images: Optional[int] = None, shard: Tuple[int, int] = (0, 1)) -> None:
        if not paths:
            raise ValueError("no training images")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if classes < 1:
            raise ValueError(f"classes must be at least 1, got {classes}")
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
        self._engine = _Engine(paths, batch_size, classes, opts, self.seed,
                               default_workers() if workers is None else workers, prefetch, self.reporter,
                               start, iteration_images or batch_size, shard)
        self._finalizer = weakref.finalize(self, self._engine.close)
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
        if not os.path.isfile(list_path):
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
    def batch_size(self) -> int:
        return self._engine.batch_size

    @property
    def size(self) -> Tuple[int, int]:
        """The network input size (width, height) of the next batch."""
        return self._engine.size

    def set_size(self, width: int, height: int) -> None:
        """Batches from the next one on are made at width x height (`random=1` multi-scale)."""
        if width < 1 or height < 1:
            raise ValueError(f"bad network size {width} x {height}")
        self._engine.set_size(int(width), int(height))

    def next_batch(self) -> Batch:
        """(images (N, C, H, W) float32 RGB in [0, 1], truths: N float32 arrays (n_i, 5) of
        class, cx, cy, w, h normalised to the network input)."""
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
