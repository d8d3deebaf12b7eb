"""Tiled inference (tiling.py, `detect --tiles`): small shapes in a large image, tiled and not."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from darknet_py.data.synth_large import large_image
from darknet_py.evaluation.mot import box_iou
from darknet_py.model_files.demo import demo_network
from darknet_py.tiling import parse_tiles, tile_grid


def big_image(seed=0, size=(1536, 1152), r=(16, 26), extra=()):
    """A large synth image with small shapes on a jittered grid (and at `extra` centres); their boxes."""
    return large_image(seed, size, r, extra=extra)


def recall(dets, boxes):
    if not dets:
        return 0.0
    iou = box_iou(boxes, np.array([d.box for d in dets]))
    return float((iou.max(axis=1) >= 0.5).mean())


@pytest.fixture(scope="module")
def net():
    return demo_network("cpu")


def test_tiles_find_small_shapes_the_whole_image_misses(net):
    img, boxes, _ = big_image()
    plain = recall(net.detect(img), boxes)
    tiled = recall(net.detect_tiled(img, "auto"), boxes)
    print(f"\nrecall on {img.shape[1]}x{img.shape[0]} with {len(boxes)} small shapes: "
          f"untiled {plain:.2f}, tiled {tiled:.2f}")
    assert tiled >= 0.9 and plain <= 0.3


def test_a_shape_cut_by_a_tile_border_is_one_detection(net):
    # no overlap: the 4x6 grid's tiles are 256 px, their borders at multiples of 256; a shape sits on x = 512
    img, boxes, classes = big_image(seed=1, size=(1536, 1024), extra=[(512, 600)])
    grid = tile_grid(img.shape[1], img.shape[0], net.input_size, (4, 6), 0.0)
    assert any(x1 == 512 for _, _, x1, _ in grid) and all(x1 - x0 == 256 for x0, _, x1, _ in grid)
    target = boxes[-1:]
    assert target[0, 0] < 512 < target[0, 0] + target[0, 2]
    dets = [d for d in net.detect_tiled(img, (4, 6), overlap=0.0) if d.class_id == classes[-1]]
    iou = box_iou(target, np.array([d.box for d in dets]))[0]
    assert iou.max() >= 0.6  # found whole
    assert (iou > 0.05).sum() == 1  # and once


def test_grid_and_parse():
    assert parse_tiles("auto") == "auto" and parse_tiles("2x3") == (2, 3)
    with pytest.raises(ValueError):
        parse_tiles("2x")
    grid = tile_grid(1000, 500, (256, 256), "auto", 0.2)
    assert all(x1 - x0 == 256 and y1 - y0 == 256 for x0, y0, x1, y1 in grid)
    xs = sorted({x0 for x0, _, _, _ in grid})
    assert xs[0] == 0 and max(x1 for _, _, x1, _ in grid) == 1000
    assert all(b - a <= 256 * 0.8 + 1 for a, b in zip(xs, xs[1:]))  # at least 20 % shared
    assert tile_grid(200, 100, (256, 256), "auto") == [(0, 0, 200, 100)]


def test_cli_tiles(tmp_path):
    import json

    from darknet_py.commands.cli import main

    img, boxes, _ = big_image(seed=2)
    cv2.imwrite(str(tmp_path / "big.png"), img)
    js = tmp_path / "d.json"
    assert main(["detect", str(tmp_path / "big.png"), "--tiles", "auto", "--tile-overlap", "0.25",
                 "--json", str(js), "--out", str(tmp_path / "out")]) == 0
    dets = json.loads(js.read_text())["results"][0]["detections"]
    assert len(dets) >= 0.85 * len(boxes)
