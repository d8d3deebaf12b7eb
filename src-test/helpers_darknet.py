"""Helpers for the tests that compare our engine with OpenCV DNN and with NumPy ports of Darknet:
rewriting cfgs (input size, extra options), filling a network with seeded random parameters,
converting our yolo outputs to OpenCV's Region-layer layout, and the error measure."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import numpy as np

_SECTION = re.compile(r"^\s*\[([^\]]+)\]")


def rewrite_cfg(text: str, net: Optional[Dict[str, object]] = None,
                per_section: Optional[Dict[str, Dict[str, object]]] = None) -> str:
    """Returns `text` with [net] options set/overridden from `net` and, for every section whose
    type is a key of `per_section` (e.g. "yolo"), those options set/overridden. Everything else
    (including comments and line order) is kept, so line numbers in errors stay meaningful-ish."""
    net = {k: str(v) for k, v in (net or {}).items()}
    per_section = {k: {kk: str(vv) for kk, vv in v.items()} for k, v in (per_section or {}).items()}
    out: List[str] = []
    current: Optional[str] = None
    pending: Dict[str, str] = {}

    def flush():
        for k, v in pending.items():
            out.append(f"{k}={v}")
        pending.clear()

    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            flush()
            current = m.group(1).strip().lower()
            out.append(line)
            wanted = net if current in ("net", "network") else per_section.get(current, {})
            pending.update(wanted)
            continue
        is_option = "=" in line and not line.lstrip().startswith(("#", ";"))
        key = line.split("=", 1)[0].strip().lower() if is_option else None
        if key is not None and key in pending:
            out.append(f"{key}={pending.pop(key)}")  # override in place
            continue
        if key is not None and current in ("net", "network") and key in net:
            continue  # a duplicate key already overridden above
        out.append(line)
    flush()
    return "\n".join(out) + "\n"


def truncate_cfg(text: str, n_layers: int) -> str:
    """Keeps [net] and the first `n_layers` layer sections of a cfg."""
    out: List[str] = []
    seen = -1  # index of the current section: [net] is 0, layer k is k + 1
    for line in text.splitlines():
        if _SECTION.match(line):
            seen += 1
            if seen > n_layers:
                break
        out.append(line)
    return "\n".join(out) + "\n"


def write_cfg(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------
# Seeded random parameters
# ---------------------------------------------------------------------------------------------

def randomize_params(net, seed: int, layers: Optional[Iterable[int]] = None) -> None:
    """Fills every parameter block of `net` (a darknet_py.Network) with seeded random values chosen
    so that activations stay O(1) through 100+ layers and Darknet/OpenCV batchnorm epsilons agree:

    * conv/connected weights ~ N(0, sqrt(2/fan_in)) (He), so a conv roughly keeps the second
      moment of its input; for layers without batchnorm (the heads in front of [yolo]) the std is
      sqrt(1/fan_in)/2 so the w/h logits stay small enough for exp() and logistic() not to saturate.
    * rolling_variance ~ U(5, 20) and scales = sqrt(rolling_variance) * U(0.5, 1): the normalised
      value (x - mean) / sqrt(var + eps) * scale ~= (x - mean) * U(0.5, 1), i.e. O(1) and mildly
      damped so residual sums do not blow up. With var >= 5, Darknet's eps (1e-5) and OpenCV's
      (1e-6) change 1/sqrt(var + eps) by at most 0.5 * 9e-6 / 5 ~= 1e-6 relative — below float32
      round-off over a deep net and two orders under the 1e-4 tolerance.
    * rolling_mean, biases ~ N(0, 0.1); shortcut weights ~ U(-0.5, 1.5).
    """
    rng = np.random.default_rng(seed)
    table = net.layers  # build the layer list once, not per layer
    idx = range(len(table)) if layers is None else layers
    for i in idx:
        p = net.params(i)
        if not p:
            continue
        has_bn = "rolling_variance" in p
        if "rolling_variance" in p:
            var = rng.uniform(5.0, 20.0, p["rolling_variance"].size).astype(np.float32)
            p["rolling_variance"].reshape(-1)[:] = var
            p["scales"].reshape(-1)[:] = np.sqrt(var) * rng.uniform(0.5, 1.0, var.size).astype(np.float32)
            p["rolling_mean"].reshape(-1)[:] = rng.normal(0, 0.1, var.size)
        if "biases" in p:
            p["biases"].reshape(-1)[:] = rng.normal(0, 0.1, p["biases"].size)
        if "weights" in p:
            w = p["weights"]
            layer_type = table[i]["type"]
            if layer_type == "shortcut":
                w.reshape(-1)[:] = rng.uniform(-0.5, 1.5, w.size)  # some negative: relu normalisation clamps
                continue
            n_out = table[i]["output"][0]
            fan_in = w.size // n_out
            std = np.sqrt(2.0 / fan_in) if has_bn else 0.5 * np.sqrt(1.0 / fan_in)
            w.reshape(-1)[:] = rng.standard_normal(w.size, dtype=np.float32) * np.float32(std)


def calibrate_heads(net, x: np.ndarray, target_std: float = 1.0) -> None:
    """Rescales the weights of every linear conv without batchnorm (the heads in front of [yolo],
    a classifier's last conv) so that its pre-bias output has standard deviation `target_std` on
    input `x`. He-initialised residual nets grow their activations with depth; without this the
    yolo w/h logits reach ~6 (exp -> 400) in yolov3 and a classifier's softmax saturates, which
    either amplifies round-off or makes the comparison trivially easy. Heads feed nothing but
    [yolo]/avgpool, so rescaling them does not change any other layer's output."""
    table = net.layers
    heads = [i for i, l in enumerate(table)
             if l["type"] == "conv" and "rolling_variance" not in net.params(i) and l["params"].split()[-1] == "linear"]
    if not heads:
        return
    outs = net._net.forward(np.ascontiguousarray(x, np.float32), heads)
    for i, y in zip(heads, outs):
        p = net.params(i)
        pre_bias = y - p["biases"].reshape(1, -1, 1, 1)
        std = float(pre_bias.std())
        if std > 0:
            p["weights"][...] *= np.float32(target_std / std)


# ---------------------------------------------------------------------------------------------
# Yolo outputs: Darknet layout -> OpenCV Region layout
# ---------------------------------------------------------------------------------------------

def yolo_to_opencv(out: np.ndarray, info: dict, net_w: int, net_h: int) -> np.ndarray:
    """Converts one image's yolo output in Darknet's layout (A*(5+C) x H x W, after the yolo head's
    logistic and scale_x_y, as Network.forward returns it) to OpenCV's Region layer output:
    rows (y*W + x)*A + a, columns [cx, cy, w, h, obj, obj*cls_0 ...] with boxes relative to the
    network input. Class columns are NOT thresholded here (callers give OpenCV thresh=0)."""
    mask, anchors, classes = info["mask"], info["anchors"], info["classes"]
    A = len(mask)
    C5, H, W = out.shape[0] // A, out.shape[1], out.shape[2]
    assert C5 == 5 + classes, (C5, classes)
    p = out.reshape(A, C5, H, W).astype(np.float64)
    ys, xs = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    res = np.empty((H, W, A, C5))
    for a in range(A):
        aw, ah = anchors[2 * mask[a]], anchors[2 * mask[a] + 1]
        res[:, :, a, 0] = (xs + p[a, 0]) / W
        res[:, :, a, 1] = (ys + p[a, 1]) / H
        if info["new_coords"]:
            res[:, :, a, 2] = p[a, 2] ** 2 * 4 * aw / net_w
            res[:, :, a, 3] = p[a, 3] ** 2 * 4 * ah / net_h
        else:
            res[:, :, a, 2] = np.exp(p[a, 2]) * aw / net_w
            res[:, :, a, 3] = np.exp(p[a, 3]) * ah / net_h
        res[:, :, a, 4] = p[a, 4]
        res[:, :, a, 5:] = (p[a, 4][None] * p[a, 5:]).transpose(1, 2, 0)
    return res.reshape(H * W * A, C5)


def rel_err(ours: np.ndarray, theirs: np.ndarray) -> float:
    """max|ours - theirs| / max|theirs|: the largest deviation relative to the tensor's scale."""
    ours = np.asarray(ours, np.float64)
    theirs = np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    scale = np.max(np.abs(theirs))
    return float(np.max(np.abs(ours - theirs)) / scale) if scale > 0 else float(np.max(np.abs(ours)))
