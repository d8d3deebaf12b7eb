"""Darknet's random initialisation of a network's parameters (what training from scratch starts from).

The engine builds layers with zero weights, as parsing a cfg for inference needs nothing else;
Darknet's make_*_layer fills them at parse time:

- [convolutional]: weights uniform in [-1, 1] times sqrt(2 / (size * size * c / groups))
  (a He-style scale over the fan-in), biases 0;
- [connected]: weights uniform in [-1, 1] times sqrt(2 / inputs), biases 0;
- batchnorm: scales 1, rolling mean 0, rolling variance 1.

Other parameters (e.g. [shortcut] weights) keep the values the engine built them with. Darknet
draws from rand(); we draw from a seeded NumPy generator, so a run is reproducible from its seed.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np


def darknet_init(net, seed: Optional[int] = 0) -> None:
    """Initialises every [convolutional] and [connected] layer of `net` (a darknet_py._core.Net or
    darknet_py.Network) in place, as Darknet does when it parses a cfg."""
    raw = getattr(net, "_net", net)
    rng = np.random.default_rng(seed)
    for i, info in enumerate(raw.layers()):
        if info["type"] not in ("conv", "connected"):
            continue
        p = raw.params(i)  # views on the CPU, copies on a GPU: written back below either way
        w = p["weights"]
        if info["type"] == "conv":  # weights (n, c/groups, size, size): fan-in = all but the first
            fan_in = int(np.prod(w.shape[1:])) if w.ndim == 4 else int(w.size // info["output"][0])
        else:
            fan_in = int(np.prod(info["input"]))
        scale = math.sqrt(2.0 / max(1, fan_in))
        w[...] = (scale * rng.uniform(-1.0, 1.0, w.shape)).astype(np.float32)
        p["biases"][...] = 0.0
        if "scales" in p:
            p["scales"][...] = 1.0
            p["rolling_mean"][...] = 0.0
            p["rolling_variance"][...] = 1.0
        raw.set_params(i, p)
