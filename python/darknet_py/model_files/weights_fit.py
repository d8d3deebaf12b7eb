"""Does a .weights file fit its cfg? Darknet's format has no layer boundaries, so a file for another
cfg (or a cfg with a typo such as `filtres=8`, which leaves the layer at its default of one filter)
loads without complaint and detects nothing. Here the file's float count is compared with what the
cfg's layers take, before loading, and the first layer where the file stops making sense is named.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

# a float this large in a layer's parameters means the file is read out of step with the layers
_IMPLAUSIBLE = 1e5


@dataclass
class WeightsHeader:
    major: int
    minor: int
    revision: int
    seen: int
    size: int  # bytes of the header


def read_header(path: str) -> WeightsHeader:
    """The header Darknet writes: major, minor, revision (int32), then `seen` (int64 from 0.2 on,
    int32 before). Raises ValueError for a file too short to hold one."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 16:
        raise ValueError(f"{path}: too short for a Darknet weights header ({len(head)} bytes)")
    major, minor, revision = struct.unpack("<3i", head[:12])
    if major * 10 + minor >= 2:
        if len(head) < 20:
            raise ValueError(f"{path}: truncated header (no 'seen' count)")
        return WeightsHeader(major, minor, revision, struct.unpack("<q", head[12:20])[0], 20)
    return WeightsHeader(major, minor, revision, struct.unpack("<i", head[12:16])[0], 16)


def layer_floats(net) -> List[List[Tuple[str, int]]]:
    """Per layer, its parameters in file order as (name, float count)."""
    return [[(name, int(np.asarray(a).size)) for name, a in net.params(i).items()] for i in range(len(net.layers))]


def expected_bytes(net, header_bytes: int = 20) -> int:
    """The size of a .weights file for `net` (header of `header_bytes`, 20 for Darknet 0.2 on)."""
    return header_bytes + 4 * sum(n for layer in layer_floats(net) for _, n in layer)


def _describe(net, i: int) -> str:
    info = net._net.layers()[i]
    return f"layer {i} ({info['type']}, cfg line {info['line']})"


def _first_implausible(values: np.ndarray, layout: List[List[Tuple[str, int]]]) -> Optional[Tuple[int, str]]:
    """The first (layer, reason) whose values, read in the cfg's layout, cannot be trained parameters:
    a negative batchnorm variance, a NaN or infinity, or a value far beyond any weight's range."""
    pos = 0
    for i, params in enumerate(layout):
        for name, n in params:
            chunk = values[pos:pos + n]
            pos += n
            if chunk.size == 0:
                return None
            if not np.all(np.isfinite(chunk)):
                return i, f"its {name} hold NaN or infinite values"
            if name == "rolling_variance" and np.any(chunk < 0):
                return i, "its batchnorm variances are negative"
            if np.any(np.abs(chunk) > _IMPLAUSIBLE):
                return i, f"its {name} hold values beyond {_IMPLAUSIBLE:g}"
    return None


def check_fit(net, path: str) -> Optional[str]:
    """None when `path` holds exactly the floats `net`'s cfg takes; else a one-line message that says
    how many floats are missing or left over and names the first layer that disagrees."""
    header = read_header(path)
    layout = layer_floats(net)
    want = sum(n for params in layout for _, n in params)
    have_bytes = os.path.getsize(path) - header.size
    have = have_bytes // 4
    if have == want and have_bytes % 4 == 0:
        return None
    with open(path, "rb") as f:
        f.seek(header.size)
        values = np.fromfile(f, dtype="<f4", count=have)
    with np.errstate(invalid="ignore", over="ignore"):
        bad = _first_implausible(values, layout)
    if bad is not None:
        where = f"the first layer that disagrees is {_describe(net, bad[0])}: {bad[1]} when read in this cfg's layout"
    elif have < want:  # every complete layer looks right: the file ends inside the first incomplete one
        pos, i = 0, 0
        for i, params in enumerate(layout):
            pos += sum(n for _, n in params)
            if pos > have:
                break
        where = f"the file ends inside {_describe(net, i)}"
    else:
        where = f"every layer reads plausibly; the extra floats follow the last, {_describe(net, len(layout) - 1)}"
    count = (f"{want - have} floats missing" if have < want else f"{have - want} floats left over") + \
        f" ({have} in the file, the cfg's {len(layout)} layers take {want})"
    return f"{path} does not fit {net.cfg_path}: {count}; {where}. Is the weights file for this cfg?"


def complete_layers(net, path: str) -> int:
    """How many leading layers the file holds completely (what a partial load can take)."""
    header = read_header(path)
    have = (os.path.getsize(path) - header.size) // 4
    pos = 0
    for i, params in enumerate(layer_floats(net)):
        pos += sum(n for _, n in params)
        if pos > have:
            return i
    return len(net.layers)


def load_checked(cfg: str, weights: str, device: Optional[str] = None, precision: str = "auto",
                 allow_partial: bool = False, on_warning=None):
    """Network(cfg, weights) that refuses a weights file not made for the cfg (floats missing or
    left over), naming the first layer that disagrees; with allow_partial it loads what fits and
    reports the mismatch through on_warning instead. The cfg's own warnings go to on_warning too."""
    import warnings

    from ..network import Network, _existing

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = Network(cfg, None, None, device, precision=precision)
        weights = _existing(weights, "weights file")
        problem = check_fit(net, weights)
        if problem is not None and not allow_partial:
            raise ValueError(problem + " (--allow-partial loads it anyway)")
        if problem is None:
            net.load_weights(weights)
        else:
            net.load_weights(weights, max_layers=complete_layers(net, weights))
            warnings.warn(problem + " (loaded as --allow-partial asks)")
    if on_warning is not None:
        for w in caught:
            if problem is not None and "left over after the last layer" in str(w.message):
                continue  # said once, above
            on_warning(str(w.message))
    return net
