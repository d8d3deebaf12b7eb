"""Darknet's own command lines run as written (commands/darknet_argv.py): the lines of AlexeyAB's and
hank-ai's READMEs, each translated into ours, and run on the bundled demo model with a synthetic
shapes set (a .data file, its lists and labels), a video written through OpenCV, and Darknet's
`partial`. Darknet's options that we do not have are refused in one line naming them; near misses
get what they were likely meant to be. The `-out result.json` file is Darknet's format to the byte.

The README lines (the table below gives each one's file and line; our tests substitute their files):
  AlexeyAB/darknet README.md at 59596d78; hank-ai/darknet README.md at f684e1d7.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import cv2
import pytest

from darknet_py.commands import cli
from darknet_py.commands.darknet_argv import DarknetArgvError, translate
from darknet_py.model_files.demo import demo_files

ALEXEYAB, HANK = "AlexeyAB/darknet README.md", "hank-ai/darknet README.md"
# (where, line, the README's command after `darknet`, with their files as {placeholders}, our command line)
TABLE = [
    (ALEXEYAB, 344, "detector test {data} {cfg} {weights} -thresh 0.25",
     "detect - --cfg {cfg} --weights {weights} --print-detections --names {names} --out predictions --thresh 0.25"),
    (ALEXEYAB, 345, "detector test {data} {cfg} {weights} -ext_output {image}",
     "detect {image} --cfg {cfg} --weights {weights} --print-detections --names {names} --out predictions"),
    (ALEXEYAB, 346, "detector demo {data} {cfg} {weights} -ext_output {video}",
     "detect {video} --cfg {cfg} --weights {weights} --names {names} --out predictions"),
    (ALEXEYAB, 347, "detector demo {data} {cfg} {weights} -c 0",
     "detect 0 --cfg {cfg} --weights {weights} --names {names} --out predictions"),
    (ALEXEYAB, 349, "detector demo {data} {cfg} {weights} {video} -out_filename res.avi",
     "detect {video} --cfg {cfg} --weights {weights} --names {names} --out predictions --out-video res.avi"),
    (ALEXEYAB, 351, "detector demo {data} {cfg} {weights} {video} -json_port 8070 -mjpeg_port 8090 -ext_output",
     "error: Darknet's -json_port is not supported by darknet_py"),
    (ALEXEYAB, 353, "detect {cfg} {weights} -i 0 -thresh 0.25",
     "detect - --cfg {cfg} --weights {weights} --print-detections --out predictions --thresh 0.25"),
    (ALEXEYAB, 355, "detector train {data} {cfg} {weights} -dont_show -mjpeg_port 8090 -map",
     "error: Darknet's -mjpeg_port is not supported by darknet_py"),
    (ALEXEYAB, 359, "detector test {data} {cfg} {weights} -ext_output -dont_show -out result.json",
     "detect - --cfg {cfg} --weights {weights} --print-detections --names {names} --out predictions "
     "--darknet-json result.json"),
    (ALEXEYAB, 364, "detector test {data} {cfg} {weights} -thresh 0.25 -dont_show -save_labels",
     "detect - --cfg {cfg} --weights {weights} --print-detections --names {names} --out predictions --thresh 0.25 "
     "--save-labels"),
    (ALEXEYAB, 365, "detector calc_anchors {data} -num_of_clusters 9 -width 416 -height 416",
     "calc_anchors {data} --num-of-clusters 9 --width 416 --height 416"),
    (ALEXEYAB, 366, "detector map {data} {cfg} {weights}", "map {data} {cfg} {weights}"),
    (ALEXEYAB, 367, "detector map {data} {cfg} {weights} -iou_thresh 0.75",
     "map {data} {cfg} {weights} --iou-thresh 0.75"),
    (ALEXEYAB, 173, "detector valid {data} {cfg} {weights}", "valid {data} {cfg} {weights}"),
    (ALEXEYAB, 477, "detector train {data} {cfg} {weights} -gpus 0,1,2,3",
     "train {data} {cfg} --weights {weights} --gpus 0,1,2,3"),
    (ALEXEYAB, 580, "detector train {data} {cfg} {weights} -dont_show", "train {data} {cfg} --weights {weights}"),
    (ALEXEYAB, 583, "detector train {data} {cfg} {weights} -map", "train {data} {cfg} --weights {weights} --map"),
    (ALEXEYAB, 585, "detector train {data} {cfg} {weights} -map -mAP_epochs 2",
     "error: Darknet's -mAP_epochs is not supported by darknet_py: `darknet_py train --map-every N`"),
    (ALEXEYAB, 608, "partial {cfg} {weights} {partial} 5", None),  # our own command, in Darknet's form
    (HANK, 432, "detector test {data} {cfg} {weights} {image}",
     "detect {image} --cfg {cfg} --weights {weights} --print-detections --names {names} --out predictions"),
    (HANK, 461, "detector demo {data} {cfg} {weights} -i 1 {video}",
     "detect {video} --cfg {cfg} --weights {weights} --names {names} --out predictions"),  # no CUDA here: -i ignored
    (HANK, 483, "detector calc_anchors {data} -num_of_clusters 6 -width 320 -height 256",
     "calc_anchors {data} --num-of-clusters 6 --width 320 --height 256"),
    (HANK, 540, "detector -map -dont_show train {data} {cfg}", "train {data} {cfg} --map"),
    (HANK, 546, "detector -gpus 0,1,2,3 -map -dont_show train {data} {cfg}", "train {data} {cfg} --gpus 0,1,2,3 --map"),
    (HANK, 554, "detector -map -dont_show -verbose train {data} {cfg}", "train {data} {cfg} --map --verbose"),
    (HANK, 560, "detector -gpus 0 -verbose -log output.log -map -dont_show train {data} {cfg}",
     "error: Darknet's -log is not supported by darknet_py"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The demo model, a synthetic shapes set of its four classes, a 5-frame video, a short cfg."""
    root = tmp_path_factory.mktemp("darknet_commands")
    demo = demo_files()
    assert cli.main(["synth", str(root / "set"), "--images", "6", "--classes", "4", "--size", "160x160"]) == 0
    video = root / "clip.mp4"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), 10, (160, 160))
    for i in range(5):
        writer.write(cv2.imread(str(root / "set" / "images" / f"{i:06d}.jpg")))
    writer.release()
    short = root / "short.cfg"  # the demo cfg for two iterations of two images
    lines = []
    for line in Path(demo["cfg"]).read_text().splitlines():
        key = line.split("=")[0].strip()
        lines.append({"max_batches": "max_batches=2", "batch": "batch=2", "subdivisions": "subdivisions=1"}.get(key, line))
    short.write_text("\n".join(lines) + "\n")
    return {"data": str(root / "set" / "shapes.data"), "cfg": demo["cfg"], "weights": demo["weights"],
            "names": str(root / "set" / "shapes.names"), "image": str(root / "set" / "images" / "000001.jpg"),
            "video": str(video), "partial": str(root / "demo.conv.5"), "short_cfg": str(short),
            "list": str(root / "set" / "valid.txt"), "root": str(root)}


def _fill(text: str, f: dict) -> list:
    return text.format(**f).split()


@pytest.mark.parametrize("where,line,darknet,ours", TABLE, ids=[f"{w.split('/')[0]}:{n}" for w, n, _, _ in TABLE])
def test_readme_command_line_translates(files, where, line, darknet, ours):
    argv = _fill(darknet, files)
    if ours is None:  # ours already, as written
        assert translate(argv) is None
    elif ours.startswith("error: "):
        with pytest.raises(DarknetArgvError, match=ours[len("error: "):].replace("`", ".").replace("(", ".")):
            translate(argv)
    else:
        assert translate(argv) == _fill(ours, files)


def _run(argv, cwd, capsys, stdin_file=None, monkeypatch=None):
    os.chdir(cwd)
    if stdin_file is not None:
        monkeypatch.setattr(sys, "stdin", open(stdin_file))
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def work(tmp_path):
    here = os.getcwd()
    yield tmp_path
    os.chdir(here)


def test_test_with_an_image_prints_darknets_lines(files, work, capsys):
    code, out, _ = _run(_fill("detector test {data} {cfg} {weights} -ext_output {image}", files), work, capsys)
    assert code == 0
    assert out.startswith(f"{files['image']}: Predicted in ") and "left_x:" in out
    assert (work / "predictions" / "000001.jpg").is_file()


def test_test_reads_a_list_on_stdin_and_writes_darknets_json(files, work, capsys, monkeypatch):
    argv = _fill("detector test {data} {cfg} {weights} -ext_output -dont_show -out result.json", files)
    code, out, _ = _run(argv, work, capsys, files["list"], monkeypatch)
    assert code == 0
    images = [line for line in Path(files["list"]).read_text().splitlines() if line]
    assert out.count("Predicted in") == len(images)  # every image's lines, as Darknet prints them
    text = (work / "result.json").read_text()
    doc = json.loads(text)
    assert [d["frame_id"] for d in doc] == list(range(1, len(images) + 1))
    assert [d["filename"] for d in doc] == images
    assert all(o["name"] in ("circle", "square", "triangle", "star") for d in doc for o in d["objects"])
    assert sum(len(d["objects"]) for d in doc) >= len(images)  # the demo model finds the shapes
    assert text.startswith('[\n{\n "frame_id":1, \n "filename":"') and text.endswith("\n ] \n}\n]")


def test_save_labels_from_a_list(files, work, capsys, monkeypatch):
    images = [line for line in Path(files["list"]).read_text().splitlines() if line]
    copies = []
    for p in images:  # labels land beside the images: copies, so the set's own labels stay
        dst = work / Path(p).name
        shutil.copy(p, dst)
        copies.append(str(dst))
    listing = work / "new_train.txt"
    listing.write_text("".join(c + "\n" for c in copies))
    argv = _fill("detector test {data} {cfg} {weights} -thresh 0.25 -dont_show -save_labels", files)
    code, _, _ = _run(argv, work, capsys, str(listing), monkeypatch)
    assert code == 0
    for c in copies:
        rows = [r.split() for r in Path(c).with_suffix(".txt").read_text().splitlines()]
        assert rows and all(len(r) == 5 and 0 <= int(r[0]) < 4 for r in rows)


def test_demo_writes_the_named_video(files, work, capsys):
    code, _, err = _run(_fill("detector demo {data} {cfg} {weights} {video} -out_filename res.avi -dont_show", files),
                        work, capsys)
    assert code == 0, err
    cap = cv2.VideoCapture(str(work / "res.avi"))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 5
    cap.release()


@pytest.mark.parametrize("extra,iou", [("", "50"), ("-iou_thresh 0.75", "75")])
def test_map(files, work, capsys, extra, iou):
    code, out, _ = _run(_fill(f"detector map {{data}} {{cfg}} {{weights}} {extra}", files), work, capsys)
    assert code == 0 and f"mean average precision (mAP@0.{iou})" in out


def test_calc_anchors(files, work, capsys):
    code, out, _ = _run(_fill("detector calc_anchors {data} -num_of_clusters 6 -width 320 -height 256", files),
                        work, capsys)
    assert code == 0 and out.count(",") >= 11 and "anchors" in out


def test_partial_then_train_from_it_with_options_first(files, work, capsys):
    from darknet_py.network import Network

    code, _, _ = _run(_fill("partial {cfg} {weights} {partial} 5", files), work, capsys)
    assert code == 0
    net = Network(files["cfg"], device="cpu")
    floats = sum(v.size for i in range(5) for v in net.params(i).values())
    assert os.path.getsize(files["partial"]) == 20 + 4 * floats  # the header, then the first 5 layers only
    full = Network(files["cfg"], files["weights"], device="cpu")
    header = net.load_weights(files["partial"], max_layers=5)
    assert header["seen"] == 0
    for i in range(5):
        for name, value in net.params(i).items():
            assert (value == full.params(i)[name]).all(), (i, name)
    # hank-ai's order: the options before the command; training starts from the backbone
    code, _, err = _run(["detector", "-map", "-dont_show", "train", files["data"], files["short_cfg"], files["partial"]],
                        work, capsys)
    assert code == 0, err
    assert (Path(files["root"]) / "set" / "backup" / "short_final.weights").is_file()


def test_darknets_detect_shortcut(files, work, capsys):
    code, out, _ = _run(_fill("detect {cfg} {weights} {image}", files), work, capsys)
    assert code == 0 and "Predicted in" in out


@pytest.mark.parametrize("line,message", [
    ("detector train {data} {cfg} -mAP", "unknown option -mAP for Darknet's detector train; did you mean -map?"),
    ("detector train {data} {cfg} --dont-show", "did you mean -dont_show?"),
    ("detector test {data} {cfg} {weights} -thres 0.3", "did you mean -thresh?"),
    ("detector tset {data} {cfg} {weights}", "unknown Darknet command detector tset; did you mean detector test?"),
    ("detector recall {data} {cfg} {weights}", "Darknet's detector recall is not supported by darknet_py: use"),
    ("detector valid {data} {cfg} {weights} -json_port 1", "Darknet's -json_port is not supported"),
    ("detector demo {data} {cfg} {weights} {video} -mjpeg_port 8090", "Darknet's -mjpeg_port is not supported"),
    ("detector train {data}", "Darknet's detector train needs DATA CFG"),
    ("detector test {data} {cfg} {weights} -thresh", "Darknet's -thresh needs a value"),
])
def test_darknet_lines_we_cannot_run_say_why_in_one_line(files, work, capsys, line, message):
    code, out, err = _run(_fill(line, files), work, capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_darknet_json_is_darknets_format_to_the_byte():
    from darknet_py.outputs.darknet_json import darknet_json

    # test_detector's "[\n", ", \n" between images, "\n]"; detection_to_json's sprintf formats (%f)
    results = [{"image": "data/dog.jpg", "width": 768, "height": 576, "detections": [
                   {"class_id": 16, "class_name": "dog", "confidence": 0.995389, "box": [126.0, 220.0, 190.0, 312.0]},
                   {"class_id": 1, "class_name": "bicycle", "confidence": 0.5, "box": [0.0, 0.0, 768.0, 576.0]}]},
               {"video": "clip.mp4", "frame": 0, "detections": []},  # (frames are not Darknet's test output)
               {"image": "data/empty.jpg", "width": 10, "height": 10, "detections": []}]
    assert darknet_json(results) == (
        '[\n{\n "frame_id":1, \n "filename":"data/dog.jpg", \n "objects": [ \n'
        '  {"class_id":16, "name":"dog", "relative_coordinates":{"center_x":0.287760, "center_y":0.652778, '
        '"width":0.247396, "height":0.541667}, "confidence":0.995389}, \n'
        '  {"class_id":1, "name":"bicycle", "relative_coordinates":{"center_x":0.500000, "center_y":0.500000, '
        '"width":1.000000, "height":1.000000}, "confidence":0.500000}\n ] \n}, \n'
        '{\n "frame_id":2, \n "filename":"data/empty.jpg", \n "objects": [ \n\n ] \n}\n]')
    assert darknet_json([]) == "[\n\n]"


def test_valid_writes_darknets_voc_result_files(files, work, capsys):
    from darknet_py.evaluation.valid_files import image_id

    code, _, err = _run(_fill("detector valid {data} {cfg} {weights}", files), work, capsys)
    assert code == 0, err
    names = Path(files["names"]).read_text().split()
    images = {image_id(p) for p in Path(files["list"]).read_text().split()}
    rows = 0
    for name in names:
        for line in (work / "results" / f"comp4_det_test_{name}.txt").read_text().splitlines():
            ident, *numbers = line.split(" ")
            assert ident in images and len(numbers) == 5
            assert all(len(n.split(".")[1]) == 6 for n in numbers)  # C's %f
            prob, xmin, ymin, xmax, ymax = map(float, numbers)
            assert 0.001 < prob <= 1 and 1 <= xmin <= xmax <= 160 and 1 <= ymin <= ymax <= 160
            rows += 1
    assert rows >= len(images)


def test_valid_lines_are_print_detector_detections():
    from darknet_py.evaluation.valid_files import detection_lines, image_id
    from darknet_py.network import Detection

    assert image_id("data/voc/2007_000027.v2.jpg") == "2007_000027" and image_id("a\\b\\c.png") == "c"
    dets = [Detection(2, "dog", 0.5, -3.0, 10.25, 40.0, 20.0), Detection(0, "cat", 0.25, 90.0, 90.0, 30.0, 30.0)]
    assert detection_lines("x/img.jpg", dets, 100, 100) == [
        (2, "img 0.500000 1.000000 11.250000 38.000000 31.250000\n"),
        (0, "img 0.250000 91.000000 91.000000 100.000000 100.000000\n")]
