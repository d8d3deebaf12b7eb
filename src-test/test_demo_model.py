"""The bundled demo model (darknet_py/models/demo): its mAP on freshly generated shapes, and
`darknet_py detect` with no model or source given.

The valid set is generated here with a seed the model never saw (it was trained on `darknet_py
synth --seed 1` images, see the README), and scored by the mAP code against the generator's own
labels.
"""
import os

import cv2
import numpy as np
import pytest

import darknet_py
from darknet_py.model_files.demo import CLASSES, demo_files, demo_network, render_video_frames
from darknet_py.data.synth import generate, render

VALID_SEED = 20250101  # any seed but the training one (1)


@pytest.fixture(scope="module")
def files():
    return demo_files()


def test_demo_files_are_small_and_consistent(files):
    assert os.path.getsize(files["weights"]) < 5 * 1024 * 1024
    net = demo_network()
    assert net.classes == len(CLASSES) and net.names == list(CLASSES)
    assert net.load_weights(files["weights"])["seen"] > 0  # trained, not initialised


@pytest.mark.parametrize("size", [(256, 256), (416, 416)])
def test_demo_model_map_on_fresh_shapes(tmp_path, files, size):
    data = generate(str(tmp_path / "valid"), images=100, classes=4, size=size, seed=VALID_SEED, valid_fraction=0)
    result = darknet_py.compute_map(data, files["cfg"], files["weights"], progress=False)
    assert result.images == 100 and result.truths > 200
    per_class = {c.name: round(c.ap, 3) for c in result.classes}
    assert result.map >= 0.8, f"demo mAP@0.5 {result.map:.3f} on {size} images; per class {per_class}"


def iou(a, b):
    ax0, ay0, ax1, ay1 = a
    bx0, by0, bx1, by1 = b
    inter = max(0, min(ax1, bx1) - max(ax0, bx0)) * max(0, min(ay1, by1) - max(ay0, by0))
    return inter / ((ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter)


def test_sample_image_detections_match_what_was_drawn(files):
    # the sample was drawn by make_sample_image(seed 2024): redraw it to know its shapes
    img, shapes = render(np.random.default_rng([2024, 0]), 416, 416, len(CLASSES))
    sample = cv2.imread(files["image"])
    # a JPEG of the same picture: close once the fine noise JPEG drops is blurred away (another seed: ~60)
    blur = lambda a: cv2.GaussianBlur(a, (5, 5), 0).astype(int)  # noqa: E731
    assert sample.shape == img.shape and np.abs(blur(sample) - blur(img)).mean() < 3
    dets = demo_network().detect(sample)
    for s in shapes:
        best = max((iou(s.box, (d.x, d.y, d.x + d.w, d.y + d.h)) for d in dets if d.class_id == s.cls), default=0)
        assert best > 0.5, f"{CLASSES[s.cls]} at {s.box} not found: {dets}"
    assert len(dets) <= len(shapes) + 1


def test_cli_detect_without_arguments_uses_the_demo(tmp_path, capsys):
    from darknet_py.commands.cli import main

    assert main(["detect", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "bundled demo model" in captured.err
    assert os.listdir(tmp_path) == ["sample.jpg"]
    assert any(name in captured.out for name in CLASSES)


def test_cli_detect_runs_the_demo_on_its_sample_video(tmp_path, files):
    from darknet_py.commands.cli import main

    assert main(["detect", files["video"], "--out", str(tmp_path)]) == 0
    out = cv2.VideoCapture(str(tmp_path / "sample.mp4"))
    assert int(out.get(cv2.CAP_PROP_FRAME_COUNT)) == int(cv2.VideoCapture(files["video"]).get(cv2.CAP_PROP_FRAME_COUNT))


def test_demo_finds_the_moving_shapes(files):
    net = demo_network()
    found = []
    for k, frame in enumerate(render_video_frames()):
        if k % 15 == 0:
            found.append({d.class_id for d in net.detect(frame)})
    assert all(len(f) >= 3 for f in found), found  # most of the four kinds, in every frame checked
