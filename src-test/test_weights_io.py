""".weights reading and writing, checked against files assembled here byte by byte from
Darknet's format (parser.c load_weights_upto / save_weights) and against the real yolov3-tiny.

Format: int32 major, minor, revision; `seen` as uint64 when major*10 + minor >= 2, else uint32;
then per layer, float32 blocks: [convolutional] biases, (scales, rolling_mean, rolling_variance
if batch_normalize), weights; [connected] biases, weights, (scales, rolling_mean,
rolling_variance) -- batchnorm AFTER the weights; weighted [shortcut] its weights. A header with
major or minor > 1000 marks connected weights stored transposed ([inputs][outputs]).
"""
from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

import darknet_py
from darknet_py import DarknetError

CFG = """[net]
width=8
height=6
channels=3

[convolutional]
batch_normalize=1
filters=4
size=3
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
filters=5
size=1
activation=linear

[connected]
output=3
batch_normalize=1
activation=linear
"""
# Darknet's block order and sizes for CFG (layer 1, maxpool, stores nothing):
BLOCKS = [
    (0, "biases", 4), (0, "scales", 4), (0, "rolling_mean", 4), (0, "rolling_variance", 4), (0, "weights", 4 * 3 * 9),
    (2, "biases", 5), (2, "weights", 5 * 4 * 1),
    (3, "biases", 3), (3, "weights", 3 * 5 * 3 * 4), (3, "scales", 3), (3, "rolling_mean", 3),
    (3, "rolling_variance", 3),
]
N_FLOATS = sum(n for _, _, n in BLOCKS)


def header(major, minor, revision, seen):
    seen_fmt = "<Q" if major * 10 + minor >= 2 else "<I"
    return struct.pack("<iii", major, minor, revision) + struct.pack(seen_fmt, seen)


def floats(n, seed):
    return np.random.default_rng(seed).normal(0, 1, n).astype("<f4")


def write(path, head: bytes, body: np.ndarray):
    path.write_bytes(head + body.astype("<f4").tobytes())
    return path


@pytest.fixture
def net(tmp_path):
    cfg = tmp_path / "small.cfg"
    cfg.write_text(CFG)
    return darknet_py.Network(cfg)


def _param_blocks(net):
    """(layer, name, flat copy) in the order params() lists them."""
    out = []
    for i in range(len(net.layers)):
        for name, arr in net.params(i).items():
            out.append((i, name, np.array(arr).ravel()))
    return out


def test_block_order_matches_darknet(net, tmp_path):
    body = floats(N_FLOATS, 1)
    path = write(tmp_path / "a.weights", header(0, 2, 5, 777), body)
    hdr = net.load_weights(path)
    assert (hdr["major"], hdr["minor"], hdr["revision"], hdr["seen"]) == (0, 2, 5, 777)
    got = _param_blocks(net)
    assert [(i, name, len(a)) for i, name, a in got] == BLOCKS
    offset = 0
    for i, name, a in got:
        np.testing.assert_array_equal(a, body[offset:offset + len(a)], err_msg=f"layer {i} {name}")
        offset += len(a)


def test_connected_batchnorm_semantics(net, tmp_path):
    """Beyond the order: the forward pass uses the blocks as Darknet does (W is [outputs][inputs],
    batchnorm with eps 1e-5 before the bias)."""
    body = floats(N_FLOATS, 2)
    body[12:16] = np.abs(body[12:16]) + 0.5  # conv rolling_variance > 0
    body[-3:] = np.abs(body[-3:]) + 0.5      # connected rolling_variance > 0
    net.load_weights(write(tmp_path / "a.weights", header(0, 2, 5, 0), body))
    x = np.random.default_rng(3).normal(0, 1, (1, 3, 6, 8)).astype(np.float32)
    outs = net._net.forward(x, [2, 3])
    assert np.all(np.isfinite(outs[1]))
    flat_in = outs[0].reshape(-1).astype(np.float64)
    p = {name: body[o:o + n].astype(np.float64) for (i, name, n), o in
         zip(BLOCKS, np.cumsum([0] + [n for *_, n in BLOCKS])) if i == 3}
    y = p["weights"].reshape(3, 60) @ flat_in
    y = (y - p["rolling_mean"]) / np.sqrt(p["rolling_variance"] + 1e-5) * p["scales"] + p["biases"]
    np.testing.assert_allclose(outs[1].ravel(), y, rtol=1e-5, atol=1e-5)


def test_transposed_connected_weights(net, tmp_path):
    """major > 1000: the file holds the connected weights as [inputs][outputs]. (`seen` is then 64 bits,
    as AlexeyAB's darknet and OpenCV read it; pjreddie's darknet read 32.)"""
    body = floats(N_FLOATS, 4)
    net.load_weights(write(tmp_path / "plain.weights", header(0, 2, 5, 9), body))
    want = {k: np.array(v) for k, v in net.params(3).items()}
    start = 4 * 4 + 108 + 5 + 20 + 3
    w = body[start:start + 180].reshape(3, 60)
    t_body = body.copy()
    t_body[start:start + 180] = w.T.ravel()
    hdr = net.load_weights(write(tmp_path / "t.weights", header(1001, 0, 0, 9), t_body))
    assert hdr["major"] == 1001 and hdr["seen"] == 9
    for k, v in net.params(3).items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)
    # our writer stores the normal layout with a 0.2.5 header: identical to the plain file
    net.save_weights(tmp_path / "re.weights")
    assert (tmp_path / "re.weights").read_bytes() == (tmp_path / "plain.weights").read_bytes()


def test_load_save_025_is_byte_identical(net, tmp_path):
    src = write(tmp_path / "a.weights", header(0, 2, 5, 123456789012), floats(N_FLOATS, 5))
    net.load_weights(src)
    net.save_weights(tmp_path / "b.weights")
    assert (tmp_path / "b.weights").read_bytes() == src.read_bytes()


def test_header_010_reads_32bit_seen(net, tmp_path):
    body = floats(N_FLOATS, 6)
    path = write(tmp_path / "old.weights", header(0, 1, 0, 4242), body)
    assert len(path.read_bytes()) == 16 + 4 * N_FLOATS  # 32-bit seen
    hdr = net.load_weights(path)
    assert (hdr["major"], hdr["minor"], hdr["seen"]) == (0, 1, 4242)
    np.testing.assert_array_equal(np.concatenate([a for *_, a in _param_blocks(net)]), body)
    net.save_weights(tmp_path / "new.weights")  # written as 0.2.5 with 64-bit seen
    new = (tmp_path / "new.weights").read_bytes()
    assert new[:20] == header(0, 2, 5, 4242) and new[20:] == path.read_bytes()[16:]


@pytest.mark.parametrize("n_layers", [1, 3])
def test_partial_load(net, tmp_path, n_layers):
    """load_weights(path, max_layers=N) fills layers 0..N-1 from the start of the file and leaves
    the rest as they were (Darknet's `partial`)."""
    full = write(tmp_path / "a.weights", header(0, 2, 5, 1), floats(N_FLOATS, 7))
    before = _param_blocks(net)  # the cfg's initial values (zeros, scales/variance 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a partial load of a longer file is not an error
        net.load_weights(full, max_layers=n_layers)
    ref = np.fromfile(full, "<f4", offset=20)
    offset = 0
    for (i, name, a), (_, _, a0) in zip(_param_blocks(net), before):
        if i < n_layers:
            np.testing.assert_array_equal(a, ref[offset:offset + len(a)], err_msg=f"layer {i} {name}")
        else:
            np.testing.assert_array_equal(a, a0, err_msg=f"max_layers={n_layers} touched layer {i} {name}")
        offset += len(a)


@pytest.mark.parametrize("missing,layer,block", [(1, 3, "rolling_variance"), (3 + 3 + 3 + 5, 3, "weights"),
                                                 (N_FLOATS - 6, 0, "scales")])
def test_truncated_file_names_layer(net, tmp_path, missing, layer, block):
    body = floats(N_FLOATS, 8)[:N_FLOATS - missing]
    path = write(tmp_path / "short.weights", header(0, 2, 5, 0), body)
    with pytest.raises(DarknetError) as e:
        net.load_weights(path)
    msg = str(e.value)
    ltype = net.layers[layer]["type"]
    # the block that is cut short: its size minus what is left of it
    offsets = np.cumsum([0] + [n for *_, n in BLOCKS])
    k = next(j for j, (i, name, _) in enumerate(BLOCKS) if i == layer and name == block)
    short_by = offsets[k + 1] - len(body)
    assert f"layer {layer}" in msg and ltype in msg and block in msg, msg
    assert f"missing {short_by}" in msg, msg
    assert str(path) in msg


def test_longer_file_warns_with_count(net, tmp_path):
    path = write(tmp_path / "long.weights", header(0, 2, 5, 0), floats(N_FLOATS + 7, 9))
    with pytest.warns(UserWarning, match=r"\b7 floats"):
        net.load_weights(path)


SHORTCUT_CFG = """[net]
width=5
height=4
channels=2

[convolutional]
filters=3
size=3
pad=1
activation=leaky

[convolutional]
filters=3
size=1
activation=linear

[shortcut]
from=-2
weights_type={wt}
weights_normalization=softmax
activation=linear
"""


@pytest.mark.parametrize("wt,n_weights", [("per_channel", 2 * 3), ("per_feature", 2)])
def test_weighted_shortcut_round_trip(tmp_path, wt, n_weights):
    cfg = tmp_path / "s.cfg"
    cfg.write_text(SHORTCUT_CFG.format(wt=wt))
    net = darknet_py.Network(cfg)
    n_conv = (3 + 3 * 2 * 9) + (3 + 3 * 3)
    body = floats(n_conv + n_weights, 10)
    src = write(tmp_path / "s.weights", header(0, 2, 5, 5), body)
    net.load_weights(src)
    np.testing.assert_array_equal(net.params(2)["weights"].ravel(), body[n_conv:])
    net.save_weights(tmp_path / "t.weights")
    assert (tmp_path / "t.weights").read_bytes() == src.read_bytes()


# ---------------------------------------------------------------------------------------------
# the real yolov3-tiny (written by Darknet with header 0.2.0)
# ---------------------------------------------------------------------------------------------

def test_real_yolov3_tiny_round_trip(yolov3_tiny, tmp_path):
    original = yolov3_tiny["weights"].read_bytes()
    major, minor, revision = struct.unpack("<iii", original[:12])
    assert (major, minor, revision) == (0, 2, 0)
    (seen,) = struct.unpack("<Q", original[12:20])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file must fit the cfg exactly: no leftover warning
        net = darknet_py.Network(yolov3_tiny["cfg"], yolov3_tiny["weights"])
    out = tmp_path / "resaved.weights"
    net.save_weights(out)
    saved = out.read_bytes()
    assert struct.unpack("<iiiQ", saved[:20]) == (0, 2, 5, seen)  # our writer: 0.2.5, seen preserved
    assert len(saved) == len(original)
    assert saved[20:] == original[20:], "a parameter changed in the load/save round trip"
