"""Which images and augmentation choices make sample j of training batch k: the seed rules, in one place.

Each sample is a function of (seed, batch index k, index in batch j, network size) only: its own
NumPy Generator, seeded with [seed, k, j], draws the image(s) (at random with replacement, as
Darknet's get_random_paths) and every augmentation choice; whether a loading group gets mosaic or
mixup is one draw seeded with [seed, iteration, group]. So the batches are the same for a seed
whatever runs them (threads or processes, how many, in what order), and a resumed run that starts
at batch k draws what an uninterrupted run would have. A data-parallel rank r of N (shard=(r, N))
counts its own batches k and draws the batches global_index(k) of the whole run: its share of every
iteration's, so that the ranks together draw exactly the batches one process would.

A SampleMaker holds no threads or open files, so it can be sent (pickled) to worker processes (its
image cache, image_cache.py, goes as the name of its shared memory).
Bad images and labels are reported once each through its reporter and skipped (labels.py).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
from numpy.random.bit_generator import ISeedSequence

from .. import _core
from . import augment as augmentation
from .darknet_files import label_path_for
from .image_cache import ImageCache
from .labels import DataReporter, read_labels

# Darknet's train_detector loads with args.threads = 6 * ngpus; one GPU: six groups per iteration.
LOAD_THREADS = 6


def load_group(index: int, images: int, threads: int = LOAD_THREADS) -> int:
    """The loading thread (group) of image `index` among an iteration's `images`, as Darknet's
    load_threads splits them: thread t gets [t * images / threads, (t + 1) * images / threads)."""
    for t in range(threads - 1, -1, -1):
        if t * images // threads <= index:
            return t
    return 0


def read_bytes(path: str) -> np.ndarray:
    """The bytes of a file as a (read-only) uint8 array: one read call of the file's size into a bytes
    object, viewed without a copy. 31-35 us for a 30 kB JPEG where a buffered-off file object read into
    an array took 38-44 and np.fromfile 47 (its stdio stream; thread CPU time, best of 7 x 200 reads,
    2-core AMD EPYC VM)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))  # O_BINARY: Windows' text mode off
    try:
        return np.frombuffer(os.read(fd, os.fstat(fd).st_size), np.uint8)  # a file cut short meanwhile: what was read
    finally:
        os.close(fd)


def entropy_words(n: int) -> List[int]:
    """The 32-bit words NumPy's SeedSequence makes of a non-negative int entropy entry: least significant
    first, one word for 0."""
    words = [n & 0xFFFFFFFF]
    while n >> 32:
        n >>= 32
        words.append(n & 0xFFFFFFFF)
    return words


class SeedWords(ISeedSequence):
    """np.random.SeedSequence(entropy) for a PCG64 to draw its state from, with the words computed in C++
    (_core.seed_sequence_state: NumPy's algorithm). `entropy`: the uint32 words SeedSequence would make of
    the seed list itself (entropy_words of each int, in order)."""

    __slots__ = ("entropy",)

    def __init__(self, entropy: List[int]) -> None:
        self.entropy = entropy

    def generate_state(self, n_words: int, dtype=np.uint32) -> np.ndarray:
        if np.dtype(dtype) not in (np.dtype(np.uint32), np.dtype(np.uint64)):
            raise ValueError("only support uint32 or uint64")  # SeedSequence's own words for this
        return _core.seed_sequence_state(self.entropy, n_words, np.dtype(dtype) == np.dtype(np.uint64))


class SampleMaker:
    """Makes the samples of a seed: sample(k, j, w, h) -> (float32 CHW image, (n, 5) truths)."""

    MAX_DRAWS = 1000  # consecutive unusable images before giving up

    def __init__(self, paths: Sequence[str], batch_size: int, classes: int, opts: Dict[str, float], seed: int,
                 reporter: DataReporter, iteration_images: int = 0, shard: Tuple[int, int] = (0, 1),
                 cache: Optional[ImageCache] = None) -> None:
        self.paths = list(paths)
        self.batch_size, self.classes, self.opts = batch_size, classes, opts
        # batches per iteration (Darknet's subdivisions): the groups span an iteration's images
        self.per_iteration = max(1, iteration_images // batch_size) if iteration_images else 1
        self.shard, self.shards = shard
        if not 0 <= self.shard < self.shards or self.per_iteration % self.shards:
            raise ValueError(f"shard {shard}: the {self.per_iteration} batches of an iteration do not divide among "
                             f"{self.shards} ranks")
        self.seed = seed % 2 ** 64  # SeedSequence takes non-negative integers
        self.seed_words = entropy_words(self.seed)
        self.channels = int(opts["channels"]) if int(opts["channels"]) == 1 else 3
        self.reporter = reporter
        self.cache = cache  # decoded images shared by the workers (image_cache.py), or None: decode at each draw
        self.labels: Dict[str, np.ndarray] = {}
        self.bad: set = set()

    def _generator(self, *ints: int) -> np.random.Generator:
        """np.random.default_rng([self.seed, *ints]), the same state, its SeedSequence's words computed in
        C++ (SeedWords): 7 us alone where default_rng took 26-33 (110-140 inside a sample, whose pixel passes
        evict the interpreter's caches; 2-core AMD EPYC VM, bindings at -O2)."""
        if all(0 <= i <= 0xFFFFFFFF for i in ints):  # one word each (else the general path, and its errors)
            return np.random.Generator(np.random.PCG64(SeedWords(self.seed_words + list(ints))))
        return np.random.default_rng([self.seed, *ints])

    def __getstate__(self) -> dict:  # for a worker process: no cache, no lock (the reporter is replaced there)
        state = dict(self.__dict__)
        state.update(labels={}, bad=set(), reporter=None)
        return state

    # ---- files ------------------------------------------------------------------------------
    def _load_image(self, index: int) -> Optional[np.ndarray]:
        """Training image `index` as decoded (BGR, or grey), from the cache if a worker stored it there;
        None for a bad file (reported once)."""
        path = self.paths[index]
        if path in self.bad:
            return None
        if self.cache is not None:
            img = self.cache.get(index)
            if img is not None:
                return img
        # imdecode: no OpenCV warning on stderr for a bad file, and any path encoding works
        img = None
        try:  # a missing file raises in the read: no stat call before it (25-35 us inside a sample)
            raw = read_bytes(path)
            flag = cv2.IMREAD_COLOR if self.channels == 3 else cv2.IMREAD_GRAYSCALE
            img = cv2.imdecode(raw, flag) if raw.size else None
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            self.bad.add(path)
            self.reporter.report("missing-image", path, f"{path}: image not found: skipped")
            return None
        except (OSError, cv2.error):
            pass
        if img is None:
            self.bad.add(path)
            self.reporter.report("unreadable-image", path, f"{path}: cannot decode the image: skipped")
            return None
        if self.cache is not None:
            self.cache.put(index, img)
        return img  # BGR as decoded: augment's bgr=True makes it RGB in its HSV step, at no extra pass

    def _boxes(self, path: str) -> np.ndarray:
        boxes = self.labels.get(path)
        if boxes is None:  # read once: a bad label file is reported once; dict writes are atomic
            boxes = read_labels(label_path_for(path), self.classes, self.reporter)
            self.labels[path] = boxes
        return boxes

    def _draw(self, rng) -> Tuple[np.ndarray, np.ndarray]:
        """A random usable image (BGR as decoded, or grey) and its boxes (another one is drawn for a bad
        image)."""
        for _ in range(self.MAX_DRAWS):
            index = int(rng.integers(len(self.paths)))
            img = self._load_image(index)
            if img is not None:
                return img, self._boxes(self.paths[index])
            if len(self.bad) >= len(self.paths):
                break
        raise RuntimeError(f"no usable training image: {len(self.bad)} of {len(self.paths)} could not be read")

    # ---- the seed rules ---------------------------------------------------------------------
    def group_mixing(self, k: int, j: int) -> str:
        """"mosaic", "mixup" or "" for image j of batch k: one even-odds draw per loading group."""
        kind = "mosaic" if self.opts["mosaic"] else ("mixup" if self.opts.get("mixup") else "")
        if not kind:
            return ""
        iteration, sub = divmod(k, self.per_iteration)
        group = load_group(sub * self.batch_size + j, self.per_iteration * self.batch_size)
        return kind if self._generator(iteration, group, 0x6D1C).random() < 0.5 else ""

    def global_index(self, k: int) -> int:
        """This shard's k-th batch as the index of a batch of the whole run: data-parallel rank r of N
        takes passes [r x P, (r + 1) x P) of each iteration's N x P (per_iteration)."""
        if self.shards == 1:
            return k
        passes = self.per_iteration // self.shards
        iteration, p = divmod(k, passes)
        return iteration * self.per_iteration + self.shard * passes + p

    def sample(self, k: int, j: int, w: int, h: int, out: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Sample j of this shard's batch k: (float32 CHW image at w x h, written into `out` if given (the
        batch's row j: float32, or a half batch's, which gets the same floats rounded, batch_storage.py);
        (n, 5) truths)."""
        k = self.global_index(k)
        rng = self._generator(k, j)
        mixing = self.group_mixing(k, j)
        if mixing == "mosaic":
            return augmentation.mosaic([self._draw(rng) for _ in range(4)], w, h, self.opts, rng, out, bgr=True)
        img, boxes = self._draw(rng)
        if mixing == "mixup":  # Darknet's second pass: another random image, blended over this one
            first = augmentation.augment_one(img, boxes, w, h, self.opts, rng, bgr=True)
            other, other_boxes = self._draw(rng)
            second = augmentation.augment_one(other, other_boxes, w, h, self.opts, rng, bgr=True)
            return augmentation.mixup(first, second, int(self.opts["max_boxes"]), out)
        return augmentation.augment_one(img, boxes, w, h, self.opts, rng, out, bgr=True)
