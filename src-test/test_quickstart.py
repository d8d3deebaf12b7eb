"""`darknet_py train yolov4-tiny.cfg` with no data, end to end on the CPU, as a newcomer runs it:
its full schedule (quickstart.py; a few minutes on 2 cores), the mAP it reaches on its valid set,
the seed in its log, one run folder holding everything it wrote, and the detect command it prints,
run as printed, finding the shapes drawn on the bundled sample image."""
import os
import re
import shlex
import subprocess
import sys

import numpy as np

from darknet_py.data.synth import render
from darknet_py.model_files.demo import CLASSES
from darknet_py.training import quickstart

DETECTION = re.compile(r"^(\w+): (\d+)%\s+\(left_x:\s*(-?\d+)\s+top_y:\s*(-?\d+)\s+width:\s*(\d+)\s+height:\s*(\d+)\)$")


def darknet_py(args, cwd, env):
    """Runs the `darknet_py` command (this interpreter's package) and returns (stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "darknet_py", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, f"darknet_py {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout, p.stderr


def iou(a, b):
    inter = max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_quick_start_ends_with_a_detector(tmp_path):
    env = dict(os.environ, DARKNET_PY_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    work = tmp_path / "work"
    work.mkdir()
    out, err = darknet_py(["train", "yolov4-tiny.cfg"], work, env)
    lines = out.splitlines()
    assert lines[0].startswith(f"No dataset given: training yolov4-tiny.cfg for {quickstart.MAX_BATCHES} iterations")
    assert f"seed {quickstart.SEED}." in lines[0]
    header = next(ln for ln in lines if ln.startswith("yolov4-tiny-quickstart: "))
    assert f", seed {quickstart.SEED}, " in header  # the seed the training ran with, in its own line
    assert any(ln.startswith("start: ") and "demo model" in ln for ln in lines)

    # one folder, named in the log, holds every file the run wrote
    run = work / "quickstart-yolov4-tiny"
    assert f"run folder: {run} " in out
    assert os.listdir(work) == [run.name]
    for f in ("yolov4-tiny-quickstart.cfg", "yolov4-tiny-quickstart_best.weights", "chart.png", "results.csv", "shapes.names"):
        assert (run / f).is_file(), f
    dataset_backup = tmp_path / "cache" / f"quickstart-shapes-{quickstart.IMAGES}-{quickstart.SIZE}-seed{quickstart.SEED}" / "backup"
    assert dataset_backup.is_dir() and not os.listdir(dataset_backup)  # the .data file's backup folder stays empty

    maps = [float(v) for v in re.findall(r"mean_average_precision \(mAP@0\.50\) = ([0-9.]+)", out)]
    assert len(maps) == 2 and max(maps) >= 0.5, f"mAP@0.5 at the two measures: {maps}"
    assert f"best mAP@0.5 {max(maps):.4f}" in err

    # the last lines: the command that detects with the new weights, which runs as printed
    assert lines[-2] == "Detect with the new weights:"
    command = shlex.split(lines[-1].strip())
    assert command[:2] == ["darknet_py", "detect"] and str(run / "yolov4-tiny-quickstart_best.weights") in command
    found, _ = darknet_py(command[1:], tmp_path, env)
    dets = [m.groups() for m in map(DETECTION.match, found.splitlines()) if m]
    _, shapes = render(np.random.default_rng([2024, 0]), 416, 416, len(CLASSES))  # the sample's shapes (demo.py)
    for s in shapes:
        best = max((iou(s.box, (int(x), int(y), int(x) + int(w), int(y) + int(h)))
                    for name, _, x, y, w, h in dets if name == CLASSES[s.cls]), default=0)
        assert best > 0.5, f"{CLASSES[s.cls]} at {s.box} not found by the quick start's weights: {found}"
    assert os.listdir(run / "detections") == ["sample.jpg"]
