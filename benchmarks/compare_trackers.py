"""Tracker libraries side by side on a `synth --video` clip with the demo model: MOTA, IDF1, ID
switches (motmetrics) and each tracker's own time per frame at 50 objects (the median of --repeats
runs over 100 frames, with the spread; each frame's input is built before the clock starts). Prints a
Markdown table (docs/video_tracking.md has the one we measured). A library that is not installed is
skipped.

    taskset -c 0 python benchmarks/compare_trackers.py [--frames 150] [--size 480x360] [--objects 8] [--seed 0]

Candidates: darknet_py's ByteTrack (tracking/bytetrack.py, the default of `detect --track`), Roboflow's
`trackers` (the ByteTrack ours ports, SORT, OC-SORT), `supervision`'s sv.ByteTrack (in supervision
0.26, gone from 0.31: it moved into `trackers`) and `norfair` (IoU distance). One core: run it under
taskset (the script also asks NumPy's BLAS for one thread).
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Callable, Dict, List, Tuple  # noqa: E402

import numpy as np  # noqa: E402

from darknet_py.data.synth import parse_size  # noqa: E402
from darknet_py.data.synth_video import read_gt, write_video  # noqa: E402
from darknet_py.evaluation.mot import mot_scores  # noqa: E402
from darknet_py.media.stream import iter_frames  # noqa: E402
from darknet_py.model_files.demo import demo_network  # noqa: E402

Frame = List[tuple]  # (x, y, w, h, confidence, class id)
# make() -> (convert: a Frame to the tracker's input, step: that input -> [(id, x, y, w, h)])
Candidate = Callable[[], Tuple[Callable, Callable]]


def ours(name: str, library: bool = False) -> Candidate:
    def make():
        from darknet_py.network import Detection
        from darknet_py.tracking.tracker import Tracker

        t = Tracker(name, 25.0, library=library)

        def convert(dets: Frame):
            return [Detection(int(c), str(c), float(p), x, y, w, h) for x, y, w, h, p, c in dets]

        def step(dets):
            return [(d.track_id, d.x, d.y, d.w, d.h) for d in t.update(dets) if d.track_id is not None]
        return convert, step
    return make


def sv_bytetrack():
    import supervision as sv

    t = sv.ByteTrack(frame_rate=25)

    def convert(dets: Frame):
        a = np.array(dets, float).reshape(-1, 6)
        return sv.Detections(xyxy=np.c_[a[:, :2], a[:, :2] + a[:, 2:4]], confidence=a[:, 4],
                             class_id=a[:, 5].astype(int))

    def step(d):
        out = t.update_with_detections(d)
        return [(int(i), x0, y0, x1 - x0, y1 - y0) for (x0, y0, x1, y1), i in zip(out.xyxy, out.tracker_id)]
    return convert, step


def norfair_iou():
    import norfair

    t = norfair.Tracker(distance_function="iou", distance_threshold=0.7, hit_counter_max=15, initialization_delay=1)

    def convert(dets: Frame):
        return [norfair.Detection(np.array([[x, y], [x + w, y + h]]), scores=np.array([p, p]))
                for x, y, w, h, p, _ in dets]

    def step(objs):
        out = []
        for o in t.update(objs):
            if o.last_detection is None or o.id is None:
                continue
            (x0, y0), (x1, y1) = o.estimate
            out.append((o.id, x0, y0, x1 - x0, y1 - y0))
        return out
    return convert, step


CANDIDATES: Dict[str, Candidate] = {
    "darknet_py ByteTrack": ours("bytetrack"), "trackers ByteTrack": ours("bytetrack", library=True),
    "trackers SORT": ours("sort"), "trackers OC-SORT": ours("ocsort"),
    "supervision sv.ByteTrack": sv_bytetrack, "norfair (IoU)": norfair_iou,
}


def fifty_objects(frames: int = 100) -> List[Frame]:
    rng = np.random.default_rng(0)
    pos, vel = rng.uniform(0, 1800, (50, 2)), rng.uniform(-3, 3, (50, 2))
    out = []
    for _ in range(frames):
        pos += vel
        p = pos + rng.normal(0, 0.5, (50, 2))
        out.append([(float(x), float(y), 40.0, 40.0, 0.9, 0) for x, y in p])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--size", type=parse_size, default=(480, 360))
    ap.add_argument("--objects", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=7, help="timed runs of the 50-object load (median, spread)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        video = os.path.join(d, "clip.mp4")
        write_video(video, args.frames, args.size, args.objects, seed=args.seed)
        gt = read_gt(os.path.join(d, "clip.gt.txt"))
        net = demo_network("cpu")
        detections = [[(*det.box, det.confidence, det.class_id) for det in net.detect(f)] for f in iter_frames(video)]
    load = fifty_objects()
    print("| tracker | MOTA | IDF1 | ID switches | ms per frame (50 objects): median (min-max) |")
    print("| --- | --- | --- | --- | --- |")
    for name, make in CANDIDATES.items():
        try:
            convert, step = make()
        except (ImportError, AttributeError) as e:
            print(f"| {name} | not installed ({e}) | | | |")
            continue
        rows = [(f, tid, x, y, w, h, 1, -1, -1) for f, dets in enumerate(detections, 1)
                for tid, x, y, w, h in step(convert(dets))]
        s = mot_scores(gt, np.array(rows, float).reshape(-1, 9))
        times = []
        for _ in range(args.repeats):
            convert, step = make()
            inputs = [convert(dets) for dets in load]
            t0 = time.perf_counter()
            for dets in inputs:
                step(dets)
            times.append((time.perf_counter() - t0) / len(load) * 1000)
        print(f"| {name} | {s['mota']:.3f} | {s['idf1']:.3f} | {s['id_switches']} | "
              f"{statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
