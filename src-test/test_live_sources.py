"""Live and everyday sources of `darknet_py detect` and Network.stream, with real parts: an MJPEG
stream served over HTTP on 127.0.0.1 by the test itself (frames of the demo sample video, JPEG-encoded
by OpenCV) and read by OpenCV's FFmpeg; a camera index that does not exist; list files and stdin;
--save-labels read back by `map` as ground truth; --save-crops; videos in the other containers,
written and read back through OpenCV. The detector is the bundled demo model."""
from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

import darknet_py
from darknet_py import exit_codes
from darknet_py.commands.cli import main
from darknet_py.model_files.demo import demo_files, demo_network
from darknet_py.media.sources import resolve_source

DEMO = demo_files()
MODEL = ["--cfg", DEMO["cfg"], "--weights", DEMO["weights"], "--names", DEMO["names"], "--threads", "2"]
ENV = {**os.environ, "PYTHONPATH": str(Path(darknet_py.__file__).resolve().parents[1])}


def run(argv, capsys):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture(scope="module")
def net():
    return demo_network("cpu")


@pytest.fixture(scope="module")
def sample_frames():
    cap = cv2.VideoCapture(DEMO["video"])
    frames = []
    while len(frames) < 12:
        ok, f = cap.read()
        assert ok
        frames.append(f)
    cap.release()
    return frames


# ---- an MJPEG server on 127.0.0.1 ----------------------------------------------------------------
class MjpegServer:
    """Serves `segments` of JPEG frames as multipart/x-mixed-replace, one segment per connection,
    `interval` seconds apart; once they are used up every request gets 404 (the stream is gone)."""

    def __init__(self, segments, interval=0.03):
        self.segments, self.interval = list(segments), interval
        self.connections = 0
        self.sent = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if owner.connections >= len(owner.segments):
                    self.send_error(404)
                    return
                segment = owner.segments[owner.connections]
                owner.connections += 1
                self.send_response(200)
                self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
                self.end_headers()
                try:
                    for jpeg in segment:
                        self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n"
                                         % len(jpeg) + jpeg + b"\r\n")
                        self.wfile.flush()
                        owner.sent += 1
                        time.sleep(owner.interval)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (max_frames, closed generator)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/cam/stream.mjpg"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _jpegs(frames):
    return [cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes() for f in frames]


def _decoded_by_ffmpeg(jpegs, folder: Path):
    """The JPEGs as FFmpeg's MJPEG decoder decodes them (the stream's decoder; OpenCV's imdecode
    uses libjpeg, whose pixels differ by a few levels): concatenated, they are a raw .mjpeg file."""
    path = folder / "frames.mjpeg"
    path.write_bytes(b"".join(jpegs))
    cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
    cap.release()
    assert len(frames) == len(jpegs)
    return frames


def test_http_mjpeg_stream_every_frame_detected(net, sample_frames, tmp_path, capsys):
    jpegs = _jpegs(sample_frames)
    server = MjpegServer([jpegs])
    try:
        rc, _, err = run(["detect", server.url, *MODEL, "--no-drop", "--reconnect", "0",
                          "--out", tmp_path / "out", "--json", tmp_path / "d.json"], capsys)
    finally:
        server.close()
    assert rc == exit_codes.OK, err
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["complete"] and [r["frame"] for r in doc["results"]] == list(range(len(jpegs)))
    for r, frame in zip(doc["results"], _decoded_by_ffmpeg(jpegs, tmp_path)):
        assert r["detections"] == [d.to_dict() for d in net.detect(frame)]
    assert sum(len(r["detections"]) for r in doc["results"]) >= 3 * len(jpegs)  # the shapes are found
    assert "the stream ended (no more frames)" in err
    assert (tmp_path / "out" / "stream.mp4").is_file()


def test_stream_that_stops_midway_reconnects_then_ends(sample_frames, tmp_path, capsys):
    jpegs = _jpegs(sample_frames)
    server = MjpegServer([jpegs[:6], jpegs[6:]])
    try:
        rc, _, err = run(["detect", server.url, *MODEL, "--reconnect", "2", "--out", tmp_path / "out",
                          "--json", tmp_path / "d.json"], capsys)
    finally:
        server.close()
    assert rc == exit_codes.OK, err
    assert server.connections == 2 and "reconnecting in 0.5 s (attempt 1 of 2)" in err and "reconnected" in err
    assert "the stream ended (no more frames after 2 reconnection attempt(s))" in err
    doc = json.loads((tmp_path / "d.json").read_text())
    frames = [r["frame"] for r in doc["results"]]
    dropped = int(err.split(" dropped")[-2].split()[-1])  # the progress summary's "N dropped"
    assert frames == sorted(frames) and len(frames) + dropped == len(jpegs) and frames[-1] >= 6


def test_net_stream_releases_the_stream_when_closed(net, sample_frames):
    server = MjpegServer([_jpegs(sample_frames) * 20])  # about 7 s of stream
    try:
        t0 = time.perf_counter()
        got = list(net.stream(server.url, max_frames=3))
        assert len(got) == 3 and all(f.shape == (240, 320, 3) and dets for f, dets in got)
        time.sleep(0.3)
        sent = server.sent
        time.sleep(0.3)
        assert server.sent == sent, "the server kept sending: the capture was not released"
        assert time.perf_counter() - t0 < 5
    finally:
        server.close()


def test_ctrl_c_stops_a_stream_cleanly(sample_frames, tmp_path):
    """SIGINT while a stream runs: exit 130, the annotated video of the frames done, playable, and
    the JSON marked interrupted; the server sees the connection closed."""
    server = MjpegServer([_jpegs(sample_frames) * 50])  # about 18 s of stream
    out, js = tmp_path / "out", tmp_path / "d.json"
    # SIGINT's default action in the child: where the suite runs with SIGINT ignored, the child inherits
    # that, and Python then turns no SIGINT into KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-m", "darknet_py", "detect", server.url, *MODEL, "--out", str(out),
                             "--json", str(js)], stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        while server.sent < 10:  # the stream is being read
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        time.sleep(0.2)
        sent = server.sent
        time.sleep(0.2)
        assert server.sent == sent, "the stream is still being sent to a process that ended"
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    assert proc.returncode == exit_codes.INTERRUPTED and "Traceback" not in err, err
    doc = json.loads(js.read_text())
    assert doc["interrupted"] is True and doc["complete"] is False and doc["results"]
    cap = cv2.VideoCapture(str(out / "stream.mp4"))
    assert cap.isOpened() and cap.read()[0]
    cap.release()


def test_camera_that_does_not_exist_is_one_line_and_exit_1(tmp_path):
    r = subprocess.run([sys.executable, "-m", "darknet_py", "detect", "9", *MODEL, "--out", str(tmp_path)],
                       capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == exit_codes.INPUT_ERROR
    assert r.stderr.strip().splitlines() == ["darknet_py: error: camera 9: cannot open (no such camera, or it is in use)"]


def test_source_kinds():
    assert resolve_source("0").live == 0 and resolve_source("0").kind == "camera"
    for url in ("rtsp://10.0.0.2:554/s1", "rtmp://host/live/key", "https://host/video.mjpg"):
        assert resolve_source(url).kind == "stream"


# ---- list files, stdin, labels and crops ---------------------------------------------------------
@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from darknet_py.data.synth import generate

    root = tmp_path_factory.mktemp("shapes")
    generate(str(root), images=6, classes=4, size=(256, 256), seed=5, valid_fraction=0.5)
    return root


def test_list_file_with_a_missing_entry(shapes, tmp_path, capsys):
    images = sorted(str(p) for p in (shapes / "images").glob("*.jpg"))[:2]
    lst = tmp_path / "list.txt"
    lst.write_text(f"{images[0]}\n\n{tmp_path / 'gone.jpg'}\n{images[1]}\n")
    rc, _, err = run(["detect", lst, *MODEL, "--out", tmp_path / "out"], capsys)
    assert rc == exit_codes.SKIPPED, err
    assert f"skipped: {lst}:3: {tmp_path / 'gone.jpg'}: not found" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(Path(p).name for p in images)


def test_paths_on_stdin(shapes, tmp_path):
    images = sorted(str(p) for p in (shapes / "images").glob("*.jpg"))[:2]
    r = subprocess.run([sys.executable, "-m", "darknet_py", "detect", "-", *MODEL, "--out", str(tmp_path / "out"),
                        "--json", str(tmp_path / "d.json")], input="\n".join(images) + "\n",
                       capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "d.json").read_text())
    assert [x["image"] for x in doc["results"]] == images
    assert "not a GPU" not in r.stderr  # device discovery that changes nothing stays quiet


def test_saved_labels_score_map_1_as_ground_truth(shapes, tmp_path, capsys):
    """Darknet's -save_labels format, read back as the truth of the same detector: mAP 1.0."""
    valid = (shapes / "valid.txt").read_text().split()
    for path in valid:  # synth's own labels must not be what `map` reads
        Path(path).with_suffix(".txt").unlink()
    rc, _, err = run(["detect", shapes / "valid.txt", *MODEL, "--out", tmp_path / "out", "--save-labels",
                      "--save-crops", tmp_path / "crops"], capsys)
    assert rc == exit_codes.OK, err
    lines = Path(valid[0]).with_suffix(".txt").read_text().splitlines()
    assert lines and all(len(line.split()) == 5 and line.split()[1].count(".") == 1
                         and len(line.split()[1].split(".")[1]) == 4 for line in lines)  # %2.4f
    result = darknet_py.compute_map(str(shapes / "shapes.data"), DEMO["cfg"], DEMO["weights"], device="cpu",
                                    progress=False)
    assert result.map == pytest.approx(1.0)
    n_labels = sum(len(Path(p).with_suffix(".txt").read_text().splitlines()) for p in valid)
    crops = list((tmp_path / "crops").rglob("*.jpg"))
    assert len(crops) == n_labels and {p.parent.name for p in crops} <= {"circle", "square", "triangle", "star"}


# ---- videos: net.stream against detect, the other containers -------------------------------------
def test_net_stream_over_a_video_equals_detect(net, tmp_path, capsys):
    rc, _, err = run(["detect", DEMO["video"], *MODEL, "--out", tmp_path, "--json", tmp_path / "d.json",
                      "--max-frames", "20"], capsys)
    assert rc == 0, err
    results = json.loads((tmp_path / "d.json").read_text())["results"]
    streamed = list(net.stream(DEMO["video"], max_frames=20))
    assert len(results) == len(streamed) == 20
    for r, (_, dets) in zip(results, streamed):
        assert r["detections"] == [d.to_dict() for d in dets]


CONTAINERS = {".m4v": "mp4v", ".webm": "VP80", ".mpg": "MPEG", ".mpeg": "MPEG", ".ts": "MPEG", ".wmv": "WMV2",
              ".gif": None}


@pytest.mark.parametrize("ext", sorted(CONTAINERS))
def test_other_containers(ext, sample_frames, tmp_path, capsys):
    path = str(tmp_path / f"clip{ext}")
    frames = [cv2.resize(f, (160, 120)) for f in sample_frames[:6]]
    if ext == ".gif":
        if not hasattr(cv2, "imwriteanimation"):
            pytest.skip("this OpenCV cannot write GIF (cv2.imwriteanimation is 4.11+)")
        anim = cv2.Animation()
        anim.frames, anim.durations = frames, [100] * len(frames)
        cv2.imwriteanimation(path, anim)
    else:
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*CONTAINERS[ext]), 10, (160, 120))
        if not writer.isOpened():
            pytest.skip(f"this OpenCV's FFmpeg cannot write {ext} with {CONTAINERS[ext]}")
        for f in frames:
            writer.write(f)
        writer.release()
    cap = cv2.VideoCapture(path)
    decoded = 0
    while cap.read()[0]:
        decoded += 1
    cap.release()
    assert decoded == len(frames)
    rc, _, err = run(["detect", path, *MODEL, "--out", tmp_path / "out", "--json", tmp_path / "d.json"], capsys)
    assert rc == 0, err
    assert len(json.loads((tmp_path / "d.json").read_text())["results"]) == decoded
    out = tmp_path / "out" / (f"clip{ext}" if ext == ".m4v" else f"clip{ext}.mp4")
    assert out.is_file(), err


def test_ffmpeg_quiet_unless_verbose(tmp_path):
    """A video with a damaged middle: FFmpeg's decoder errors stay out of stderr, our line stays."""
    path = tmp_path / "c.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (160, 120))
    for i in range(30):
        f = np.full((120, 160, 3), 40 + 6 * i, np.uint8)
        cv2.circle(f, (20 + 4 * i, 60), 15, (0, 0, 255), -1)
        writer.write(f)
    writer.release()
    data = bytearray(path.read_bytes())
    a, b = len(data) * 2 // 5, len(data) * 3 // 5
    data[a:b] = np.random.default_rng(7).integers(0, 256, b - a, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    base = [sys.executable, "-m", "darknet_py", "detect", str(path), *MODEL, "--out", str(tmp_path / "o")]
    env = {k: v for k, v in ENV.items() if k != "OPENCV_FFMPEG_LOGLEVEL"}
    quiet = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    loud = subprocess.run(base + ["--verbose"], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == loud.returncode == exit_codes.SKIPPED
    assert "could not be decoded" in quiet.stderr and "@ 0x" not in quiet.stderr  # FFmpeg's "[mpeg4 @ 0x...]"
    assert "@ 0x" in loud.stderr


# ---- the window ----------------------------------------------------------------------------------
def test_show_without_a_display_is_one_line(tmp_path):
    env = {k: v for k, v in ENV.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    r = subprocess.run([sys.executable, "-m", "darknet_py", "detect", DEMO["video"], *MODEL, "--show",
                        "--max-frames", "3", "--out", str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--show: no display ($DISPLAY is not set); going on without a window" in r.stderr.splitlines()
    assert (tmp_path / "sample.mp4").is_file()


def _free_display() -> int:
    return next(n for n in range(90, 200) if not os.path.exists(f"/tmp/.X11-unix/X{n}"))


@pytest.fixture
def virtual_display():
    """An Xvfb display for one test, with xwininfo (window list) and xdotool (key presses)."""
    import shutil

    if sys.platform != "linux":
        pytest.skip("Xvfb is a Linux X server")
    missing = [t for t in ("Xvfb", "xwininfo", "xdotool") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian: apt-get install xvfb x11-utils xdotool)")
    display = f":{_free_display()}"
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", "640x480x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while not os.path.exists(f"/tmp/.X11-unix/X{display[1:]}") and time.time() < deadline:
        time.sleep(0.05)
    yield {**ENV, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
    xvfb.terminate()
    xvfb.wait(timeout=10)


def _wait_for_window(proc, title: str, env: dict, seconds: float = 30) -> str:
    """The window id of the X window titled `title`, once it appears (xwininfo, not our word for it)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        for line in subprocess.run(["xwininfo", "-root", "-tree"], capture_output=True, text=True, env=env).stdout.splitlines():
            if f'"{title}"' in line:
                return line.split()[0]
        time.sleep(0.05)
    raise AssertionError(f"no window titled {title!r} appeared in {seconds} s")


def _press(key: str, window: str, env: dict) -> None:
    subprocess.run(["xdotool", "windowfocus", "--sync", window], env=env, check=True, timeout=10)
    subprocess.run(["xdotool", "key", key], env=env, check=True, timeout=10)


def test_show_window_image_waits_for_a_key_video_plays(virtual_display, tmp_path):
    lst = tmp_path / "list.txt"
    lst.write_text(f"{DEMO['image']}\n{DEMO['video']}\n")
    proc = subprocess.Popen([sys.executable, "-m", "darknet_py", "detect", str(lst), *MODEL, "--show",
                             "--out", str(tmp_path / "out")], stderr=subprocess.PIPE, text=True, env=virtual_display)
    try:
        window = _wait_for_window(proc, f"darknet_py: {lst}", virtual_display)
        time.sleep(0.5)
        assert proc.poll() is None, "the image should stay up until a key is pressed"
        _press("space", window, virtual_display)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "--show:" not in err and (tmp_path / "out" / "sample.mp4").is_file()


def test_show_q_stops_a_stream(virtual_display, sample_frames, tmp_path):
    server = MjpegServer([_jpegs(sample_frames) * 50])  # about 18 s of stream
    proc = subprocess.Popen([sys.executable, "-m", "darknet_py", "detect", server.url, *MODEL, "--show",
                             "--out", str(tmp_path)], stderr=subprocess.PIPE, text=True, env=virtual_display)
    try:
        window = _wait_for_window(proc, f"darknet_py: {server.url}", virtual_display)
        _press("q", window, virtual_display)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    assert proc.returncode == 0, err
    assert server.sent < 12 * 50 and (tmp_path / "stream.mp4").is_file()


# ---- the Python names the README uses -------------------------------------------------------------
def test_python_names(net):
    import importlib

    rows = darknet_py.devices()  # a function, as README says, though a submodule has the same name
    assert isinstance(rows, list) and all("found" in r for r in rows)
    assert importlib.import_module("darknet_py.devices").resolve("cpu") == "cpu"
    shipped = darknet_py.Network("yolov4-tiny.cfg", names="coco.names", device="cpu")  # found by name
    assert shipped.cfg_path.endswith(os.path.join("cfg", "yolov4-tiny.cfg")) and len(shipped.names) == 80
    with pytest.raises(FileNotFoundError, match="cfg file not found: nope.cfg .*yolov4-tiny.cfg"):
        darknet_py.Network("nope.cfg")
    image = cv2.imread(DEMO["image"])
    dets = net.detect(image)
    annotated = darknet_py.annotate(image, dets, net.classes)
    assert annotated is not image and (annotated != image).any() and cv2.imread(DEMO["image"]).tobytes() == image.tobytes()
