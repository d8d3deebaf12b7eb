"""`darknet_py info --coverage CFG --device D`: per layer, which ops ran on the device and which fell
back to the CPU (with copies), found by running the network once: a forward pass, a training forward,
a backward pass with random head gradients and an optimizer step, at a small input size (which ops
run where does not depend on the size)."""
from __future__ import annotations

import os
from typing import Dict, List

import numpy as np

from .. import _core
from ..model_files.cfgfiles import cfg_with_size, resolve_cfg
from ..devices import resolve


def layer_coverage(cfg: str, device: str, size: int = 64, batch: int = 2) -> List[Dict[str, object]]:
    """One row per layer: index, type, and `cpu_ops`, the ops of that layer that fell back."""
    cfg = resolve_cfg(cfg)
    device = resolve(device)
    path = cfg_with_size(cfg, size, size)
    try:
        try:
            net = _core.Net(path, device)
        except ValueError:  # a cfg that needs its own size ([connected] after the backbone, ...)
            net = _core.Net(cfg, device)
    finally:
        os.unlink(path)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (batch, net.channels, net.height, net.width)).astype(np.float32)
    last = len(net.layers()) - 1
    net.forward(x, [last])
    outs = net.forward_train(x, [last])
    for i in list(net.yolo_layers) or [last]:
        shape = outs[0].shape if i == last else net.delta(i).shape
        net.set_delta(i, rng.normal(0, 0.01, shape).astype(np.float32))
    net.backward()
    net.update(1e-4, batch)
    fallbacks = net.fallback_ops()
    return [{"index": info["index"], "type": info["type"], "cpu_ops": list(fallbacks[k])}
            for k, info in enumerate(net.layers())]


def format_coverage(cfg: str, device: str, rows: List[Dict[str, object]]) -> str:
    on_cpu = [r for r in rows if r["cpu_ops"]]
    lines = [f"{cfg} on {device}: {len(rows) - len(on_cpu)} of {len(rows)} layers run entirely on the device"]
    for r in rows:
        where = "device" if not r["cpu_ops"] else "CPU fallback: " + ", ".join(r["cpu_ops"])
        lines.append(f"{r['index']:5d} {r['type']:<16} {where}")
    return "\n".join(lines)
