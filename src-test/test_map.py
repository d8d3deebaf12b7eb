"""mAP (`darknet_py map`, darknet_py.evaluation.evaluate): hand-computed AP for each points mode on a small
fixture, an exact/shifted synthetic detector end to end through Darknet's files, and a real run of
the command with yolov3-tiny on photos labelled from its own detections."""
from __future__ import annotations

import json
from fractions import Fraction as F
from pathlib import Path

import cv2
import numpy as np
import pytest

import darknet_py
from darknet_py.commands.cli import main
from darknet_py.data.darknet_files import label_path_for
from darknet_py.evaluation.evaluate import Box, Truth, average_precision, compute_map, evaluate

# ---- the hand-computed fixture -------------------------------------------------------------------
# Three classes (0 circle, 1 square, 2 triangle: no ground truth anywhere). Boxes are (x, y, w, h).
#   image 1: truths A = circle (0,0,10,10), B = circle (50,50,10,10)
#   image 2: truths C = circle (20,20,10,10), D = square (60,0,20,20)
#   image 3: no labels at all
# Detections (name class conf box -> outcome at IoU .5):
#   d1 circle .90 (0,0,10,10)   IoU 1 with A            TP
#   d2 circle .80 (0,0,10,9)    IoU .9 with A, taken     FP (duplicate)
#   d6 circle .20 (50,50,10,10) IoU 1 with B             TP (below --thresh .25)
#   w  square .97 (0,0,10,10)   on the circle A          FP (wrong class: no square in image 1)
#   d4 circle .60 (20,20,10,8)  IoU 80/100 = .8 with C   TP
#   e1 square .95 (60,0,20,20)  IoU 1 with D             TP
#   d3 circle .70 (30,30,10,10) image 3                  FP
#   d5 circle .60 (0,0,10,10)   image 3, ties with d4    FP
#   d7 circle .20 (50,50,10,10) image 3, ties with d6    FP
#   t1 triangle .40 (5,5,5,5)   image 3                  FP (class without ground truth)
IMG1 = ([Box(0, .90, 0, 0, 10, 10), Box(0, .80, 0, 0, 10, 9), Box(0, .20, 50, 50, 10, 10),
         Box(1, .97, 0, 0, 10, 10)],
        [Truth(0, 0, 0, 10, 10), Truth(0, 50, 50, 10, 10)])
IMG2 = ([Box(0, .60, 20, 20, 10, 8), Box(1, .95, 60, 0, 20, 20)],
        [Truth(0, 20, 20, 10, 10), Truth(1, 60, 0, 20, 20)])
IMG3 = ([Box(0, .70, 30, 30, 10, 10), Box(0, .60, 0, 0, 10, 10), Box(0, .20, 50, 50, 10, 10),
         Box(2, .40, 5, 5, 5, 5)],
        [])
NAMES = ["circle", "square", "triangle"]

# Circles ranked (ties keep image order: d4 before d5, d6 before d7), 3 truths:
#   d1 T, d2 F, d3 F, d4 T, d5 F, d6 T, d7 F
#   precision 1, 1/2, 1/3, 2/4, 2/5, 3/6, 3/7;  recall 1/3, 1/3, 1/3, 2/3, 2/3, 1, 1
#   envelope (best precision at or after each rank): 1, 1/2, 1/2, 1/2, 1/2, 1/2, 3/7
#   points 0:   1/3 * 1 + 1/3 * 1/2 + 1/3 * 1/2 = 2/3
#   points 11:  r = 0, .1, .2, .3 -> 1 (4 points); .4, .5, .6 -> 1/2 (3); .7, .8, .9, 1 -> 1/2 (4)
#               (4 + 1.5 + 2) / 11 = 7.5/11
#   points 101: r = 0..0.33 -> 1 (34 points); .34..0.66 -> 1/2 (33); .67..1 -> 1/2 (34)
#               (34 + 16.5 + 17) / 101 = 67.5/101
# Squares ranked, 1 truth: w F (.97), e1 T (.95): precision 0, 1/2; recall 0, 1
#   envelope 1/2, 1/2 -> every mode: 1/2 (all recall points up to 1 see precision 1/2)
# Triangles: no truth -> 0, and Darknet still divides by 3 classes.
CIRCLE_AP = {0: F(2, 3), 11: F(15, 22), 101: F(135, 202)}
MAP = {p: (ap + F(1, 2)) / 3 for p, ap in CIRCLE_AP.items()}  # 7/18, 13/33, 118/303
# At IoU .80 and above d4 (IoU exactly .8, Darknet needs > ) becomes a FP:
#   circles d1 T, d2 F, d3 F, d4 F, d5 F, d6 T, d7 F: precision 1, 1/2, 1/3, 1/4, 1/5, 2/6, 2/7
#   recall 1/3 x5, 2/3, 2/3; envelope 1, 1/2, 1/3, 1/3, 1/3, 1/3, 2/7
#   points 0: 1/3 * 1 + 1/3 * 1/3 = 4/9; mAP = (4/9 + 1/2) / 3 = 17/54
# COCO mean over .50 .55 .60 .65 .70 .75 (mAP 7/18) and .80 .85 .90 .95 (17/54), points 0:
#   (6 * 7/18 + 4 * 17/54) / 10 = 97/270
MAP_50_95_POINTS0 = F(97, 270)


def approx(x) -> pytest.approx:
    return pytest.approx(float(x), abs=1e-12)


@pytest.mark.parametrize("points", [0, 11, 101])
def test_hand_computed_ap_each_points_mode(points):
    r = evaluate([IMG1, IMG2, IMG3], 3, iou_thresh=0.5, points=points, thresh=0.25, names=NAMES)
    assert [c.ap for c in r.classes] == [approx(CIRCLE_AP[points]), approx(F(1, 2)), 0.0]
    assert r.map == approx(MAP[points])
    assert [c.truths for c in r.classes] == [3, 1, 0]
    assert [c.detections for c in r.classes] == [7, 2, 1]


def test_hand_computed_counts_at_conf_thresh():
    r = evaluate([IMG1, IMG2, IMG3], 3, thresh=0.25, names=NAMES)
    # above .25: TP d1, d4, e1; FP d2, d3, d5, w, t1 (d6, d7 are below)
    assert [(c.tp, c.fp) for c in r.classes] == [(2, 3), (1, 1), (0, 1)]
    assert (r.tp, r.fp, r.fn) == (3, 5, 1)
    assert r.precision == approx(F(3, 8)) and r.recall == approx(F(3, 4))
    assert r.f1 == approx(F(1, 2))  # 2 * 3/8 * 3/4 / (3/8 + 3/4)
    assert r.avg_iou == approx(F(28, 80))  # (1 + .8 + 1) / (TP + FP = 8), as Darknet divides
    text = r.report()
    assert "class_id = 0, name = circle, ap = 66.67%   (TP = 2, FP = 3)" in text
    assert "class_id = 2, name = triangle, ap = 0.00%   (TP = 0, FP = 1)" in text
    assert "for conf_thresh = 0.25, precision = 0.38, recall = 0.75, F1-score = 0.50" in text
    assert "TP = 3, FP = 5, FN = 1, average IoU = 35.00 %" in text
    assert "mean average precision (mAP@0.50) = 0.388889, or 38.89 %" in text


# Darknet counts TP/FP at --thresh in collection order, per image (validate_detector_map): a detection
# is a FP when one collected before it in the same image, of any confidence, has the same truth.
#   image 1: truth A = circle (0,0,10,10); collected: e1 .10 (0,0,10,9) IoU .9, then e2 .90 (0,0,10,10) IoU 1
#   image 2: truth B = circle (20,20,10,10); collected: f1 .80 (20,20,10,8) IoU .8, then f2 .70 (20,20,10,10) IoU 1
# Above .25: e2, f1, f2.
#   darknet: e2 FP (e1, below the threshold, took A first), f1 TP, f2 FP (f1 took B)
#            TP 1, FP 2, FN 1; precision 1/3, recall 1/2, F1 = 2 * 1/6 / (5/6) = 2/5; avg IoU .8 / 3 = 4/15
#   ranked:  e2 TP (most confident match of A), f1 TP, f2 FP
#            TP 2, FP 1, FN 0; precision 2/3, recall 1, F1 4/5; avg IoU (1 + .8) / 3 = 3/5
# The AP is the same in both (rank order): e2 T, f1 T, f2 F, e1 F with 2 truths -> 1.
COUNT_IMAGES = [([Box(0, .10, 0, 0, 10, 9), Box(0, .90, 0, 0, 10, 10)], [Truth(0, 0, 0, 10, 10)]),
                ([Box(0, .80, 20, 20, 10, 8), Box(0, .70, 20, 20, 10, 10)], [Truth(0, 20, 20, 10, 10)])]


def test_counts_at_thresh_follow_darknets_collection_order():
    r = evaluate(COUNT_IMAGES, 1, thresh=0.25)
    assert (r.tp, r.fp, r.fn) == (1, 2, 1) and (r.classes[0].tp, r.classes[0].fp) == (1, 2)
    assert r.precision == approx(F(1, 3)) and r.recall == approx(F(1, 2)) and r.f1 == approx(F(2, 5))
    assert r.avg_iou == approx(F(4, 15)) and r.classes[0].avg_iou == approx(F(4, 15))  # Darknet's AvgIoU column
    assert r.map == 1.0 and r.counts == "darknet"
    assert "TP = 1, FP = 2, FN = 1, average IoU = 26.67 %" in r.report()


def test_ranked_counts_give_each_truth_its_most_confident_match():
    r = evaluate(COUNT_IMAGES, 1, thresh=0.25, counts="ranked")
    assert (r.tp, r.fp, r.fn) == (2, 1, 0)
    assert r.precision == approx(F(2, 3)) and r.recall == 1.0 and r.f1 == approx(F(4, 5))
    assert r.avg_iou == approx(F(3, 5)) and r.map == 1.0
    with pytest.raises(ValueError, match="counts"):
        evaluate(COUNT_IMAGES, 1, counts="strict")


def test_detections_come_in_darknets_nms_order():
    """Darknet's do_nms_sort leaves the array sorted by the last class's probability (taken before
    that class's suppression), and validate_detector_map collects in that order: the last class's
    surviving rows are in descending confidence, and every box with such a row comes before the
    boxes without one that have no probability for that class at all, which we cannot see. So:
    the rows of the last class are in descending confidence."""
    from darknet_py.model_files.demo import demo_files, demo_network

    net = demo_network("cpu")
    dets = net.detect(cv2.imread(demo_files()["image"]), 0.005, 0.45)
    last = [d.confidence for d in dets if d.class_id == net.classes - 1]
    assert len(last) >= 2, "the sample image should give several low-confidence stars"
    assert last == sorted(last, reverse=True)


class _BorderNet:
    """A detector whose one box sticks out of a 10x10 image on the left: (-6, 0) to (4, 10)."""

    input_size = (10, 10)

    def detect(self, image, thresh, nms, letterbox, clip=True):
        from darknet_py.network import Detection

        x0 = 0.0 if clip else -6.0
        return [Detection(0, "circle", 0.9, x0, 0.0, 4.0 - x0, 10.0)]


def test_boxes_are_matched_unclipped_as_darknet_does():
    # validate_detector_map (hank-ai's detector_map_calculations_thread, AlexeyAB's detector.c) takes
    # box_iou(dets[i].bbox, truth) on the box as predicted, not clipped to the image.
    # Truth (0,0,4,10); the box (-6,0,10,10): intersection 4x10 = 40, union 100 + 40 - 40 = 100,
    # IoU .4 -> FP at .5 (clipped to (0,0,4,10) it would be IoU 1, a TP).
    from darknet_py.evaluation.evaluate import network_detections

    dets = network_detections(_BorderNet(), np.zeros((10, 10, 3), np.uint8), False)
    assert dets == [Box(0, 0.9, -0.6, 0.0, 1.0, 1.0)]
    r = evaluate([(dets, [Truth(0, 0, 0, 0.4, 1.0)])], 1)
    assert (r.tp, r.fp, r.fn) == (0, 1, 1) and r.map == 0.0
    assert evaluate([(dets, [Truth(0, 0, 0, 0.4, 1.0)])], 1, iou_thresh=0.39).tp == 1


def test_unclipped_detections_clip_to_the_clipped_ones():
    from darknet_py.model_files.demo import demo_files, demo_network

    net = demo_network("cpu")
    image = cv2.imread(demo_files()["image"])
    image = np.ascontiguousarray(image[:, image.shape[1] // 3:])  # cuts shapes at the left border
    h, w = image.shape[:2]
    clipped, raw = net.detect(image, 0.005, 0.45), net.detect(image, 0.005, 0.45, clip=False)
    outside = [d for d in raw if d.x < 0 or d.y < 0 or d.x + d.w > w or d.y + d.h > h]
    assert len(outside) >= 2, "the cropped sample gives boxes past the border at thresh .005"
    kept = [d for d in raw if min(d.x + d.w, w) > max(d.x, 0) and min(d.y + d.h, h) > max(d.y, 0)]
    assert len(kept) == len(clipped)
    for a, b in zip(kept, clipped):
        x0, y0 = max(a.x, 0), max(a.y, 0)
        assert (a.class_id, a.confidence) == (b.class_id, b.confidence)
        assert (x0, y0, min(a.x + a.w, w) - x0, min(a.y + a.h, h) - y0) == pytest.approx(b.box, abs=1e-3)


def test_opencv_resize_is_hank_ais_load_image():
    # hank-ai's detector map loads each image with Darknet::load_image(path, net.w, net.h):
    # cv::resize(..., INTER_LINEAR_EXACT) straight to the network size, letter_box ignored
    from darknet_py.evaluation.evaluate import network_detections
    from darknet_py.model_files.demo import demo_files, demo_network

    net = demo_network("cpu")
    image = cv2.imread(demo_files()["image"])
    h, w = image.shape[:2]
    resized = cv2.resize(image, net.input_size, interpolation=cv2.INTER_LINEAR_EXACT)
    nw, nh = net.input_size
    want = [Box(d.class_id, d.confidence, d.x / nw, d.y / nh, d.w / nw, d.h / nh)
            for d in net.detect(resized, 0.005, 0.45, clip=False)]
    for letterbox in (False, True):
        assert network_detections(net, image, letterbox, "opencv") == want
    assert (w, h) != (nw, nh) and network_detections(net, image, False) != want
    with pytest.raises(ValueError, match="resize"):
        network_detections(net, image, False, "area")


def test_coco_mean_over_iou_thresholds():
    r = evaluate([IMG1, IMG2, IMG3], 3, points=0)
    assert r.map_50_95 == approx(MAP_50_95_POINTS0)
    assert evaluate([IMG1, IMG2, IMG3], 3, iou_thresh=0.8).map == approx(F(17, 54))


def test_ties_keep_image_order():
    # image 3 first: d5 now ranks before d4 and d7 before d6:
    #   d1 T, d2 F, d3 F, d5 F, d4 T, d7 F, d6 T: precision 1, 1/2, 1/3, 1/4, 2/5, 2/6, 3/7
    #   recall 1/3 x4, 2/3, 2/3, 1; envelope at the recall steps: 1, 3/7 (rank 5), 3/7 (rank 7)
    #   points 0: 1/3 + 1/3 * 3/7 + 1/3 * 3/7 = 13/21
    r = evaluate([IMG3, IMG1, IMG2], 3)
    assert r.classes[0].ap == approx(F(13, 21))


def test_iou_must_exceed_the_threshold():
    # IoU exactly 50/100: Darknet's `current_iou > iou_thresh` makes it a FP at .5
    img = ([Box(0, .9, 0, 0, 10, 5)], [Truth(0, 0, 0, 10, 10)])
    assert evaluate([img], 1, iou_thresh=0.5).map == 0.0
    assert evaluate([img], 1, iou_thresh=0.45).map == 1.0


def test_conf_thresh_is_strict():
    # Darknet counts TP/FP for `prob > thresh_calc_avg_iou`: a detection at exactly .25 is not counted
    img = ([Box(0, .25, 0, 0, 10, 10), Box(0, .5, 20, 0, 10, 10)], [Truth(0, 0, 0, 10, 10)])
    r = evaluate([img], 1, thresh=0.25)
    assert (r.tp, r.fp, r.fn) == (0, 1, 1)
    assert r.map == approx(F(1, 2))  # FP then TP: precision 1/2 at recall 1


def test_average_precision_on_flags():
    # T F T with 2 truths: precision 1, 1/2, 2/3; recall 1/2, 1/2, 1; envelope 1, 2/3, 2/3
    # points 0: 1/2 * 1 + 1/2 * 2/3 = 5/6; points 11: r <= .5 (6 points) -> 1, r > .5 (5) -> 2/3
    assert average_precision([1, 0, 1], 2, 0) == approx(F(5, 6))
    assert average_precision([1, 0, 1], 2, 11) == approx((6 + F(10, 3)) / 11)
    assert average_precision([], 2, 0) == 0.0 and average_precision([1], 0, 0) == 0.0
    with pytest.raises(ValueError, match="points"):
        average_precision([1], 1, 7)


# ---- Darknet's files, with an injected detector ----------------------------------------------------
def write_dataset(root: Path, labels: dict, classes: int) -> Path:
    """images/ with labels/ beside, a names file, a valid list and a .data file (paths relative to
    the .data file's folder). `labels` maps image name -> lines `class cx cy w h`, or None for no file."""
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for name, lines in labels.items():
        cv2.imwrite(str(root / "images" / name), np.full((32, 48, 3), 127, np.uint8))
        if lines is not None:
            (root / "labels" / (Path(name).stem + ".txt")).write_text("".join(l + "\n" for l in lines))
    (root / "shapes.names").write_text("".join(f"shape{i}\n" for i in range(classes)))
    (root / "valid.txt").write_text("".join(f"images/{n}\n" for n in labels))
    data = root / "shapes.data"
    data.write_text(f"classes = {classes}\nvalid = valid.txt\nnames = shapes.names\n# a comment\n")
    return data


LABELS = {"a.jpg": ["0 0.25 0.25 0.2 0.3", "1 0.7 0.6 0.3 0.2"],
          "b.jpg": ["1 0.5 0.5 0.4 0.4", "0 0.2 0.8 0.1 0.1", "0 0.8 0.2 0.15 0.15"],
          "c.jpg": None}  # no label file: no objects


def truth_detector(shift: float):
    """Detections equal to the labels, moved right by `shift` widths (0: exact)."""
    def detections_for(image_path: str):
        txt = Path(label_path_for(image_path))
        rows = [l.split() for l in txt.read_text().splitlines()] if txt.exists() else []
        return [Box(int(c), 0.9 - 0.1 * i, float(x) - float(w) / 2 + shift * float(w), float(y) - float(h) / 2,
                    float(w), float(h)) for i, (c, x, y, w, h) in enumerate(rows)]
    return detections_for


@pytest.mark.parametrize("points", [0, 11, 101])
def test_exact_detector_scores_one_shifted_scores_zero(tmp_path, points):
    data = write_dataset(tmp_path, LABELS, 2)
    exact = compute_map(str(data), detections_for=truth_detector(0.0), points=points, progress=False)
    assert exact.map == 1.0 and exact.map_50_95 == 1.0
    assert [c.name for c in exact.classes] == ["shape0", "shape1"]
    assert (exact.truths, exact.tp, exact.fp, exact.images) == (5, 5, 0, 3)
    # shifted by 0.4 of the width: IoU = 0.6/1.4 < .5 -> every detection a FP
    shifted = compute_map(str(data), detections_for=truth_detector(0.4), points=points, progress=False)
    assert shifted.map == 0.0 and shifted.tp == 0 and shifted.fp == 5


def test_bad_label_lines_are_reported_and_skipped(tmp_path, capsys):
    data = write_dataset(tmp_path, {"a.jpg": ["0 0.5 0.5 0.2 0.2", "7 0.5 0.5 0.2 0.2", "0 0.5"]}, 1)
    r = compute_map(str(data), detections_for=lambda p: [Box(0, .9, .4, .4, .2, .2)], progress=False)
    assert r.truths == 1 and r.map == 1.0
    err = capsys.readouterr().err
    assert "a.txt:2: 1 box(es) with a class id outside [0, 0]" in err and "a.txt:3: 1 line(s) not" in err


def test_map_command_input_errors(tmp_path, capsys):
    assert main(["map", str(tmp_path / "none.data"), "x.cfg", "x.weights"]) == 1
    assert "data file not found" in capsys.readouterr().err
    (tmp_path / "empty.data").write_text("classes = 1\n")
    with pytest.raises(ValueError, match="no `valid =`"):
        compute_map(str(tmp_path / "empty.data"), detections_for=lambda p: [], progress=False)


# ---- the real command with real weights ------------------------------------------------------------
skdata = pytest.importorskip("skimage.data", reason="scikit-image provides the test photos")


def test_map_command_with_yolov3_tiny(tmp_path, yolov3_tiny, capsys):
    """Labels written from yolov3-tiny's own detections at .3 (it sees two people in the cameraman
    photo and a "toilet" in the coffee cup): the same network, evaluated at .005, must find them again
    with AP ~1 for those classes. The astronaut photo has no label file (its detections are FPs)."""
    net = darknet_py.Network(yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"])
    photos = {"camera.jpg": cv2.cvtColor(skdata.camera(), cv2.COLOR_GRAY2BGR),
              "coffee.png": cv2.cvtColor(skdata.coffee(), cv2.COLOR_RGB2BGR),
              "astronaut.jpg": cv2.cvtColor(skdata.astronaut(), cv2.COLOR_RGB2BGR)}
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    labelled = set()
    for name, img in photos.items():
        path = tmp_path / "images" / name
        cv2.imwrite(str(path), img)
        if name == "astronaut.jpg":
            continue
        h, w = img.shape[:2]
        dets = net.detect(cv2.imread(str(path)), 0.3)
        lines = [f"{d.class_id} {(d.x + d.w / 2) / w:.6f} {(d.y + d.h / 2) / h:.6f} {d.w / w:.6f} {d.h / h:.6f}"
                 for d in dets]
        labelled |= {d.class_id for d in dets}
        (tmp_path / "labels" / (Path(name).stem + ".txt")).write_text("\n".join(lines) + "\n")
    assert labelled, "yolov3-tiny found nothing to label on the test photos"
    (tmp_path / "valid.txt").write_text("".join(str(tmp_path / "images" / n) + "\n" for n in photos))
    data = tmp_path / "photos.data"
    data.write_text(f"classes = 80\nvalid = {tmp_path / 'valid.txt'}\nnames = {yolov3_tiny['names']}\n")
    js = tmp_path / "map.json"
    rc = main(["map", str(data), str(yolov3_tiny["cfg"]), str(yolov3_tiny["weights"]), "--json", str(js)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(js.read_text())
    for c in labelled:
        assert doc["classes"][c]["ap"] >= 0.9, doc["classes"][c]
        assert doc["classes"][c]["tp"] == doc["classes"][c]["truths"]
        assert f"class_id = {c}, name = {net.names[c]}, ap = " in out
    assert doc["images"] == 3 and doc["truths"] == sum(doc["classes"][c]["truths"] for c in labelled)
    assert "mean average precision (mAP@0.50) = " in out and "mAP@0.50:0.95" in out
    assert "3/3 images" in err or "3 images in" in err  # the progress bar
    # the same from Python, with 11 points
    r = darknet_py.map(str(data), network=net, points=11, progress=False)
    assert all(r.classes[c].ap >= 0.9 for c in labelled)
