"""Peak resident memory of a yolov4-tiny forward and of a training iteration, and resident memory that
stays flat over 10,000 detect calls and a 100,000-frame video. The engine allocates in C++, which tracemalloc
does not see, so a fresh process reports its high-water mark (VmHWM, or ru_maxrss) before and
after the forward pass."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import report

_SCRIPT = r"""
import json, sys, tempfile
sys.path.insert(0, {bench_dir!r})
import bench_common as bc

with tempfile.TemporaryDirectory() as d:
    net, _, _ = bc.random_model(bc.find_model("yolov4-tiny"), d)
    blob = bc.input_blob(net)
    before = bc.peak_rss_mb()
    net.forward(blob)
    after = bc.peak_rss_mb()
    net.forward(blob)  # a second pass must reuse the buffers
    again = bc.peak_rss_mb()
print(json.dumps({{"loaded_mb": before, "forward_mb": after, "second_forward_mb": again}}))
"""


_TRAIN_SCRIPT = r"""
import json, sys, tempfile
import numpy as np
sys.path.insert(0, {bench_dir!r})
import bench_common as bc
from test_bench_train import random_truths, BATCH

with tempfile.TemporaryDirectory() as d:
    net, _, _ = bc.random_model(bc.find_model("yolov4-tiny"), d)
    raw = net._net
    blob = bc.input_blob(net, batch=BATCH)
    truths = random_truths(np.random.default_rng(0), BATCH)
    before = bc.peak_rss_mb()
    for _ in range(2):
        raw.forward_train(blob, [])
        raw.yolo_loss(truths)
        raw.backward()
        raw.update(1e-6, BATCH)
    after = bc.peak_rss_mb()
print(json.dumps({{"loaded_mb": before, "train_mb": after}}))
"""


def _measure(threads: int, script: str = _SCRIPT) -> dict:
    env = dict(os.environ, DARKNET_PY_THREADS=str(threads))
    code = script.format(bench_dir=str(Path(__file__).resolve().parent))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_peak_memory_yolov4_tiny_forward(benchmark, threads):
    result = {}

    def run():
        result.update(_measure(threads))

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    report(f"yolov4-tiny 416 forward peak RSS: {result['forward_mb']:.0f} MB (after loading "
           f"{result['loaded_mb']:.0f} MB, +{result['forward_mb'] - result['loaded_mb']:.0f} MB for the forward; "
           f"second forward {result['second_forward_mb']:.0f} MB)")
    # a second forward that grows memory would mean buffers are not reused
    assert result["second_forward_mb"] <= result["forward_mb"] * 1.05 + 5


def test_peak_memory_yolov4_tiny_train_iteration(benchmark, threads):
    import darknet_py

    if not hasattr(darknet_py._core.Net, "forward_train"):
        pytest.skip("this build has no training bindings (Net.forward_train)")
    result = {}
    benchmark.pedantic(lambda: result.update(_measure(threads, _TRAIN_SCRIPT)), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    report(f"yolov4-tiny 416 training iteration (batch 16) peak RSS: {result['train_mb']:.0f} MB "
           f"(+{result['train_mb'] - result['loaded_mb']:.0f} MB over the loaded network)")


# ---- long runs stay flat: the long versions of src-test/test_memory_flat.py ---------
_PROBE = Path(__file__).resolve().parents[1] / "src-test" / "memory_probe.py"
FLAT_BOUND_MB = 2.0


def _probe(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(_PROBE), *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmRSS is read from /proc (Linux only)")
def test_rss_flat_over_10000_detect_calls(benchmark):
    result = {}
    benchmark.pedantic(lambda: result.update(_probe("detect", "--calls", "10000", "--warmup", "200",
                                                    "--model", "demo")), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    report(f"10,000 detect calls (demo model, {result['detections_per_call']} detections each, "
           f"{result['ms_per_call']:.1f} ms a call): RSS {result['rss_after_warmup_mb']:.1f} MB after warm-up, "
           f"{result['rss_after_mb']:.1f} MB after, growth {result['growth_mb'] * 1024:.0f} kB")
    assert result["growth_mb"] < FLAT_BOUND_MB, result


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmRSS is read from /proc (Linux only)")
def test_rss_flat_over_100000_video_frames(benchmark):
    result = {}
    benchmark.pedantic(lambda: result.update(_probe("video", "--frames", "100000", "--model", "tiny")),
                       rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    report(f"100,000-frame video (64x48 MJPG) through `darknet_py detect --out`: RSS "
           f"{result['rss_after_warmup_mb']:.1f} MB after the first tenth, peak {result['rss_peak_mb']:.1f} MB, "
           f"growth {result['growth_mb'] * 1024:.0f} kB, {result['frames_per_second']:.0f} frames/s")
    assert result["frames_written"] == 100000
    assert result["growth_mb"] < FLAT_BOUND_MB, result
