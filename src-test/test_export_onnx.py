"""ONNX export (darknet_py.export.onnx_model): ONNX Runtime runs the exported graph and must give what
Network.forward gives, within 1e-4 of each output's scale (helpers_darknet.rel_err), on every reference
cfg of ../shared/cfg (random weights and batchnorm statistics, so the folding is exercised), on small
cfgs for the layer options those lack, and on real weights; the postprocessed model's detections must
equal Network.detect's. onnx's checker must accept every graph.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (pip install '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install '.[test]')")
import darknet_py  # noqa: E402
from darknet_py.model_files.cfgfiles import cfg_with_size  # noqa: E402

from helpers_darknet import rel_err  # noqa: E402

TOL = 1e-4
SMALL = 64  # the export tests' input size: every reference cfg builds at 64x64 (128 where noted)
SIZE_FOR = {}  # cfg name -> (w, h) where 64x64 is too small


def _session(model_path) -> "ort.InferenceSession":
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    return ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])


_POOL = np.random.default_rng(12345).random(1_000_003, dtype=np.float32)  # a prime length: slices differ


def _randomize(net: darknet_py.Network, seed: int) -> None:
    """Random weights as Darknet initialises them (uniform, He-scaled by the fan-in), with random
    biases, batchnorm statistics and shortcut weights, so that folding and weighting are not the
    identity. In place (on the CPU params() are views of the engine's memory). The values are slices
    of one random pool at random offsets: drawing hundreds of millions of numbers would cost more than
    the rest of the test."""
    rng = np.random.default_rng(seed)

    def uniform(a, lo, hi):
        flat = a.reshape(-1)
        start, done = int(rng.integers(len(_POOL))), 0
        while done < flat.size:
            part = _POOL[start:start + flat.size - done]
            flat[done:done + part.size] = part
            done, start = done + part.size, 0
        flat *= np.float32(hi - lo)
        flat += np.float32(lo)

    for i, info in enumerate(net.layers):
        p = net.params(i)
        if "weights" in p and info["type"] in ("conv", "connected"):
            w = p["weights"]
            uniform(w, -1, 1)
            w *= np.float32(np.sqrt(2.0 / (w.size // info["output"][0])))
        elif "weights" in p:  # weighted shortcut
            uniform(p["weights"], -1, 1.5)
        if "biases" in p:
            uniform(p["biases"], -0.2, 0.2)
        if "rolling_mean" in p:
            uniform(p["scales"], 0.5, 1.5)
            uniform(p["rolling_mean"], -0.2, 0.2)
            uniform(p["rolling_variance"], 0.5, 2.0)


def _small_network(cfg: Path, size) -> darknet_py.Network:
    """The cfg at another input size (a copy with [net] width/height replaced), on the CPU."""
    path = cfg_with_size(str(cfg), *size)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unused training options: not this test's business
            return darknet_py.Network(path, device="cpu")
    finally:
        Path(path).unlink()


def _compare(net: darknet_py.Network, model_path: Path, batches=(1, 2), seed: int = 0) -> float:
    """Runs ONNX Runtime and Network.forward on the same random blobs; returns the largest rel_err."""
    sess = _session(model_path)
    names = [o.name for o in sess.get_outputs()]
    w, h = net.input_size
    rng = np.random.default_rng(seed)
    worst = 0.0
    for n in batches:
        blob = rng.uniform(0, 1, (n, net.channels, h, w)).astype(np.float32)
        ours = net.forward(blob)
        theirs = sess.run(names, {"input": blob})
        assert len(ours) == len(theirs)
        for name, a, b in zip(names, theirs, ours):
            assert a.shape == b.shape, (name, a.shape, b.shape)
            err = rel_err(a, b)
            assert err <= TOL, f"{name} at batch {n}: rel_err {err:.3g} > {TOL}"
            worst = max(worst, err)
    return worst


# ---- every reference cfg ------------------------------------------------------------------------
def _reference_cfgs():
    d = Path(__file__).resolve().parents[1].parent / "shared" / "cfg"
    return sorted(p.name for p in d.glob("*.cfg")) if d.is_dir() else ["(../shared/cfg absent)"]


@pytest.mark.parametrize("name", _reference_cfgs())
def test_reference_cfg_exports_and_matches(name, shared_cfg_dir, tmp_path):
    cfg = shared_cfg_dir / name
    if not cfg.is_file():
        pytest.skip(f"{cfg} not found")
    size = SIZE_FOR.get(name, (SMALL, SMALL))
    net = _small_network(cfg, size)
    _randomize(net, seed=len(name))
    model = tmp_path / "model.onnx"
    summary = net.export_onnx(model, dynamic_batch=True)  # runs onnx's checker (full_check) on the file
    assert summary.input == ("input", ["batch", net.channels, size[1], size[0]])
    _compare(net, model)


# ---- layer options the reference cfgs lack --------------------------------------------------------
CONV_VARIANTS = """
[net]
width=32
height=32
channels=3

[convolutional]
filters=8
size=3
pad=1
batch_normalize=1
activation=relu6

[convolutional]
filters=8
size=3
stride_x=2
stride_y=1
padding=2
activation=tanh

[convolutional]
filters=8
size=3
dilation=2
pad=1
groups=2
batch_normalize=1
activation=hard_mish

[convolutional]
filters=8
size=1
activation=elu

[convolutional]
filters=8
size=3
pad=1
groups=8
activation=selu

[convolutional]
filters=8
size=2
stride=2
activation=gelu

[convolutional]
filters=6
size=1
activation=normalize_channels

[convolutional]
filters=6
size=1
activation=normalize_channels_softmax

[convolutional]
filters=6
size=3
stride=3
activation=logistic
"""

OTHER_LAYERS = """
[net]
width=32
height=32
channels=3

# 0
[convolutional]
filters=8
size=3
pad=1
activation=leaky

[maxpool]
size=3
stride=2

[local_avgpool]
size=3
stride=2

# 3: 8 channels -> 3 (the last group is short)
[maxpool]
maxpool_depth=1
out_channels=3

[route]
layers=0

# 5: YOLOv2's reorg both ways, then reorg3d both ways
[reorg]
stride=2

[reorg]
stride=2
reverse=1

[reorg3d]
stride=2

[reorg3d]
stride=2
reverse=1

# 9: downsample by summing, then upsample with a scale
[upsample]
stride=-2
scale=0.5

[upsample]
stride=2
scale=1.5

[shortcut]
from=0
weights_type=per_feature
weights_normalization=relu
activation=swish

# 12
[shortcut]
from=4,0
weights_type=per_channel
weights_normalization=softmax

[convolutional]
filters=4
size=1
activation=linear

# 14: from-layers of other shapes add by flat index: cut when larger ...
[shortcut]
from=12

[maxpool]
size=2
stride=2

[shortcut]
from=13

# 17: ... zero-padded when smaller
[route]
layers=12

[shortcut]
from=16

[route]
layers=12,11
groups=2
group_id=1

# 20
[convolutional]
filters=8
size=1
activation=leaky

[avgpool]

[scale_channels]
from=20

[convolutional]
filters=1
size=1
activation=logistic

[scale_channels]
from=22
scale_wh=1
activation=leaky

# 25
[sam]
from=22

[dropout]
probability=0.3

[convolutional]
filters=4
size=1
activation=mish

[connected]
output=12
batch_normalize=1
activation=leaky

[softmax]
groups=3
temperature=2

[cost]
"""

# a max pool whose padding exceeds its window: ONNX's MaxPool cannot pad that much, an explicit Pad can
WIDE_MAXPOOL = """
[net]
width=16
height=16
channels=3

[convolutional]
filters=4
size=1
activation=linear

[maxpool]
size=2
stride=1
padding=6
"""


def _cfg_network(tmp_path: Path, text: str, name: str) -> darknet_py.Network:
    cfg = tmp_path / f"{name}.cfg"
    cfg.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return darknet_py.Network(str(cfg), device="cpu")


@pytest.mark.parametrize("name", ["CONV_VARIANTS", "OTHER_LAYERS", "WIDE_MAXPOOL"])
def test_layer_options_match(name, tmp_path):
    net = _cfg_network(tmp_path, globals()[name], name.lower())
    _randomize(net, seed=3)
    assert np.any(net.params(0)["weights"] != 0)  # the in-place randomisation reached the engine
    model = tmp_path / "model.onnx"
    net.export_onnx(model, dynamic_batch=True)
    onnx.checker.check_model(str(model), full_check=True)
    _compare(net, model)


@pytest.mark.parametrize("name", ["CONV_VARIANTS", "OTHER_LAYERS"])
def test_every_layer_matches(name, tmp_path):
    """Each layer's ONNX tensor against the engine's output of that layer: a layer whose result does not
    reach the network's output (a side branch, a route that restarts) is checked too."""
    from darknet_py.export.onnx_model import build_model

    net = _cfg_network(tmp_path, globals()[name], name.lower())
    _randomize(net, seed=4)
    model, _ = build_model(net._net, batch=None, every_layer=True)
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    w, h = net.input_size
    blob = np.random.default_rng(5).uniform(0, 1, (2, net.channels, h, w)).astype(np.float32)
    n = len(net.layers)
    theirs = sess.run([f"layer_{i}" for i in range(n)], {"input": blob})
    ours = net._net.forward(blob, list(range(n)))
    for i, (a, b) in enumerate(zip(theirs, ours)):
        assert a.shape == b.shape, (i, a.shape, b.shape)
        assert rel_err(a, b) <= TOL, f"layer {i} ({net.layers[i]['type']}): rel_err {rel_err(a, b):.3g}"


def test_fixed_batch_and_other_size(tmp_path):
    from darknet_py.model_files.demo import demo_files

    files = demo_files()
    net = darknet_py.Network(files["cfg"], files["weights"], device="cpu")
    model = tmp_path / "demo.onnx"
    summary = net.export_onnx(model, size=(96, 64), batch=2)
    assert net.input_size == (256, 256)  # restored after the export
    assert summary.input == ("input", [2, 3, 64, 96])
    sess = _session(model)
    assert sess.get_inputs()[0].shape == [2, 3, 64, 96]
    net._net.resize_input(96, 64)  # ours at that size, for the comparison
    _compare(net, model, batches=(2,))


def test_layer_onnx_cannot_express_names_it(tmp_path):
    text = WIDE_MAXPOOL.replace("[maxpool]", "[local_avgpool]")
    net = _cfg_network(tmp_path, text, "wide_avgpool")
    with pytest.raises(darknet_py.DarknetError, match=r"wide_avgpool.cfg:12: layer 1 \[local_avgpool\] cannot be "
                                                      r"exported to ONNX: padding=6 leaves windows"):
        net.export_onnx(tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_missing_onnx_package_says_how_to_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    net = _cfg_network(tmp_path, WIDE_MAXPOOL, "small")
    with pytest.raises(darknet_py.DarknetError, match=r'pip install "darknet-engine\[onnx\]"'):
        net.export_onnx(tmp_path / "model.onnx")


def test_postprocess_needs_yolo_layers(tmp_path):
    net = _cfg_network(tmp_path, WIDE_MAXPOOL, "classifier")
    with pytest.raises(darknet_py.DarknetError, match="--postprocess needs \\[yolo\\] layers"):
        net.export_onnx(tmp_path / "model.onnx", postprocess=True)


# ---- real weights, detections -------------------------------------------------------------------
def _onnx_detections(model_path: Path, blob: np.ndarray, sizes):
    """The postprocessed model's rows as (class, confidence, x, y, w, h) in pixels per image, sorted."""
    boxes, scores, classes, batch = _session(model_path).run(["boxes", "scores", "classes", "batch_index"],
                                                             {"input": blob})
    out = [[] for _ in sizes]
    for b, c, s, (x1, y1, x2, y2) in zip(batch, classes, scores, boxes):
        w, h = sizes[b]
        out[b].append((int(c), float(s), x1 * w, y1 * h, (x2 - x1) * w, (y2 - y1) * h))
    return [sorted(rows) for rows in out]


def _assert_same_detections(onnx_rows, ours):
    ours = sorted((d.class_id, d.confidence, *d.box) for d in ours)
    assert len(onnx_rows) == len(ours), (onnx_rows, ours)
    for a, b in zip(onnx_rows, ours):
        assert a[0] == b[0] and abs(a[1] - b[1]) <= 1e-4, (a, b)
        assert np.max(np.abs(np.subtract(a[2:], b[2:]))) <= 1e-2, (a, b)  # pixels


def test_demo_model_postprocess_equals_detect(tmp_path):
    import cv2
    from darknet_py.model_files.demo import demo_files

    files = demo_files()
    net = darknet_py.Network(files["cfg"], files["weights"], device="cpu")
    image = cv2.imread(files["image"])
    heads, detections = tmp_path / "heads.onnx", tmp_path / "detections.onnx"
    net.export_onnx(heads)
    # the demo cfg asks for greedynms (DIoU); ONNX's NMS is plain IoU: the export says so. On this image
    # no pair of boxes lies between the two criteria, so the detections are still equal.
    with pytest.warns(UserWarning, match="greedynms"):
        net.export_onnx(detections, postprocess=True, dynamic_batch=True)
    blob = net.preprocess(image)[None]
    _compare(net, heads, batches=(1,))
    ours = net.detect(image, postproc="cpu")
    assert len(ours) >= 3  # the sample has several shapes: the comparison is not empty
    [rows] = _onnx_detections(detections, blob, [(image.shape[1], image.shape[0])])
    _assert_same_detections(rows, ours)
    # nms=0 turns NMS off, as in detect: every (box, class) above the threshold stays
    no_nms = tmp_path / "no_nms.onnx"
    net.export_onnx(no_nms, postprocess=True, nms=0)
    all_ours = net.detect(image, nms=0, postproc="cpu")
    assert len(all_ours) > len(ours)
    [rows] = _onnx_detections(no_nms, blob, [(image.shape[1], image.shape[0])])
    _assert_same_detections(rows, all_ours)


def test_yolov3_tiny_real_weights_on_photos(yolov3_tiny, tmp_path):
    skdata = pytest.importorskip("skimage.data")
    net = darknet_py.Network(str(yolov3_tiny["cfg"]), str(yolov3_tiny["weights"]), device="cpu")
    images = [np.ascontiguousarray(skdata.astronaut()[:, :, ::-1]),
              np.ascontiguousarray(np.dstack([skdata.coins()] * 3))]  # coins: many overlapping boxes, NMS
    blob = np.stack([net.preprocess(im) for im in images])
    heads, detections = tmp_path / "heads.onnx", tmp_path / "detections.onnx"
    net.export_onnx(heads, batch=2)
    thresh = 0.1
    net.export_onnx(detections, postprocess=True, thresh=thresh, dynamic_batch=True)
    _compare_blob(net, heads, blob)
    sizes = [(im.shape[1], im.shape[0]) for im in images]
    rows = _onnx_detections(detections, blob, sizes)
    for im, r in zip(images, rows):
        ours = net.detect(im, thresh=thresh, postproc="cpu")
        assert ours, "yolov3-tiny finds something in these photos"
        _assert_same_detections(r, ours)


def _compare_blob(net, model_path, blob):
    sess = _session(model_path)
    for a, b in zip(sess.run(None, {"input": blob}), net.forward(blob)):
        assert rel_err(a, b) <= TOL


def test_cli_export(tmp_path, capsys):
    from darknet_py.commands.cli import main
    from darknet_py.model_files.demo import demo_files

    files = demo_files()
    out = tmp_path / "demo.onnx"
    assert main(["export", files["cfg"], files["weights"], "-o", str(out), "--size", "128x96", "--dynamic-batch"]) == 0
    line = capsys.readouterr().out
    assert f"to {out}" in line and "input batchx3x96x128" in line and "yolo_" in line
    assert _session(out).get_inputs()[0].shape == ["batch", 3, 96, 128]
    assert main(["export", files["cfg"], str(tmp_path / "missing.weights"), "-o", str(out)]) == 1
    assert "missing.weights" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # usage error: --batch and --dynamic-batch exclude each other
        main(["export", files["cfg"], files["weights"], "-o", str(out), "--batch", "2", "--dynamic-batch"])
