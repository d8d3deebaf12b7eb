"""Evaluation you can look at: the confusion matrix (hand-made cases, and on the demo model: its
diagonal is the TP count, its rows the truths), the PNG plots, per-class FN/precision/recall in
the report and JSON, and --save-errors."""
import json
import os

import cv2
import numpy as np
import pytest

from darknet_py.commands.cli import main
from darknet_py.data.darknet_files import read_data_file, read_image_list, label_path_for
from darknet_py.model_files.demo import demo_files
from darknet_py.evaluation.evaluate import Box, Truth, compute_map, evaluate, read_truths
from darknet_py.evaluation.plots import GRID, PLOT_FILES

A, B, C = Truth(0, 0.0, 0.0, 0.2, 0.2), Truth(1, 0.5, 0.5, 0.2, 0.2), Truth(1, 0.1, 0.6, 0.2, 0.2)


def test_confusion_matrix_hand_made():
    image = ([Box(0, 0.9, 0.0, 0.0, 0.2, 0.2),     # TP of A
              Box(0, 0.8, 0.01, 0.0, 0.2, 0.2),    # a duplicate on A: background row, not the diagonal
              Box(0, 0.7, 0.5, 0.5, 0.2, 0.2),     # on B, wrong class: row 1, column 0
              Box(1, 0.6, 0.8, 0.0, 0.1, 0.1),     # on nothing: background row, column 1
              Box(1, 0.1, 0.1, 0.6, 0.2, 0.2)],    # on C but below the threshold: C is missed
             [A, B, C])
    r = evaluate([image], 2, thresh=0.25, coco=False)
    assert r.confusion == [[1, 0, 0],
                           [1, 0, 1],
                           [1, 1, 0]]
    assert (r.tp, r.fp, r.fn) == (1, 3, 2)
    assert [(c.fn, c.precision, c.recall) for c in r.classes] == [(0, 1 / 3, 1.0), (2, 0.0, 0.0)]


@pytest.mark.parametrize("counts", ["darknet", "ranked"])
def test_diagonal_follows_the_counting_rule(counts):
    # Darknet's rule: d1 (below the threshold) takes A first, so d2 above is a FP; ranked: d2 is the TP
    image = ([Box(0, 0.1, 0.0, 0.0, 0.2, 0.2), Box(0, 0.9, 0.01, 0.0, 0.2, 0.2)], [A])
    r = evaluate([image], 1, thresh=0.25, coco=False, counts=counts)
    assert r.confusion[0][0] == r.tp == (0 if counts == "darknet" else 1)
    assert sum(r.confusion[0]) == 1  # the row of class 0 holds its one truth either way


@pytest.fixture(scope="module")
def demo_map(tmp_path_factory):
    from darknet_py.data.synth import generate

    root = tmp_path_factory.mktemp("evalplots")
    data = generate(str(root / "ds"), images=40, classes=4, size=(256, 256), seed=77, valid_fraction=1, workers=1)
    demo = demo_files()
    # a high threshold makes some errors to draw
    code = main(["map", data, demo["cfg"], demo["weights"], "--thresh", "0.6", "--plots", str(root / "plots"),
                 "--save-errors", str(root / "errors"), "--json", str(root / "map.json")])
    return {"code": code, "data": data, "root": root, "json": json.load(open(root / "map.json"))}


def test_confusion_matrix_on_the_demo_model(demo_map):
    doc = demo_map["json"]
    m = np.array(doc["confusion"])
    k = len(doc["classes"])
    assert m.shape == (k + 1, k + 1)
    assert list(np.diag(m)[:k]) == [c["tp"] for c in doc["classes"]] and m.trace() == doc["tp"]
    assert list(m[:k].sum(axis=1)) == [c["truths"] for c in doc["classes"]]
    assert list(m[:, :k].sum(axis=0)) == [c["tp"] + c["fp"] for c in doc["classes"]]
    for c in doc["classes"]:
        assert c["fn"] == c["truths"] - c["tp"] and c["recall"] == pytest.approx(c["tp"] / c["truths"])
    assert doc["fn"] > 0 and doc["tp"] > 50  # there were errors to draw, and a working model


def test_plots_are_real_images(demo_map):
    images = {}
    for name in PLOT_FILES:
        img = cv2.imread(str(demo_map["root"] / "plots" / name))
        assert img is not None and img.shape[0] >= 300 and img.shape[1] >= 300, name
        packed = img.reshape(-1, 3).astype(np.int32) @ np.array([1, 256, 65536], np.int32)
        colours = len(np.unique(packed))
        inked = np.mean(np.any(img < 200, axis=2))
        assert colours > 20 and 0.01 < inked < 0.6, (name, colours, inked)
        images[name] = img
    assert not np.array_equal(images["P_curve.png"], images["R_curve.png"])
    from darknet_py.outputs.draw import class_color

    from darknet_py.evaluation import plots

    for name in PLOT_FILES[2:]:  # each class's curve is drawn inside the plot area (the legend is outside it)
        area = images[name][plots.TOP:-plots.BOTTOM, plots.LEFT + 2:-plots.RIGHT - 2].astype(np.int32)
        near = [(np.abs(area - np.array(class_color(c, 4))).sum(axis=2) < 60).sum() for c in range(4)]
        if name == "PR_curve.png":  # near-perfect classes' curves overlap along precision 1: the last drawn shows
            assert sum(near) > 300, near
        else:
            assert min(near) > 100, (name, near)


def test_curves_agree_with_the_ranked_counts(demo_map):
    demo = demo_files()
    r = compute_map(demo_map["data"], demo["cfg"], demo["weights"], thresh=0.25, counts="ranked", progress=False,
                    coco=False)
    curves = r.accumulator.curves(0.5)
    at = int(np.flatnonzero(GRID == 0.25)[0])
    for c in r.classes:
        assert curves.recall[c.class_id, at] == pytest.approx(c.recall)
        assert curves.precision[c.class_id, at] == pytest.approx(c.precision)


def test_save_errors_writes_exactly_the_images_with_errors(demo_map):
    demo = demo_files()
    from darknet_py import Network
    from darknet_py.evaluation.evaluate import network_detections

    net = Network(demo["cfg"], demo["weights"])
    written = set(os.listdir(demo_map["root"] / "errors"))
    paths = read_image_list(read_data_file(demo_map["data"]).valid)
    for p in paths:  # each image on its own: a FP or FN at .6 exactly when it was written
        image = cv2.imread(p)
        one = evaluate([(network_detections(net, image, False), read_truths(label_path_for(p), 4, print))], 4,
                       thresh=0.6, coco=False)
        name = os.path.splitext(os.path.basename(p))[0] + ".jpg"
        assert (name in written) == (one.fp + one.fn > 0), p
        if name in written:
            drawn = cv2.imread(str(demo_map["root"] / "errors" / name))
            assert drawn.shape == image.shape and not np.array_equal(drawn, image)
    assert 0 < len(written) < len(paths)


def test_report_prints_per_class_fn_precision_recall(demo_map, capsys):
    demo = demo_files()
    compute_map(demo_map["data"], demo["cfg"], demo["weights"], progress=False, verbose=True, coco=False)
    out = capsys.readouterr().out
    assert "class_id = 0, name = circle, ap = " in out and ")   FN = " in out and ", recall = " in out


def test_unwritable_plots_folder_is_an_output_error(demo_map, tmp_path, capsys):
    demo = demo_files()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["map", demo_map["data"], demo["cfg"], demo["weights"], "--plots", str(blocker / "plots")]) == 5
    assert str(blocker / "plots") in capsys.readouterr().err
