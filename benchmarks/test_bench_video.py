"""The detect pipeline on a video, as `darknet_py detect clip.mp4` runs it (decode -> preprocess ->
forward -> NMS -> draw -> encode, with decoding and encoding in their own threads): frames per
second over the whole clip."""
from __future__ import annotations

import io
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

import bench_common as bc
import darknet_py
from conftest import report

FRAMES, W, H = 48, 640, 360
SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"


def make_clip(path: str) -> None:
    """A synthetic clip: moving bright shapes on a textured background (content does not change
    the forward's cost; it keeps NMS and drawing from being trivially empty with real weights)."""
    rng = np.random.default_rng(0)
    bg = cv2.GaussianBlur(rng.integers(0, 255, (H, W, 3), dtype=np.uint8), (0, 0), 5)
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 25.0, (W, H))
    assert writer.isOpened(), "OpenCV cannot write MJPG"
    for i in range(FRAMES):
        f = bg.copy()
        cv2.rectangle(f, (20 + 8 * i, 60), (140 + 8 * i, 260), (40, 40, 220), -1)
        cv2.circle(f, (W - 60 - 6 * i, 180), 50, (220, 200, 30), -1)
        writer.write(f)
    writer.release()


@pytest.fixture(scope="module")
def detector(workdir, threads):
    """Real yolov3-tiny weights when ../shared has them, else yolov4-tiny with random weights."""
    cfg, weights = SHARED_MODELS / "yolov3-tiny.cfg", SHARED_MODELS / "yolov3-tiny.weights"
    if cfg.is_file() and weights.is_file():
        return darknet_py.Network(str(cfg), str(weights)), "yolov3-tiny (real weights)"
    net, _, _ = bc.random_model(bc.find_model("yolov4-tiny"), workdir)
    return net, "yolov4-tiny (random weights)"


def run_cli_pipeline(net, clip: str, out_dir: str) -> int:
    """The video path of `darknet_py detect`: returns the number of frames it wrote."""
    from darknet_py.commands.runner import DetectOptions, Runner
    from darknet_py.media.sources import resolve_source

    runner = Runner(net, resolve_source(clip), DetectOptions(out_dir=out_dir), stdout=io.StringIO(),
                    stderr=io.StringIO())
    runner.run()
    return len(runner.results)


def test_video_detect_pipeline_fps(benchmark, workdir, detector, threads):
    net, what = detector
    clip = os.path.join(workdir, "clip.avi")
    make_clip(clip)
    pipeline, how = run_cli_pipeline, "darknet_py.commands.runner (the CLI's video path)"
    out_dir = os.path.join(workdir, "video-out")
    pipeline(net, clip, out_dir)  # warm-up: buffers, codec
    frames = {}
    benchmark.pedantic(lambda: frames.update(n=pipeline(net, clip, out_dir)), rounds=3, iterations=1)
    assert frames["n"] == FRAMES
    fps = FRAMES / benchmark.stats.stats.median
    benchmark.extra_info.update(fps=fps, frames=FRAMES, size=f"{W}x{H}", model=what, pipeline=how, threads=threads)
    report(f"video detect {W}x{H}, {what}, {how}: {fps:.1f} frames/s, {threads} threads")
