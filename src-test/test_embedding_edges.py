"""Rough edges an outside fuzz of the package found: grey .pgm inputs and outputs, what a
video writer that does not open says, class ids out of range, detect_batch on a generator, and NMS
at --thresh 0 (every box a candidate)."""
import os
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest

import darknet_py
from darknet_py import DarknetError
from darknet_py.exit_codes import OutputError
from darknet_py.media.video import FrameWriter

DEMO = os.path.join(os.path.dirname(darknet_py.__file__), "models", "demo")


@pytest.fixture(scope="module")
def demo():
    return darknet_py.Network(os.path.join(DEMO, "shapes-demo.cfg"), os.path.join(DEMO, "shapes-demo.weights"),
                              os.path.join(DEMO, "shapes.names"), device="cpu")


def test_grey_pgm_in_grey_pgm_out(tmp_path, yolov3_tiny):
    """A .pgm holds one channel: the annotated image (boxes drawn in colour) is written to it in grey,
    said once on stderr, exit 0; the detections are those of the same image given as colour."""
    import skimage.data

    grey = skimage.data.camera()
    for name in ("a.pgm", "b.pgm"):
        assert cv2.imwrite(str(tmp_path / name), grey)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "darknet_py", "detect", str(tmp_path / "*.pgm"), "--out", str(out),
                        "--cfg", str(yolov3_tiny["cfg"]), "--weights", str(yolov3_tiny["weights"]),
                        "--thresh", "0.1", "--device", "cpu", "--json", str(tmp_path / "d.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("holds one channel") == 1, r.stderr
    written = cv2.imread(str(out / "a.pgm"), cv2.IMREAD_UNCHANGED)
    assert written.shape == grey.shape and written.dtype == np.uint8
    assert not np.array_equal(written, grey)  # the boxes are drawn
    net = darknet_py.Network(yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"], device="cpu")
    dets = net.detect(cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR), thresh=0.1)
    import json

    results = json.loads((tmp_path / "d.json").read_text())["results"]
    assert dets and [len(r["detections"]) for r in results] == [len(dets)] * 2
    assert [d["class_name"] for d in results[0]["detections"]] == [d.class_name for d in dets]


@pytest.mark.parametrize("size,why", [((1, 1), "refuses 1x1 frames; .avi (MJPG) takes any size"),
                                      ((64, 64), "refuses 0 frames per second")])
def test_video_writer_says_what_failed(tmp_path, size, why):
    fps = 0.0 if size == (64, 64) else 25.0
    writer = FrameWriter(str(tmp_path / "out.mp4"), fps)
    with pytest.raises(OutputError, match="out.mp4: cannot write this video .*" + why.replace(".", r"\.")
                       .replace("(", r"\(").replace(")", r"\)")):
        writer.write(np.zeros((size[1], size[0], 3), np.uint8))
    writer.close(keep=False)
    assert os.listdir(tmp_path) == []  # no temporary file left
    if size == (1, 1):  # what the message promises
        with FrameWriter(str(tmp_path / "out.avi"), fps) as w:
            w.write(np.zeros((1, 1, 3), np.uint8))
        assert cv2.VideoCapture(str(tmp_path / "out.avi")).read()[0]


def test_class_name_out_of_range_names_the_range(tmp_path, demo):
    assert [demo.class_name(i) for i in range(4)] == ["circle", "square", "triangle", "star"]
    unnamed = darknet_py.Network(os.path.join(DEMO, "shapes-demo.cfg"), device="cpu")
    assert unnamed.class_name(3) == "3"
    for net in (demo, unnamed):
        for bad in (-1, 4, 10**9):
            with pytest.raises(DarknetError, match=rf"class id {bad} is out of range: this network has 4 "
                                                   r"classes \(0\.\.3\)"):
                net.class_name(bad)


def test_detect_batch_takes_any_iterable(demo):
    image = cv2.imread(os.path.join(DEMO, "sample.jpg"))
    images = [image, cv2.flip(image, 0)]
    want = demo.detect_batch(images)
    assert want[0] and want[1] and want[0] != want[1]
    assert demo.detect_batch(im for im in images) == want
    assert demo.detect_batch(tuple(images)) == want
    assert demo.detect_batch(iter([])) == []


def test_nms_over_every_candidate_is_fast(yolov3_tiny):
    """--thresh 0 makes every one of yolov3-tiny's 2535 boxes a candidate for all 80 classes: Darknet's
    do_nms_sort then computes 257 million IoUs (5.4 s a 416x416 image, 4.0 s here). Only intersecting
    boxes are compared now (that the result is still Darknet's: test_real_weights.py, test_map.py)."""
    net = darknet_py.Network(yolov3_tiny["cfg"], yolov3_tiny["weights"], device="cpu")
    image = cv2.imread(os.path.join(DEMO, "sample.jpg"))
    blob = net.preprocess(image)[None]
    net._net.detect(blob, [(416, 416)], 0.0, 0.45, False)  # warm-up
    t0 = time.perf_counter()
    net._net.detect(blob, [(416, 416)], 0.0, 0.45, False)[0]
    seconds = time.perf_counter() - t0
    assert seconds < 2.0, f"{seconds:.2f} s"
