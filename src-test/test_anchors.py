"""calc_anchors: the k-means against a loop-by-loop transcription of Darknet's do_kmeans (matrix.cpp)
from the same first centers, the average IoU against brute force, Darknet's output format, and
--cfg/-o writing anchors and masks into a cfg that loads."""
import re

import numpy as np
import pytest

from darknet_py import _core
from darknet_py.model_files.anchors import calc_anchors, format_anchors, kmeans_iou
from darknet_py.commands.cli import main
from darknet_py.data.synth import generate


def darknet_kmeans(data, k, first):
    """hank-ai darknet src-lib/matrix.cpp do_kmeans, line by line, from centers data[first]."""
    def dist(x, y):
        mw, mh = min(x[0], y[0]), min(x[1], y[1])
        inter = mw * mh
        return 1 - inter / (x[0] * x[1] + y[0] * y[1] - inter)

    def closest(d, centers):
        best, best_dist = 0, dist(d, centers[0])
        for j in range(len(centers)):
            nd = dist(d, centers[j])
            if nd < best_dist:
                best, best_dist = j, nd
        return best

    centers = [list(data[i]) for i in first]
    assignments = [0] * len(data)

    def expectation():
        converged = True
        for i, d in enumerate(data):
            c = closest(d, centers)
            if c != assignments[i]:
                converged = False
            assignments[i] = c
        return converged

    def maximization():
        old = [c[:] for c in centers]
        counts = [0] * k
        for c in centers:
            c[0] = c[1] = 0.0
        for i, d in enumerate(data):
            counts[assignments[i]] += 1
            centers[assignments[i]][0] += d[0]
            centers[assignments[i]][1] += d[1]
        for j in range(k):
            if counts[j]:
                centers[j][0] /= counts[j]
                centers[j][1] /= counts[j]
            for q in range(2):
                if centers[j][q] == 0:
                    centers[j][q] = old[j][q]

    if k == 1:
        maximization()
    i = 0
    while i < 1000 and not expectation():
        maximization()
        i += 1
    return np.array(centers), i


@pytest.mark.parametrize("k", [1, 3, 5])
def test_kmeans_equals_darknets_loops(k):
    rng = np.random.default_rng(k)
    boxes = np.exp(rng.normal(3, 0.8, size=(60, 2)))  # widths and heights from a few px to ~100
    first = rng.permutation(len(boxes))[:k]
    ours, rounds = kmeans_iou(boxes, k, first)
    theirs, their_rounds = darknet_kmeans(boxes.tolist(), k, first)
    assert rounds == their_rounds and np.allclose(ours, theirs, rtol=1e-12)


def test_average_iou_and_order_by_brute_force():
    rng = np.random.default_rng(0)
    boxes = np.exp(rng.normal(3, 0.8, size=(40, 2)))
    r = calc_anchors(boxes, 4, seed=2, restarts=3)
    areas = r.anchors[:, 0] * r.anchors[:, 1]
    assert list(areas) == sorted(areas)
    best = [max(min(b[0], a[0]) * min(b[1], a[1]) / (b[0] * b[1] + a[0] * a[1] - min(b[0], a[0]) * min(b[1], a[1]))
                for a in r.anchors) for b in boxes]
    assert r.avg_iou == pytest.approx(np.mean(best), rel=1e-12)
    singles = [calc_anchors(boxes, 4, seed=s).avg_iou for s in (2, 3, 4)]
    assert r.avg_iou == max(singles) and r.seed == 2 + int(np.argmax(singles))


def test_darknets_format():
    a = np.array([[10.7, 14.2], [23.0, 27.9]])
    assert format_anchors(a, 416) == "10, 14, 23, 27"  # truncated, as Darknet's (int) cast
    assert format_anchors(a / 100, 32) == "0.1070,0.1420, 0.2300,0.2790"


def test_command_prints_darknets_lines_and_writes_a_cfg(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Darknet's anchors.txt and counters_per_class.txt go to the working folder
    data = generate(str(tmp_path / "ds"), images=20, classes=2, size=(128, 128), seed=1, workers=1)
    out = tmp_path / "anchored.cfg"
    assert main(["calc_anchors", data, "--num-of-clusters", "6", "--width", "256", "--height", "256",
                 "--restarts", "4", "--cfg", "yolov4-tiny.cfg", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Recalculating anchors, num_of_clusters=6, width=256, height=256" in printed
    assert re.search(r"^avg IoU=\d+(\.\d+)?%$", printed, re.M)
    line = re.search(r"^anchors=(.*)$", printed, re.M).group(1)
    values = [int(v) for v in line.split(", ")]
    assert len(values) == 12
    assert (tmp_path / "anchors.txt").read_text() == line  # as Darknet writes it: the line, no newline
    counters = re.search(r"^counters_per_class=(.*)$", printed, re.M).group(1)
    assert (tmp_path / "counters_per_class.txt").read_text() == f"counters_per_class={counters}"
    net = _core.Net(str(out), "cpu")
    heads = [net.yolo_info(i) for i in net.yolo_layers]
    assert [h["anchors"] for h in heads] == [[float(v) for v in values]] * 2
    # the 13x13 head (the first in yolov4-tiny) takes the largest three, the 26x26 one the smallest
    assert [h["mask"] for h in heads] == [[3, 4, 5], [0, 1, 2]]
    assert (net.width, net.height) == (256, 256)
    # a YAML of the same dataset gives the same boxes
    yaml_path = tmp_path / "ds.yaml"
    yaml_path.write_text(f"path: {tmp_path / 'ds'}\ntrain: train.txt\nval: valid.txt\nnames: [circle, square]\n")
    assert main(["calc_anchors", str(yaml_path), "--num-of-clusters", "6", "--width", "256", "--height", "256",
                 "--restarts", "4"]) == 0
    assert f"anchors={line}\n" in capsys.readouterr().out


def test_command_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["calc_anchors", "x.data", "--num-of-clusters", "6", "--width", "100", "--height", "256"])
    assert "multiple of 32" in capsys.readouterr().err
    data = generate(str(tmp_path / "ds"), images=2, classes=1, size=(64, 64), seed=1, workers=1)
    assert main(["calc_anchors", data, "--num-of-clusters", "500", "--width", "64", "--height", "64"]) == 1
    assert "boxes for 500 clusters" in capsys.readouterr().err
    assert main(["calc_anchors", data, "--num-of-clusters", "5", "--width", "64", "--height", "64",
                 "--cfg", "yolov4-tiny.cfg", "-o", str(tmp_path / "x.cfg")]) == 1
    assert "multiple of it" in capsys.readouterr().err


def test_set_anchors_adds_missing_keys(tmp_path):
    from darknet_py.model_files.cfg_edit import CfgEditor, set_anchors

    text = ("[net]\nwidth=64\nheight=64\nchannels=3\n\n[convolutional]\nfilters=8\nsize=3\nstride=2\npad=1\n"
            "activation=leaky\n\n[convolutional]\nfilters=18\nsize=1\nstride=1\npad=1\nactivation=linear\n\n"
            "[yolo]\nclasses=1\nanchors=10,10\n")
    ed = set_anchors(CfgEditor(text, "t.cfg"), [(4.7, 5.2), (9, 9), (20, 30), (40, 40)], [[0, 1, 2, 3]])
    assert "[yolo] of line 20: added mask=0,1,2,3" in ed.changes and "line 22: anchors=10,10 -> anchors=4,5, 9,9, 20,30, 40,40" in ed.changes
    assert "[yolo] of line 20: added num=4" in ed.changes and "line 14: filters=18 -> filters=24" in ed.changes
    net = _core.Net(ed.write(str(tmp_path / "t.cfg")), "cpu")
    info = net.yolo_info(net.yolo_layers[0])
    assert info["mask"] == [0, 1, 2, 3] and info["anchors"] == [4, 5, 9, 9, 20, 30, 40, 40]
