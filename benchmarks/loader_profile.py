"""Where the training loader's time goes: CPU microseconds per image of each stage of one sample
(416x416 JPEGs from `darknet_py synth`, yolov4-tiny's augmentation: jitter .3, flip, HSV 1.5/1.5/.1),
the floor (decode, one resize, the HSV pass, the copy into the batch, each alone; the last two fused, as
sample() runs them: augment.hsv_into_chw, in the copy of the CPU kernels DARKNET_PY_ISA picks), the page faults of a
sample with glibc's default heap and with the loader's (data/heap.py), and the share of a sampling
thread's time that holds the GIL, measured with a probe thread (its pure-Python loop rate while a
worker thread samples, against its rate alone): a thread pool tops out near 1 / that share. Then the
process loader (one worker process, batches of 64): the worker's CPU and minor page faults per image
and the parent's CPU per image, batch by batch, in the first round of the shared batch ring (each
buffer's pages allocated and mapped into the worker on first write) and after it: the worker's CPU
beyond a whole sample() is its message handling. Every stage is the uncached path (the loaders here run
with cache=0): a draw whose decoded file the image cache holds (data/image_cache.py) skips read + imdecode,
and its own cost is a row of its own.

CPU time of this thread (time.thread_time, best of 3), OpenCV on one thread as in a worker process
(process_loader.WORKER_CV_THREADS): figures that hold on a loaded machine better than wall time.

    python benchmarks/loader_profile.py [--images 64]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

import cv2
import numpy as np


def best_us(f, n: int, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        f()
        times.append(time.thread_time() - t0)
    return 1e6 * min(times) / n


def probe_rate(seconds: float) -> float:
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        n += 1
    return n / seconds


def whole_sample(data: str, cfg: str, n: int, heap: str) -> None:
    """Prints CPU us and minor page faults per sample() into a batch row, in the main thread of this
    fresh process (as in a worker process: the heap's state depends on what else the process holds),
    with glibc's default heap or the loader's (heap == "kept")."""
    from darknet_py.data import BatchLoader
    from darknet_py.data.heap import keep_freed_memory

    if heap == "kept":
        keep_freed_memory()
    cv2.setNumThreads(1)
    with BatchLoader.from_files(data, cfg, 64, seed=1, workers=0, cache=0) as loader:
        m = loader.sampler
        out = np.zeros((n, m.channels, 416, 416), np.float32)
        for j in range(n):  # the batch's pages and the images' first touch
            m.sample(0, j, 416, 416, out=out[j])
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        us = best_us(lambda: [m.sample(1, j, 416, 416, out=out[j]) for j in range(n)], n)
        faults = (resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0) / (3 * n)
    print(f"{us:.0f} us, {faults:.0f} page faults")


def process_loader_costs(data: str, cfg: str, batches: int = 12):
    """[(phase, (worker CPU us, worker minor faults, parent CPU us) per image)] of a one-worker process
    loader: its first round of the batch ring (prefetch + 2 buffers, each allocated and mapped on first
    write) and the batches after it. The clock of /proc ticks at 10 ms: 64 images a batch over several
    batches."""
    from darknet_py.data import BatchLoader
    from train_throughput import process_cpu_seconds, process_minor_faults

    def process_stat(pid: int):
        return process_minor_faults(pid), process_cpu_seconds(pid)

    rows = {"first round of the batch ring": [], "after it (steady state)": []}
    with BatchLoader.from_files(data, cfg, 64, seed=1, workers=1, processes=True, cache=0) as loader:
        engine = loader._engine
        worker = engine.procs[0].pid
        loader.next_batch()  # the worker's start (imports, spawn) left out
        for b in range(1, batches):
            f0, c0 = process_stat(worker)
            p0 = time.process_time()
            loader.next_batch()
            parent = time.process_time() - p0
            f1, c1 = process_stat(worker)
            phase = "first round of the batch ring" if b < len(engine.ring) else "after it (steady state)"
            rows[phase].append((c1 - c0, f1 - f0, parent))
    table = []
    for name, r in rows.items():
        cpu, faults, parent = np.sum(r, axis=0) / (64 * len(r))
        table.append((name, (1e6 * cpu, faults, 1e6 * parent)))
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--whole", nargs=3, metavar=("DATA", "CFG", "HEAP"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.whole:
        whole_sample(*args.whole[:2], args.images, args.whole[2])
        return 0
    from darknet_py import _core
    from darknet_py.data import BatchLoader, augment as A
    from darknet_py.data.image_cache import ImageCache
    from darknet_py.data.batch_storage import batch_dtype
    from darknet_py.data.heap import keep_freed_memory
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_throughput import adapted_cfg

    keep_freed_memory()  # the stages as a worker runs them: without it each new image may fault its pages in
    cv2.setNumThreads(1)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "darknet_py", "synth", tmp, "--images", str(args.images), "--classes", "4"],
                       check=True, stdout=subprocess.DEVNULL)
        cfg = adapted_cfg(4, 64, 416, os.path.join(tmp, "net.cfg"))
        with BatchLoader.from_files(os.path.join(tmp, "shapes.data"), cfg, 64, seed=1, workers=0, cache=0) as loader:
            m, n = loader.sampler, args.images
            paths = m.paths[:n]
            raws = [np.fromfile(p, np.uint8) for p in paths]
            bgr = [cv2.imdecode(r, cv2.IMREAD_COLOR) for r in raws]
            rng = np.random.default_rng(1)
            crops = [A.sample_crop(rng, 416, 416, 416, 416, m.opts) for _ in bgr]
            boxes = [m._boxes(p) for p in paths]
            sized = [A.crop_resize(i, p, 416, 416) for i, p in zip(bgr, crops)]
            inside = [i[40:370, 30:380] for i in bgr]  # a crop inside the image, as jitter .3 draws them
            hsv = [A.distort_hsv(i, p.dhue, p.dsat, p.dexp, bgr=True) for i, p in zip(sized, crops)]
            batch = np.zeros((n, 3, 416, 416), np.float32)
            half = {s: np.zeros((n, 3, 416, 416), batch_dtype(s)) for s in ("bf16", "fp16")}  # half training batches
            for j, i in enumerate(hsv):
                A.to_chw(i, batch[j])

            def hsv_pass(i, p):  # OpenCV's 8-bit HSV round trip and one table: what any HSV step costs
                return cv2.cvtColor(cv2.LUT(cv2.cvtColor(i, cv2.COLOR_BGR2HSV), A._hsv_lut(p.dhue, p.dsat, p.dexp)),
                                    cv2.COLOR_HSV2RGB)

            floor = [
                ("read the file", lambda: [np.fromfile(p, np.uint8) for p in paths]),
                ("imdecode (libjpeg-turbo)", lambda: [cv2.imdecode(r, cv2.IMREAD_COLOR) for r in raws]),
                ("one resize (a crop -> 416x416, bilinear)", lambda: [cv2.resize(i, (416, 416)) for i in inside]),
                ("the HSV pass (BGR -> HSV, table, HSV -> RGB)",
                 lambda: [hsv_pass(i, p) for i, p in zip(sized, crops)]),
                ("the copy into the batch (uint8 HWC -> float32 CHW / 255)",
                 lambda: [A.to_chw(i, batch[j]) for j, i in enumerate(hsv)]),
                ("the HSV pass and the copy fused (hsv_into_chw: what sample() runs)",
                 lambda: [A.hsv_into_chw(i, p.dhue, p.dsat, p.dexp, batch[j], bgr=True)
                          for j, (i, p) in enumerate(zip(sized, crops))]),
                *[(f"the same into a {s} batch (fp16 / bf16 training: the pass rounds on the way)",
                   lambda s=s: [A.hsv_into_chw(i, p.dhue, p.dsat, p.dexp, half[s][j], bgr=True)
                                for j, (i, p) in enumerate(zip(sized, crops))]) for s in half],
            ]
            stages = [  # what sample() runs for one plain image, in its order (augment.augment_one)
                ("the sample's Generator (default_rng([seed, k, j])'s state)", lambda: [m._generator(2, j) for j in range(n)]),
                ("read + imdecode (_load_image)", lambda: [m._load_image(i) for i in range(len(paths))]),
                ("random choices (sample_crop, sample_pixel_noise)",
                 lambda: [(A.sample_crop(rng, 416, 416, 416, 416, m.opts), A.sample_pixel_noise(rng, m.opts)) for _ in bgr]),
                ("boxes (correct_truth)",
                 lambda: [A.correct_truth(b, p, 416, 416, 416, 416, 200, rng) for b, p in zip(boxes, crops)]),
                ("crop + pad + resize (crop_resize; the pad colour's mean included)",
                 lambda: [A.crop_resize(i, p, 416, 416) for i, p in zip(bgr, crops)]),
                ("flip + HSV + copy into the batch (hsv_into_chw, the flip fused)",
                 lambda: [A.hsv_into_chw(i, p.dhue, p.dsat, p.dexp, batch[j], bgr=True, flip=p.flip)
                          for j, (i, p) in enumerate(zip(sized, crops))]),
            ]
            cache = ImageCache(n, sum(i.nbytes + 64 for i in bgr))
            for i, image in enumerate(bgr):
                cache.put(i, image)
            parts = [  # parts of the stages above, for scale
                ("the decoded image from the image cache instead (image_cache.get: a draw of a stored file)",
                 lambda: [cache.get(i) for i in range(n)]),
                ("the pad colour alone (mean_colour)", lambda: [A.mean_colour(i) for i in bgr]),
                ("cv2.flip alone (what the fused flip saves)", lambda: [cv2.flip(i, 1) for i in sized]),
            ]
            print(f"{os.cpu_count()} cores; OpenCV {cv2.__version__} (1 thread), NumPy {np.__version__}, the CPU kernels' "
                  f"{_core.cpu_isa()['active']} copy; CPU time")
            print("\n| the floor, each alone | us / image |\n|---|---|")
            for name, f in floor:
                print(f"| {name} | {best_us(f, n):.0f} |")
            print("\n| sample()'s stages, in its order | us / image |\n|---|---|")
            total = 0.0
            for name, f in stages:
                us = best_us(f, n)
                total += us
                print(f"| {name} | {us:.0f} |")
            print(f"| sum | {total:.0f} |")
            for name, f in parts:
                print(f"| ({name}) | {best_us(f, n):.0f} |")
            print("\n| whole sample(), a fresh process's main thread | CPU, minor page faults per image |\n|---|---|")
            data = os.path.join(tmp, "shapes.data")
            for heap, name in (("default", "glibc's default heap"), ("kept", "the loader's heap (heap.py)")):
                cost = subprocess.run([sys.executable, __file__, "--images", str(n), "--whole", data, cfg, heap],
                                      check=True, capture_output=True, text=True).stdout.strip()
                print(f"| {name} | {cost} |")
            print("(whole sample() less the sum of its stages: the Python of sample() and caches the stages share)")

            print("\n| the process loader, 1 worker, batch 64 | worker CPU us / image | worker minor faults / image "
                  "| parent CPU us / image |\n|---|---|---|---|")
            for name, row in process_loader_costs(data, cfg):
                print(f"| {name} | {row[0]:.0f} | {row[1]:.0f} | {row[2]:.0f} |")

            alone = max(probe_rate(1.0) for _ in range(3))
            stop = threading.Event()

            def sampling():
                k = 0
                while not stop.is_set():
                    m.sample(k, 0, 416, 416)
                    k += 1

            t = threading.Thread(target=sampling)
            t.start()
            time.sleep(0.2)
            busy = float(np.median([probe_rate(1.0) for _ in range(3)]))
            stop.set()
            t.join()
            held = 1 - busy / alone
            print(f"\nGIL probe: {alone:.0f} loops/s alone, {busy:.0f} beside a sampling thread: that thread holds the "
                  f"GIL about {100 * held:.0f}% of its time, so threads top out near {1 / max(held, 1e-3):.1f}x one worker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
