"""Core ML export of a darknet_py Network (`Network.export_coreml`, `darknet_py export ... -o X.mlpackage`).

The .mlpackage is a Pipeline of two models, the way Core ML's object detectors are built (see
coreml_pipeline): the network as an ML Program (mlprogram, minimum deployment target macOS 13) ending
in the yolo decode, then Core ML's NonMaximumSuppression. Input `image`: an RGB image of the network's
size (ImageType, scale 1/255: the blob Network.forward takes), resized without letterboxing as
`darknet_py detect` does by default (letterboxing is left to the caller, e.g. Vision's
imageCropAndScaleOption). Outputs `confidence` (K x classes) and `coordinates` (K x 4: x, y centre,
width, height relative to the image), which Vision turns into VNRecognizedObjectObservations with the
class labels. precision "fp16" (`--half`): weights and activations in float16, which the Neural Engine
runs; fp32 models run on the GPU or CPU.

Why the program is built here, layer by layer with coremltools' MIL builder (coreml_layers), and not
converted: coremltools converts only from PyTorch and TensorFlow (its ONNX converter is gone since
coremltools 6), so a conversion would make PyTorch a dependency and add a model translation of its own
between our engine and the file. The MIL builder needs only coremltools, reads the same layer
descriptions, parameters and folding as the ONNX exporter (layer_common), and gives one MIL operation
sequence per Darknet layer that a test can check against the network.

What can be checked without a Mac: coremltools runs a model only through the Core ML framework
(MLModel.predict needs macOS), and it has no interpreter for ML Programs on Linux: its MIL operations
compute values only for constant folding (value_inference, absent for conv and pooling), and its
testing utilities predict through Core ML too. So on Linux the tests check the saved package's
structure (inputs, outputs, operation counts, metadata) and every weight tensor read back from it, not
its numbers; on macOS they also run it against our CPU engine.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .._core import DarknetError
from .coreml_layers import CONVERTERS, Context
from .coreml_pipeline import add_decode, make_pipeline
from .layer_common import check_thresholds, input_size, layer_specs

MINIMUM_TARGET = "macOS13"
PREVIEW_TYPE = "com.apple.coreml.model.preview.type"  # Xcode's preview: an object detector


def require_coremltools() -> Any:
    """The `coremltools` module, or a DarknetError that says how to install it."""
    # coremltools warns at import that its Core ML runtime is missing (always the case off macOS)
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    try:
        import coremltools
    except ImportError:
        raise DarknetError('Core ML export needs the coremltools package: pip install "darknet-engine[coreml]" '
                           "(or pip install coremltools)") from None
    return coremltools


@dataclass
class CoreMLSummary:
    path: str
    input: Tuple[str, List[int]]    # name, (channels, height, width)
    classes: int
    candidates: int                 # boxes decoded before NMS
    layers: int
    parameters: int                 # weights stored in the program (after folding)
    precision: str
    bytes: int = 0

    def line(self) -> str:
        """One line for the CLI: what was written, its input and outputs."""
        c, h, w = self.input[1]
        return (f"exported {self.layers} layers to {self.path} ({self.bytes / 1e6:.1f} MB, {self.parameters / 1e6:.2f}M "
                f"parameters, Core ML mlprogram {self.precision}, {MINIMUM_TARGET}): {self.input[0]} {w}x{h} RGB -> "
                f"{self.candidates} candidates -> NMS -> confidence Kx{self.classes}, coordinates Kx4")


def build_program(ct: Any, net: Any, thresh: float, on_layer: Optional[Callable[[int], None]] = None) -> Tuple[Any, int]:
    """The MIL Program of a _core.Net at its input size (batch 1): the layers, then the decode. Returns it
    and the number of candidate boxes."""
    from coremltools.converters.mil import Builder as mb

    if not net.yolo_layers:
        raise DarknetError(f"{net.cfg_path}: Core ML export makes an object detector and needs [yolo] layers; "
                           "this network has none (export a classifier to ONNX)")
    specs = layer_specs(net, target="Core ML")
    for l in specs:  # before building anything: say at once what cannot be exported
        if l.type not in CONVERTERS:
            raise l.fail(f"no Core ML translation for the engine's '{l.type}' layer "
                         f"(supported: {', '.join(CONVERTERS)})")
    c, h, w = net.channels, net.height, net.width
    if c != 3:
        raise DarknetError(f"{net.cfg_path}: Core ML export takes RGB images: channels=3, not {c}")
    heads = list(net.yolo_layers)

    def body(image: Any) -> Any:
        ctx = Context(mb, specs, net)
        x = image
        for l in specs:
            ctx.tensors.append(CONVERTERS[l.type](ctx, l, x))
            x = ctx.tensors[-1]
            if on_layer:
                on_layer(l.index)
        return add_decode(mb, [(ctx.tensors[i], net.yolo_info(i), specs[i].output) for i in heads], (w, h), thresh)

    program = mb.program(input_specs=[mb.TensorSpec(shape=(1, c, h, w))],
                         opset_version=getattr(ct.target, MINIMUM_TARGET))(body)
    candidates = sum(len(net.yolo_info(i)["mask"]) * specs[i].output[1] * specs[i].output[2] for i in heads)
    return program, candidates


def export_coreml(network: Any, path: str, size: Optional[Tuple[int, int]] = None, precision: str = "fp32",
                  thresh: float = 0.25, nms: float = 0.45, on_layer: Optional[Callable[[int], None]] = None) -> CoreMLSummary:
    """Writes `network` (a darknet_py.Network) as a Core ML object detector to `path` (a .mlpackage).

    size: (width, height) of the input (default: the network's); the network is rebuilt at that size for
    the export and restored after. precision "fp16": float16 weights and activations (the Neural
    Engine's). thresh, nms: the default confidence and IoU thresholds (NMS inputs a caller may override;
    nms 0 turns NMS off); objectness at or below `thresh` is zeroed in the model, as Network.detect does.
    Class names: network.names (their numbers where it has fewer)."""
    ct = require_coremltools()
    if precision not in ("fp32", "fp16"):
        raise DarknetError(f"Core ML export precision must be fp32 or fp16, got {precision!r}")
    check_thresholds(thresh, nms)
    net = network._net
    with input_size(net, size):
        program, candidates = build_program(ct, net, thresh, on_layer)
        c, h, w = net.channels, net.height, net.width
        classes = net.yolo_info(net.yolo_layers[0])["classes"]
        layers = len(net.layers())
        parameters = sum(int(np.prod(v.shape)) for i, info in enumerate(net.layers()) if info["type"] == "conv"
                         for k, v in net.params(i).items() if k in ("weights", "biases"))
    labels = [network.names[k] if k < len(network.names) else str(k) for k in range(classes)]
    image = ct.ImageType(name="image", shape=(1, c, h, w), scale=1 / 255.0, color_layout=ct.colorlayout.RGB)
    compute = ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32
    # coremltools' per-pass progress bars, and its weights folder's TemporaryDirectory left to the finalizer
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        model = ct.convert(program, convert_to="mlprogram", inputs=[image],
                           minimum_deployment_target=getattr(ct.target, MINIMUM_TARGET),
                           compute_precision=compute, skip_model_load=True)
    spec = make_pipeline(ct, model.get_spec(), labels, thresh, nms)
    pipeline = ct.models.MLModel(spec, weights_dir=model.weights_dir, skip_model_load=True)
    name = os.path.splitext(os.path.basename(net.cfg_path))[0]
    pipeline.short_description = (f"{name} (Darknet YOLO, {len(labels)} classes) exported by darknet_py: "
                                  f"network, decode and NMS")
    pipeline.input_description["image"] = f"RGB image, {w}x{h} (resized without letterboxing)"
    pipeline.input_description["iouThreshold"] = f"NMS IoU threshold (default {nms})"
    pipeline.input_description["confidenceThreshold"] = f"confidence threshold (default {thresh})"
    pipeline.user_defined_metadata.update({
        PREVIEW_TYPE: "objectDetector", "classes": ",".join(labels), "darknet_py.cfg": os.path.basename(net.cfg_path),
        "darknet_py.precision": precision, "darknet_py.thresh": str(thresh), "darknet_py.nms": str(nms),
        "darknet_py.input": "RGB, 0..255 scaled by 1/255, resized without letterboxing"})
    path = os.fspath(path)
    _save_atomically(pipeline, path)
    size_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return CoreMLSummary(path, ("image", [c, h, w]), classes, candidates, layers, parameters, precision, size_bytes)


def _save_atomically(model: Any, path: str) -> None:
    """Saves the package under a temporary name beside `path`, then puts it in place (an existing one is
    replaced only once the new one is complete)."""
    parent = os.path.dirname(os.path.abspath(path))
    tmp = tempfile.mkdtemp(prefix=".coreml-", dir=parent)
    try:
        staged = os.path.join(tmp, os.path.basename(path))
        model.save(staged)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
        os.replace(staged, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
