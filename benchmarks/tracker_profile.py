"""Where a tracker's time per frame goes, at 50 objects per frame (the load of compare_trackers.py):
our wrapper's conversions (Detection list -> arrays -> Detection list), the association (IoU and
scipy's linear_sum_assignment; for darknet_py's ByteTrack the solver alone: its IoU is computed in
the engine's core, with the Kalman steps) and the rest of the update (Kalman predict and update,
bookkeeping), for `trackers`' ByteTrackTracker and for darknet_py's own ByteTrack
(tracking/bytetrack.py).
Prints a Markdown table of medians over --repeats runs, with the spread (min-max).

    taskset -c 0 python benchmarks/tracker_profile.py [--frames 100] [--repeats 7]

One core: run it under taskset (the script also asks NumPy's BLAS for one thread).
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Callable, Dict, List  # noqa: E402


from compare_trackers import fifty_objects  # noqa: E402


class Clock:
    """Seconds spent inside the wrapped callables."""

    def __init__(self) -> None:
        self.spent: Dict[str, float] = {}

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t0
        return timed


@contextmanager
def patched(obj, name: str, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def detections(load) -> List[list]:
    from darknet_py.network import Detection

    return [[Detection(0, "circle", p, x, y, w, h) for x, y, w, h, p, _ in frame] for frame in load]


def _run(tracker, frames: List[list], clock) -> "tuple[float, Dict[str, float]]":
    """(ms per frame of tracker.update over `frames`, each clocked part's ms per frame)."""
    t0 = time.perf_counter()
    for dets in frames:
        tracker.update(dets)
    n = len(frames)
    return (time.perf_counter() - t0) / n * 1000, {k: v / n * 1000 for k, v in clock.spent.items()}


def profile_library(frames: List[list]) -> Dict[str, float]:
    """ms per frame: the whole Tracker.update, the library's update within it, and the association
    within that (the rest of the library's update is its per-track Kalman filters and bookkeeping)."""
    import trackers.core.bytetrack.tracker as bt

    from darknet_py.tracking.tracker import Tracker

    t = Tracker("bytetrack", library=True)
    clock = Clock()
    lib = t._tracker
    with patched(bt, "linear_sum_assignment", clock.wrap("assignment", bt.linear_sum_assignment)), \
            patched(lib, "update", clock.wrap("library update", lib.update)), \
            patched(lib.iou, "compute", clock.wrap("iou", lib.iou.compute)):
        total, s = _run(t, frames, clock)
    return {"total": total, "wrapper": total - s["library update"],
            "association": s["assignment"] + s["iou"],
            "kalman and bookkeeping": s["library update"] - s["assignment"] - s["iou"]}


def profile_ours(frames: List[list]) -> Dict[str, float]:
    import darknet_py.tracking.bytetrack as ours

    from darknet_py.tracking.tracker import Tracker

    t = Tracker("bytetrack")
    clock = Clock()
    core = t._tracker
    # _assign: linear_sum_assignment, where the core needs it
    with patched(ours, "_assign", clock.wrap("assignment", ours._assign)), \
            patched(core, "update", clock.wrap("core update", core.update)):
        total, s = _run(t, frames, clock)
    return {"total": total, "wrapper": total - s["core update"],
            "association": s["assignment"], "kalman and bookkeeping": s["core update"] - s["assignment"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    frames = detections(fifty_objects(args.frames))
    parts = ("total", "wrapper", "association", "kalman and bookkeeping")
    print("| tracker | " + " | ".join(f"{p} (ms/frame)" for p in parts) + " |")
    print("| --- | " + " | ".join("---" for _ in parts) + " |")
    for name, fn in (("trackers ByteTrackTracker", profile_library), ("darknet_py ByteTrack", profile_ours)):
        try:
            runs = [fn(frames) for _ in range(args.repeats)]
        except ImportError as e:
            print(f"| {name} | not installed ({e}) |")
            continue
        cells = []
        for p in parts:
            v = [r[p] for r in runs]
            cells.append(f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
