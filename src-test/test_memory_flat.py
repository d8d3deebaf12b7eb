"""Long runs keep resident memory flat: many detect calls in one process, and a long video through
`darknet_py detect VIDEO --out DIR`. Each measure runs in a fresh process (memory_probe.py).

The bound is 2 MB over 10,000 calls and over 100,000 frames (benchmarks/test_bench_memory.py
runs those: about 200 bytes a call, 20 bytes a frame). These short runs take seconds, so they
assert the growth is below 0.5 MB: over the calls, or for the video between the peaks of the first
and second half of the run (resident memory swings by MBs with the allocator; memory_probe.py): a leak
of 0.5 kB a call, or of 0.33 kB a frame (the per-frame result dicts the CLI kept without --json were
0.5 kB), fails them.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parent / "memory_probe.py"
BOUND_MB = 0.5

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                                reason="resident memory is read from /proc/self/status (Linux only)")


def _probe(*args) -> dict:
    out = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_detect_calls_keep_memory_flat():
    r = _probe("detect", "--calls", "1000", "--warmup", "100", "--model", "tiny")
    assert r["detections_per_call"] > 0  # the decode, NMS and Detection objects are exercised
    assert r["growth_mb"] < BOUND_MB, r


def test_video_through_the_cli_keeps_memory_flat():
    r = _probe("video", "--frames", "3000", "--model", "tiny")
    assert r["frames_written"] == 3000
    assert r["growth_mb"] < BOUND_MB, r
