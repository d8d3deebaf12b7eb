"""Darknet layers as ONNX nodes for the exporter (export_onnx): one function per layer type, each
computing what the engine's layer computes at inference (batchnorm folded into the weights as the
engine's batchnorm_fold does). A layer ONNX cannot express raises DarknetError naming it and why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .layer_common import (FLT_MAX, LayerSpec, conv_geometry, conv_weights, end_pad, fold_batchnorm, pool_geometry,
                           pool_pads)
from .onnx_activations import activate
from .onnx_graph import Graph


@dataclass
class Context:
    """The graph being built and the tensor of every layer exported so far."""

    g: Graph
    layers: List[LayerSpec]
    net: Any                                        # the _core.Net (yolo_info)
    tensors: List[str] = field(default_factory=list)  # tensors[i]: output of layer i


LayerFn = Callable[[Context, LayerSpec, str], str]


def _per_sample(shape: Sequence[int]) -> List[int]:
    """A reshape target for (batch, *shape) whatever the batch: -1 stands for it."""
    return [-1] + [int(v) for v in shape]


# ---- layers ---------------------------------------------------------------------------------------
def _pad_or_crop(ctx: Context, l: LayerSpec, x: str, size_hw: Tuple[int, int], ends: Tuple[int, int]) -> Tuple[str, List[int]]:
    """Crops the trailing rows/columns no window reads (a negative end pad); returns x and the end pads left."""
    (h, w), (eh, ew) = size_hw, ends
    if eh < 0 or ew < 0:
        x = ctx.g.slice(x, [0, 0], [h + min(eh, 0), w + min(ew, 0)], [2, 3], f"{l.hint}_crop")
    return x, [max(eh, 0), max(ew, 0)]


def export_conv(ctx: Context, l: LayerSpec, x: str) -> str:
    g = ctx.g
    _, h, w = l.input
    _, out_h, out_w = l.output
    geo = conv_geometry(l)
    sy, sx, pad, span, size = geo["stride_y"], geo["stride_x"], geo["pad"], geo["span"], geo["size"]
    x, (eh, ew) = _pad_or_crop(ctx, l, x, (h, w), (end_pad(h, out_h, sy, span, pad), end_pad(w, out_w, sx, span, pad)))
    weights, shift = conv_weights(l)
    y = g.node("Conv", [x, g.const(weights, f"{l.hint}_weights"), g.const(shift, f"{l.hint}_bias")], l.hint,
               kernel_shape=[size, size], strides=[sy, sx], pads=[pad, pad, eh, ew],
               dilations=[geo["dilation"]] * 2, group=geo["groups"])
    return activate(g, y, l.str("activation", "logistic"), f"{l.hint}_act")


def export_connected(ctx: Context, l: LayerSpec, x: str) -> str:
    g = ctx.g
    outputs = l.output[0]
    inputs = int(np.prod(l.input))
    scale, shift = fold_batchnorm(l.params, outputs)
    weights = l.params["weights"].reshape(outputs, inputs) * scale[:, None]
    flat = g.node("Flatten", [x], f"{l.hint}_flat", axis=1)
    y = g.node("Gemm", [flat, g.const(weights, f"{l.hint}_weights"), g.const(shift, f"{l.hint}_bias")], l.hint,
               transB=1)
    y = activate(g, y, l.str("activation", "logistic"), f"{l.hint}_act")
    return g.reshape(y, _per_sample(l.output), f"{l.hint}_chw")


def export_maxpool(ctx: Context, l: LayerSpec, x: str) -> str:
    if l.int("maxpool_depth", 0):
        return _maxpool_depth(ctx, l, x)
    return _local_pool(ctx, l, x, "MaxPool")


def export_local_avgpool(ctx: Context, l: LayerSpec, x: str) -> str:
    return _local_pool(ctx, l, x, "AveragePool")


def _local_pool(ctx: Context, l: LayerSpec, x: str, op: str) -> str:
    # Darknet's windows start at -padding/2 and read only pixels inside the input (a max ignores the
    # rest, an average divides by the pixels it read): ONNX pads with count_include_pad=0 mean the same.
    g = ctx.g
    c, h, w = l.input
    size, sy, sx, padding = pool_geometry(l)
    x, (eh, ew) = _pad_or_crop(ctx, l, x, (h, w), pool_pads(l)[1:])
    begin = pool_pads(l)[0]
    if max(begin, eh, ew) >= size:
        if op == "AveragePool":  # Darknet averages such an empty window to 0; ONNX would divide by 0
            raise l.fail(f"padding={padding} leaves windows of the {size}x{size} average pool entirely outside the "
                         f"{w}x{h} input; ONNX's AveragePool cannot express their value (0)")
        # ONNX limits pads to less than the window: pad explicitly with Darknet's starting value, -FLT_MAX
        pads = g.ints([0, 0, begin, begin, 0, 0, eh, ew], f"{l.hint}_pads")
        x = g.node("Pad", [x, pads, g.const(np.float32(-FLT_MAX), f"{l.hint}_pad_value")], f"{l.hint}_pad")
        begin, eh, ew = 0, 0, 0
    attrs = {"count_include_pad": 0} if op == "AveragePool" else {}
    return g.node(op, [x], l.hint, kernel_shape=[size, size], strides=[sy, sx], pads=[begin, begin, eh, ew], **attrs)


def _maxpool_depth(ctx: Context, l: LayerSpec, x: str) -> str:
    # output channel k = max over input channels k, k + out_c, k + 2 out_c, ... (the last group may be short)
    g = ctx.g
    c, h, w = l.input
    out_c = l.output[0]
    groups = -(-c // out_c)
    if groups * out_c != c:
        pads = g.ints([0, 0, 0, 0, 0, groups * out_c - c, 0, 0], f"{l.hint}_pads")
        x = g.node("Pad", [x, pads, g.const(np.float32(-FLT_MAX), f"{l.hint}_pad_value")], f"{l.hint}_pad")
    grouped = g.reshape(x, [-1, groups, out_c, h, w], f"{l.hint}_groups")
    return g.node("ReduceMax", [grouped], l.hint, axes=[1], keepdims=0)


def export_global_avgpool(ctx: Context, l: LayerSpec, x: str) -> str:
    return ctx.g.node("GlobalAveragePool", [x], l.hint)


def export_route(ctx: Context, l: LayerSpec, x: str) -> str:
    g = ctx.g
    groups, group_id = l.int("groups", 1), l.int("group_id", 0)
    parts = []
    for src in l.sources:
        t = ctx.tensors[src]
        if groups > 1:
            part = ctx.layers[src].output[0] // groups
            t = g.slice(t, [group_id * part], [(group_id + 1) * part], [1], f"{l.hint}_from{src}")
        parts.append(t)
    if len(parts) == 1:
        return g.node("Identity", parts, l.hint)
    return g.node("Concat", parts, l.hint, axis=1)


def _shortcut_weights(l: LayerSpec, nin: int) -> Optional[np.ndarray]:
    """The per-input weights after Darknet's normalisation, shape (nin, C) (None: plain sum)."""
    kind = l.str("weights_type", "none")
    if kind == "none":
        return None
    c = l.output[0]
    raw = l.params["weights"].reshape(-1).astype(np.float32)
    w = np.repeat(raw.reshape(nin, 1), c, axis=1) if kind in ("per_feature", "per_layer") else raw.reshape(nin, c)
    norm = l.str("weights_normalization", "none")
    if norm in ("relu", "avg_relu"):
        pos = np.maximum(w, 0).astype(np.float64)
        w = (pos / (0.0001 + pos.sum(axis=0))).astype(np.float32)
    elif norm == "softmax":
        e = np.exp(w.astype(np.float64) - w.max(axis=0))
        w = (e / (0.0001 + e.sum(axis=0))).astype(np.float32)
    return w


def export_shortcut(ctx: Context, l: LayerSpec, x: str) -> str:
    # Darknet adds the from-layers by flat per-sample index where they have one: an equal shape is an
    # Add; another shape is flattened, cut or zero-padded to the input's size and reshaped.
    g = ctx.g
    size = int(np.prod(l.input))
    weights = _shortcut_weights(l, len(l.sources) + 1)
    inputs = [x]
    for src in l.sources:
        t, shape = ctx.tensors[src], ctx.layers[src].output
        if shape != l.input:
            other = int(np.prod(shape))
            t = g.reshape(t, [-1, other], f"{l.hint}_flat{src}")
            if other > size:
                t = g.slice(t, [0], [size], [1], f"{l.hint}_cut{src}")
            elif other < size:
                t = g.node("Pad", [t, g.ints([0, 0, 0, size - other], f"{l.hint}_pads{src}")], f"{l.hint}_zeros{src}")
            t = g.reshape(t, _per_sample(l.input), f"{l.hint}_as_input{src}")
        inputs.append(t)
    if weights is not None:
        inputs = [g.node("Mul", [t, g.const(weights[k].reshape(1, -1, 1, 1), f"{l.hint}_w{k}")], f"{l.hint}_weighted{k}")
                  for k, t in enumerate(inputs)]
    y = inputs[0]
    for k, t in enumerate(inputs[1:]):
        y = g.node("Add", [y, t], f"{l.hint}_sum{k}")
    return activate(g, y, l.str("activation", "linear"), f"{l.hint}_act")


def export_upsample(ctx: Context, l: LayerSpec, x: str) -> str:
    g = ctx.g
    stride = l.int("stride", 2)
    scale = l.float("scale", 1.0)
    s = abs(stride)
    if stride > 0:  # nearest neighbour: out[i] = in[floor(i / s)]
        # roi and scales are float32 in every model (ONNX's Resize types them so)
        y = g.node("Resize", [x, g.const(np.zeros(0, np.float32), f"{l.hint}_roi", np.float32),
                              g.const(np.array([1, 1, s, s], np.float32), f"{l.hint}_scales", np.float32)],
                   f"{l.hint}_resize",
                   mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        return y if scale == 1.0 else g.scalar_op("Mul", y, scale, l.hint)
    # negative stride: each s x s block summed (rows/columns beyond whole blocks ignored), times scale
    avg = g.node("AveragePool", [x], f"{l.hint}_blocks", kernel_shape=[s, s], strides=[s, s])
    return g.scalar_op("Mul", avg, scale * s * s, l.hint)


def export_reorg(ctx: Context, l: LayerSpec, x: str) -> str:
    # Darknet's reorg_cpu loops over (w, h, c): the output's dims for [reorg3d], the input's for the old
    # [reorg]. Forward it is SpaceToDepth of the input viewed as (c / s^2, h s, w s), reverse
    # DepthToSpace (DCR) of the input viewed as (c, h, w); either result is viewed as the layer's output.
    g = ctx.g
    s = l.int("stride", 1)
    reverse = bool(l.int("reverse", 0))
    c, h, w = l.input if l.type == "reorg" else l.output
    if reverse:
        t = g.reshape(x, [-1, c, h, w], f"{l.hint}_view")
        t = g.node("DepthToSpace", [t], f"{l.hint}_d2s", blocksize=s, mode="DCR")
    else:
        t = g.reshape(x, [-1, c // (s * s), h * s, w * s], f"{l.hint}_view")
        t = g.node("SpaceToDepth", [t], f"{l.hint}_s2d", blocksize=s)
    return g.reshape(t, _per_sample(l.output), l.hint)


def export_scale_channels(ctx: Context, l: LayerSpec, x: str) -> str:
    # from-layer times the input, which broadcasts: C x 1 x 1 per channel, 1 x H x W (scale_wh) per pixel
    y = ctx.g.node("Mul", [ctx.tensors[l.sources[0]], x], f"{l.hint}_mul")
    return activate(ctx.g, y, l.str("activation", "linear"), f"{l.hint}_act")


def export_sam(ctx: Context, l: LayerSpec, x: str) -> str:
    y = ctx.g.node("Mul", [x, ctx.tensors[l.sources[0]]], f"{l.hint}_mul")
    return activate(ctx.g, y, l.str("activation", "linear"), f"{l.hint}_act")


def export_identity(ctx: Context, l: LayerSpec, x: str) -> str:
    """[dropout] (identity at inference) and [cost] (a classifier's loss: its output is its input)."""
    return ctx.g.node("Identity", [x], l.hint)


def export_softmax(ctx: Context, l: LayerSpec, x: str) -> str:
    # softmax over each sample's features, split into `groups` runs, of x / temperature
    g = ctx.g
    groups = l.int("groups", 1)
    t = g.reshape(x, [-1, groups, int(np.prod(l.input)) // groups], f"{l.hint}_groups")
    temperature = l.float("temperature", 1.0)
    if temperature != 1.0:
        t = g.scalar_op("Div", t, temperature, f"{l.hint}_temperature")
    return g.reshape(g.node("Softmax", [t], f"{l.hint}_softmax", axis=2), _per_sample(l.output), l.hint)


def export_yolo(ctx: Context, l: LayerSpec, x: str) -> str:
    # Darknet's activated head: per anchor, logistic on x, y, objectness and classes (not on w, h), then
    # x, y scaled by scale_x_y about 0.5; with new_coords no logistic (the conv before applied it).
    g = ctx.g
    info = ctx.net.yolo_info(l.index)
    anchors, classes = len(info["mask"]), info["classes"]
    entries = 5 + classes
    c, h, w = l.input
    sxy = float(info["scale_x_y"])
    t = g.reshape(x, [-1, anchors, entries, h * w], f"{l.hint}_anchors")
    xy = g.slice(t, [0], [2], [2], f"{l.hint}_xy")
    wh = g.slice(t, [2], [4], [2], f"{l.hint}_wh")
    rest = g.slice(t, [4], [entries], [2], f"{l.hint}_obj_cls")
    if not info["new_coords"]:
        xy = g.node("Sigmoid", [xy], f"{l.hint}_xy_logistic")
        rest = g.node("Sigmoid", [rest], f"{l.hint}_obj_cls_logistic")
    if sxy != 1.0:
        xy = g.scalar_op("Add", g.scalar_op("Mul", xy, sxy, f"{l.hint}_xy_scaled"), -0.5 * (sxy - 1.0),
                         f"{l.hint}_xy_shifted")
    y = g.node("Concat", [xy, wh, rest], f"{l.hint}_entries", axis=2)
    return g.reshape(y, _per_sample(l.output), l.hint)


EXPORTERS: Dict[str, LayerFn] = {
    "conv": export_conv, "connected": export_connected, "max": export_maxpool, "local_avg": export_local_avgpool,
    "avg": export_global_avgpool, "route": export_route, "shortcut": export_shortcut,
    "upsample": export_upsample, "downsample": export_upsample, "reorg": export_reorg, "reorg3d": export_reorg,
    "scale_channels": export_scale_channels, "sam": export_sam, "dropout": export_identity, "cost": export_identity,
    "softmax": export_softmax, "yolo": export_yolo,
}
