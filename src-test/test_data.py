"""Training data: Darknet's .data/list files and label path rule, bad data, augmentation
(checked against the pixels of the augmented image, not against our own box arithmetic), and the
background batch loader."""
import dataclasses
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from darknet_py.data import synth
from darknet_py.data import (BatchLoader, DataFileError, DataReporter, augment_options_from_cfg, darknet_truth,
                             dense_truth, label_path_for, random_network_size, read_data_file, read_image_list,
                             read_labels, replace_image_to_label)
from darknet_py.data.sampler import SampleMaker, SeedWords
from darknet_py.data import augment as A

# every augmentation off: the tests switch on one at a time
PLAIN = dict(A.DEFAULT_OPTIONS, jitter=0.0, flip=0, hue=0.0, saturation=1.0, exposure=1.0, mosaic=0)


# ---- .data files and lists ------------------------------------------------------------------
def test_data_file_paths_relative_to_its_folder(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.txt").write_text("a.jpg\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "obj.names").write_text("x\n")
    data = tmp_path / "sub" / "obj.data"
    data.write_text("# a comment\n; another\n\n classes= 2 \ntrain  =  train.txt\r\nnames = elsewhere/obj.names\n"
                    "backup = backup/\nvalid = /abs/valid.txt\neval=coco\n")
    monkeypatch.chdir(tmp_path)  # names exists only relative to the current directory (Darknet's rule)
    d = read_data_file(str(data))
    assert d.classes == 2
    assert d.train == str(tmp_path / "sub" / "train.txt")
    assert d.names == str(tmp_path / "elsewhere" / "obj.names")
    assert d.backup == str(tmp_path / "sub" / "backup")  # exists nowhere: beside the .data file
    assert d.valid == "/abs/valid.txt" and d.extra == {"eval": "coco"}
    assert d.where("train") == f"{data}:5"


@pytest.mark.parametrize("text, line, words", [
    ("classes = 2\ntrain\n", 2, "key = value"),
    ("classes = two\n", 1, "integer"),
    ("classes = 0\n", 1, "at least 1"),
    ("train = a\n# x\ntrain = b\n", 3, "twice"),
    ("names =\n", 1, "no value"),
])
def test_data_file_errors_name_file_and_line(tmp_path, text, line, words):
    p = tmp_path / "bad.data"
    p.write_text(text)
    with pytest.raises(DataFileError, match=rf"^{p}:{line}: .*{words}"):
        read_data_file(str(p))


def test_data_file_missing_key_names_the_file(tmp_path):
    p = tmp_path / "x.data"
    p.write_text("classes = 3\n")
    with pytest.raises(DataFileError, match=rf"{p}: no `train"):
        read_data_file(str(p)).require("train")


def test_image_list(tmp_path, monkeypatch):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(b"")
    (tmp_path / "cwd_only.jpg").write_bytes(b"")
    lst = tmp_path / "imgs" / "list.txt"
    lst.write_text("a.jpg\r\n\n  # a comment\n   \n/abs/b.png  \ncwd_only.jpg\nnowhere.jpg\n")
    monkeypatch.chdir(tmp_path)
    assert read_image_list(str(lst)) == [str(tmp_path / "imgs" / "a.jpg"), "/abs/b.png",
                                         str(tmp_path / "cwd_only.jpg"), str(tmp_path / "imgs" / "nowhere.jpg")]


@pytest.mark.parametrize("image, label", [
    ("/d/images/x.jpg", "/d/images/x.txt"),  # current Darknet: a generic images/ keeps its folder
    ("/d/images/train2014/x.JPG", "/d/labels/train2014/x.txt"),
    ("/d/VOC2007/JPEGImages/000005.jpeg", "/d/VOC2007/labels/000005.txt"),
    ("/images/proj/images/a.b.png", "/images/proj/images/a.b.txt"),
    ("/d/images/val2017/x.png", "/d/labels/val2017/x.txt"),
    ("/d/images/val2014/images/val2014/x.jpg", "/d/labels/val2014/images/val2014/x.txt"),  # the first only,
    # as Darknet's find_replace
    ("C:\\d\\JPEGImages\\x.jpg", "C:\\d\\labels\\x.txt"),
    ("/d/myimages/x.bmp", "/d/myimages/x.txt"),  # a whole folder name only
    ("/d/obj/img_images.jpg", "/d/obj/img_images.txt"),  # AlexeyAB layout: beside the image
    ("images/x.tiff", "images/x.txt"),
    ("x.PNG", "x.txt"),
])
def test_label_path_rule(image, label):
    assert replace_image_to_label(image) == label


def test_label_beside_the_image_first_then_the_labels_folder(tmp_path):
    (tmp_path / "images").mkdir()
    image = str(tmp_path / "images" / "a.jpg")
    assert label_path_for(image) == str(tmp_path / "images" / "a.txt")  # neither: Darknet's path
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "a.txt").write_text("0 .5 .5 .1 .1\n")  # pjreddie's layout still read
    assert label_path_for(image) == str(tmp_path / "labels" / "a.txt")
    (tmp_path / "images" / "a.txt").write_text("0 .5 .5 .1 .1\n")  # where current Darknet looks: wins
    assert label_path_for(image) == str(tmp_path / "images" / "a.txt")


# ---- labels and bad data --------------------------------------------------------------------
def _reporter():
    seen = []
    return DataReporter(lambda kind, path, msg: seen.append((kind, path, msg))), seen


@pytest.mark.parametrize("text, kind, n_boxes", [
    ("0 .5 .5 .2 .2\n7 .5 .5 .2 .2\n-1 .1 .1 .1 .1\n", "bad-class", 1),
    ("0 .5 .5 .2 .2\n1 1.2 .5 .2 .2\n1 .95 .5 .3 .2\n", "bad-coords", 3),  # kept: clipped later
    ("0 .5 .5 .2\n0 a b c d\n1 .5 .5 .2 .2\n", "bad-line", 1),
    ("0 .5 .5 0 .2\n", "bad-size", 0),
    ("\n\n", "empty-label", 0),
])
def test_read_labels_reports_once(tmp_path, text, kind, n_boxes):
    p = tmp_path / "l.txt"
    p.write_text(text)
    rep, seen = _reporter()
    boxes = read_labels(str(p), 2, rep)
    read_labels(str(p), 2, rep)  # a second read reports nothing new
    assert boxes.shape == (n_boxes, 5) and boxes.dtype == np.float32
    assert [(k, path) for k, path, _ in seen] == [(kind, str(p))]
    assert str(p) in seen[0][2]


def test_read_labels_missing_file():
    rep, seen = _reporter()
    assert read_labels("/nonexistent/l.txt", 3, rep).shape == (0, 5)
    assert seen[0][:2] == ("missing-label", "/nonexistent/l.txt")


def test_bad_data_reported_once_and_loading_goes_on(tmp_path):
    data = Path(synth.generate(tmp_path, images=3, classes=2, size=(64, 64), seed=1, valid_fraction=0))
    img = lab = tmp_path / "images"  # labels beside the images, as synth writes them
    cv2.imwrite(str(img / "badclass.jpg"), np.full((64, 64, 3), 90, np.uint8))
    (lab / "badclass.txt").write_text("5 .5 .5 .3 .3\n1 .5 .5 .4 .4\n")
    cv2.imwrite(str(img / "outside.jpg"), np.full((64, 64, 3), 90, np.uint8))
    (lab / "outside.txt").write_text("0 .9 .5 .4 .2\n")  # reaches x = 1.1
    cv2.imwrite(str(img / "empty.jpg"), np.full((64, 64, 3), 90, np.uint8))
    (lab / "empty.txt").write_text("")
    (img / "garbage.jpg").write_bytes(b"not a jpeg at all")
    (lab / "garbage.txt").write_text("0 .5 .5 .1 .1\n")
    (img / "folder.jpg").mkdir()  # not a file: reported as missing, as a missing file
    bad = ["missing.jpg", "folder.jpg", "garbage.jpg", "badclass.jpg", "outside.jpg", "empty.jpg"]
    with (tmp_path / "train.txt").open("a") as f:
        f.write("".join(f"images/{n}\n" for n in bad))
    rep, seen = _reporter()
    opts = dict(PLAIN, width=64, height=64)
    with BatchLoader.from_files(str(data), None, 4, options=opts, seed=0, workers=2, reporter=rep) as loader:
        batches = [loader.next_batch() for _ in range(12)]
    kinds = sorted((k, os.path.basename(p)) for k, p, _ in seen)
    assert kinds == [("bad-class", "badclass.txt"), ("bad-coords", "outside.txt"), ("empty-label", "empty.txt"),
                     ("missing-image", "folder.jpg"), ("missing-image", "missing.jpg"),
                     ("unreadable-image", "garbage.jpg")]
    for _, path, msg in seen:
        assert path in msg
    for images, truths in batches:
        assert images.shape == (4, 3, 64, 64) and np.isfinite(images).all()
        for t in truths:
            assert ((t[:, 0] >= 0) & (t[:, 0] < 2)).all()
            assert (t[:, 1] - t[:, 3] / 2 >= -1e-6).all() and (t[:, 1] + t[:, 3] / 2 <= 1 + 1e-6).all()
    # the box reaching outside was clipped to the image: x from .7 to 1
    clipped = [t for _, ts in batches for t in ts if len(t) == 1 and abs(t[0, 3] - 0.3) < 1e-3]
    assert clipped and np.allclose(clipped[0][0, 1:], [0.85, 0.5, 0.3, 0.2], atol=1e-5)


def test_no_usable_image_is_an_error(tmp_path):
    lst = [str(tmp_path / "a.jpg"), str(tmp_path / "b.jpg")]
    rep, _ = _reporter()
    with BatchLoader(lst, 2, 1, PLAIN, workers=1, reporter=rep) as loader:
        with pytest.raises(RuntimeError, match="no usable training image"):
            loader.next_batch()


# ---- augmentation ---------------------------------------------------------------------------
def _square_image(w=120, h=90, box=(30, 20, 70, 50), colour=(220, 30, 40), bg=(100, 110, 120)):
    """An RGB image with one solid rectangle and its class-first label."""
    img = np.empty((h, w, 3), np.uint8)
    img[...] = bg
    x0, y0, x1, y1 = box
    img[y0:y1, x0:x1] = colour
    label = np.array([[0, (x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h]], np.float32)
    return img, label


def _colour_box(chw, colour, tol=40):
    """Normalised (cx, cy, w, h) of the pixels within `tol` of `colour` in a CHW [0, 1] image."""
    rgb = (chw.transpose(1, 2, 0) * 255).astype(int)
    ys, xs = np.nonzero(np.abs(rgb - colour).max(axis=2) <= tol)
    if len(xs) == 0:
        return None
    h, w = rgb.shape[:2]
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    return np.array([(x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h])


def test_flip_mirrors_image_and_box():
    img, label = _square_image()
    opts = dict(PLAIN, flip=1)
    seen = set()
    for seed in range(12):
        chw, truth = A.augment_one(img, label, 96, 96, opts, np.random.default_rng(seed))
        found = _colour_box(chw, (220, 30, 40))
        flipped = found[0] > 0.5  # the square is on the left of the source image
        seen.add(flipped)
        assert truth.shape == (1, 5)
        assert np.allclose(truth[0, 1:], found, atol=1.5 / 96), (seed, truth, found)
        expected_x = 1 - label[0, 1] if flipped else label[0, 1]
        assert abs(truth[0, 1] - expected_x) < 1e-5
    assert seen == {True, False}


@pytest.mark.parametrize("letter_box", [0, 1])
def test_jitter_crop_keeps_boxes_on_the_object(letter_box):
    """Random crops (reaching outside the image too) and resizes: the box stays on the square's
    pixels, clipped where the crop cuts the square."""
    img, label = _square_image()
    opts = dict(PLAIN, jitter=0.3, resize=1.5, flip=1, letter_box=letter_box)
    for seed in range(30):
        rng = np.random.default_rng(seed)
        chw, truth = A.augment_one(img, label, 128, 96, opts, rng)
        found = _colour_box(chw, (220, 30, 40))
        if found is None:  # the crop missed the square: no box either
            assert len(truth) == 0
            continue
        assert len(truth) == 1, seed
        assert np.allclose(truth[0, 1:], found, atol=2.0 / 96), (seed, truth, found)


def test_crop_outside_the_image_takes_the_mean_colour():
    img, _ = _square_image()
    p = A.CropParams(pleft=-60, pright=0, ptop=0, pbot=0, swidth=180, sheight=90, flip=False, dhue=0, dsat=1, dexp=1)
    out = A.crop_resize(img, p, 180, 90)
    mean = np.rint(img.reshape(-1, 3).mean(axis=0))
    assert np.abs(out[:, :55].astype(int) - mean).max() <= 1
    assert np.array_equal(out[:, 60:], img)


def test_mean_colour_is_cv2_mean_to_the_bit():
    """The pad colour's mean from cv2.sumElems: cv::mean's double, bit for bit (a rounding
    half-way case would otherwise flip a level), colour and grey, odd sizes, 8-bit extremes."""
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (h, w, 3), np.uint8) for h, w in ((1, 1), (7, 13), (97, 130), (416, 416))]
    images += [rng.integers(0, 256, (33, 50), np.uint8), np.full((64, 64, 3), 255, np.uint8),
               np.zeros((5, 9, 3), np.uint8)]
    images.append(np.tile(np.uint8([[[1, 2, 3]], [[2, 3, 4]]]), (1, 3, 1)))  # means 1.5, 2.5, 3.5: the halves
    for img in images:
        c = 1 if img.ndim == 2 else 3
        assert A.mean_colour(img) == list(cv2.mean(img)[:c]), img.shape


def test_decoded_bgr_gives_the_bits_of_rgb():
    """bgr=True (the sampler's decoded images, never converted) against RGB input: the same bits through
    every pixel step (crop with mean padding, flip, HSV or none, blur, noise, mosaic)."""
    rng = np.random.default_rng(5)
    rgb = [rng.integers(0, 256, (70, 90, 3), np.uint8) for _ in range(4)]
    for i, img in enumerate(rgb):
        cv2.rectangle(img, (10 + i, 12), (50, 40 + i), (220, 30 + 40 * i, 40), -1)
    bgr = [cv2.cvtColor(i, cv2.COLOR_RGB2BGR) for i in rgb]
    label = np.array([[0, 0.33, 0.37, 0.45, 0.41]], np.float32)
    hsv = dict(hue=0.1, saturation=1.5, exposure=1.5)
    for opts in (dict(PLAIN, jitter=0.3, flip=1, **hsv), dict(PLAIN, jitter=0.3, flip=1, blur=1, gaussian_noise=20),
                 dict(PLAIN, letter_box=1, **hsv)):
        for seed in range(4):
            want = A.augment_one(rgb[seed], label, 64, 48, opts, np.random.default_rng(seed))
            got = A.augment_one(bgr[seed], label, 64, 48, opts, np.random.default_rng(seed), bgr=True)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
    opts = dict(PLAIN, jitter=0.3, flip=1, mosaic=1, **hsv)
    want = A.mosaic([(i, label) for i in rgb], 64, 48, opts, np.random.default_rng(1))
    got = A.mosaic([(i, label) for i in bgr], 64, 48, opts, np.random.default_rng(1), bgr=True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_letterbox_geometry():
    """A 2:1 image in a square network: centred, full width, half height, mean colour above and below."""
    img = np.empty((100, 200, 3), np.uint8)
    img[...] = (200, 40, 40)
    label = np.array([[0, 0.5, 0.5, 1.0, 1.0]], np.float32)
    chw, truth = A.augment_one(img, label, 128, 128, dict(PLAIN, letter_box=1), np.random.default_rng(0))
    assert np.allclose(truth, [[0, 0.5, 0.5, 1.0, 0.5]], atol=1e-6)
    rgb = np.rint(chw.transpose(1, 2, 0) * 255)
    assert np.allclose(rgb[33:95], (200, 40, 40), atol=1) and np.allclose(rgb[:31], (200, 40, 40), atol=1)
    # the mean colour of this image is its own colour: use a two-colour image to see the bars
    img[:, :100] = (0, 0, 255)
    chw, _ = A.augment_one(img, label, 128, 128, dict(PLAIN, letter_box=1), np.random.default_rng(0))
    rgb = np.rint(chw.transpose(1, 2, 0) * 255)
    bar = np.rint(np.array(cv2.mean(img)[:3]))
    assert np.allclose(rgb[:31], bar, atol=1) and np.allclose(rgb[97:], bar, atol=1)
    assert np.allclose(rgb[34:94, :60], (0, 0, 255), atol=1) and np.allclose(rgb[34:94, 68:], (200, 40, 40), atol=1)


def test_hsv_changes_colours_not_geometry():
    img, label = _square_image(bg=(128, 128, 128))
    plain, t0 = A.augment_one(img, label, 96, 96, PLAIN, np.random.default_rng(1))
    opts = dict(PLAIN, hue=0.1, saturation=1.5, exposure=1.5)
    changed = 0
    for seed in range(6):
        chw, t1 = A.augment_one(img, label, 96, 96, opts, np.random.default_rng(seed))
        assert np.array_equal(t0, t1)
        changed += not np.allclose(chw, plain, atol=2 / 255)
        background = chw[:, 0, 0][:, None, None]  # grey has no hue: it stays grey, only brighter/darker
        assert abs(background.max() - background.min()) <= 2 / 255
        object_now = np.abs(chw - background).max(axis=0) > 0.1
        object_before = np.abs(plain - plain[:, :1, :1]).max(axis=0) > 0.1
        assert (object_now != object_before).mean() < 0.005
    assert changed >= 5


def test_hsv_matches_opencv_arithmetic():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (20, 30, 3), np.uint8)
    out = A.distort_hsv(rgb, 0.0975, 1.4, 0.7)  # 179 x .0975 = 17.45: 17, where 180 x would give 18
    hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV).astype(np.float64)  # Darknet's cv::Mat steps, in double
    hsv[..., 1] *= 1.4
    hsv[..., 2] *= 0.7
    hsv[..., 0] += 179 * 0.0975
    ref = cv2.cvtColor(np.clip(np.rint(hsv), 0, 255).astype(np.uint8), cv2.COLOR_HSV2RGB)
    assert np.array_equal(out, ref)


def test_mosaic_four_quadrants():
    """Four solid images, each one object filling it: the mosaic shows the four colours in the
    four quadrants around the cut, with one box per quadrant of that image's class."""
    colours = [(250, 0, 0), (0, 250, 0), (0, 0, 250), (250, 250, 0)]
    images = []
    for k, c in enumerate(colours):
        img = np.empty((60 + 10 * k, 80, 3), np.uint8)
        img[...] = c
        images.append((img, np.array([[k, 0.5, 0.5, 1.0, 1.0]], np.float32)))
    for bound in (0, 1):
        for seed in range(4):
            chw, truth = A.mosaic(images, 128, 96, dict(PLAIN, mosaic=1, mosaic_bound=bound, flip=1),
                                  np.random.default_rng(seed))
            assert chw.shape == (3, 96, 128)
            assert sorted(truth[:, 0].tolist()) == [0, 1, 2, 3]
            rgb = chw.transpose(1, 2, 0) * 255
            for cls, cx, cy, w, h in truth:
                found = _colour_box(chw, colours[int(cls)], tol=5)
                assert np.allclose([cx, cy, w, h], found, atol=1.5 / 96), (bound, seed, cls, found)
                assert np.allclose(rgb[int(cy * 96), int(cx * 128)], colours[int(cls)], atol=1)
            # quadrants: top-left is image 0, top-right 1, bottom-left 2, bottom-right 3
            order = truth[np.argsort(truth[:, 0])]
            assert order[0, 1] < order[1, 1] and order[2, 1] < order[3, 1]
            assert order[0, 2] < order[2, 2] and order[1, 2] < order[3, 2]


def test_mosaic_with_jitter_boxes_follow_the_pixels():
    """With jitter and flips each quadrant shows a shifted crop of its image: with mosaic_bound=1
    (boxes clipped to their quadrant) every box must still cover exactly its object's pixels."""
    colours = [(250, 0, 0), (0, 250, 0), (0, 0, 250), (250, 250, 0)]
    images = []
    for k, c in enumerate(colours):
        img, label = _square_image(w=100 + 20 * k, h=80, box=(25, 15, 75 + 10 * k, 60), colour=c, bg=(90, 90, 90))
        label[0, 0] = k
        images.append((img, label))
    opts = dict(PLAIN, mosaic=1, mosaic_bound=1, flip=1, jitter=0.3)
    boxes = 0
    for seed in range(25):
        chw, truth = A.mosaic(images, 128, 96, opts, np.random.default_rng(seed))
        for k, c in enumerate(colours):
            found = _colour_box(chw, c, tol=30)
            mine = truth[truth[:, 0] == k]
            if len(mine) == 0:  # only a sliver (or nothing) of the object in its quadrant
                assert found is None or min(found[2] * 128, found[3] * 96) <= 2, (seed, k, found)
                continue
            boxes += 1
            assert found is not None and np.allclose(mine[0, 1:], found, atol=2.0 / 96), (seed, k, mine, found)
    assert boxes >= 60


def test_mosaic_shows_image_content_not_the_fill_border():
    """Darknet shifts each quadrant's window past the mean-colour border that a jittered crop
    adds (left/right/top/bottom shifts, mirrored for flipped images): little border remains."""
    images, borders = [], []
    for k in range(4):
        img = np.zeros((80, 100 + 20 * k, 3), np.uint8)
        img[:, :img.shape[1] // 2] = (200, 20 * k, 0)
        img[:, img.shape[1] // 2:] = (0, 20 * k, 200)
        images.append((img, np.zeros((0, 5), np.float32)))
        borders.append(np.array([100, 20 * k, 100]))  # the mean colour fills outside the image
    fractions = []
    for seed in range(60):
        chw, _ = A.mosaic(images, 128, 96, dict(PLAIN, mosaic=1, flip=1, jitter=0.3), np.random.default_rng(seed))
        rgb = chw.transpose(1, 2, 0) * 255
        fractions.append(np.any([np.abs(rgb - b).max(axis=2) <= 3 for b in borders], axis=0).mean())
    assert np.mean(fractions) < 0.03, np.mean(fractions)  # about 7 % without the shifts


def test_max_boxes_and_tiny_boxes():
    img, _ = _square_image()
    many = np.array([[0, 0.1 + 0.8 * i / 30, 0.5, 0.05, 0.05] for i in range(30)]
                    + [[0, 0.5, 0.5, 0.001, 0.3]], np.float32)  # the last is narrower than a pixel
    _, truth = A.augment_one(img, many, 96, 96, dict(PLAIN, max_boxes=10), np.random.default_rng(0))
    assert len(truth) <= 10 and (truth[:, 3] >= 1 / 96).all()
    _, truth = A.augment_one(img, many, 96, 96, PLAIN, np.random.default_rng(0))
    assert len(truth) == 30


def test_truth_orders():
    t = np.array([[3, 0.1, 0.2, 0.3, 0.4]], np.float32)
    assert darknet_truth(t).tolist() == [[np.float32(x) for x in (0.1, 0.2, 0.3, 0.4, 3)]]
    dense = dense_truth([t, np.zeros((0, 5), np.float32)], 4)
    assert dense.shape == (2, 4, 5) and dense[0, 0, 4] == 3 and not dense[0, 1:].any() and not dense[1].any()


def test_sample_generator_is_default_rng_of_seed_and_indices():
    """A sample's Generator (SampleMaker._generator) starts where np.random.default_rng([seed, k, j]) does:
    seeds of one and two 32-bit words, 0, and indices past 32 bits (the general path)."""
    for seed in (0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 64 - 1, 12345678901234567):
        maker = SampleMaker(["x.jpg"], 4, 2, dict(PLAIN), seed, DataReporter())
        for ints in ((0, 0), (7, 3), (2 ** 32 - 1, 63), (2 ** 32, 1), (5, 2, 0x6D1C)):
            assert maker._generator(*ints).bit_generator.state == np.random.default_rng([seed, *ints]).bit_generator.state


def test_seed_words_are_numpys_seed_sequence():
    """SeedWords' C++ state words (loader_seed.cpp) are SeedSequence.generate_state's, for entropy shorter and
    longer than its pool of 4 words, in 32 and 64 bits."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 5, 9):
        for _ in range(20):
            entropy = [int(v) for v in rng.integers(0, 2 ** 32, n)]
            want, got = np.random.SeedSequence(entropy), SeedWords(entropy)  # ints below 2^32: one word each
            for words, dtype in ((1, np.uint32), (4, np.uint64), (7, np.uint32), (8, np.uint64)):
                assert np.array_equal(got.generate_state(words, dtype), want.generate_state(words, dtype))
                assert got.generate_state(words, dtype).dtype == dtype
    with pytest.raises(ValueError, match="only support uint32 or uint64"):
        SeedWords([1]).generate_state(4, np.int64)


@pytest.mark.parametrize("flip, hue, sat, exp", [(1, 0.1, 1.5, 1.5), (0, 0.0, 1.0, 1.0), (1, 0.0, 0.7, 1.0)])
def test_crop_choices_are_those_drawn_one_by_one(flip, hue, sat, exp):
    """sample_crop draws its uniforms in one call: the same choices as drawing them one by one in Darknet's
    order (jitter's four, resize's two, flip, hue, saturation, exposure), and the stream goes on alike."""
    opts = dict(PLAIN, jitter=0.3, resize=1.5, flip=flip, hue=hue, saturation=sat, exposure=exp)
    for s in range(50):
        a, b = np.random.default_rng(s), np.random.default_rng(s)
        p = A.sample_crop(a, 500, 300, 416, 416, opts)
        r = [b.random() for _ in range(6)]
        want_flip = bool(flip) and b.random() < 0.5
        want_hue = b.uniform(-hue, hue) if hue else 0.0
        want_sat = A.rand_scale(b, sat) if sat != 1 else 1.0
        want_exp = A.rand_scale(b, exp) if exp != 1 else 1.0
        assert (p.flip, p.dhue, p.dsat, p.dexp) == (want_flip, want_hue, want_sat, want_exp)
        assert a.random() == b.random() and len(set(r)) == 6


def test_crop_choices_of_a_seed_are_those_of_the_previous_loader():
    """The crop rectangles and colour factors the loader drew for these seeds before sample_crop took its
    uniforms in one call (main at d963836): resume-with-seed keeps its promise across the change."""
    opts = dict(PLAIN, jitter=0.3, resize=1.5, flip=1, hue=0.1, saturation=1.5, exposure=1.5)
    want = [(-129, -213, 60, 32, 842, 208, False, 0.045899312196799685, 0.7862794266885105, 1.4079267770607662),
            (-124, 206, -44, 30, 418, 314, False, -0.01816017272616774, 1.2747968438365298, 0.7263448260693217),
            (23, -184, -24, 3, 661, 321, True, -0.08897067453338636, 0.8791327163410866, 1.281132831390214)]
    for seed, choices in enumerate(want):
        assert dataclasses.astuple(A.sample_crop(np.random.default_rng(seed), 500, 300, 416, 416, opts)) == choices


def test_random_network_size():
    rng = np.random.default_rng(0)
    sizes = {random_network_size(416, 416, rng) for _ in range(300)}
    assert all(w == h and w % 32 == 0 for w, h in sizes)
    assert min(sizes)[0] == 320 and max(sizes)[0] == 608  # 416 / 1.4 .. 416 * 1.4, Darknet's + 1 step
    assert random_network_size(416, 416, rng, largest=True) == (608, 608)
    w, h = random_network_size(608, 320, np.random.default_rng(3), random_coef=1.2)
    assert w % 32 == 0 and h % 32 == 0 and 448 <= w <= 768 and 256 <= h <= 416


def test_augment_options_from_cfg(tmp_path):
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nwidth=320\nheight = 256\nchannels=3\nhue=.1\nsaturation=1.5\nexposure = 1.5\nmosaic=1\n"
                   "flip=0\n\n[convolutional]\nfilters=18\n\n[yolo]\nclasses=1\njitter=.1\n\n"
                   "[yolo]\nclasses=1\njitter=.3\nrandom=1\nmax=90\n")
    o = augment_options_from_cfg(str(cfg))
    assert (o["width"], o["height"], o["flip"], o["mosaic"], o["letter_box"]) == (320, 256, 0, 1, 0)
    assert (o["hue"], o["saturation"], o["exposure"]) == (0.1, 1.5, 1.5)
    assert (o["jitter"], o["random"], o["max_boxes"], o["classes"]) == (0.3, 1.0, 90, 1)  # the last head
    cfg.write_text("[net]\nwidth=32\nheight=32\nmosaic=1\nletter_box=1\n")
    with pytest.raises(DataFileError, match="letter_box"):
        augment_options_from_cfg(str(cfg))
    cfg.write_text("[net]\nwidth=3x2\n")
    with pytest.raises(DataFileError, match=rf"{cfg}:2: width"):
        augment_options_from_cfg(str(cfg))


def test_options_of_a_shipped_cfg(shared_cfg_dir):
    o = augment_options_from_cfg(str(shared_cfg_dir / "yolov4.cfg"))
    assert (o["width"], o["mosaic"], o["random"], o["jitter"], o["hue"]) == (608, 1, 1.0, 0.3, 0.1)


# ---- the loader -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return synth.generate(tmp_path_factory.mktemp("loader"), images=16, classes=3, size=(96, 80), seed=2,
                          valid_fraction=0)


def _loader_threads():
    return [t for t in threading.enumerate() if t.name.startswith("darknet_py-loader")]


def test_loader_shapes_and_determinism(shapes):
    opts = dict(A.DEFAULT_OPTIONS, width=64, height=48, jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5,
                mosaic=1)
    runs = []
    for workers in (1, 2, 0):
        with BatchLoader.from_files(shapes, None, 3, options=opts, seed=7, workers=workers) as loader:
            runs.append([loader.next_batch() for _ in range(4)])
    for images, truths in runs[0]:
        assert images.shape == (3, 3, 48, 64) and images.dtype == np.float32
        assert 0 <= images.min() and images.max() <= 1
        assert len(truths) == 3 and all(t.dtype == np.float32 and t.shape[1:] == (5,) for t in truths)
    assert sum(len(t) for _, ts in runs[0] for t in ts) > 0
    for other in runs[1:]:  # the same batches, whatever the number of workers
        for (i0, t0), (i1, t1) in zip(runs[0], other):
            assert np.array_equal(i0, i1) and all(np.array_equal(a, b) for a, b in zip(t0, t1))
    with BatchLoader.from_files(shapes, None, 3, options=opts, seed=8, workers=1) as loader:
        assert not np.array_equal(loader.next_batch()[0], runs[0][0][0])
    with BatchLoader.from_files(shapes, None, 3, options=opts, seed=7, workers=2, start=2) as loader:
        assert np.array_equal(loader.next_batch()[0], runs[0][2][0])  # a resumed run: the same batches


def test_loader_multiscale_and_close(shapes):
    before = len(_loader_threads())
    loader = BatchLoader.from_files(shapes, None, 2, options=dict(PLAIN, width=64, height=64), workers=2)
    assert len(_loader_threads()) == before + 2
    assert loader.next_batch()[0].shape == (2, 3, 64, 64)
    loader.set_size(96, 32)
    assert loader.size == (96, 32)
    assert next(loader)[0].shape == (2, 3, 32, 96)
    loader.close()
    loader.close()  # idempotent
    assert loader.closed and len(_loader_threads()) == before
    with pytest.raises(RuntimeError, match="closed"):
        loader.next_batch()
    # a loader dropped without close() stops its threads too
    BatchLoader.from_files(shapes, None, 2, options=PLAIN, workers=2).next_batch()
    gc.collect()
    deadline = time.monotonic() + 5
    while len(_loader_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_loader_threads()) == before


def test_loader_prepares_batches_while_the_caller_computes(shapes):
    """While the caller computes, the workers prepare the next batches: next_batch() then waits a
    small part of what making a batch costs (measured here in the calling thread)."""
    opts = dict(PLAIN, width=320, height=320, hue=0.1, saturation=1.5, exposure=1.5, jitter=0.2)
    with BatchLoader.from_files(shapes, None, 16, options=opts, workers=0) as loader:
        loader.next_batch()
        t0 = time.perf_counter()
        for _ in range(2):
            loader.next_batch()
        cost = (time.perf_counter() - t0) / 2
    with BatchLoader.from_files(shapes, None, 16, options=opts, workers=2, prefetch=2) as loader:
        loader.next_batch()
        waits = []
        for _ in range(3):
            time.sleep(max(0.2, 3 * cost))  # the "training step"
            loader.next_batch()
            waits.append(loader.last_wait)
    assert max(waits) < 0.25 * cost + 0.005, (waits, cost)


def test_no_hang_at_interpreter_exit(shapes):
    code = textwrap.dedent(f"""
        from darknet_py.data import BatchLoader
        loader = BatchLoader.from_files({shapes!r}, None, 2, workers=2, prefetch=4)
        loader.next_batch()
        print("ok")
    """)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert time.monotonic() - t0 < 60
