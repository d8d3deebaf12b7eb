"""Darknet layers as Core ML MIL operations (coremltools' MIL builder, `mb`) for export_coreml: one
function per layer type, each computing what the engine's layer computes at inference, with the same
batchnorm folding and padding arithmetic as the ONNX exporter (layer_common). The batch is 1 (what Core
ML and Vision feed an image model). A layer or option this exporter does not translate raises
DarknetError naming the layer and its cfg line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List

import numpy as np

from .layer_common import LayerSpec, conv_geometry, conv_weights, end_pad, pool_geometry, pool_pads


@dataclass
class Context:
    """The MIL builder and the tensor (a MIL Var) of every layer translated so far."""

    mb: Any                                        # coremltools.converters.mil.Builder
    layers: List[LayerSpec]
    net: Any                                       # the _core.Net (yolo_info)
    tensors: List[Any] = field(default_factory=list)


# ---- activations (the engine's formulas, src-lib/activation.h) -------------------------------------
def _mish(mb: Any, x: Any, name: str) -> Any:
    # x * tanh(softplus(x)): Darknet's thresholded softplus equals log(1 + e^x) to float precision
    return mb.mul(x=x, y=mb.tanh(x=mb.softplus(x=x, name=f"{name}_softplus"), name=f"{name}_tanh"), name=name)


ACTIVATIONS: Dict[str, Callable[[Any, Any, str], Any]] = {
    "linear": lambda mb, x, name: x,
    "leaky": lambda mb, x, name: mb.leaky_relu(x=x, alpha=0.1, name=name),
    "relu": lambda mb, x, name: mb.relu(x=x, name=name),
    "logistic": lambda mb, x, name: mb.sigmoid(x=x, name=name),
    "tanh": lambda mb, x, name: mb.tanh(x=x, name=name),
    "swish": lambda mb, x, name: mb.silu(x=x, name=name),  # x * logistic(x)
    "mish": _mish,
}


def activate(ctx: Context, l: LayerSpec, x: Any, default: str) -> Any:
    name = l.str("activation", default)
    fn = ACTIVATIONS.get(name)
    if fn is None:
        raise l.fail(f"activation={name} has no Core ML translation here (supported: {', '.join(ACTIVATIONS)})")
    return fn(ctx.mb, x, f"{l.hint}_{name}")


# ---- layers ---------------------------------------------------------------------------------------
def _crop(ctx: Context, l: LayerSpec, x: Any, ends: List[int]) -> Any:
    """Drops the trailing rows/columns no window reads (negative end pads)."""
    c, h, w = l.input
    if min(ends) >= 0:
        return x
    return ctx.mb.slice_by_index(x=x, begin=[0, 0, 0, 0], end=[1, c, h + min(ends[0], 0), w + min(ends[1], 0)],
                                 name=f"{l.hint}_crop")


def convert_conv(ctx: Context, l: LayerSpec, x: Any) -> Any:
    _, h, w = l.input
    _, out_h, out_w = l.output
    geo = conv_geometry(l)
    sy, sx, pad, span = geo["stride_y"], geo["stride_x"], geo["pad"], geo["span"]
    ends = [end_pad(h, out_h, sy, span, pad), end_pad(w, out_w, sx, span, pad)]
    x = _crop(ctx, l, x, ends)
    weights, bias = conv_weights(l)
    y = ctx.mb.conv(x=x, weight=weights, bias=bias, strides=[sy, sx], pad_type="custom",
                    pad=[pad, max(ends[0], 0), pad, max(ends[1], 0)], dilations=[geo["dilation"]] * 2,
                    groups=geo["groups"], name=l.hint)
    return activate(ctx, l, y, "logistic")


def convert_maxpool(ctx: Context, l: LayerSpec, x: Any) -> Any:
    # Darknet's windows read only pixels inside the input: Core ML's max_pool pads with -inf, the same
    if l.int("maxpool_depth", 0):
        raise l.fail("maxpool_depth=1 has no Core ML translation here")
    size, sy, sx, padding = pool_geometry(l)
    begin, eh, ew = pool_pads(l)
    if max(begin, eh, ew) >= size:
        raise l.fail(f"padding={padding} leaves windows of the {size}x{size} max pool entirely outside the input")
    x = _crop(ctx, l, x, [eh, ew])
    return ctx.mb.max_pool(x=x, kernel_sizes=[size, size], strides=[sy, sx], pad_type="custom",
                           pad=[begin, max(eh, 0), begin, max(ew, 0)], name=l.hint)


def convert_route(ctx: Context, l: LayerSpec, x: Any) -> Any:
    groups, group_id = l.int("groups", 1), l.int("group_id", 0)
    parts = []
    for src in l.sources:
        t = ctx.tensors[src]
        if groups > 1:
            c, h, w = ctx.layers[src].output
            part = c // groups
            t = ctx.mb.slice_by_index(x=t, begin=[0, group_id * part, 0, 0], end=[1, (group_id + 1) * part, h, w],
                                      name=f"{l.hint}_from{src}")
        parts.append(t)
    if len(parts) == 1:
        return parts[0]
    return ctx.mb.concat(values=parts, axis=1, name=l.hint)


def convert_shortcut(ctx: Context, l: LayerSpec, x: Any) -> Any:
    if l.str("weights_type", "none") != "none":
        raise l.fail(f"weights_type={l.str('weights_type', 'none')} has no Core ML translation here")
    y = x
    for src in l.sources:
        if ctx.layers[src].output != l.input:
            raise l.fail(f"from={src} has shape {ctx.layers[src].output}, the input {l.input}: only equal shapes "
                         "translate to Core ML here")
        y = ctx.mb.add(x=y, y=ctx.tensors[src], name=f"{l.hint}_from{src}")
    return activate(ctx, l, y, "linear")


def convert_upsample(ctx: Context, l: LayerSpec, x: Any) -> Any:
    stride = l.int("stride", 2)
    if stride < 1:
        raise l.fail(f"stride={stride} (a downsampling) has no Core ML translation here")
    y = ctx.mb.upsample_nearest_neighbor(x=x, scale_factor_height=stride, scale_factor_width=stride, name=l.hint)
    scale = l.float("scale", 1.0)
    return y if scale == 1.0 else ctx.mb.mul(x=y, y=np.float32(scale), name=f"{l.hint}_scale")


def convert_yolo(ctx: Context, l: LayerSpec, x: Any) -> Any:
    # Darknet's activated head: per anchor, logistic on x, y, objectness and classes (not on w, h), then
    # x, y scaled by scale_x_y about 0.5; with new_coords no logistic (the conv before applied it).
    mb = ctx.mb
    info = ctx.net.yolo_info(l.index)
    anchors, entries = len(info["mask"]), 5 + info["classes"]
    c, h, w = l.input
    t = mb.reshape(x=x, shape=[anchors, entries, h * w], name=f"{l.hint}_anchors")
    xy = mb.slice_by_index(x=t, begin=[0, 0, 0], end=[anchors, 2, h * w], name=f"{l.hint}_xy")
    wh = mb.slice_by_index(x=t, begin=[0, 2, 0], end=[anchors, 4, h * w], name=f"{l.hint}_wh")
    rest = mb.slice_by_index(x=t, begin=[0, 4, 0], end=[anchors, entries, h * w], name=f"{l.hint}_obj_cls")
    if not info["new_coords"]:
        xy = mb.sigmoid(x=xy, name=f"{l.hint}_xy_logistic")
        rest = mb.sigmoid(x=rest, name=f"{l.hint}_obj_cls_logistic")
    sxy = float(info["scale_x_y"])
    if sxy != 1.0:
        xy = mb.add(x=mb.mul(x=xy, y=np.float32(sxy), name=f"{l.hint}_xy_scaled"), y=np.float32(-0.5 * (sxy - 1.0)),
                    name=f"{l.hint}_xy_shifted")
    y = mb.concat(values=[xy, wh, rest], axis=1, name=f"{l.hint}_entries")
    return mb.reshape(x=y, shape=[1, c, h, w], name=l.hint)


CONVERTERS: Dict[str, Callable[[Context, LayerSpec, Any], Any]] = {
    "conv": convert_conv, "max": convert_maxpool, "route": convert_route, "shortcut": convert_shortcut,
    "upsample": convert_upsample, "yolo": convert_yolo,
}
