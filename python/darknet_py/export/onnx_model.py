"""ONNX export of a darknet_py Network (`Network.export_onnx`, `darknet_py export`).

The graph's input is the blob Network.forward takes (N x C x H x W float32, RGB in [0, 1]); its outputs
are what Network.forward returns: each [yolo] head's activated tensor in Darknet's layout, named
yolo_<layer>, or a classifier's last layer, named output. With postprocess=True they are instead the
detections after decoding and ONNX's NonMaxSuppression (onnx_postprocess). Batchnorm is folded into
the convolutions as the engine folds it. Layers are read from the engine: shapes, sources and
parameters from the built network, options from the cfg it was built from; one function per layer
type in onnx_layers.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from .._core import DarknetError
from .onnx_graph import OPSET, Graph, require_onnx
from .layer_common import check_thresholds, input_size, layer_specs
from .onnx_layers import EXPORTERS, Context
from .onnx_postprocess import add_postprocess

# protobuf cannot hold a message over 2 GiB: bigger models keep their weights in a file beside the .onnx
EXTERNAL_DATA_BYTES = 1 << 30


@dataclass
class ExportSummary:
    path: str
    input: Tuple[str, List[Any]]            # name, shape ("batch" where dynamic)
    outputs: List[Tuple[str, List[Any]]]
    layers: int
    parameters: int                         # floats stored in the graph (after folding)
    bytes: int                              # size of the .onnx file (and its external data)
    opset: int = OPSET

    def line(self) -> str:
        """One line for the CLI: what was written, its input and outputs."""
        shape = lambda s: "x".join(str(v) for v in s)  # noqa: E731
        outs = ", ".join(f"{n} {shape(s)}" for n, s in self.outputs)
        return (f"exported {self.layers} layers to {self.path} ({self.bytes / 1e6:.1f} MB, {self.parameters / 1e6:.2f}M "
                f"parameters, opset {self.opset}): {self.input[0]} {shape(self.input[1])} -> {outs}")


def build_model(net: Any, batch: Optional[int] = 1, postprocess: bool = False, thresh: float = 0.25,
                nms: float = 0.45, on_layer: Optional[Callable[[int], None]] = None,
                every_layer: bool = False, precision: str = "fp32") -> Tuple[Any, ExportSummary]:
    """The ONNX ModelProto of a _core.Net at its current input size. batch=None: a dynamic batch.
    every_layer: also output each layer's tensor as layer_<i> (to find where a graph and the engine part).
    precision "fp16": weights and activations in float16, as the engine's fp16 detection: the float32
    input is cast to float16 first, the heads back to float32 (outputs and post-processing stay fp32)."""
    onnx = require_onnx()
    helper = onnx.helper
    if precision not in ("fp32", "fp16"):
        raise DarknetError(f"ONNX export precision must be fp32 or fp16, got {precision!r}")
    half = precision == "fp16"
    g = Graph(half)
    specs = layer_specs(net)
    ctx = Context(g, specs, net)
    c, h, w = net.channels, net.height, net.width
    batch_dim: Any = "batch" if batch is None else int(batch)
    x = g.node("Cast", ["input"], "input_fp16", to=onnx.TensorProto.FLOAT16) if half else "input"
    for l in specs:
        fn = EXPORTERS.get(l.type)
        if fn is None:
            raise l.fail(f"no ONNX translation for the engine's '{l.type}' layer (supported: {', '.join(EXPORTERS)})")
        ctx.tensors.append(fn(ctx, l, x))
        x = ctx.tensors[-1]
        if on_layer:
            on_layer(l.index)
    heads = list(net.yolo_layers) or [len(specs) - 1]
    if half:  # everything after the layers is float32
        for i in (range(len(specs)) if every_layer else heads):
            ctx.tensors[i] = g.node("Cast", [ctx.tensors[i]], f"{specs[i].hint}_fp32", to=onnx.TensorProto.FLOAT)
        g.float_type = np.float32
    outputs: List[Tuple[str, List[Any]]] = []
    if postprocess:
        if not net.yolo_layers:
            raise DarknetError(f"{net.cfg_path}: --postprocess needs [yolo] layers; this network has none "
                               "(a classifier: export it without --postprocess)")
        infos = [(ctx.tensors[i], net.yolo_info(i), specs[i].output) for i in heads]
        names = add_postprocess(g, infos, (w, h), thresh, nms)
        value_infos = [helper.make_tensor_value_info("boxes", onnx.TensorProto.FLOAT, ["detections", 4]),
                       helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, ["detections"]),
                       helper.make_tensor_value_info("classes", onnx.TensorProto.INT64, ["detections"]),
                       helper.make_tensor_value_info("batch_index", onnx.TensorProto.INT64, ["detections"])]
        outputs = [(n, ["detections", 4] if n == "boxes" else ["detections"]) for n in names]
    else:
        value_infos = []
        for i in heads:
            name = f"yolo_{i}" if net.yolo_layers else "output"
            g.node("Identity", [ctx.tensors[i]], out=name)
            shape = [batch_dim, *specs[i].output]
            value_infos.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape))
            outputs.append((name, shape))
    if every_layer:
        for l in specs:
            name = f"layer_{l.index}"
            g.node("Identity", [ctx.tensors[l.index]], out=name)
            value_infos.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [batch_dim, *l.output]))
    input_shape = [batch_dim, c, h, w]
    inputs = [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, input_shape)]
    metadata = {"darknet_py.cfg": os.path.basename(net.cfg_path), "darknet_py.input": "RGB, 0..1, NCHW",
                "darknet_py.precision": precision,
                "darknet_py.postprocess": json.dumps(bool(postprocess))}
    if net.yolo_layers:
        metadata["darknet_py.yolo"] = json.dumps([{"layer": i, **{k: net.yolo_info(i)[k] for k in
                                                                  ("classes", "mask", "anchors", "scale_x_y", "new_coords")}}
                                                  for i in net.yolo_layers])
    if postprocess:
        metadata.update({"darknet_py.thresh": str(thresh), "darknet_py.nms": str(nms)})
    model = g.model(inputs, value_infos, os.path.splitext(os.path.basename(net.cfg_path))[0], metadata)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    return model, ExportSummary("", ("input", input_shape), outputs, len(specs), params, 0)


def export_onnx(network: Any, path: str, size: Optional[Tuple[int, int]] = None, batch: int = 1,
                dynamic_batch: bool = False, postprocess: bool = False, thresh: float = 0.25, nms: float = 0.45,
                on_layer: Optional[Callable[[int], None]] = None, precision: str = "fp32") -> ExportSummary:
    """Writes `network` (a darknet_py.Network) as an ONNX model to `path` and checks it with onnx's checker.

    size: (width, height) of the exported input (default: the network's); the network is rebuilt at that
    size for the export and restored after. batch: the fixed batch size; dynamic_batch=True leaves it
    open. postprocess: outputs detections (boxes, scores, classes, batch_index) instead of the heads,
    with `thresh` and `nms` (IoU; 0 turns NMS off) as Network.detect uses them. precision "fp16": float16
    weights and activations, float32 input and outputs (see build_model)."""
    onnx = require_onnx()
    if not dynamic_batch and (not isinstance(batch, (int, np.integer)) or batch < 1):
        raise DarknetError(f"batch must be a positive integer, got {batch!r}")
    check_thresholds(thresh, nms)
    net = network._net
    with input_size(net, size):
        model, summary = build_model(net, None if dynamic_batch else int(batch), postprocess, thresh, nms, on_layer,
                                     precision=precision)
    path = os.fspath(path)
    # serialized once (large models take seconds); the checker reads the file back, with shape inference
    external = summary.parameters * (2 if precision == "fp16" else 4) > EXTERNAL_DATA_BYTES
    if external:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data")
    else:
        onnx.save_model(model, path)
    onnx.checker.check_model(path, full_check=True)
    summary.bytes = os.path.getsize(path) + (os.path.getsize(path + ".data") if external else 0)
    summary.path = path
    return summary
