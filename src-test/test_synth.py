"""`darknet_py synth`: determinism, label correctness against the pixels, the files it writes,
and its command line. The pixel checks read the JPEGs back with OpenCV: a label is right only if
the shape's colour is really there, filling the box and touching its four sides."""
import os
import shutil
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

from darknet_py.data import synth
from darknet_py.commands.cli import main
from darknet_py.data import (label_path_for, read_data_file, read_image_list, read_labels, read_names_file,
                             replace_image_to_label)


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("shapes")
    data = synth.generate(d, images=40, classes=8, size=(160, 128), seed=5, valid_fraction=0.25)
    return Path(data)


def test_same_seed_same_bytes_whatever_the_threads(tmp_path):
    # relative paths: the lists and .data file would otherwise differ by the folder's name
    a = _tree(Path(synth.generate(tmp_path / "a", 12, 4, (96, 64), seed=3, workers=1, relative=True)).parent)
    b = _tree(Path(synth.generate(tmp_path / "b", 12, 4, (96, 64), seed=3, workers=3, relative=True)).parent)
    c = _tree(Path(synth.generate(tmp_path / "c", 12, 4, (96, 64), seed=4, workers=1, relative=True)).parent)
    assert a == b
    assert len([k for k in a if k.startswith("images/") and k.endswith(".jpg")]) == 12
    assert a["shapes.names"] == c["shapes.names"] and a["images/000000.jpg"] != c["images/000000.jpg"]


def test_files_and_lists(dataset):
    d = read_data_file(str(dataset))
    root = dataset.parent
    assert d.classes == 8
    assert read_names_file(d.names) == list(synth.SHAPES)
    train, valid = read_image_list(d.train), read_image_list(d.valid)
    assert len(train) == 30 and len(valid) == 10 and not set(train) & set(valid)
    assert sorted(train + valid) == sorted(str(p) for p in (root / "images").glob("*.jpg"))
    assert d.backup == str(root / "backup") and os.path.isdir(d.backup)
    for p in train + valid:  # Darknet's rule finds every label beside its image, and none is empty
        label = label_path_for(p)
        assert label == str(root / "images" / (Path(p).stem + ".txt")) == replace_image_to_label(p)
        assert os.path.getsize(label) > 0
    assert not (root / "labels").exists()
    assert all(os.path.isabs(p) for p in (root / "train.txt").read_text().split())
    assert not [p for p in root.rglob("*") if ".tmp" in p.name]  # every file was renamed into place


def test_labels_match_the_pixels(dataset):
    """Each label file is what render() drew; each box is tight around its shape's colour in the
    uncompressed image, and in the JPEG that colour fills a good part of the box."""
    root = dataset.parent
    counts = Counter()
    for i in range(40):
        img, shapes = synth.render(np.random.default_rng([5, i]), 160, 128, 8)
        name = f"{i:06d}"
        text = (root / "images" / f"{name}.txt").read_text()
        assert text == synth.label_text(shapes, 160, 128)
        boxes = read_labels(str(root / "images" / f"{name}.txt"), 8)
        assert len(boxes) == len(shapes) >= 1
        x, y, w, h = boxes[:, 1], boxes[:, 2], boxes[:, 3], boxes[:, 4]
        assert (x - w / 2 >= 0).all() and (x + w / 2 <= 1 + 1e-6).all()
        assert (y - h / 2 >= 0).all() and (y + h / 2 <= 1 + 1e-6).all() and (w > 0).all() and (h > 0).all()
        jpg = cv2.imread(str(root / "images" / f"{name}.jpg")).astype(int)
        assert jpg.shape == (128, 160, 3)
        raw = img.astype(int)
        for s in shapes:
            counts[s.cls] += 1
            x0, y0, x1, y1 = s.box
            near = np.abs(raw[y0:y1, x0:x1] - s.colour).max(axis=2) <= 32  # the noise is sigma 6
            assert near[0].any() and near[-1].any() and near[:, 0].any() and near[:, -1].any(), s
            assert s.visible >= 0.5 * s.area
            in_jpeg = np.abs(jpg[y0:y1, x0:x1] - s.colour).max(axis=2) <= 60
            assert in_jpeg.mean() >= 0.2, (name, s)
    assert set(counts) == set(range(8))
    assert min(counts.values()) >= 0.4 * sum(counts.values()) / 8, counts


def test_shapes_differ_and_turn():
    areas = {}
    for kind in synth.SHAPES:
        _, _, mask = synth._shape_mask(kind, 40, 0.3, 50, 50, 100, 100)
        areas[kind] = int(mask.sum())
        _, _, turned = synth._shape_mask(kind, 40, 1.1, 50, 50, 100, 100)
        if kind not in ("circle", "ring"):
            assert not np.array_equal(mask, turned), kind
    # analytic areas of the shapes of circumradius 40; the pixel count may differ by half a pixel
    # along the outline (fillPoly counts boundary pixels as inside, also on the ring's hole)
    expected = {"circle": np.pi * 1600, "square": 2 * 1600, "triangle": 3 * np.sqrt(3) / 4 * 1600,
                "hexagon": 3 * np.sqrt(3) / 2 * 1600, "ring": np.pi * 1600 * (1 - 0.55 ** 2),
                "diamond": 2 * 40 * 0.6 * 40}
    for kind, area in expected.items():
        outline = [p for p in synth.shape_outline(kind, 40, 0.3) if p is not None]
        perimeter = sum(np.linalg.norm(p - np.roll(p, 1, axis=0), axis=1).sum() for p in outline)
        assert abs(areas[kind] - area) <= 0.5 * perimeter, (kind, areas[kind], area, perimeter)


def test_cli_relative_dataset_survives_a_move(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["synth", str(out), "--images", "6", "--classes", "3", "--size", "64x48", "--seed", "2",
                 "--valid-fraction", "0.5", "--relative", "--labels-folder"]) == 0
    assert "data file:" in capsys.readouterr().out
    moved = tmp_path / "moved"
    shutil.move(str(out), str(moved))
    d = read_data_file(str(moved / "shapes.data"))
    paths = read_image_list(d.train) + read_image_list(d.valid)
    assert len(paths) == 6 and all(os.path.isfile(p) and str(moved) in p for p in paths)
    assert cv2.imread(paths[0]).shape == (48, 64, 3)
    assert (moved / "images" / "000000.txt").read_text() == (moved / "labels" / "000000.txt").read_text()


def test_cli_default_is_what_darknet_reads_from_any_folder(tmp_path, monkeypatch):
    """Darknet opens the .data file's paths and the lists' paths as written, relative to its working
    directory, and finds a label by swapping the extension: all must resolve from elsewhere."""
    assert main(["synth", str(tmp_path / "ds"), "--images", "4", "--classes", "2", "--size", "48x48"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    text = (tmp_path / "ds" / "shapes.data").read_text()
    values = dict(line.split(" = ") for line in text.splitlines() if " = " in line)
    for key in ("train", "valid", "names", "backup"):
        assert os.path.isabs(values[key]) and os.path.exists(values[key]), key
    for image in Path(values["train"]).read_text().split():
        assert os.path.isabs(image) and os.path.isfile(image)
        assert os.path.getsize(replace_image_to_label(image)) > 0


def test_valid_fraction_one_lists_every_image_for_validation(tmp_path):
    assert main(["synth", str(tmp_path), "--images", "3", "--classes", "1", "--size", "48x48",
                 "--valid-fraction", "1"]) == 0
    assert (tmp_path / "train.txt").read_text() == ""
    assert len((tmp_path / "valid.txt").read_text().split()) == 3
    assert f"valid = {tmp_path / 'valid.txt'}" in (tmp_path / "shapes.data").read_text()


@pytest.mark.parametrize("argv", [["--classes", "9"], ["--classes", "0"], ["--size", "16x16"], ["--images", "0"],
                                  ["--valid-fraction", "1.5"]])
def test_cli_rejects_bad_options(tmp_path, argv, capsys):
    base = {"--images": "2", "--classes": "2"}
    base.update(dict(zip(argv[::2], argv[1::2])))
    with pytest.raises(SystemExit) as e:
        main(["synth", str(tmp_path)] + [x for kv in base.items() for x in kv])
    assert e.value.code == 2
    assert argv[0] in capsys.readouterr().err
