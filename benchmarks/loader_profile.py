"""Where the training loader's time goes: per-stage microseconds of one sample (416x416 JPEGs from
`darknet_py synth`, yolov4-tiny's augmentation: jitter .3, flip, HSV 1.5/1.5/.1), and the share of a
sampling thread's time that holds the GIL, measured with a probe thread (its pure-Python loop rate
while a worker thread samples, against its rate alone): a thread pool tops out near 1 / that share.

    python benchmarks/loader_profile.py [--images 64]
"""
from __future__ import annotations

import argparse
import os
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
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return 1e6 * min(times) / n


def probe_rate(seconds: float) -> float:
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        n += 1
    return n / seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=64)
    args = ap.parse_args(argv)
    from darknet_py.data import BatchLoader, augment as A
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_throughput import adapted_cfg

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "darknet_py", "synth", tmp, "--images", str(args.images), "--classes", "4"],
                       check=True, stdout=subprocess.DEVNULL)
        cfg = adapted_cfg(4, 64, 416, os.path.join(tmp, "net.cfg"))
        with BatchLoader.from_files(os.path.join(tmp, "shapes.data"), cfg, 64, seed=1, workers=0) as loader:
            m, n = loader.sampler, args.images
            paths = m.paths[:n]
            raws = [np.fromfile(p, np.uint8) for p in paths]
            bgr = [cv2.imdecode(r, cv2.IMREAD_COLOR) for r in raws]
            rgb = [cv2.cvtColor(i, cv2.COLOR_BGR2RGB) for i in bgr]
            rng = np.random.default_rng(1)
            crops = [A.sample_crop(rng, 416, 416, 416, 416, m.opts) for _ in rgb]
            boxes = [m._boxes(p) for p in paths]
            sized = [A.crop_resize(i, p, 416, 416) for i, p in zip(rgb, crops)]
            hsv = [A.distort_hsv(i, p.dhue, p.dsat, p.dexp) for i, p in zip(sized, crops)]
            chw = [A.to_chw(i) for i in hsv]
            batch = np.zeros((n, 3, 416, 416), np.float32)

            def copy_rows():
                for j, c in enumerate(chw):
                    batch[j] = c

            stages = [
                ("read the file", lambda: [np.fromfile(p, np.uint8) for p in paths]),
                ("imdecode", lambda: [cv2.imdecode(r, cv2.IMREAD_COLOR) for r in raws]),
                ("BGR -> RGB", lambda: [cv2.cvtColor(i, cv2.COLOR_BGR2RGB) for i in bgr]),
                ("default_rng([seed, k, j])", lambda: [np.random.default_rng([1, 2, j]) for j in range(n)]),
                ("random choices (sample_crop, sample_pixel_noise)",
                 lambda: [(A.sample_crop(rng, 416, 416, 416, 416, m.opts), A.sample_pixel_noise(rng, m.opts)) for _ in rgb]),
                ("boxes (correct_truth)",
                 lambda: [A.correct_truth(b, p, 416, 416, 416, 416, 200, rng) for b, p in zip(boxes, crops)]),
                ("crop + resize (crop_resize)", lambda: [A.crop_resize(i, p, 416, 416) for i, p in zip(rgb, crops)]),
                ("flip", lambda: [cv2.flip(i, 1) for i in sized]),
                ("HSV (distort_hsv)", lambda: [A.distort_hsv(i, p.dhue, p.dsat, p.dexp) for i, p in zip(sized, crops)]),
                ("uint8 HWC -> float32 CHW / 255 (to_chw)", lambda: [A.to_chw(i) for i in hsv]),
                ("copy into the batch array", copy_rows),
                ("first touch of a fresh batch array", lambda: np.empty((n, 3, 416, 416), np.float32).fill(0)),
                ("whole sample()", lambda: [m.sample(5, j, 416, 416) for j in range(n)]),
            ]
            print(f"{os.cpu_count()} cores; OpenCV {cv2.__version__} ({cv2.getNumThreads()} threads), NumPy {np.__version__}")
            print("| stage | us / image |\n|---|---|")
            for name, f in stages:
                print(f"| {name} | {best_us(f, n):.0f} |")

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
