"""The `darknet_py` command line: detect on images/folders/globs, info, cfglayers, help, errors,
and the drawing and progress helpers it uses."""
from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from darknet_py import Detection, Network, _core
from darknet_py.model_files.cfgfiles import cfg_with_size, resolve_cfg, shipped_dir
from darknet_py.commands.cli import main
from darknet_py.outputs.draw import class_color, draw_detections, draw_fps
from darknet_py.commands.progress import Progress, format_duration

skdata = pytest.importorskip("skimage.data", reason="scikit-image provides the test photos")


def run(argv, capsys):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def model_args(m: dict) -> list:
    return ["--cfg", m["cfg"], "--weights", m["weights"]]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """Real photos: the cameraman (yolov3-tiny sees people and a car) and the coffee cup."""
    d = tmp_path_factory.mktemp("photos")
    cv2.imwrite(str(d / "camera.jpg"), cv2.cvtColor(skdata.camera(), cv2.COLOR_GRAY2BGR))
    cv2.imwrite(str(d / "coffee.png"), cv2.cvtColor(skdata.coffee(), cv2.COLOR_RGB2BGR))
    return d


@pytest.fixture(scope="module")
def tiny(yolov3_tiny) -> Network:
    return Network(yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"])


# ---- detect ----------------------------------------------------------------------------------
def test_single_image_prints_like_darknet_and_writes_annotated_copy(photos, tmp_path, yolov3_tiny, tiny, capsys):
    img, out, js = photos / "camera.jpg", tmp_path / "out", tmp_path / "d.json"
    rc, stdout, err = run(["detect", img, *model_args(yolov3_tiny), "--out", out, "--json", js], capsys)
    assert rc == 0, err
    want = tiny.detect(cv2.imread(str(img)))
    assert any(d.class_name == "person" for d in want)
    # Darknet's lines: "person: 48%\t(left_x:  309   top_y:  172   width:   21   height:   39)"
    lines = [l for l in stdout.splitlines() if "left_x" in l]
    assert len(lines) == len(want)
    for line, d in zip(lines, want):
        m = re.fullmatch(r"(.+): (\d+)%\t\(left_x: +(-?\d+) +top_y: +(-?\d+) +width: +(\d+) +height: +(\d+)\)", line)
        assert m, line
        assert m.group(1) == d.class_name and int(m.group(2)) == round(d.confidence * 100)
        assert [int(v) for v in m.groups()[2:]] == [round(v) for v in d.box]
    annotated = cv2.imread(str(out / "camera.jpg"))
    assert annotated.shape == cv2.imread(str(img)).shape
    assert not np.array_equal(annotated, cv2.imread(str(img)))
    doc = json.loads(js.read_text())
    assert doc["source"] == str(img) and doc["complete"] is True and len(doc["results"]) == 1
    assert doc["results"][0]["image"] == str(img)
    assert doc["results"][0]["detections"] == [d.to_dict() for d in want]
    # no --names: an 80-class net gets the shipped coco.names
    assert doc["model"]["names"].endswith("coco.names") and doc["model"]["classes"] == 80


def test_folder_and_glob(photos, tmp_path, yolov3_tiny, tiny, capsys):
    rc, stdout, err = run(["detect", photos, *model_args(yolov3_tiny), "--out", tmp_path / "a",
                           "--json", tmp_path / "a.json", "--thresh", "0.2"], capsys)
    assert rc == 0, err
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["camera.jpg", "coffee.png"]
    assert "2 images in" in err  # the progress summary
    doc = json.loads((tmp_path / "a.json").read_text())
    assert [Path(r["image"]).name for r in doc["results"]] == ["camera.jpg", "coffee.png"]
    coffee = doc["results"][1]
    assert (coffee["width"], coffee["height"]) == (600, 400)
    assert coffee["detections"] == [d.to_dict() for d in tiny.detect(cv2.imread(str(photos / "coffee.png")), 0.2)]

    rc, _, err = run(["detect", str(photos / "*.png"), *model_args(yolov3_tiny), "--out", tmp_path / "g",
                      "--json", tmp_path / "g.json"], capsys)
    assert rc == 0, err
    assert [p.name for p in (tmp_path / "g").iterdir()] == ["coffee.png"]
    assert len(json.loads((tmp_path / "g.json").read_text())["results"]) == 1


def test_recursive_glob_keeps_same_named_files_apart(photos, tmp_path, yolov3_tiny, capsys):
    for sub in ("a", "b"):
        (tmp_path / "in" / sub).mkdir(parents=True)
        shutil.copy(photos / "coffee.png", tmp_path / "in" / sub / "x.png")
    rc, _, err = run(["detect", str(tmp_path / "in" / "**" / "*.png"), *model_args(yolov3_tiny),
                      "--out", tmp_path / "out"], capsys)
    assert rc == 0, err
    assert (tmp_path / "out" / "a" / "x.png").is_file() and (tmp_path / "out" / "b" / "x.png").is_file()


def test_bad_file_in_a_folder_is_skipped_but_reported(photos, tmp_path, yolov3_tiny, capsys):
    src = tmp_path / "src"
    shutil.copytree(photos, src)
    (src / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    rc, _, err = run(["detect", src, *model_args(yolov3_tiny), "--out", tmp_path / "out"], capsys)
    assert rc == 4  # exit_codes.SKIPPED: the others were done
    assert "broken.jpg" in err and "Traceback" not in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["camera.jpg", "coffee.png"]


def test_refuses_to_overwrite_the_input(photos, tmp_path, yolov3_tiny, capsys):
    shutil.copy(photos / "coffee.png", tmp_path / "c.png")
    before = (tmp_path / "c.png").read_bytes()
    rc, _, err = run(["detect", tmp_path / "c.png", *model_args(yolov3_tiny), "--out", tmp_path], capsys)
    assert rc == 1 and "overwrite" in err
    assert (tmp_path / "c.png").read_bytes() == before


def test_console_script_runs_for_real(photos, tmp_path, yolov3_tiny):
    exe = shutil.which("darknet_py")
    cmd = [exe] if exe else [sys.executable, "-m", "darknet_py"]
    r = subprocess.run([*cmd, "detect", str(photos / "camera.jpg"), *map(str, model_args(yolov3_tiny)),
                        "--names", str(yolov3_tiny["names"]), "--out", str(tmp_path), "--threads", "1",
                        "--backend", "cpu"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^person: \d+%", r.stdout, re.M)
    assert (tmp_path / "camera.jpg").is_file()


# ---- errors ----------------------------------------------------------------------------------
def _assert_one_line_error(rc, err, name):
    assert rc == 1
    assert name in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_missing_source(yolov3_tiny, tmp_path, capsys):
    rc, _, err = run(["detect", tmp_path / "nope.jpg", *model_args(yolov3_tiny)], capsys)
    _assert_one_line_error(rc, err, "nope.jpg")


def test_missing_cfg_and_weights(photos, yolov3_tiny, tmp_path, capsys):
    rc, _, err = run(["detect", photos / "camera.jpg", "--cfg", tmp_path / "absent.cfg",
                      "--weights", yolov3_tiny["weights"]], capsys)
    _assert_one_line_error(rc, err, "absent.cfg")
    rc, _, err = run(["detect", photos / "camera.jpg", "--cfg", yolov3_tiny["cfg"],
                      "--weights", tmp_path / "absent.weights"], capsys)
    _assert_one_line_error(rc, err, "absent.weights")


def test_corrupt_image(yolov3_tiny, tmp_path, capsys):
    bad = tmp_path / "corrupt.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    rc, _, err = run(["detect", bad, *model_args(yolov3_tiny), "--out", tmp_path / "o"], capsys)
    _assert_one_line_error(rc, err, "corrupt.jpg")


def test_cfg_with_a_typo(photos, yolov3_tiny, tmp_path, capsys):
    text = Path(yolov3_tiny["cfg"]).read_text().replace("[maxpool]", "[maxpoool]", 1)
    typo = tmp_path / "typo.cfg"
    typo.write_text(text)
    rc, _, err = run(["detect", photos / "camera.jpg", "--cfg", typo, "--weights", yolov3_tiny["weights"]], capsys)
    _assert_one_line_error(rc, err, "typo.cfg")
    assert "maxpoool" in err
    rc, _, err = run(["cfglayers", typo], capsys)
    _assert_one_line_error(rc, err, "typo.cfg")
    # with a size override the engine reads a temporary copy; the message still names the user's file
    rc, _, err = run(["cfglayers", typo, "--width", "320"], capsys)
    _assert_one_line_error(rc, err, f"{typo}:")


def test_detect_with_half_a_model_is_a_usage_error(photos, capsys):
    # neither --cfg nor --weights means the bundled demo model (test_demo_model.py); one alone is a mistake
    with pytest.raises(SystemExit) as e:
        main(["detect", str(photos / "camera.jpg"), "--cfg", "yolov4-tiny.cfg"])
    assert e.value.code == 2
    assert "--cfg and --weights" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["detect", "x.jpg", "--thresh", "1.5"], ["detect", "x.jpg", "--backend", "gpu"],
                                  ["nosuchcommand"], []])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2


# ---- help, version, info, cfglayers ----------------------------------------------------------
@pytest.mark.parametrize("argv", [["--help"], ["detect", "--help"], ["info", "--help"], ["cfglayers", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "usage: darknet_py" in out and "examples:" in out


def test_detect_help_names_the_default_output_folder(capsys):
    with pytest.raises(SystemExit):
        main(["detect", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: ./detections/)" in out and ".mkv" in out


def test_version(capsys):
    import darknet_py

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"darknet_py {darknet_py.__version__}"


def test_info(capsys):
    rc, out, _ = run(["info"], capsys)
    assert rc == 0
    fields = dict(line.split(":", 1) for line in out.splitlines())
    for key in ("version", "compiler", "CPU kernels", "native build", "BLAS", "CPU", "CPU features",
                "threads", "backends"):
        assert key in fields, key
    assert int(fields["threads"]) == _core.get_threads()
    assert "cpu: available" in fields["backends"] and "reference: available" in fields["backends"]
    build = _core.build_info()
    assert ("metal: not built" in fields["backends"]) != bool(build["metal"])
    # a module built with CUDA (nvcc was found) says how many CUDA devices it sees
    cuda = r"cuda: (built, no device|\d+ device\(s\))" if build["cuda"] else "cuda: not built"
    assert re.search(cuda, fields["backends"]), fields["backends"]
    assert _core.build_info()["compiler"] in fields["compiler"]


@pytest.mark.skipif(not _core.build_info()["cuda"], reason="this module was built without CUDA (no nvcc at build time)")
def test_info_says_plainly_when_there_is_no_nvidia_driver(capsys):
    """Without any NVIDIA driver the CUDA runtime calls it "CUDA driver version is insufficient for CUDA
    runtime version"; info says what that means."""
    if Path("/proc/driver/nvidia/version").exists() or any(d["kind"] == "cuda" and d["found"] for d in _core.devices()):
        pytest.skip("this machine has an NVIDIA driver")
    rc, out, _ = run(["info"], capsys)
    assert rc == 0
    assert "no NVIDIA driver: no NVIDIA GPU here, or its driver is not installed" in out, out
    assert "insufficient" not in out, out


def test_cfglayers_yolov3_tiny(yolov3_tiny, capsys):
    rc, out, _ = run(["cfglayers", yolov3_tiny["cfg"]], capsys)
    assert rc == 0
    rows = [l for l in out.splitlines() if re.match(r"\s*\d+ \w+", l)]
    assert len(rows) == 24 and rows[-1].split()[:2] == ["23", "yolo"]
    assert "416 x 416 x 3" in rows[0]
    assert re.search(r"Total BFLOPS 5\.571\b", out)  # Darknet's own figure for yolov3-tiny at 416


def test_cfglayers_size_override_scales_the_flops(yolov3_tiny, capsys):
    rc, out, _ = run(["cfglayers", yolov3_tiny["cfg"], "--width", "320", "--height", "320"], capsys)
    assert rc == 0
    assert "320 x 320 x 3" in out and "input 320 x 320 x 3" in out
    total = float(re.search(r"Total BFLOPS ([\d.]+)", out).group(1))
    # a fully convolutional net: FLOPs scale with the input area
    assert total == pytest.approx(5.571 * (320 * 320) / (416 * 416), abs=0.002)


def test_shipped_cfgs_by_name(capsys):
    assert resolve_cfg("yolov3-tiny") == str(shipped_dir() / "yolov3-tiny.cfg")
    rc, out, _ = run(["cfglayers", "yolov4-tiny.cfg"], capsys)
    assert rc == 0 and "Total BFLOPS 6.9" in out  # Darknet prints 6.910 for yolov4-tiny at 416


def test_cfg_with_size_adds_missing_keys(tmp_path):
    cfg = tmp_path / "a.cfg"
    cfg.write_text("[net]\nwidth=416\nchannels=3\n\n[convolutional]\nwidth=9\n")
    path = cfg_with_size(str(cfg), 320, 256)
    try:
        text = Path(path).read_text()
    finally:
        Path(path).unlink()
    net_section, conv_section = text.split("[convolutional]")
    assert "width=320" in net_section and "height=256" in net_section and "width=416" not in net_section
    assert "width=9" in conv_section  # only [net] is touched


# ---- drawing and progress --------------------------------------------------------------------
def test_draw_leaves_the_callers_array_alone():
    img = np.full((120, 160, 3), 200, np.uint8)
    dets = [Detection(0, "person", 0.87, 10, 20, 50, 60), Detection(16, "dog", 0.5, 150, 110, 40, 40)]
    out = draw_detections(img, dets)
    assert np.all(img == 200) and out is not img
    assert np.any(out != 200)
    # the label's filled background takes the class colour
    assert (np.abs(out.astype(int) - class_color(0)).sum(axis=2) == 0).sum() > 100
    same = draw_detections(img, dets, inplace=True)
    assert same is img and np.array_equal(img, out)
    draw_fps(img, 12.3)  # corner overlay, in place
    assert not np.array_equal(img, out)


def test_class_colors_differ():
    colours = {class_color(c) for c in range(80)}
    assert len(colours) > 40
    assert all(0 <= v <= 255 for c in colours for v in c)


def test_progress_in_a_log_and_on_a_terminal():
    log = io.StringIO()
    with Progress(4, "frames", stream=log, interval=0) as bar:
        for _ in range(4):
            bar.update()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0].startswith("1/4 frames") and "FPS" in lines[0] and "ETA" in lines[0]
    assert re.fullmatch(r"4 frames in [\d.]+ s \([\d.]+ FPS\)", lines[-1])

    tty = io.StringIO()
    bar = Progress(10, "images", stream=tty, tty=True, interval=0)
    bar.update(5)
    assert "\r" in tty.getvalue() and "|" in tty.getvalue() and "images/s" in tty.getvalue()
    bar.close()
    bar.close()  # once only
    assert tty.getvalue().count("5 images in") == 1
    assert format_duration(3725) == "1:02:05" and format_duration(65) == "1:05"


def test_progress_line_fits_any_width():
    """The count, the rate and the ETA come first; the file name is shortened, then dropped."""
    bar = Progress(9000, "frames", label="a_very_long_video_file_name_from_a_phone_2026-12-01.mp4 on cuda:0",
                   stream=io.StringIO(), tty=True, interval=1e9)
    bar.count, bar.start = 4500, bar.start - 90.0  # 50 FPS, 90 s to go
    for width in (200, 120, 80, 60, 40, 30, 24, 20, 12):
        line = bar.line(width=width)
        assert len(line) <= width, (width, line)
        if width >= 30:
            assert "4500/9000" in line and "FPS" in line and "ETA 1:30" in line, (width, line)
    wide = bar.line(width=200)
    assert wide.startswith(bar.label) and "|" in wide
    assert "..." in bar.line(width=80) and "cuda:0" in bar.line(width=80)  # the name shortened, its end kept
    assert "phone" not in bar.line(width=40)  # no room for it: dropped
    assert bar.line(width=27) == "4500/9000 50.0 FPS ETA 1:30"  # tight: one space apart


def test_export_refuses_an_extension_it_does_not_write(tmp_path, capsys):
    from darknet_py.model_files.demo import demo_files

    d = demo_files()
    rc, _, err = run(["export", d["cfg"], d["weights"], "-o", tmp_path / "x.tflite"], capsys)
    assert rc == 1 and "export writes .onnx, .mlpackage files, not .tflite" in err, err
    assert not (tmp_path / "x.tflite").exists()


def test_train_names_a_missing_data_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["train", "yolov4-tiny.cfg", "missing.data"], ["train", "missing.data", "yolov4-tiny.cfg"],
                 ["train", "yolov4-tiny.cfg", "missing"]):
        rc, _, err = run(argv, capsys)
        assert rc == 1 and "data file not found: missing" in err and "cfg" not in err.split("not found")[0], (argv, err)
        assert "shipped cfgs" not in err, err
