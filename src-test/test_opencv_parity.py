"""Whole-network parity with OpenCV DNN 4.x (cv2.dnn.readNetFromDarknet), an independent
implementation of Darknet inference that we did not write.

For each reference cfg OpenCV can run: build our Network on a copy of the cfg with a small
non-square input (so a W/H mix-up cannot hide), fill every parameter with seeded random values
(helpers_darknet.randomize_params explains the choice), write them with our save_weights, load
that file into OpenCV, feed both the same random image and compare every [yolo] output (or the
classifier's final output).

Error measure: max|ours - theirs| / max|theirs| ("relative error"), computed separately for each
column group of the Region layout (box centre, box size, objectness, class scores) so that the
large w/h values cannot hide an error in the probabilities. Tolerance 1e-4: float32 round-off
through 100-200 layers is ~1e-6 here; the batchnorm eps difference (OpenCV 1e-6, Darknet 1e-5)
is ~1e-7 with rolling_variance >= 5.

OpenCV's [yolo] is its Region layer: rows (y*W + x)*anchors + a, columns [cx, cy, w, h, obj,
obj*cls...], and class columns below its `thresh` (default 0.2) are zeroed. The copy handed to
OpenCV gets thresh=0 and nms_threshold=0 in each [yolo] section so the class columns compare
everywhere and no NMS runs inside OpenCV.

Not here (see test_layers_vs_reference.py): yolov4-sam-mish-csp-reorg-bfm ([reorg3d] is unknown
to OpenCV) and the full resnet101 (its downsampling [shortcut]s add a 2x larger map by flat index,
as Darknet's release build does; OpenCV's Eltwise refuses the shape mismatch). The resnet101 part
before the first such shortcut, with its channel-mismatch shortcuts, IS compared here.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
import darknet_py  # noqa: E402

from helpers_darknet import (calibrate_heads, randomize_params, rel_err, rewrite_cfg,  # noqa: E402
                             truncate_cfg, write_cfg, yolo_to_opencv)

TOL = 1e-4
YOLO_SIZE = (160, 128)        # width, height: the smallest non-square multiple of stride 32 above 128
CLASSIFIER_SIZE = (128, 96)

# cfg name -> (width, height, number of layers to keep or None for all)
OPENCV_CFGS = {
    "yolov3-tiny": (*YOLO_SIZE, None),
    "yolov3-tiny_3l": (*YOLO_SIZE, None),
    "yolov3": (*YOLO_SIZE, None),
    "yolov3-spp": (*YOLO_SIZE, None),
    "yolov4-tiny": (*YOLO_SIZE, None),
    "yolov4-tiny-3l": (*YOLO_SIZE, None),
    "yolov4": (*YOLO_SIZE, None),
    "yolov4-csp": (*YOLO_SIZE, None),
    "yolov4-csp-swish": (*YOLO_SIZE, None),
    "yolov4-p5": (*YOLO_SIZE, None),
    "yolov4x-mish": (*YOLO_SIZE, None),
    "yolov7-tiny": (*YOLO_SIZE, None),
    "yolov7": (*YOLO_SIZE, None),
    "yolov7x": (*YOLO_SIZE, None),
    "enet-coco": (*YOLO_SIZE, None),
    "csdarknet53-omega": (*CLASSIFIER_SIZE, None),
    "darknet53": (*CLASSIFIER_SIZE, None),
    "efficientnet_b0": (*CLASSIFIER_SIZE, None),
    # layers 0..16: stem, maxpool and the first four residual blocks (shortcuts adding 64 channels
    # to 256 and 256 to 256); layer 17 is the first shortcut with a spatial mismatch.
    "resnet101": (*CLASSIFIER_SIZE, 17),
}
# Reference cfgs checked elsewhere, with the reason.
NOT_OPENCV = {
    "yolov4-sam-mish-csp-reorg-bfm": "[reorg3d] is unknown to OpenCV; test_layers_vs_reference.py runs it",
}

# Filled by the tests, printed at the end of the session (pytest -s) as the per-cfg table.
RESULTS: dict = {}


def test_every_reference_cfg_is_covered(shared_cfg_dir):
    names = {p.stem for p in shared_cfg_dir.glob("*.cfg")}
    uncovered = names - set(OPENCV_CFGS) - set(NOT_OPENCV)
    assert not uncovered, f"reference cfgs with no parity test: {sorted(uncovered)}"


def _build_pair(shared_cfg_dir, tmp_path, name, width, height, keep, x):
    """Our Network with seeded random parameters, and the OpenCV net loaded from the file we saved."""
    text = (shared_cfg_dir / f"{name}.cfg").read_text()
    if keep is not None:
        text = truncate_cfg(text, keep)
    net_opts = dict(width=width, height=height, batch=1, subdivisions=1)
    ours_cfg = write_cfg(tmp_path / "ours.cfg", rewrite_cfg(text, net=net_opts))
    cv_cfg = write_cfg(tmp_path / "opencv.cfg",
                       rewrite_cfg(text, net=net_opts, per_section={"yolo": dict(thresh=0, nms_threshold=0)}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unused-option warnings
        net = darknet_py.Network(ours_cfg)
    randomize_params(net, seed=sum(map(ord, name)))
    calibrate_heads(net, x)
    weights = tmp_path / "random.weights"
    net.save_weights(weights)
    cv_net = cv2.dnn.readNetFromDarknet(str(cv_cfg), str(weights))
    weights.unlink()  # up to 400 MB; do not keep it around for the rest of the session
    return net, cv_net


@pytest.mark.parametrize("name", sorted(OPENCV_CFGS))
def test_matches_opencv(name, shared_cfg_dir, tmp_path):
    width, height, keep = OPENCV_CFGS[name]
    x = np.random.default_rng(7).uniform(0, 1, (1, 3, height, width)).astype(np.float32)
    net, cv_net = _build_pair(shared_cfg_dir, tmp_path, name, width, height, keep, x)
    assert net.input_size == (width, height)

    cv_net.setInput(x)
    cv_names = list(cv_net.getUnconnectedOutLayersNames())
    theirs = cv_net.forward(cv_names)
    ours = net.forward(x)

    errors = {}
    yolo_layers = net.yolo_layers
    if yolo_layers:
        # OpenCV names its yolo outputs yolo_<layer index>: match by index, not by order.
        by_index = {int(n.rsplit("_", 1)[1]): t for n, t in zip(cv_names, theirs)}
        assert sorted(by_index) == sorted(yolo_layers), (cv_names, yolo_layers)
        for layer, out in zip(yolo_layers, ours):
            info = net._net.yolo_info(layer)
            mine = yolo_to_opencv(out[0], info, width, height)
            ref = by_index[layer]
            assert mine.shape == ref.shape, f"layer {layer}: {mine.shape} vs OpenCV {ref.shape}"
            assert np.all(np.isfinite(mine))
            # the comparison must not be trivial: objectness spread, classes not all zero
            assert ref[:, 4].std() > 1e-3 and ref[:, 5:].max() > 1e-3
            for group, cols in (("xy", slice(0, 2)), ("wh", slice(2, 4)), ("obj", slice(4, 5)),
                                ("cls", slice(5, None))):
                errors[f"yolo{layer}.{group}"] = rel_err(mine[:, cols], ref[:, cols])
    else:
        assert len(ours) == 1 and len(theirs) == 1
        mine, ref = ours[0], theirs[0]
        assert mine.size == ref.size, f"{mine.shape} vs OpenCV {ref.shape}"
        mine = mine.reshape(ref.shape)
        assert np.all(np.isfinite(mine)) and ref.std() > 0
        errors["output"] = rel_err(mine, ref)

    worst = max(errors.values())
    RESULTS[name] = (width, height, worst)
    bad = {k: v for k, v in errors.items() if not v <= TOL}
    assert not bad, f"{name} at {width}x{height}: relative error above {TOL}: {bad}"


def teardown_module(module):
    if RESULTS:
        print("\nOpenCV parity, max relative error per cfg:")
        for name, (w, h, err) in sorted(RESULTS.items()):
            print(f"  {name:32s} {w}x{h}  {err:.1e}")
