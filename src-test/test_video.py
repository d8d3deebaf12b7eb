"""Video I/O and `darknet_py detect VIDEO`: an mp4 goes in, an annotated mp4 of the same frame
count, size and fps comes out, and the JSON holds, per frame, what Network.detect finds in the
decoded input frame."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from darknet_py import Network
from darknet_py.commands.cli import main
from darknet_py.media.video import FrameReader, FrameWriter, fourcc_for

skdata = pytest.importorskip("skimage.data", reason="scikit-image provides the test photos")

W, H, FPS = 320, 240, 12.0


def _camera_frames(n: int) -> list:
    """The cameraman photo (a grey person with a camera) sliding across a grey background:
    every frame differs, and yolov3-tiny finds a person in them."""
    photo = cv2.resize(cv2.cvtColor(skdata.camera(), cv2.COLOR_GRAY2BGR), (H, H))
    frames = []
    for i in range(n):
        f = np.full((H, W, 3), 96, np.uint8)
        x = (W - H) * i // max(1, n - 1)
        f[:, x:x + H] = photo
        frames.append(f)
    return frames


def _write_video(path: Path, frames: list, fps: float = FPS) -> Path:
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc_for(str(path))), fps, (W, H))
    assert w.isOpened(), f"OpenCV cannot write {path}"
    for f in frames:
        w.write(f)
    w.release()
    return path


def _read_all(path: Path) -> tuple:
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    fps = cap.get(cv2.CAP_PROP_FPS)
    cap.release()
    return frames, fps


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return _write_video(tmp_path_factory.mktemp("video") / "clip.mp4", _camera_frames(10))


@pytest.fixture(scope="module")
def tiny(yolov3_tiny) -> Network:
    return Network(yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"])


def _colourful_pixels(frame: np.ndarray) -> int:
    # the test video is grey, so strongly coloured pixels can only be boxes and labels
    f = frame.astype(np.int16)
    return int(((f.max(axis=2) - f.min(axis=2)) > 100).sum())


# ---- the reader and writer on their own -------------------------------------------------------
def test_reader_yields_what_videocapture_decodes(clip):
    expected, fps = _read_all(clip)
    with FrameReader(str(clip), prepare=lambda f: f.mean()) as reader:
        assert reader.fps == pytest.approx(fps)
        assert reader.frame_count == len(expected)
        got = list(reader)
    assert [i for i, _, _ in got] == list(range(len(expected)))
    for (_, frame, prepared), want in zip(got, expected):
        assert np.array_equal(frame, want)
        assert prepared == pytest.approx(want.mean())  # prepare ran on that very frame


def test_reader_stops_early_without_hanging(clip):
    t0 = time.perf_counter()
    with FrameReader(str(clip), queue_size=1) as reader:
        next(iter(reader))  # leave the decoder blocked on a full queue
    assert time.perf_counter() - t0 < 3


def test_reader_error_names_the_file(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    with pytest.raises(ValueError, match="broken.mp4"):
        FrameReader(str(bad))


@pytest.mark.parametrize("ext, fourcc", [(".avi", "MJPG"), (".mkv", "mp4v"), (".MOV", "mp4v")])
def test_writer_round_trip_other_containers(tmp_path, ext, fourcc):
    assert fourcc_for("x" + ext) == fourcc
    frames = _camera_frames(4)
    path = tmp_path / f"out{ext}"
    with FrameWriter(str(path), 7.0) as writer:
        for f in frames:
            writer.write(f)
    back, fps = _read_all(path)
    assert len(back) == 4 and back[0].shape == (H, W, 3)
    assert fps == pytest.approx(7.0, abs=0.01)
    # lossy, but the same picture: mean error of a few grey levels
    assert np.abs(back[2].astype(float) - frames[2]).mean() < 8


# ---- the command line -------------------------------------------------------------------------
def test_detect_video_round_trip(clip, tmp_path, yolov3_tiny, tiny, capsys):
    out, js = tmp_path / "out", tmp_path / "dets.json"
    rc = main(["detect", str(clip), "--cfg", str(yolov3_tiny["cfg"]), "--weights", str(yolov3_tiny["weights"]),
               "--out", str(out), "--json", str(js), "--thresh", "0.1"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "10 frames in" in err and "FPS" in err  # the progress bar's summary line

    inputs, in_fps = _read_all(clip)
    outputs, out_fps = _read_all(out / "clip.mp4")
    assert len(outputs) == len(inputs) == 10
    assert outputs[0].shape == inputs[0].shape == (H, W, 3)
    assert out_fps == pytest.approx(in_fps, abs=0.01)

    doc = json.loads(js.read_text())
    assert doc["model"]["input_size"] == [416, 416] and doc["model"]["thresh"] == 0.1
    assert [r["frame"] for r in doc["results"]] == list(range(10))
    total = 0
    for frame_in, frame_out, entry in zip(inputs, outputs, doc["results"]):
        # the oracle: the Python API on the frame as decoded from the input (mp4 is lossy)
        want = [d.to_dict() for d in tiny.detect(frame_in, thresh=0.1)]
        got = entry["detections"]
        assert [d["class_id"] for d in got] == [d["class_id"] for d in want]
        for g, w in zip(got, want):
            assert g["confidence"] == pytest.approx(w["confidence"], abs=1e-4)
            assert g["box"] == pytest.approx(w["box"], abs=0.05)
        total += len(got)
        if any(d["class_name"] == "person" for d in got):
            assert _colourful_pixels(frame_out) > 100, "boxes and labels should be drawn"
        assert _colourful_pixels(frame_in) < 20
    assert total >= 5, "yolov3-tiny should find the cameraman in most frames"


def test_detect_video_with_uppercase_extension_and_letterbox(tmp_path, yolov3_tiny, capsys):
    clip = _write_video(tmp_path / "CLIP.MOV", _camera_frames(3))
    rc = main(["detect", str(clip), "--cfg", str(yolov3_tiny["cfg"]), "--weights", str(yolov3_tiny["weights"]),
               "--out", str(tmp_path / "o"), "--letterbox"])
    assert rc == 0, capsys.readouterr().err
    assert len(_read_all(tmp_path / "o" / "CLIP.MOV")[0]) == 3


def test_corrupt_video_is_a_one_line_error(tmp_path, yolov3_tiny, capsys):
    bad = tmp_path / "broken.mkv"
    bad.write_bytes(os.urandom(2000))
    rc = main(["detect", str(bad), "--cfg", str(yolov3_tiny["cfg"]), "--weights", str(yolov3_tiny["weights"]),
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and "broken.mkv" in err and "Traceback" not in err


def test_ctrl_c_finalizes_the_video(tmp_path, yolov3_tiny):
    """A real process (python -m darknet_py): SIGINT mid-video exits 130 and leaves a playable
    video and a JSON marked interrupted, holding the frames done so far."""
    clip = _write_video(tmp_path / "long.mp4", _camera_frames(80))
    out, js = tmp_path / "out", tmp_path / "d.json"
    proc = subprocess.Popen([sys.executable, "-m", "darknet_py", "detect", str(clip), "--cfg", str(yolov3_tiny["cfg"]),
                             "--weights", str(yolov3_tiny["weights"]), "--out", str(out), "--json", str(js),
                             "--threads", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        # the writer opens on the first detected frame, under a temporary name beside the output
        while not list(out.glob(".long.mp4.*.tmp.mp4")) if out.exists() else True:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no output video after 30 s"
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    frames, _ = _read_all(out / "long.mp4")  # renamed into place, finalized
    assert not list(out.glob(".*tmp*"))
    doc = json.loads(js.read_text())
    assert doc["interrupted"] is True and doc["complete"] is False
    assert doc["outputs"] == [str(out / "long.mp4")]
    assert 1 <= len(frames) < 80
    assert abs(len(doc["results"]) - len(frames)) <= 1
