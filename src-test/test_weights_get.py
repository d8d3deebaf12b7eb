"""`darknet_py weights get/list` and `--weights NAME`, against a real HTTP server on 127.0.0.1 (http.server
in a thread, with Range support) serving ../shared/models/yolov3-tiny.weights: a download that breaks
off mid-file and is resumed, the checks, the weights folder. Nothing is downloaded from the internet:
DARKNET_PY_WEIGHTS_URL points every download at the local server."""
from __future__ import annotations

import http.server
import os
import re
import threading
from pathlib import Path

import pytest

from darknet_py.commands.cli import main
from darknet_py.model_files import official

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"
WEIGHTS = SHARED / "yolov3-tiny.weights"
needs_shared = pytest.mark.skipif(not WEIGHTS.is_file(), reason=f"{WEIGHTS} is absent: the real yolov3-tiny "
                                  "weights the local server serves are kept in ../shared beside the repository")


class _Server:
    """Serves one file at /<its name>; the first `cut_first` requests end after `cut_after` bytes of
    body (the connection is closed mid-file). Records each request's Range header."""

    def __init__(self, path: Path, cut_after: int = 0, cut_first: int = 0) -> None:
        self.data = path.read_bytes()
        self.name = path.name
        self.cut_after, self.cut_first = cut_after, cut_first
        self.ranges = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                if self.path.lstrip("/") != server.name:
                    self.send_error(404)
                    return
                rng = self.headers.get("Range")
                server.ranges.append(rng)
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", rng or "")
                if m:
                    start = int(m.group(1))
                    if start >= len(server.data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(server.data)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(server.data) - 1}/{len(server.data)}")
                else:
                    self.send_response(200)
                body = server.data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if len(server.ranges) <= server.cut_first:
                    self.wfile.write(body[:server.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # ends the body early: the client sees a short read
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "_Server":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    d = tmp_path / "weights"
    monkeypatch.setenv(official.DIR_ENV, str(d))
    return d


@needs_shared
def test_an_interrupted_download_is_resumed_and_checked(folder, monkeypatch, capsys):
    size = WEIGHTS.stat().st_size
    with _Server(WEIGHTS, cut_after=size // 3, cut_first=1) as server:
        monkeypatch.setenv(official.URL_ENV, server.url)
        # no retries: the run fails, keeping the part it got, and says how to resume
        assert main(["weights", "get", "yolov3-tiny", "--retries", "0"]) == 1
        err = capsys.readouterr().err
        assert "darknet_py weights get yolov3-tiny" in err and ".part" in err, err
        part = folder / "yolov3-tiny.weights.part"
        assert part.is_file() and 0 < part.stat().st_size < size
        assert not (folder / "yolov3-tiny.weights").exists()
        got = part.stat().st_size
        # the next run asks for the rest only, and checks the whole
        assert main(["weights", "get", "yolov3-tiny"]) == 0
        out = capsys.readouterr()
        assert server.ranges == [None, f"bytes={got}-"]
        assert "resuming at" in out.err
        assert "header 0.2.0" in out.out and "fits yolov3-tiny.cfg" in out.out and "md5 matches" in out.out
    final = folder / "yolov3-tiny.weights"
    assert final.read_bytes() == WEIGHTS.read_bytes() and not part.exists()


@needs_shared
def test_retries_resume_within_one_run(folder, monkeypatch, capsys):
    with _Server(WEIGHTS, cut_after=1_000_000, cut_first=2) as server:
        monkeypatch.setenv(official.URL_ENV, server.url)
        assert main(["weights", "get", "yolov3-tiny", "--dir", str(folder / "other"), "--retries", "3"]) == 0
    assert server.ranges == [None, "bytes=1000000-", "bytes=2000000-"]
    assert (folder / "other" / "yolov3-tiny.weights").stat().st_size == WEIGHTS.stat().st_size
    assert "resuming" in capsys.readouterr().err


@needs_shared
def test_a_damaged_download_is_not_kept(tmp_path, folder, monkeypatch, capsys):
    bad = tmp_path / "serve" / "yolov3-tiny.weights"
    bad.parent.mkdir()
    data = bytearray(WEIGHTS.read_bytes())
    data[-5] ^= 0xFF  # same size, same header, other bytes: only the checksum sees it
    bad.write_bytes(bytes(data))
    with _Server(bad) as server:
        monkeypatch.setenv(official.URL_ENV, server.url)
        assert main(["weights", "get", "yolov3-tiny"]) == 1
    assert "md5 differs" in capsys.readouterr().err
    assert not any(folder.iterdir())


@needs_shared
def test_weights_name_uses_the_downloaded_file(folder, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    import numpy as np
    import cv2

    cv2.imwrite(str(tmp_path / "x.jpg"), np.full((64, 64, 3), 127, np.uint8))
    # not downloaded: one line with the command that gets it
    assert main(["detect", "x.jpg", "--cfg", "yolov3-tiny", "--weights", "yolov3-tiny"]) == 1
    err = capsys.readouterr().err
    assert "run `darknet_py weights get yolov3-tiny`" in err and len(err.strip().splitlines()) == 1, err
    folder.mkdir()
    os.symlink(WEIGHTS, folder / "yolov3-tiny.weights")
    assert main(["detect", "x.jpg", "--cfg", "yolov3-tiny", "--weights", "yolov3-tiny.weights", "--out", "o"]) == 0
    assert (tmp_path / "o" / "x.jpg").is_file()
    assert official.resolve_weights("yolov3-tiny") == str(folder / "yolov3-tiny.weights")


def test_a_missing_weights_file_points_at_weights_get(tmp_path, capsys):
    from darknet_py.model_files.demo import demo_files

    d = demo_files()
    img = d["image"]
    assert main(["detect", img, "--cfg", d["cfg"], "--weights", str(tmp_path / "nope.weights")]) == 1
    err = capsys.readouterr().err
    assert f"weights file not found: {tmp_path / 'nope.weights'}" in err and "darknet_py weights get" in err


def test_weights_list(folder, capsys):
    folder.mkdir()
    (folder / "yolov4-tiny.weights").write_bytes(b"x")
    (folder / "yolov4.weights.part").write_bytes(b"x" * 2_000_000)
    assert main(["weights", "list"]) == 0
    out = capsys.readouterr().out
    assert str(folder) in out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(lines) == {"yolov3-tiny", "yolov4-tiny", "yolov4", "yolov7-tiny"}
    assert "not downloaded" in lines["yolov3-tiny"] and "35.4 MB" in lines["yolov3-tiny"]
    assert "257.7 MB" in lines["yolov4"] and "24.3 MB" in lines["yolov4-tiny"]
    assert lines["yolov4-tiny"].rstrip().endswith("downloaded") and "not" not in lines["yolov4-tiny"]
    assert "partial (2.0 MB)" in lines["yolov4"]
    assert main(["weights", "list", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc["weights"]] == list(official.OFFICIAL)


def test_default_folder_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv(official.DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert official.weights_dir() == tmp_path / "darknet_py" / "weights"
    monkeypatch.setenv(official.DIR_ENV, str(tmp_path / "w"))
    assert official.weights_dir() == tmp_path / "w"
    assert official.official_name("yolov4-tiny.weights") == "yolov4-tiny"
    assert official.official_name("models/yolov4-tiny.weights") is None
    assert official.official_name("mine") is None


def test_the_recorded_sizes_are_those_the_shipped_cfgs_take():
    from darknet_py import Network
    from darknet_py.model_files.cfgfiles import resolve_cfg
    from darknet_py.model_files.weights_fit import expected_bytes

    for o in official.OFFICIAL.values():
        assert o.size == expected_bytes(Network(resolve_cfg(o.cfg), device="cpu")), o.name
