"""The largest shapes the shipped cfgs (cfg/*.cfg) give each vendor fast path, as op cases.

MPS and MPSGraph reject shapes they cannot take with a C assertion, and the shapes a user's network
meets are those of the cfgs we ship, at batch 1 (detection) and at their training batch (batch /
subdivisions): the selftest judges each fast path on those too, not only on op_cases' small ones. The
shapes come from the cfgs' own text through Darknet's size rules (convolutional, maxpool, route,
shortcut, upsample, yolo); the arrays are made only when the cases are asked for (hundreds of MB at a
training batch of a 608x608 network: the naive reference backend takes minutes on them, so the
selftest runs them on real devices, not with --quick).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np


def shipped_cfg_dir() -> str:
    from ..model_files.cfgfiles import shipped_dir

    return str(shipped_dir())


def _sections(text: str) -> List[Tuple[str, Dict[str, str]]]:
    out = []
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("[") and line.endswith("]"):
            out.append((line[1:-1].strip(), {}))
        elif "=" in line and out:
            k, v = line.split("=", 1)
            out[-1][1][k.strip()] = v.strip()
    return out


def layer_shapes(text: str) -> Tuple[dict, List[dict]]:
    """([net] options, one dict per layer: type, x and y as (c, h, w), and the geometry of convolutional
    and maxpool layers) of a cfg's text, by Darknet's rules."""
    sections = _sections(text)
    net = sections[0][1]
    shape = (int(net.get("channels", 3)), int(net["height"]), int(net["width"]))
    layers: List[dict] = []
    for kind, o in sections[1:]:
        c, h, w = shape
        layer = {"type": kind, "x": shape}
        if kind == "convolutional":
            k, s = int(o.get("size", 1)), int(o.get("stride", 1))
            pad = k // 2 if int(o.get("pad", 0)) else int(o.get("padding", 0))
            groups = int(o.get("groups", 1))
            oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
            layer.update(k=k, stride=s, pad=pad, groups=groups, bn=int(o.get("batch_normalize", 0)))
            shape = (int(o["filters"]), oh, ow)
        elif kind == "maxpool":
            k, s = int(o.get("size", o.get("stride", 1))), int(o.get("stride", 1))
            padding = int(o.get("padding", k - 1))
            layer.update(k=k, stride=s, padding=padding)
            shape = (c, (h + padding - k) // s + 1, (w + padding - k) // s + 1)
        elif kind == "route":
            idx = [int(v) for v in o["layers"].split(",")]
            srcs = [layers[i if i >= 0 else len(layers) + i]["y"] for i in idx]
            groups = int(o.get("groups", 1))
            shape = (sum(sc for sc, _, _ in srcs) // groups, srcs[0][1], srcs[0][2])
        elif kind == "upsample":
            s = int(o.get("stride", 2))
            shape = (c, h * s, w * s)
        layer["y"] = shape
        layers.append(layer)
    return net, layers


def training_batch(net: dict) -> int:
    return max(1, int(net.get("batch", 1)) // max(1, int(net.get("subdivisions", 1))))


def largest_shapes(cfg_dir: Optional[str] = None) -> Dict[str, dict]:
    """Per kind of case ("conv", "conv_weights", "pool", "pool_window", "batchnorm") and batch
    ("batch1", "train"), the largest one over the shipped cfgs: {"conv-train": {"cfg", "n", "layer"},
    ...}. conv: the most elements in x + y; conv_weights: the most weights; pool: the most elements in
    x; pool_window: the largest window; batchnorm: the most elements in the normalized output."""
    cfg_dir = cfg_dir or shipped_cfg_dir()
    best: Dict[str, tuple] = {}

    def consider(key, size, entry):
        if key not in best or size > best[key][0]:
            best[key] = (size, entry)

    for name in sorted(os.listdir(cfg_dir)):
        if not name.endswith(".cfg"):
            continue
        with open(os.path.join(cfg_dir, name)) as f:
            net, layers = layer_shapes(f.read())
        for batch_name, n in (("batch1", 1), ("train", training_batch(net))):
            for layer in layers:
                e = {"cfg": name, "n": n, "layer": layer}
                x, y = np.prod(layer["x"]) * n, np.prod(layer["y"]) * n
                if layer["type"] == "convolutional":
                    consider("conv-" + batch_name, (x + y,), e)
                    cin, cout = layer["x"][0], layer["y"][0]
                    consider("conv_weights-" + batch_name, (cout * cin // layer["groups"] * layer["k"] ** 2, x + y), e)
                    if layer["bn"]:
                        consider("batchnorm-" + batch_name, (y,), e)
                elif layer["type"] == "maxpool":
                    consider("pool-" + batch_name, (x,), e)
                    consider("pool_window-" + batch_name, (layer["k"], x), e)  # SPP's 13x13 windows
    return {k: v[1] for k, v in best.items()}


CASE_OPS = {"conv": {"conv2d", "conv2d_backward_data", "conv2d_backward_weights", "gemm"},
            "pool": {"pool", "pool_backward"}, "batchnorm": {"batchnorm_train", "batchnorm_backward"}}


def cfg_cases(cfg_dir: Optional[str] = None, ops: Optional[set] = None) -> list:
    """The op cases of largest_shapes (only those of `ops` when given, the others' arrays not made):
    conv2d with both backward passes, the convolution's GEMM (weights x im2col columns, as GpuBackend
    runs it on MPS), pool and pool_backward, batchnorm_train and batchnorm_backward; each id names the
    cfg, the kind of shape and the batch."""
    from .op_cases import Case, DOT_TOL, _batchnorm_cases, _conv_backward_cases, conv_case, rand, trand

    out = []
    for key, e in sorted(largest_shapes(cfg_dir).items()):
        family = key.split("-")[0].split("_")[0]
        if ops is not None and not (CASE_OPS[family] & set(ops)):
            continue
        l, n = e["layer"], e["n"]
        tag = f"cfg-{e['cfg'][:-4]}-{key}"
        (cin, h, w), cout = l["x"], l["y"][0]
        if key.startswith(("conv-", "conv_weights-")):
            c = conv_case(tag, n, cin, h, w, cout, l["k"], l["k"], l["stride"], l["stride"], l["pad"], 1, l["groups"])
            out += [c] + _conv_backward_cases(c)
            if key.startswith("conv_weights-"):
                M, K, N = cout, cin * l["k"] ** 2, l["y"][1] * l["y"][2]
                A, B, C = rand(M, K), rand(K, N), rand(M, N)
                out.append(Case(f"gemm-{tag}-{M}x{N}x{K}", "gemm", (False, False, 1.0, A, B, 0.0, C), atol=DOT_TOL,
                                rtol=0, scale=lambda _, A=A, B=B, K=K: np.sqrt(K) * (np.abs(A).astype(np.float64)
                                                                                     @ np.abs(B))))
        elif key.startswith(("pool-", "pool_window-")):
            k, s, p = l["k"], l["stride"], l["padding"]
            y = [n, cin, l["y"][1], l["y"][2]]
            x = rand(n, cin, h, w)
            out.append(Case(f"pool-{tag}", "pool", ("max", x, k, s, s, p, y)))
            out.append(Case(f"pool_backward-{tag}", "pool_backward", ("max", x, trand(*y), k, s, s, p)))
        elif key.startswith("batchnorm-"):
            out += [c for c in _batchnorm_cases((n, cout, l["y"][1], l["y"][2]))
                    if c.op in ("batchnorm_train", "batchnorm_backward")]
    return [c for c in out if ops is None or c.op in ops]
