"""A cfg fits the data: `cfg adapt`, train's automatic adaptation (shipped yolov4-tiny.cfg to 1, 4
and 20 classes, trained a few iterations, then read by OpenCV 4.x's Darknet importer with the
weights we wrote), and the transfer of 80-class weights to every layer but the heads."""
import os
import re

import cv2
import numpy as np
import pytest

from darknet_py import _core
from darknet_py.model_files.cfg_edit import CfgEditor, adapt_classes, set_net_options
from darknet_py.model_files.cfgfiles import resolve_cfg
from darknet_py.commands.cli import main
from darknet_py.training.init_weights import darknet_init
from darknet_py.data.synth import generate
from darknet_py.training.train import train
from darknet_py.training.weights_transfer import load_start_weights

SMALL = {"batch": 2, "subdivisions": 1, "width": 64, "height": 64, "burn_in": 1, "mosaic": 0}


def small_yolov4_tiny(folder) -> str:
    """The shipped yolov4-tiny.cfg (80 classes) at 64x64, batch 2: quick to train a step."""
    ed = set_net_options(CfgEditor.from_file(resolve_cfg("yolov4-tiny.cfg")), SMALL)
    return ed.write(os.path.join(folder, "yolov4-tiny.cfg"))


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    d = tmp_path_factory.mktemp("shapes")
    generate(str(d / "one"), 6, 1, (64, 64), seed=3, valid_fraction=0.34, workers=1)
    generate(str(d / "four"), 6, 4, (64, 64), seed=3, valid_fraction=0.34, workers=1)
    # 20 classes: the same images (classes 0..3 used), a .data file and names for 20
    four = d / "four"
    (four / "twenty.names").write_text("".join(f"c{i}\n" for i in range(20)))
    (four / "twenty.data").write_text(f"classes = 20\ntrain = {four}/train.txt\nvalid = {four}/valid.txt\n"
                                      f"names = {four}/twenty.names\nbackup = {d}/backup20\n")
    return {1: str(d / "one" / "shapes.data"), 4: str(four / "shapes.data"), 20: str(four / "twenty.data"),
            "dir": d}


def test_adapt_changes_classes_and_the_filters_before_each_head():
    ed = adapt_classes(CfgEditor.from_file(resolve_cfg("yolov4-tiny.cfg")), 4)
    assert ed.changes == ["line 229: classes=80 -> classes=4", "line 221: filters=255 -> filters=27",
                          "line 280: classes=80 -> classes=4", "line 274: filters=255 -> filters=27"]
    original = open(resolve_cfg("yolov4-tiny.cfg")).read().splitlines()
    changed = [i for i, (a, b) in enumerate(zip(original, ed.lines)) if a != b]
    assert [i + 1 for i in changed] == [221, 229, 274, 280] and len(ed.lines) == len(original)
    again = adapt_classes(CfgEditor(ed.text()), 80)  # and back: the original's values
    assert [ln.replace(" ", "") for ln in again.lines] == [ln.replace(" ", "") for ln in original]


def test_head_after_something_else_than_a_convolution_is_named(tmp_path):
    text = "[net]\nwidth=64\nheight=64\n[convolutional]\nfilters=18\n[maxpool]\nsize=2\n[yolo]\nclasses=1\nmask=0,1,2\n"
    with pytest.raises(ValueError, match=r"cfg:8: \[yolo\] does not follow a \[convolutional\]"):
        adapt_classes(CfgEditor(text, "cfg"), 4)


def test_cfg_adapt_command(tmp_path, capsys):
    out = tmp_path / "y4.cfg"
    assert main(["cfg", "adapt", "yolov4-tiny.cfg", "--classes", "4", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "line 221: filters=255 -> filters=27" in printed and "line 280: classes=80 -> classes=4" in printed
    net = _core.Net(str(out), "cpu")
    assert [net.yolo_info(i)["classes"] for i in net.yolo_layers] == [4, 4]
    assert [net.layers()[i]["input"][0] for i in net.yolo_layers] == [27, 27]
    assert main(["cfg", "adapt", "nope.cfg", "--classes", "4", "-o", str(out)]) == 1
    assert "nope.cfg" in capsys.readouterr().err


@pytest.mark.parametrize("classes", [1, 4, 20])
def test_train_adapts_the_shipped_cfg_and_opencv_reads_the_result(tmp_path, shapes, classes, capsys):
    cfg = small_yolov4_tiny(str(tmp_path))
    r = train(shapes[classes], cfg, max_batches=2, out_dir=str(tmp_path / "backup"), seed=1, workers=0,
              progress=False, chart=False)
    out = capsys.readouterr().out
    adapted = tmp_path / "backup" / f"yolov4-tiny-{classes}classes.cfg"
    assert f"has classes=80, the dataset {classes}: training {adapted}" in out
    assert f"filters=255 -> filters={(classes + 5) * 3}" in out
    assert r.iteration == 2 and r.final == str(tmp_path / "backup" / f"yolov4-tiny-{classes}classes_final.weights")
    # OpenCV's own Darknet importer takes the adapted cfg with the weights we trained
    net = cv2.dnn.readNetFromDarknet(str(adapted), r.final)
    net.setInput(cv2.dnn.blobFromImage(np.zeros((64, 64, 3), np.uint8), 1 / 255, (64, 64)))
    outs = net.forward(net.getUnconnectedOutLayersNames())
    assert sorted(o.shape for o in outs) == sorted([(2 * 2 * 3, 5 + classes), (4 * 4 * 3, 5 + classes)])


def test_80_class_weights_give_every_layer_but_the_heads(tmp_path, shapes, capsys):
    cfg = small_yolov4_tiny(str(tmp_path))
    pretrained = _core.Net(cfg, "cpu")  # "pretrained": Darknet's initialisation, saved by seed 7
    darknet_init(pretrained, 7)
    weights = str(tmp_path / "pretrained.weights")
    pretrained.save_weights(weights)
    ed = adapt_classes(CfgEditor.from_file(cfg), 4)
    adapted = _core.Net(ed.write(str(tmp_path / "four.cfg")), "cpu")
    darknet_init(adapted, 8)
    before = {i: adapted.params(i) for i in range(len(adapted.layers()))}
    said = []
    assert load_start_weights(adapted, weights, cfg, said.append, said.append) is True
    heads = [i - 1 for i in adapted.yolo_layers]  # the convolutions before the heads
    assert re.search(rf"loaded {len(adapted.layers()) - 2} of {len(adapted.layers())} layers .* "
                     rf"layers {heads[0]}, {heads[1]} ", said[0])
    for i in range(len(adapted.layers())):
        for key, v in adapted.params(i).items():
            source = before[i][key] if i in heads else pretrained.params(i)[key]
            assert np.array_equal(v, source), (i, key)
    # the same through `train`: its first lines say so, and it counts from iteration 0
    r = train(shapes[4], cfg, weights, max_batches=1, out_dir=str(tmp_path / "b"), seed=1, workers=0,
              progress=False, chart=False)
    assert r.start_iteration == 0 and "layers 29, 36 (the convolutions before the heads" in capsys.readouterr().out
