"""Resident memory of long runs: many detect calls in one process, and a long video through the
`darknet_py detect` command. Run as a script, in a fresh process, it prints one JSON line:

    python src-test/memory_probe.py detect --calls 10000 --model demo
    python src-test/memory_probe.py video --frames 100000 --model tiny

Models: `demo`, the bundled demo model (256x256, a reduced yolov4-tiny); `tiny`, a 32x32
two-layer detector whose weights are all zero, so every cell reports objectness 0.5 and class
probabilities 0.5 (detections above THRESH in every call) at a fraction of a millisecond a forward.
At 32x32 its 192 boxes leave about 20 detections after NMS: a call costs about 1.3 ms, where 64x64's
768 boxes cost 5.8 ms (NMS is quadratic in the boxes) and 72 labels to draw a frame.
detect: the model detects the demo's sample image `warmup` times, then `calls` times more; the
figure is the resident memory (VmRSS) after the calls minus after the warm-up.
video: a video of small generated frames (moving shapes, so there are detections to draw) goes
through the CLI's `detect VIDEO --out DIR` in this process, VmRSS sampled every 0.1 s; warm-up is
the first tenth of the run (model, threads, codecs, the first large allocations), and the figure
is the peak over the rest minus the resident memory at its start. Part of it is inherent: the AVI
writer keeps each frame's offset and size for the file's index (16 bytes a frame, 1.6 MB for
100,000 frames; FFmpeg's .mp4 muxer keeps about 70 bytes a frame).
The engine allocates in C++, out of tracemalloc's sight, so only the resident set tells. Used by
src-test/test_memory_flat.py (short runs) and benchmarks/test_bench_memory.py (the long ones).
"""
from __future__ import annotations

import argparse
import array
import json
import os
import sys
import tempfile
import threading
import time
from typing import Dict

import numpy as np

STATUS = "/proc/self/status"
THRESH = 0.2  # below the tiny model's 0.5 * 0.5, so that it reports boxes


def rss_kb() -> int:
    """This process's resident set size in KiB (Linux: /proc/self/status VmRSS)."""
    with open(STATUS) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise OSError(f"no VmRSS line in {STATUS}")


def available() -> bool:
    return os.path.isfile(STATUS)


TINY_CFG = """[net]
batch=1
subdivisions=1
width=32
height=32
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
size=1
stride=1
pad=1
filters=21
activation=linear

[yolo]
mask=0,1,2
anchors=40,40, 52,52, 64,64
classes=2
num=3
"""


def model_files(model: str, folder: str) -> Dict[str, str]:
    """cfg, weights and names of the `demo` or `tiny` model (tiny's are written into `folder`)."""
    from darknet_py.model_files.demo import demo_files

    if model == "demo":
        return {k: v for k, v in demo_files().items() if k in ("cfg", "weights", "names")}
    if model != "tiny":
        raise ValueError(f"model must be demo or tiny, got {model!r}")
    from darknet_py import Network

    cfg, weights, names = (os.path.join(folder, f"tiny.{ext}") for ext in ("cfg", "weights", "names"))
    with open(cfg, "w") as f:
        f.write(TINY_CFG)
    with open(names, "w") as f:
        f.write("a\nb\n")
    Network(cfg).save_weights(weights)  # a network built without weights holds zeros
    return {"cfg": cfg, "weights": weights, "names": names}


def detect_growth(calls: int, warmup: int = 200, model: str = "demo") -> Dict[str, float]:
    import cv2

    from darknet_py import Network
    from darknet_py.model_files.demo import demo_files

    with tempfile.TemporaryDirectory(prefix="darknet_py-memory-") as d:
        files = model_files(model, d)
        net = Network(files["cfg"], files["weights"], files["names"], "cpu")
    image = cv2.imread(demo_files()["image"])
    found = 0
    for _ in range(warmup):
        found = len(net.detect(image, THRESH))
    before = rss_kb()
    t0 = time.perf_counter()
    for _ in range(calls):
        net.detect(image, THRESH)
    seconds = time.perf_counter() - t0
    after = rss_kb()
    return {"model": model, "calls": calls, "warmup": warmup, "detections_per_call": found, "rss_after_warmup_mb": before / 1024,
            "rss_after_mb": after / 1024, "growth_mb": (after - before) / 1024, "ms_per_call": 1000 * seconds / calls}


def make_video(path: str, frames: int, size=(64, 48), fps: float = 25.0) -> str:
    """A video of `frames` frames: a square and a circle moving over a gray background (MJPG .avi,
    which every OpenCV build can write)."""
    import cv2

    w, h = size
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
    if not writer.isOpened():
        raise OSError(f"OpenCV cannot write {path}")
    try:
        for i in range(frames):
            img = np.full((h, w, 3), 110, np.uint8)
            x = (i * 2) % max(1, w - 20)
            cv2.rectangle(img, (x, 6), (x + 18, 24), (40, 40, 220), -1)
            cv2.circle(img, (w - 12 - x // 2, h - 12), 9, (220, 120, 30), -1)
            writer.write(img)
    finally:
        writer.release()
    return path


def _cli_detect(video: str, out_dir: str, files: Dict[str, str]) -> None:
    from darknet_py.commands.cli import main

    code = main(["detect", video, "--cfg", files["cfg"], "--weights", files["weights"], "--names", files["names"],
                 "--out", out_dir, "--device", "cpu", "--thresh", str(THRESH)])
    if code != 0:
        raise RuntimeError(f"darknet_py detect {video} exited with {code}")


def video_growth(frames: int, size=(64, 48), model: str = "tiny") -> Dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="darknet_py-memory-") as d:
        files = model_files(model, d)
        long = make_video(os.path.join(d, "long.avi"), frames, size)
        out = os.path.join(d, "out")
        samples = array.array("q", [rss_kb()])  # 8 bytes a sample: the probe must not grow itself
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                samples.append(rss_kb())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        try:
            _cli_detect(long, out, files)
        finally:
            done.set()
            sampler.join()
        seconds = time.perf_counter() - t0
        after = rss_kb()
        # A leak raises the later peaks; resident memory also swings with the allocator (a freed large
        # block goes back to the system and the next one comes again), by several MB on some machines.
        # Growth = the highest sample of the second half minus the highest of the first half after
        # warm-up: the swings cancel, a steady leak does not (half the run: 0.5 MB = 0.33 kB a frame).
        warm, half = len(samples) // 10, len(samples) // 2
        base = max(samples[warm:half])
        import cv2

        cap = cv2.VideoCapture(os.path.join(out, "long.avi"))
        written = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        cap.release()
    return {"model": model, "frames": frames, "frame_size": list(size), "frames_written": written,
            "rss_after_warmup_mb": base / 1024, "rss_peak_mb": max(samples[warm:]) / 1024, "rss_after_mb": after / 1024,
            "growth_mb": (max(samples[half:]) - base) / 1024, "frames_per_second": frames / seconds,
            "rss_deciles_mb": [round((samples[len(samples) * k // 10] - base) / 1024, 3) for k in range(10)]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("detect")
    d.add_argument("--calls", type=int, default=1000)
    d.add_argument("--warmup", type=int, default=200)
    v = sub.add_parser("video")
    v.add_argument("--frames", type=int, default=3000)
    for q in (d, v):
        q.add_argument("--model", choices=("demo", "tiny"), default="tiny")
    args = p.parse_args()
    result = (detect_growth(args.calls, args.warmup, args.model) if args.what == "detect"
              else video_growth(args.frames, model=args.model))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
