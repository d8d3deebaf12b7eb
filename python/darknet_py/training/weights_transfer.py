"""Starting training from a .weights file: resuming, a pretrained prefix (Darknet's `partial`,
e.g. yolov4-tiny.conv.29), or weights of the same network with another class count.

A .weights file is the layers' parameters back to back with no layout information, so a file
made for an 80-class yolov4-tiny cannot be read layer by layer into a 4-class one: the head
convolutions have other sizes and every layer after the first head would be read from the wrong
offset. Such a file is read into the network it was made for (the cfg before adaptation) and every
layer whose parameters have the same shapes is copied over; the heads' convolutions keep Darknet's
random initialisation, which is what Darknet's users get by hand with `partial` and a `.conv.N` file.
"""
from __future__ import annotations

import os
import struct
from typing import Callable, List, Optional


def weights_floats(path: str) -> int:
    """The number of float parameters stored in a .weights file (after its header)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(12)
    if len(head) < 12:
        raise ValueError(f"{path}: not a Darknet .weights file ({size} bytes, shorter than its header)")
    major, minor, _ = struct.unpack("<3i", head)
    offset = 12 + (8 if major * 10 + minor >= 2 and major < 1000 and minor < 1000 else 4)
    return (size - offset) // 4


def _layer_sizes(raw) -> List[int]:
    return [sum(v.size for v in raw.params(i).values()) for i in range(len(raw.layers()))]


def weights_layers_in_file(raw, path: str) -> int:
    """How many leading layers of `raw` (a _core.Net) a .weights file holds completely: all of
    them (-1) for a full file, fewer for a pretrained prefix such as yolov4-tiny.conv.29 (Darknet
    loads such files up to their end). Raises DarknetError-style ValueError when the file ends inside
    a layer, via the engine's own message."""
    if os.path.getsize(path) < 12:
        raw.load_weights(path, -1)  # the engine's message for a short header
    floats = weights_floats(path)
    used = 0
    for i, need in enumerate(_layer_sizes(raw)):
        if used + need > floats:
            if used == floats:
                return i
            raw.load_weights(path, i + 1)  # ends inside layer i: the engine names the layer and sizes
            return i
        used += need
    return -1


def load_start_weights(raw, weights: str, made_for: Optional[str], say: Callable[[str], None],
                       warn: Callable[[str], None]) -> bool:
    """Loads `weights` into `raw` (a _core.Net). `made_for`: the cfg `raw` was adapted from (its
    class count changed), or None. Returns True when the weights came from that other network (a
    transfer: the caller starts counting iterations from 0)."""
    from .. import _core

    floats = weights_floats(weights)
    if made_for is None or floats == sum(_layer_sizes(raw)):  # same network (a resume), or a prefix
        n = weights_layers_in_file(raw, weights)
        before = len(raw.warnings)
        raw.load_weights(weights, n)
        for w in raw.warnings[before:]:
            warn(str(w))
        if n >= 0:
            say(f"loaded the first {n} of {len(raw.layers())} layers from {weights} (the others start from "
                "Darknet's random initialisation)")
        return False
    source = _core.Net(made_for, "cpu")
    n = weights_layers_in_file(source, weights)
    source.load_weights(weights, n)
    n = len(source.layers()) if n < 0 else n
    copied, kept = [], []
    for i in range(n):
        theirs, ours = source.params(i), raw.params(i)
        if {k: v.shape for k, v in theirs.items()} == {k: v.shape for k, v in ours.items()}:
            if ours:
                raw.set_params(i, theirs)
            copied.append(i)
        else:
            kept.append(i)
    if kept:
        say(f"loaded {len(copied)} of {len(raw.layers())} layers from {weights} (made for "
            f"{os.path.basename(made_for)}); layer{'s' if len(kept) != 1 else ''} {', '.join(map(str, kept))} (the "
            "convolutions before the heads, sized for another class count) and any layer past the file's end start "
            "from Darknet's random initialisation; iterations count from 0")
    else:  # a prefix that ends before the heads, e.g. yolov4-tiny.conv.29
        say(f"loaded the first {len(copied)} of {len(raw.layers())} layers from {weights} (the others start from "
            "Darknet's random initialisation); iterations count from 0")
    return True
