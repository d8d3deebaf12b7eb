"""Core ML export (darknet_py.export.coreml_model): the saved .mlpackage is read back with coremltools and
checked against the network: a Pipeline of the ML Program (macOS 13) and Core ML's NMS; the input an RGB
ImageType of the network's size scaled by 1/255; the outputs confidence and coordinates; the number of
each operation against the layers; every convolution's weights and bias, read back from the package,
equal to the network's batchnorm-folded ones (computed here again, in float32; within float16 rounding
for --half); the class names in the metadata and in the NMS model.

No Core ML runtime exists off macOS and coremltools has no interpreter for ML Programs, so on Linux the
model's numbers are not run; on macOS test_predict_matches_cpu runs tools/coreml_predict_check.py
(Core ML against our CPU detections).
"""
from __future__ import annotations

import collections
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

ct = pytest.importorskip("coremltools", reason="coremltools is not installed (pip install '.[test]' or '.[coreml]')")
import darknet_py  # noqa: E402
from darknet_py.model_files.demo import demo_files  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHIPPED = ["yolov3-tiny", "yolov4-tiny", "yolov4-tiny-3l", "yolov7-tiny", "yolov4"]


def _read_back(path: Path):
    """(spec, MIL program of the network model) of a saved package, without loading it into Core ML."""
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    net_spec = spec.pipeline.models[0]
    program = milproto_load(net_spec, specification_version=net_spec.specificationVersion,
                            file_weights_dir=model.weights_dir)
    return model, spec, program


def _folded(net: darknet_py.Network, i: int):
    """Layer i's convolution weights and bias with batchnorm folded in, Darknet's formula, float32."""
    filters = net.layers[i]["output"][0]
    p = {k: np.asarray(v, np.float32).reshape(filters, -1) for k, v in net.params(i).items()}
    p.update({k: v.reshape(filters) for k, v in p.items() if k != "weights"})
    w = p["weights"]
    if "scales" not in p:
        return w, p["biases"]
    scale = p["scales"] / np.sqrt(p["rolling_variance"] + np.float32(1e-5))
    return w * scale[:, None], p["biases"] - p["rolling_mean"] * scale


def check_package(net: darknet_py.Network, path: Path, precision: str, labels):
    model, spec, program = _read_back(path)
    assert spec.WhichOneof("Type") == "pipeline"
    assert [m.WhichOneof("Type") for m in spec.pipeline.models] == ["mlProgram", "nonMaximumSuppression"]
    assert spec.specificationVersion >= 7  # macOS 13
    w, h = net.input_size
    image = spec.description.input[0]
    assert image.name == "image"
    assert (image.type.imageType.width, image.type.imageType.height) == (w, h)
    assert image.type.imageType.colorSpace == ct.proto.FeatureTypes_pb2.ImageFeatureType.RGB
    assert [f.name for f in spec.description.input[1:]] == ["iouThreshold", "confidenceThreshold"]
    assert all(f.type.isOptional for f in spec.description.input[1:])
    assert [o.name for o in spec.description.output] == ["confidence", "coordinates"]

    ops = list(program.functions["main"].operations)
    scale = ops[0] if ops[0].op_type == "mul" else next(o for o in ops if o.op_type == "mul" and o.x.name == "image")
    assert scale.x.name == "image" and abs(float(scale.y.val) - 1 / 255) < 1e-9
    counts = collections.Counter(o.op_type for o in ops)
    layers = net.layers
    types = collections.Counter(l["type"] for l in layers)
    acts = collections.Counter(net._net.cfg_sections()[i + 1]["options"].get("activation", "logistic").strip()
                               for i, l in enumerate(layers) if l["type"] == "conv")
    heads = [net._net.yolo_info(i) for i in net._net.yolo_layers]
    assert counts["conv"] == types["conv"]
    assert counts.get("max_pool", 0) == types.get("max", 0)
    assert counts.get("upsample_nearest_neighbor", 0) == types.get("upsample", 0)
    assert counts.get("leaky_relu", 0) == acts.get("leaky", 0)
    assert counts.get("softplus", 0) == acts.get("mish", 0)
    assert counts.get("silu", 0) == acts.get("swish", 0)
    assert counts.get("sigmoid", 0) == acts.get("logistic", 0) + 2 * sum(not y["new_coords"] for y in heads)
    assert counts.get("relu", 0) == acts.get("relu", 0)
    assert counts.get("tanh", 0) == acts.get("tanh", 0) + acts.get("mish", 0)
    assert counts.get("exp", 0) == sum(not y["new_coords"] for y in heads)
    # each [shortcut] one add, and one more in each head whose scale_x_y is not 1
    assert counts.get("add", 0) == types.get("shortcut", 0) + len(heads) + sum(y["scale_x_y"] != 1 for y in heads)

    convs = [o for o in ops if o.op_type == "conv"]
    conv_layers = [i for i, l in enumerate(layers) if l["type"] == "conv"]
    dtype = np.float16 if precision == "fp16" else np.float32
    for op, i in zip(convs, conv_layers):
        assert op.name.startswith(f"l{i}_conv")
        ref_w, ref_b = _folded(net, i)
        got_w, got_b = op.weight.val, op.bias.val
        assert got_w.dtype == dtype and got_b.dtype == dtype, (i, got_w.dtype, got_b.dtype)
        assert got_w.shape[0] == ref_w.shape[0] and got_w.size == ref_w.size, (i, got_w.shape)
        if precision == "fp16":  # the nearest float16: within half a unit in the last place
            np.testing.assert_allclose(got_w.reshape(ref_w.shape).astype(np.float32), ref_w, rtol=2 ** -11, atol=2 ** -25)
            np.testing.assert_allclose(got_b.astype(np.float32), ref_b, rtol=2 ** -11, atol=2 ** -25)
        else:
            np.testing.assert_allclose(got_w.reshape(ref_w.shape), ref_w, rtol=1e-6, atol=1e-12)
            np.testing.assert_allclose(got_b, ref_b, rtol=1e-6, atol=1e-12)

    raw = {o.name: list(o.type.multiArrayType.shape) for o in spec.pipeline.models[0].description.output}
    candidates = sum(len(y["mask"]) * layers[i]["output"][1] * layers[i]["output"][2]
                     for i, y in zip(net._net.yolo_layers, heads))
    assert raw == {"raw_confidence": [candidates, len(labels)], "raw_coordinates": [candidates, 4]}
    nms = spec.pipeline.models[1].nonMaximumSuppression
    assert list(nms.stringClassLabels.vector) == list(labels)
    assert nms.pickTop.perClass
    assert model.user_defined_metadata["classes"] == ",".join(labels)
    assert model.user_defined_metadata["com.apple.coreml.model.preview.type"] == "objectDetector"
    assert model.user_defined_metadata["darknet_py.precision"] == precision
    return spec


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_demo_model(precision, tmp_path):
    files = demo_files()
    net = darknet_py.Network(files["cfg"], files["weights"], files["names"], device="cpu")
    path = tmp_path / "demo.mlpackage"
    summary = net.export_coreml(path, precision=precision)
    assert summary.path == str(path) and summary.classes == 4 and summary.input == ("image", [3, 256, 256])
    spec = check_package(net, path, precision, ["circle", "square", "triangle", "star"])
    nms = spec.pipeline.models[1].nonMaximumSuppression
    assert abs(nms.iouThreshold - 0.45) < 1e-9 and abs(nms.confidenceThreshold - 0.25) < 1e-9


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_official_yolov3_tiny(yolov3_tiny, precision, tmp_path):
    names = [n.strip() for n in Path(yolov3_tiny["names"]).read_text().splitlines() if n.strip()]
    net = darknet_py.Network(str(yolov3_tiny["cfg"]), str(yolov3_tiny["weights"]), str(yolov3_tiny["names"]),
                             device="cpu")
    path = tmp_path / "yolov3-tiny.mlpackage"
    net.export_coreml(path, precision=precision, thresh=0.3, nms=0.5)
    spec = check_package(net, path, precision, names)
    assert spec.pipeline.models[1].nonMaximumSuppression.confidenceThreshold == pytest.approx(0.3)


def _randomize_batchnorm(net: darknet_py.Network, seed: int) -> None:
    """Random biases and batchnorm statistics (in place), so that folding is not the identity."""
    rng = np.random.default_rng(seed)
    for i, info in enumerate(net.layers):
        p = net.params(i)
        for key, (lo, hi) in (("biases", (-0.2, 0.2)), ("scales", (0.5, 1.5)), ("rolling_mean", (-0.2, 0.2)),
                              ("rolling_variance", (0.5, 2.0))):
            if key in p:
                p[key][...] = rng.uniform(lo, hi, p[key].shape).astype(np.float32)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_cfgs(name, tmp_path):
    """Every shipped cfg (every layer type and activation they use) at a small size."""
    from darknet_py.model_files.cfgfiles import resolve_cfg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = darknet_py.Network(resolve_cfg(f"{name}.cfg"), device="cpu")
    _randomize_batchnorm(net, seed=len(name))
    path = tmp_path / f"{name}.mlpackage"
    net.export_coreml(path, size=(128, 96), precision="fp16" if name == "yolov4" else "fp32")
    assert net.input_size == (int(net._net.width), int(net._net.height)) != (128, 96)  # restored
    net._net.resize_input(128, 96)  # the network as exported, for the checks
    check_package(net, path, "fp16" if name == "yolov4" else "fp32", [str(k) for k in range(80)])


# the activations and options the shipped cfgs lack: swish, relu, tanh, a strided 1x1 convolution that
# never reads the last row and column (cropped), a max pool that does the same, a scaled upsample
OPTIONS = """
[net]
width=34
height=34
channels=3

[convolutional]
filters=8
size=3
pad=1
batch_normalize=1
activation=swish

[convolutional]
filters=8
size=1
stride=2
batch_normalize=1
activation=relu

[maxpool]
size=2
stride=2
padding=0

[convolutional]
filters=8
size=3
pad=1
activation=tanh

[upsample]
stride=2
scale=0.5

[route]
layers=-1
groups=2
group_id=1

[route]
layers=-1,-2

[convolutional]
filters=12
size=1
activation=linear

[yolo]
mask=0,1
anchors=4,4, 8,8
classes=1
num=2
"""


def test_layer_options(tmp_path):
    net = _cfg_network(tmp_path, OPTIONS, "options")
    _randomize_batchnorm(net, seed=7)
    assert [l["output"] for l in net.layers][:3] == [(8, 34, 34), (8, 17, 17), (8, 8, 8)]
    path = tmp_path / "options.mlpackage"
    net.export_coreml(path)
    _, _, program = _read_back(path)
    crops = [o for o in program.functions["main"].operations if o.op_type == "slice_by_index" and "crop" in o.name]
    assert len(crops) == 2  # the strided convolution and the max pool
    check_package(net, path, "fp32", ["0"])


UNSUPPORTED = """
[net]
width=32
height=32
channels=3

[convolutional]
filters=8
size=3
pad=1
activation=leaky

[reorg]
stride=2
"""


def _cfg_network(tmp_path: Path, text: str, name: str) -> darknet_py.Network:
    cfg = tmp_path / f"{name}.cfg"
    cfg.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return darknet_py.Network(str(cfg), device="cpu")


def test_unsupported_layer_names_it(tmp_path):
    head = "\n[convolutional]\nfilters=6\nsize=1\nactivation=linear\n\n[yolo]\nmask=0\nanchors=1,1\nclasses=1\nnum=1\n"
    net = _cfg_network(tmp_path, UNSUPPORTED + head, "reorg")
    with pytest.raises(darknet_py.DarknetError, match=r"reorg.cfg:13: layer 1 \[reorg\] cannot be exported to "
                                                      r"Core ML: no Core ML translation for the engine's 'reorg'"):
        net.export_coreml(tmp_path / "model.mlpackage")
    assert not (tmp_path / "model.mlpackage").exists()


def test_unsupported_activation_names_it(tmp_path):
    text = UNSUPPORTED.replace("activation=leaky", "activation=selu").replace("[reorg]\nstride=2\n", "")
    text += "\n[convolutional]\nfilters=6\nsize=1\nactivation=linear\n\n[yolo]\nmask=0\nanchors=1,1\nclasses=1\nnum=1\n"
    net = _cfg_network(tmp_path, text, "selu")
    with pytest.raises(darknet_py.DarknetError, match=r"selu.cfg:7: layer 0 \[convolutional\] cannot be exported to "
                                                      r"Core ML: activation=selu"):
        net.export_coreml(tmp_path / "model.mlpackage")


def test_classifier_is_refused(tmp_path):
    net = _cfg_network(tmp_path, UNSUPPORTED.replace("[reorg]\nstride=2\n", ""), "classifier")
    with pytest.raises(darknet_py.DarknetError, match=r"needs \[yolo\] layers"):
        net.export_coreml(tmp_path / "model.mlpackage")


def test_missing_coremltools_says_how_to_install(tmp_path, monkeypatch, capsys):
    from darknet_py.commands.cli import main

    monkeypatch.setitem(sys.modules, "coremltools", None)  # import coremltools now raises ImportError
    files = demo_files()
    net = darknet_py.Network(files["cfg"], files["weights"], device="cpu")
    with pytest.raises(darknet_py.DarknetError, match=r'pip install "darknet-engine\[coreml\]"'):
        net.export_coreml(tmp_path / "model.mlpackage")
    assert main(["export", files["cfg"], files["weights"], "-o", str(tmp_path / "m.mlpackage")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "darknet-engine[coreml]"' in err[0]
    assert not (tmp_path / "m.mlpackage").exists()


def test_cli_export(tmp_path, capsys):
    from darknet_py.commands.cli import main

    files = demo_files()
    out = tmp_path / "demo.mlpackage"
    assert main(["export", files["cfg"], files["weights"], "-o", str(out), "--size", "128x96", "--half",
                 "--names", files["names"], "--thresh", "0.4"]) == 0
    line = capsys.readouterr().out
    assert f"to {out}" in line and "image 128x96 RGB" in line and "fp16" in line and "confidence Kx4" in line
    model, spec, _ = _read_back(out)
    assert (spec.description.input[0].type.imageType.width, spec.description.input[0].type.imageType.height) == (128, 96)
    assert model.user_defined_metadata["classes"] == "circle,square,triangle,star"
    assert spec.pipeline.models[1].nonMaximumSuppression.confidenceThreshold == pytest.approx(0.4)
    # again over the existing package: replaced
    assert main(["export", files["cfg"], files["weights"], "-o", str(out)]) == 0
    assert "class numbers" in capsys.readouterr().err  # no names for 4 classes
    assert ct.models.MLModel(str(out), skip_model_load=True).user_defined_metadata["classes"] == "0,1,2,3"
    with pytest.raises(SystemExit):  # usage error: one image per prediction
        main(["export", files["cfg"], files["weights"], "-o", str(out), "--dynamic-batch"])
    with pytest.raises(SystemExit):  # usage error: ONNX has no names
        main(["export", files["cfg"], files["weights"], "-o", str(tmp_path / "x.onnx"), "--names", files["names"]])


@pytest.mark.skipif(sys.platform != "darwin", reason="Core ML runs models only on macOS (MLModel.predict); "
                                                     "coremltools has no ML Program interpreter elsewhere")
def test_predict_matches_cpu(tmp_path):
    files = demo_files()
    net = darknet_py.Network(files["cfg"], files["weights"], files["names"], device="cpu")
    path = tmp_path / "demo.mlpackage"
    net.export_coreml(path)
    r = subprocess.run([sys.executable, str(REPO / "tools" / "coreml_predict_check.py"), str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
