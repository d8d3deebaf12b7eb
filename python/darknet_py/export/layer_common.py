"""What every exporter (ONNX, Core ML) reads from the engine and computes the same way: the layer
description (LayerSpec, layer_specs), batchnorm folded as the engine's batchnorm_fold does, Darknet's
pooling/convolution padding arithmetic, and the constants of the yolo decode (grid cells, anchors).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .._core import DarknetError

BN_EPS = 1e-5  # Darknet's batchnorm epsilon (NormActivationTrainer::kEps), inside the sqrt
FLT_MAX = float(np.finfo(np.float32).max)  # Darknet's maxpool starts from -FLT_MAX


@dataclass
class LayerSpec:
    """What an exporter knows of one layer: the engine's description, its cfg options, its parameters."""

    index: int
    type: str                    # the engine's type: conv, max, route, yolo, ...
    section: str                 # the cfg's section name: convolutional, maxpool, ...
    line: int
    input: Tuple[int, int, int]  # per sample (c, h, w)
    output: Tuple[int, int, int]
    sources: List[int]           # absolute indices of the layers it reads besides its input
    options: Dict[str, str]
    params: Dict[str, np.ndarray] = field(default_factory=dict)
    cfg_path: str = ""
    target: str = "ONNX"         # the format being written, for error messages

    def int(self, key: str, default: int) -> int:
        return int(float(self.options[key])) if key in self.options else default

    def float(self, key: str, default: float) -> float:
        return float(self.options[key]) if key in self.options else default

    def str(self, key: str, default: str) -> str:
        return self.options.get(key, default).strip()

    def fail(self, why: str) -> DarknetError:
        return DarknetError(f"{self.cfg_path}:{self.line}: layer {self.index} [{self.section}] cannot be exported to "
                            f"{self.target}: {why}")

    @property
    def hint(self) -> str:
        return f"l{self.index}_{self.type}"


def layer_specs(net: Any, target: str = "ONNX") -> List[LayerSpec]:
    """The exporter's view of every layer of a _core.Net: the engine's description, the cfg options of
    the section that built it and its parameters (views of the engine's memory on the CPU: read only)."""
    sections = net.cfg_sections()[1:]  # sections[0] is [net]
    specs = []
    for info, sec in zip(net.layers(), sections):
        i = info["index"]
        specs.append(LayerSpec(index=i, type=info["type"], section=sec["type"], line=info["line"],
                               input=tuple(info["input"]), output=tuple(info["output"]),
                               sources=list(info["sources"]), options=dict(sec["options"]),
                               params={k: np.asarray(v, dtype=np.float32) for k, v in net.params(i).items()},
                               cfg_path=net.cfg_path, target=target))
    return specs


def fold_batchnorm(p: Dict[str, np.ndarray], outputs: int) -> Tuple[np.ndarray, np.ndarray]:
    """(scale, shift) per output: the engine's batchnorm_fold in float32, or (1, biases) without batchnorm."""
    biases = p["biases"].reshape(outputs).astype(np.float32)
    if "scales" not in p:
        return np.ones(outputs, np.float32), biases
    scale = p["scales"].reshape(outputs).astype(np.float32) / np.sqrt(
        p["rolling_variance"].reshape(outputs).astype(np.float32) + np.float32(BN_EPS))
    return scale, biases - p["rolling_mean"].reshape(outputs).astype(np.float32) * scale


def conv_geometry(l: LayerSpec) -> Dict[str, int]:
    """A [convolutional]'s size, strides, dilation, groups and begin padding (the engine's ConvGeom)."""
    size = l.int("size", 1)
    stride = l.int("stride", 1)
    dilation = 1 if size == 1 else l.int("dilation", 1)
    padding = size // 2 if l.int("pad", 0) else l.int("padding", 0)
    return {"size": size, "stride_y": l.int("stride_y", stride), "stride_x": l.int("stride_x", stride),
            "dilation": dilation, "groups": l.int("groups", 1), "pad": padding * dilation,
            "span": dilation * (size - 1) + 1}


def conv_weights(l: LayerSpec) -> Tuple[np.ndarray, np.ndarray]:
    """A [convolutional]'s weights (filters, c_in / groups, size, size) and bias with batchnorm folded in."""
    filters = l.output[0]
    g = conv_geometry(l)
    scale, shift = fold_batchnorm(l.params, filters)
    weights = l.params["weights"].reshape(filters, l.input[0] // g["groups"], g["size"], g["size"])
    return weights * scale[:, None, None, None], shift


def end_pad(size: int, out: int, stride: int, window: int, begin: int) -> int:
    """Padding after the input so that floor((size + begin + end - window) / stride) + 1 = out;
    negative: that many trailing rows/columns are never read."""
    return (out - 1) * stride + window - size - begin


def pool_geometry(l: LayerSpec) -> Tuple[int, int, int, int]:
    """(size, stride_y, stride_x, padding) with Darknet's defaults: stride 1, size = stride, padding = size - 1."""
    stride = l.int("stride", 1)
    sy, sx = l.int("stride_y", stride), l.int("stride_x", stride)
    size = l.int("size", stride)
    return size, sy, sx, l.int("padding", size - 1)


def pool_pads(l: LayerSpec) -> Tuple[int, int, int]:
    """A local pool's (begin, end_h, end_w) padding: Darknet's windows start at -padding/2 (end pads may
    be negative: trailing rows/columns no window reads)."""
    _, h, w = l.input
    _, out_h, out_w = l.output
    size, sy, sx, padding = pool_geometry(l)
    begin = padding // 2
    return begin, end_pad(h, out_h, sy, size, begin), end_pad(w, out_w, sx, size, begin)


def decode_grid(info: Dict[str, Any], shape: Sequence[int]) -> Tuple[np.ndarray, ...]:
    """The constants of a yolo head's decode, one value per candidate in Darknet's order (cell by cell,
    anchor by anchor): (column, row, anchor width, anchor height), float32 of length H*W*anchors."""
    anchors = len(info["mask"])
    _, h, w = shape
    cells = np.arange(h * w)
    col = np.repeat(cells % w, anchors).astype(np.float32)
    row = np.repeat(cells // w, anchors).astype(np.float32)
    a = np.asarray(info["anchors"], np.float32).reshape(-1, 2)[info["mask"]]
    return col, row, np.tile(a[:, 0], h * w), np.tile(a[:, 1], h * w)


def check_thresholds(thresh: float, nms: float) -> None:
    """The confidence and NMS thresholds every exporter takes: thresh in [0, 1), nms in [0, 1]."""
    if not 0 <= thresh < 1:
        raise DarknetError(f"thresh must be in [0, 1), got {thresh}")
    if not 0 <= nms <= 1:
        raise DarknetError(f"nms must be in [0, 1], got {nms}")


@contextlib.contextmanager
def input_size(net: Any, size: Optional[Sequence[int]]) -> Iterator[None]:
    """The network at `size` (width, height) for the export, its own size restored after; None: as it is."""
    if size is None:
        yield
        return
    old = (net.width, net.height)
    w, h = (int(v) for v in size)
    if w < 1 or h < 1:
        raise DarknetError(f"size must be positive, got {w}x{h}")
    net.resize_input(w, h)
    try:
        yield
    finally:
        net.resize_input(*old)
