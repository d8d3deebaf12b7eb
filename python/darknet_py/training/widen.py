"""A trained network's weights in a wider copy of it: the same layers, each with k times the filters.

The quick start trains yolov4-tiny; the package ships a trained yolov4-tiny with a quarter of the
filters (the demo model). No layer of one fits the other, but the small network's function fits
the wide one exactly (Net2Net's widening, Chen et al. 2016): wide channel j repeats narrow channel
j // k, so a convolution's wide weight [o, i] is the narrow [o // k, i // k] divided by the input's
repeat count, and batchnorm, activations, pooling, upsampling, concatenating routes and routes
taking a group of channels (group ids index halves, quarters: the repeats stay in step) all act
per channel. The wide network then computes what the narrow one does, which `widen` checks on an
image before returning. A little noise on the weights lets the repeats drift apart in training
(identical copies would get identical gradients and stay copies).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

NOISE = 0.02  # the noise's standard deviation, relative to each layer's weights'
TOLERANCE = 1e-3  # the largest difference of the two networks' head outputs, relative to their scale


class WidenError(ValueError):
    """The two networks differ in more than their filter counts."""


def _ratio(wide: int, narrow: int, where: str) -> int:
    if narrow <= 0 or wide % narrow:
        raise WidenError(f"{where}: {wide} channels is no multiple of {narrow}")
    return wide // narrow


def _check_layers(wide_layers: List[dict], narrow_layers: List[dict]) -> None:
    if [l["type"] for l in wide_layers] != [l["type"] for l in narrow_layers]:
        raise WidenError(f"the networks' layers differ ({len(wide_layers)} and {len(narrow_layers)} layers, "
                         "or other types in some places)")
    for w, n in zip(wide_layers, narrow_layers):
        if tuple(w["output"][1:]) != tuple(n["output"][1:]):
            raise WidenError(f"layer {w['index']}: output {w['output']} against {n['output']} (another grid)")
        _ratio(w["output"][0], n["output"][0], f"layer {w['index']}")


def widened_params(wide: Dict[str, np.ndarray], narrow: Dict[str, np.ndarray], where: str) -> Dict[str, np.ndarray]:
    """A convolution's wide parameters from its narrow ones (shapes from `wide`, values from `narrow`)."""
    out: Dict[str, np.ndarray] = {}
    if set(wide) != set(narrow):
        raise WidenError(f"{where}: parameters {sorted(wide)} against {sorted(narrow)}")
    ww, nw = wide["weights"], narrow["weights"]
    if ww.ndim != 4 or nw.ndim != 4 or ww.shape[2:] != nw.shape[2:]:
        raise WidenError(f"{where}: weights {ww.shape} against {nw.shape}")
    ko, ki = _ratio(ww.shape[0], nw.shape[0], where), _ratio(ww.shape[1], nw.shape[1], where)
    rows, cols = np.arange(ww.shape[0]) // ko, np.arange(ww.shape[1]) // ki
    out["weights"] = (nw[rows][:, cols] / ki).astype(np.float32)
    for key, v in narrow.items():
        if key != "weights":
            if wide[key].shape[0] != ww.shape[0] or v.shape[1:] != wide[key].shape[1:]:
                raise WidenError(f"{where}: {key} {wide[key].shape} against {v.shape}")
            out[key] = np.ascontiguousarray(v[rows]).astype(np.float32)
    return out


def _head_outputs(raw, image: np.ndarray) -> List[np.ndarray]:
    return [np.array(o, np.float32) for o in raw.forward(image, list(raw.yolo_layers))]


def widen(wide_raw, narrow_raw, image: np.ndarray, seed: Optional[int] = 0) -> int:
    """Writes `narrow_raw`'s parameters (a _core.Net with weights) into `wide_raw` (a _core.Net of the
    same layers with k times the filters), checks that both compute the same head outputs for
    `image` (NCHW float32 at their input size), then adds the symmetry-breaking noise. Returns the
    number of convolutions copied. Raises WidenError when the networks differ otherwise."""
    _check_layers(wide_raw.layers(), narrow_raw.layers())
    convs = 0
    for info in wide_raw.layers():
        i = info["index"]
        if info["type"] != "conv":
            continue
        wide_raw.set_params(i, widened_params(wide_raw.params(i), narrow_raw.params(i), f"layer {i}"))
        convs += 1
    got, want = _head_outputs(wide_raw, image), _head_outputs(narrow_raw, image)
    scale = max(float(np.abs(w).max()) for w in want) or 1.0
    worst = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
    if worst > TOLERANCE * scale:
        raise WidenError(f"the widened network computes other outputs (differences up to {worst:.3g} "
                         f"at a scale of {scale:.3g}): a layer does not act per channel")
    rng = np.random.default_rng(seed)
    for info in wide_raw.layers():
        if info["type"] == "conv":
            p = wide_raw.params(info["index"])
            w = p["weights"]
            w += (NOISE * float(w.std()) * rng.standard_normal(w.shape)).astype(np.float32)
            wide_raw.set_params(info["index"], p)
    return convs
