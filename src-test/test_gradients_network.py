"""Network-level gradient checks: small networks (cfgs written here) holding every layer type that
has a backward pass, on every backend. After forward_train, set_delta(last, r) and backward, each
layer's parameter gradients are compared with central finite differences of L = sum(r * output)
computed by forward_train itself, so the layers' backward passes, their wiring (route, shortcut,
sam and scale_channels deltas reaching the layers they read) and the saved training state are
checked together. The per-op backward kernels are checked in float64 in test_ops.py; here the
network runs in float32, which sets the tolerance (see FD_H / NET_TOL).

Also: dropout's backward applies the forward's mask; the [yolo] head passes its delta (the loss's
dL/d(head input), Darknet's convention) straight through; and one SGD step along the gradient of
the yolo loss lowers the loss on the same batch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from darknet_py import _core

BACKENDS = ["reference", "cpu"]

# Central differences on the float32 network. The loss is summed in float64, but the outputs carry
# float32 round-off of the whole forward (~1e-6 of the loss here), which the difference divides by
# h; a 4-point stencil (truncation ~h^4) allows a large h, and h = 3e-2 balances the two. Measured
# worst ratios |grad - fd| / (|fd| + max|fd| of the tensor) over 6 seeds and both backends are
# 2.6e-3 (the per-channel softmax shortcut weights, whose gradients are the smallest); with
# h = 1e-2 they reach 8e-3. A missing term, a wrong sign or scale, or a delta that does not reach
# a layer are O(1) errors; the exact per-op checks are the float64 ones in test_ops.py.
FD_H = 3e-2
NET_TOL = 1.5e-2
SAMPLES_PER_TENSOR = 16  # elements checked per parameter tensor (all when it has fewer)


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param not in _core.backends():
        pytest.skip(f"backend {request.param!r} is not built into this module (have {_core.backends()})")
    return request.param


def make_net(tmp_path: Path, text: str, backend: str) -> "_core.Net":
    path = tmp_path / "net.cfg"
    path.write_text(text)
    return _core.Net(str(path), backend)


def init_params(net, seed: int) -> None:
    """Seeded parameters that keep activations O(1): weights ~ N(0, 1/fan_in), biases ~ N(0, 0.1),
    batchnorm scales in [0.5, 1.5], shortcut weights in [0.3, 1.5] except one negative raw weight
    (relu normalisation clamps it: its gradient must be 0)."""
    rng = np.random.default_rng(seed)
    for i, info in enumerate(net.layers()):
        p = net.params(i)
        if "scales" in p:
            p["scales"][...] = rng.uniform(0.5, 1.5, p["scales"].shape)
        if "biases" in p:
            p["biases"][...] = rng.normal(0, 0.1, p["biases"].shape)
        if "weights" in p:
            w = p["weights"]
            if info["type"] == "shortcut":
                w[...] = rng.uniform(0.3, 1.5, w.shape)
                w.reshape(-1)[-1] = -0.4
                continue
            fan_in = w.size // info["output"][0]
            w[...] = rng.normal(0, 1 / np.sqrt(fan_in), w.shape)


def loss_of(net, x: np.ndarray, r: np.ndarray, layer: int) -> float:
    return float(np.sum(r * net.forward_train(x, [layer])[0].astype(np.float64)))


def check_param_gradients(net, x: np.ndarray, loss_layer: int, seed: int, what: str) -> Dict[str, float]:
    """Backpropagates r from the last layer and compares every layer's parameter gradients with
    finite differences of sum(r * output of loss_layer). Returns the worst ratio per tensor."""
    rng = np.random.default_rng(seed)
    last = len(net.layers()) - 1
    out = net.forward_train(x, [last])[0]
    r = rng.uniform(-1, 1, out.shape).astype(np.float32)
    net.set_delta(last, r)
    net.backward()
    r = r.astype(np.float64)
    worst = {}
    for i, info in enumerate(net.layers()):
        grads = {k: np.array(v) for k, v in net.gradients(i).items()}  # copies: FD runs more passes
        values = net.params(i)
        for name, g in grads.items():
            v = values[name].reshape(-1)
            g = g.reshape(-1).astype(np.float64)
            assert g.size == v.size, f"{what}: layer {i} {name}: gradient has {g.size} values, parameter {v.size}"
            idx = np.arange(v.size) if v.size <= SAMPLES_PER_TENSOR else \
                rng.choice(v.size, SAMPLES_PER_TENSOR, replace=False)
            fd = np.empty(idx.size)
            for j, e in enumerate(idx):
                orig = v[e]
                ls = []
                for step in (-2, -1, 1, 2):
                    v[e] = orig + step * FD_H
                    ls.append(loss_of(net, x, r, loss_layer))
                v[e] = orig
                fd[j] = (8 * (ls[2] - ls[1]) - (ls[3] - ls[0])) / (12 * FD_H)
            got = g[idx]
            scale = np.abs(fd).max()
            ratio = np.abs(got - fd) / (np.abs(fd) + scale + 1e-30)
            worst[f"{i}:{info['type']}:{name}"] = float(ratio.max())
            bad = ratio > NET_TOL
            assert not bad.any(), (
                f"{what}: layer {i} ({info['type']}, line {info['line']}) {name}: gradient differs from finite "
                f"differences at elements {idx[bad].tolist()}: got {got[bad].tolist()}, fd {fd[bad].tolist()} "
                f"(max |fd| {scale:.3g}, tolerance {NET_TOL} of |fd| + max |fd|)")
    return worst


# ---------------------------------------------------------------------------------------------
# Every layer type with a backward, in one network. Smooth activations only (mish, swish, tanh,
# logistic): the kinks of leaky/relu would break finite differences.

ALL_LAYERS_CFG = """[net]
batch=4
width=9
height=9
channels=4

# 0: positive 1x1 depthwise weights and logistic: increasing in the input per channel, so the
#    maxpool after it keeps the argmax of the input (a distinct ramp) however the finite
#    differences move this layer's parameters: no kink is crossed. (No batchnorm here: it would
#    cancel the per-channel weight, leaving it an eps-sized gradient.)
[convolutional]
filters=4
size=1
groups=4
activation=logistic

# 1: 4x5x5 (Darknet's default padding size-1: the last window hangs over the edge)
[maxpool]
size=2
stride=2

# 2: 6x5x5
[convolutional]
batch_normalize=1
filters=6
size=3
pad=1
activation=mish

# 3: 6x5x5, 2 groups, dilation 2 (padding 2; Darknet's output size ignores dilation)
[convolutional]
filters=6
size=3
pad=1
groups=2
dilation=2
activation=swish

# 4: second half of the channels of 2 and of 3
[route]
layers=2,3
groups=2
group_id=1

# 5
[shortcut]
from=2
weights_type=per_channel
weights_normalization=softmax
activation=tanh

# 6
[shortcut]
from=3,2
weights_type=per_feature
weights_normalization=relu

# 7
[shortcut]
from=4
activation=logistic

# 8: 4x3x3
[convolutional]
filters=4
size=3
stride=2
pad=1
activation=tanh

# 9: 4x6x6
[upsample]
stride=2

# 10: 16x3x3
[reorg3d]
stride=2

# 11: 16x3x3
[local_avgpool]
size=3
stride=1

# 12: 1x3x3
[convolutional]
filters=1
size=1
activation=logistic

# 13: per-pixel scale of layer 11
[scale_channels]
from=11
scale_wh=1

# 14: 16x1x1
[avgpool]

# 15
[convolutional]
filters=16
size=1
activation=logistic

# 16: per-channel scale of layer 13
[scale_channels]
from=13

# 17
[sam]
from=11

# 18: probability 0 passes the delta through
[dropout]
probability=0

# 19
[connected]
output=10
batch_normalize=1
activation=tanh

# 20
[connected]
output=8
activation=linear

# 21
[softmax]
groups=2
temperature=0.7
"""


def ramp_input(shape, seed: int) -> np.ndarray:
    """Per channel a shuffled ramp over [-2, 2]: distinct values, so every max has a clear winner."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    x = np.empty(shape, np.float32)
    for ch in range(c):
        x[:, ch] = rng.permutation(np.linspace(-2, 2, n * h * w)).reshape(n, h, w)
    return x


def test_every_layer_type_gradients_match_finite_differences(tmp_path, backend):
    net = make_net(tmp_path, ALL_LAYERS_CFG, backend)
    types = {l["type"] for l in net.layers()}
    assert {"conv", "max", "route", "shortcut", "upsample", "reorg3d", "local_avg", "scale_channels", "avg", "sam",
            "dropout", "connected", "softmax"} <= types, types
    init_params(net, 1)
    p0 = net.params(0)
    p0["weights"][...] = np.random.default_rng(2).uniform(0.5, 1.5, p0["weights"].shape)  # increasing, see cfg
    x = ramp_input((4, 4, 9, 9), 3)
    worst = check_param_gradients(net, x, len(net.layers()) - 1, 4, f"all-layers net on {backend}")
    # the first layers' gradients went through every later layer's backward
    assert {"0:conv:weights", "2:conv:scales", "5:shortcut:weights", "6:shortcut:weights", "19:connected:scales"} <= \
        set(worst), sorted(worst)


# ---------------------------------------------------------------------------------------------
# [yolo]: the loss writes dL/d(head input) into the head's delta, so backward is an identity pass

YOLO_CFG = """[net]
batch=2
width=8
height=8
channels=3
learning_rate=0.001
momentum=0.9
decay=0.0005

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=mish

[convolutional]
filters=14
size=1
activation=linear

[yolo]
mask=0,1
anchors=2,3, 4,5, 6,6
num=3
classes=2
"""


def test_yolo_head_passes_its_delta_through(tmp_path, backend):
    net = make_net(tmp_path, YOLO_CFG, backend)
    init_params(net, 5)
    x = np.random.default_rng(6).uniform(0, 1, (2, 3, 8, 8)).astype(np.float32)
    # the delta set on the head is dL/d(its input): finite differences of sum(r * input of the head)
    check_param_gradients(net, x, 1, 7, f"yolo net on {backend}")


TRUTHS = [np.array([[0.4, 0.6, 0.3, 0.4, 1], [0.7, 0.2, 0.2, 0.2, 0]], np.float32),
          np.array([[0.5, 0.5, 0.5, 0.6, 0]], np.float32)]


def yolo_loss_after(net, x, lr: float, steps: int) -> List[float]:
    losses = []
    for _ in range(steps + 1):
        net.forward_train(x, [2])
        losses.append(sum(h["loss"] for h in net.yolo_loss(TRUTHS)))
        net.backward()
        net.update(lr, 2)
    return losses


def test_sgd_step_along_yolo_gradient_lowers_the_loss(tmp_path, backend):
    x = np.random.default_rng(8).uniform(0, 1, (2, 3, 8, 8)).astype(np.float32)
    nets = []
    for _ in range(2):
        net = make_net(tmp_path, YOLO_CFG, backend)
        init_params(net, 9)
        nets.append(net)
    down = yolo_loss_after(nets[0], x, 1e-3, 3)
    up = yolo_loss_after(nets[1], x, -1e-3, 1)  # the opposite direction must raise it: the test can fail
    assert down[0] == up[0]
    assert all(b < a for a, b in zip(down, down[1:])), f"yolo loss along the gradient on {backend}: {down}"
    assert up[1] > up[0], f"yolo loss against the gradient on {backend}: {up}"


# ---------------------------------------------------------------------------------------------
# [dropout] is random in training: backward must apply the mask the forward drew

DROPOUT_CFG = """[net]
batch=2
width=6
height=5
channels=3

[convolutional]
filters=4
size=3
pad=1
activation=linear

[dropout]
probability=0.4
"""


def test_dropout_backward_applies_the_forward_mask(tmp_path, backend):
    net = make_net(tmp_path, DROPOUT_CFG, backend)
    init_params(net, 10)
    x = np.random.default_rng(11).uniform(-1, 1, (2, 3, 5, 6)).astype(np.float32)
    a, y = net.forward_train(x, [0, 1])
    assert np.all(a != 0)
    r = np.random.default_rng(12).uniform(-1, 1, y.shape).astype(np.float32)
    net.set_delta(1, r)
    net.backward()
    dx = net.delta(0)  # dL/d(conv output): the linear conv without batchnorm leaves its delta as is
    scale = np.float32(1 / (1 - 0.4))
    dropped = y == 0
    assert 0.2 < dropped.mean() < 0.6, f"{dropped.mean():.2f} of the values dropped with probability 0.4"
    np.testing.assert_allclose(y[~dropped], a[~dropped] * scale, rtol=1e-6)
    assert np.all(dx[dropped] == 0), "gradient reaches inputs the forward dropped"
    np.testing.assert_allclose(dx[~dropped], r[~dropped] * scale, rtol=1e-6)
    # a new forward draws a new mask
    y2 = net.forward_train(x, [1])[0]
    assert not np.array_equal(y2 == 0, dropped)
