"""Activations held channels last (NHWC) on a GPU device, behind the ops (tensor.h Layout;
src-lib/gpu/PRECISION.md, "Layout"): the network's outputs, deltas, gradients and training steps match
the same network held NCHW on the same device, every host copy is NCHW, and the layout is chosen as
documented (Network.layout).

Every op case of the parity harness (diagnostics/op_cases.py) whose activations can be NHWC
(Ops.layout) runs so on pocl against the reference backend, or is refused with the error that names
the op's missing NHWC path. On pocl (CPU OpenCL, in CI) the NHWC kernels run (batchnorm's reductions and passes, both max pooling
backward paths, average pooling, upsample, the route copies, bias, yolo activation, the relayouts) and
the convolutions run on NCHW copies (pocl has no NHWC convolution); on Oclgrind the same kernels run
under its race and bounds checker (conftest.py), with channel counts that are not a multiple of the
kernels' 32 lanes; on CUDA cuDNN's NHWC convolutions with KRSC filters run too.

Tolerances, of each tensor's largest magnitude: NCHW and NHWC sum batchnorm's statistics in different
orders (and cuDNN its convolutions), so fp32 results differ by roundings (measured on pocl: 7e-6 after
an update); in bf16 a value near a rounding boundary then rounds to the neighbouring bf16 value, 2^-8
relative, which the next layers carry (measured in the first step: 0.17 % in the deltas on pocl, 0.6 %
in a gradient on an H100); after an update the two networks' weights differ by that too, and the next
step then drifts as training does (2.0 % on pocl, 10 % on an H100 in the second step's deltas): bf16
compares one step and the forward after it (0.8 % on pocl). A bf16 tensor that differs by more than its
bound (a value two roundings apart carried to the first layer's delta: 1.5 bf16 steps, 1.0 % on an H100)
passes only if NHWC is as close as NCHW, within 1.5x, to the same network run in fp32.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import gpu_devices
from darknet_py import DarknetError, _core
from darknet_py.diagnostics.half_op_cases import round_to
from darknet_py.diagnostics.op_cases import CASES, SHORTCUT_WEIGHTS, TRAIN_CASES, check_case, pool_out
from darknet_py.training.init_weights import darknet_init

SIZE, BATCH = 32, 2
# conv+bn+leaky, both maxpool backward paths (2/2 disjoint, 2/1 overlapping), a route of a channel
# group and a concatenation, local average pooling, upsample, a biased head conv and two heads
CFG = f"""[net]
batch={BATCH}
width={SIZE}
height={SIZE}
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[route]
layers=-1
groups=2
group_id=1

[convolutional]
batch_normalize=1
filters=8
size=1
stride=1
pad=0
activation=leaky

[route]
layers=-1,-3

[maxpool]
size=2
stride=1

[local_avgpool]
size=3
stride=1
pad=1

[convolutional]
size=1
stride=1
pad=1
filters=18
activation=linear

[yolo]
mask=3,4,5
anchors=4,4, 6,6, 8,8, 10,10, 14,14, 20,20
classes=1
num=6

[route]
layers=-3

[upsample]
stride=2

[convolutional]
size=1
stride=1
pad=1
filters=18
activation=linear

[yolo]
mask=0,1,2
anchors=4,4, 6,6, 8,8, 10,10, 14,14, 20,20
classes=1
num=6
"""
# yolov4's blocks: conv + batchnorm + mish, a residual shortcut, the CSP route of two layers, SPP's
# stride-1 max pools concatenated, then a head
CSP_CFG = f"""[net]
batch={BATCH}
width={SIZE}
height={SIZE}
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=mish

[convolutional]
batch_normalize=1
filters=8
size=1
stride=1
pad=1
activation=mish

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=mish

[shortcut]
from=-3
activation=linear

[route]
layers=-1,-3

[maxpool]
stride=1
size=5

[route]
layers=-2

[maxpool]
stride=1
size=9

[route]
layers=-1,-3,-4

[convolutional]
batch_normalize=1
filters=8
size=1
stride=1
pad=1
activation=swish

[convolutional]
size=1
stride=1
pad=1
filters=18
activation=linear

[yolo]
mask=0,1,2
anchors=4,4, 6,6, 8,8
classes=1
num=3
"""
# (the first step and before, after an update), of the tensor's largest magnitude (at least 1): see the docstring
TOL = {"fp32": (2e-5, 2e-5), "bf16": (0.01, 0.05)}
STEPS = {"fp32": 2, "bf16": 1}


def _net(tmp_path, monkeypatch, device: str, precision: str, layout: str, cfg: str = CFG):
    path = tmp_path / "layout.cfg"
    path.write_text(cfg)
    monkeypatch.setenv("DARKNET_PY_LAYOUT", layout)
    net = _core.Net(str(path), device)
    darknet_init(net, 3)
    net.precision = precision
    return net


def _run(net, steps: int = 2, size: int = SIZE, batch: int = BATCH):
    """Forward outputs, then per training step the loss, every delta and gradient, then the outputs."""
    layers = list(range(len(net.layers())))
    rng = np.random.default_rng(0)
    got = {"forward": net.forward(rng.random((batch, 3, size, size), dtype=np.float32), layers)}
    for step in range(steps):
        x = rng.random((batch, 3, size, size), dtype=np.float32)
        got[f"train {step}"] = net.forward_train(x, layers)
        truths = [np.array([[0.5, 0.4, 0.3, 0.4, 0]], np.float32)] * batch
        got[f"loss {step}"] = [np.float32([sum(h["loss"] for h in net.yolo_loss(truths))])]
        net.backward()
        got[f"deltas {step}"] = [net.delta(i) for i in layers]
        got[f"gradients {step}"] = [g for i in layers for _, g in sorted(net.gradients(i).items())]
        net.update(0.002, batch)
    got["forward after"] = net.forward(x, layers)
    assert not any(net.fallback_ops()), net.fallback_ops()
    return got


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max(initial=0))


def _assert_close(nchw: dict, nhwc: dict, tols: tuple, fp32: dict = None):
    """NHWC within the tolerance of NCHW; else (with fp32 given) no farther than 1.5x NCHW from fp32's run."""
    for key, want in nchw.items():
        tol = tols[0] if key == "forward" or key.endswith(" 0") else tols[1]
        for i, (a, b) in enumerate(zip(want, nhwc[key])):
            assert a.shape == b.shape and a.dtype == b.dtype == np.float32, (key, i)
            err, scale = _max_diff(a, b), max(1.0, float(np.abs(a).max(initial=0)))
            if err > tol * scale and fp32 is not None:
                truth = fp32[key][i]
                from_nchw, from_nhwc = _max_diff(a, truth), _max_diff(b, truth)
                assert from_nhwc <= 1.5 * from_nchw, (f"{key}, tensor {i}: {err} of {scale} from NCHW; from fp32: "
                                                      f"NHWC {from_nhwc}, NCHW {from_nchw}")
                continue
            assert err <= tol * scale, f"{key}, tensor {i}: {err} of {scale}"


@pytest.mark.parametrize("cfg", ["tiny", "csp"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("label", ["pocl", "cuda"])
def test_nhwc_network_trains_as_nchw(tmp_path, monkeypatch, label, precision, cfg):
    device, cfg = gpu_devices.device(label), {"tiny": CFG, "csp": CSP_CFG}[cfg]
    nchw = _net(tmp_path, monkeypatch, device, precision, "nchw", cfg)
    nhwc = _net(tmp_path, monkeypatch, device, precision, "nhwc", cfg)
    assert (nchw.layout, nhwc.layout) == ("nchw", "nhwc")
    fp32 = None if precision == "fp32" else _run(_net(tmp_path, monkeypatch, device, "fp32", "nchw", cfg),
                                                 STEPS[precision])
    _assert_close(_run(nchw, STEPS[precision]), _run(nhwc, STEPS[precision]), TOL[precision], fp32)


def test_nhwc_kernels_under_oclgrind(tmp_path, monkeypatch):
    """The NHWC kernels with 5 and 40 channels (a partial block of 32 lanes; two blocks, the second
    partial), one image of 8x8, under the race and bounds checker."""
    cfg = CFG.replace(f"width={SIZE}", "width=8").replace(f"height={SIZE}", "height=8").replace(
        f"batch={BATCH}", "batch=1").replace("filters=8\n", "filters=5\n").replace("filters=16\n", "filters=40\n")
    # (the NCHW network, the comparison's side, on pocl: the simulator is slow)
    nchw = _net(tmp_path, monkeypatch, gpu_devices.device("pocl"), "fp32", "nchw", cfg)
    nhwc = _net(tmp_path, monkeypatch, gpu_devices.device("oclgrind"), "fp32", "nhwc", cfg)
    _assert_close(_run(nchw, 1, 8, 1), _run(nhwc, 1, 8, 1), TOL["fp32"])


# Max pooling's NHWC kernels (maxpool_nhwc, maxpool_argmax_nhwc, maxpool_backward_disjoint_nhwc,
# maxpool_backward_nhwc: a thread per channel of a run of 8 pixels of a row, kernels/layout_index.h
# NHWC_RUN), as (n, c, h, w, size, stride_y, stride_x, padding): yolov4-tiny's 2/2 (disjoint) with a
# partial run (out_w 11) and 5 channels, 40 channels (more than a warp); yolov3-tiny's 2/1 (overlapping);
# overlapping in x only; an SPP-like 5/1; disjoint without padding (the last column in no window);
# windows of padding only (winner -1).
MAXPOOL_GEOMETRY = [(2, 5, 11, 21, 2, 2, 2, 1), (1, 40, 6, 10, 2, 2, 2, 1), (1, 3, 13, 13, 2, 1, 1, 1),
                    (1, 7, 10, 19, 3, 2, 1, 2), (1, 4, 9, 23, 5, 1, 1, 4), (2, 9, 6, 17, 2, 2, 2, 0),
                    (1, 3, 7, 9, 3, 3, 3, 5)]
MAXPOOL_NHWC_KERNELS = ("maxpool_nhwc", "maxpool_argmax_nhwc", "maxpool_backward_disjoint_nhwc",
                        "maxpool_backward_nhwc")
KERNEL_SUFFIX = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}  # storage -> kernel name suffix


def _maxpool_inputs(rng, n, c, h, w, k, sy, sx, pad):
    """x, dy for one geometry, exact in fp16 and bf16 and so are dx's sums: x integers in [-3, 3] (ties in
    most windows: the first in (ky, kx) order must win) with a few -inf (never a winner, as in the
    reference), dy quarters in [-2, 2]."""
    oh, ow = pool_out(h, k, sy, pad), pool_out(w, k, sx, pad)
    x = rng.integers(-3, 4, (n, c, h, w)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = -np.inf
    return x, rng.integers(-8, 9, (n, c, oh, ow)).astype(np.float32) / 4, [n, c, oh, ow]


@pytest.mark.parametrize("label", ["pocl", "oclgrind", "cuda"])
def test_nhwc_maxpool_kernels_give_the_reference_bits(label):
    """Forward and backward, both backward paths, every storage type: the NHWC kernels' results equal the
    reference's rounded to the storage type, and the NCHW kernels' on the same device, bit for bit; and
    they are the kernels that ran. Oclgrind (races, bounds) takes bf16 only (3-4 s)."""
    ref, dev = _core.Ops("reference"), _core.kernel_counting_device(gpu_devices.device(label))
    ops = _core.Ops(dev.device)
    rng = np.random.default_rng(32)
    storages = ["bf16"] if label == "oclgrind" else ["fp32", "fp16", "bf16"]
    cases = [_maxpool_inputs(rng, *g) for g in MAXPOOL_GEOMETRY]
    got = {}
    for layout in ("nhwc", "nchw"):
        ops.layout = layout
        for storage in storages:
            ops.storage = storage
            for g, (x, dy, out) in zip(MAXPOOL_GEOMETRY, cases):
                k, sy, sx, pad = g[4:]
                got[layout, storage, g] = (ops.pool("max", x, k, sy, sx, pad, out),
                                           ops.pool_backward("max", x, dy, k, sy, sx, pad))
        if layout == "nhwc":
            launched = {name for name in dev.calls() if "maxpool" in name}
            nhwc_kernels = {f"kernel {k}_{KERNEL_SUFFIX[s]}" for k in MAXPOOL_NHWC_KERNELS for s in storages}
            assert launched == nhwc_kernels, launched
    want = {g: (ref.pool("max", x, *g[4:], out), ref.pool_backward("max", x, dy, *g[4:]))
            for g, (x, dy, out) in zip(MAXPOOL_GEOMETRY, cases)}
    for (layout, storage, g), results in got.items():
        for what, a, b, nchw in zip(("forward", "backward"), results, want[g], got["nchw", storage, g]):
            with np.errstate(over="ignore"):  # -FLT_MAX, an empty window's max, is -inf in half
                b = b if storage == "fp32" else round_to(b, storage)
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (layout, storage, g, what)
            assert np.array_equal(a.view(np.uint32), nchw.view(np.uint32)), (layout, storage, g, what)


def test_layout_is_chosen_per_device_precision_and_layers(tmp_path, monkeypatch):
    pocl = gpu_devices.device("pocl")
    monkeypatch.delenv("DARKNET_PY_LAYOUT", raising=False)
    path = tmp_path / "layout.cfg"
    path.write_text(CFG)
    net = _core.Net(str(path), pocl)
    net.precision = "bf16"
    assert net.layout == "nchw"  # OpenCL prefers NCHW
    assert _net(tmp_path, monkeypatch, pocl, "bf16", "nhwc").layout == "nhwc"
    assert _net(tmp_path, monkeypatch, "cpu", "fp32", "nhwc").layout == "nchw"  # host memory is NCHW
    # a layer without a channels-last path (a shortcut from a layer of another shape: its sum is not
    # elementwise) keeps the whole network NCHW; a shortcut of equal shapes runs channels last
    shortcut = CFG.replace("[route]\nlayers=-1,-3", "[shortcut]\nfrom=-3\nactivation=linear")
    assert _net(tmp_path, monkeypatch, pocl, "fp32", "nhwc", shortcut).layout == "nchw"
    assert _net(tmp_path, monkeypatch, pocl, "fp32", "nhwc", CSP_CFG).layout == "nhwc"
    with pytest.raises(DarknetError, match=r"DARKNET_PY_LAYOUT='NHWC': use nchw, nhwc or auto"):
        _net(tmp_path, monkeypatch, pocl, "fp32", "NHWC")


def test_cuda_holds_half_batches_channels_last(tmp_path, monkeypatch):
    cuda = gpu_devices.device("cuda")
    tf32 = os.environ.get("DARKNET_PY_TF32", "0") not in ("", "0")  # read when the device opened
    assert [_net(tmp_path, monkeypatch, cuda, p, "auto").layout for p in ("fp32", "fp16", "bf16")] == [
        "nhwc" if tf32 else "nchw", "nhwc", "nhwc"]
    one = _net(tmp_path, monkeypatch, cuda, "bf16", "auto", CFG.replace(f"batch={BATCH}", "batch=1"))
    assert one.layout == "nchw"  # one image: our im2col + cuBLAS path, NCHW, is the faster there
    # one network, a pass of two images (NHWC) then of one (NCHW): each in its layout, the same heads
    net = _net(tmp_path, monkeypatch, cuda, "bf16", "auto")
    x = np.random.default_rng(0).random((2, 3, SIZE, SIZE), dtype=np.float32)
    both, single = net.forward(x, [9, 13]), net.forward(x[:1], [9, 13])
    for a, b in zip(both, single):
        assert np.abs(a[:1] - b).max() <= TOL["bf16"][0] * max(1.0, float(np.abs(a).max()))


# The ops whose activation arguments and results Ops.storage / Ops.layout apply to (_core_ops.cpp)
ACTIVATION_OPS = {"conv2d", "conv2d_affine_act", "activate", "pool", "copy_channels", "shortcut", "upsample",
                  "yolo_activate", "conv2d_backward_weights", "conv2d_backward_data", "bias_backward",
                  "batchnorm_train", "batchnorm_backward", "batchnorm_activate_train", "batchnorm_activate_backward",
                  "activate_backward", "pool_backward", "add_channels", "shortcut_backward", "upsample_backward", "fill",
                  "add_scaled"}
CHANNEL_MIXING = ("normalize_channels", "normalize_channels_softmax")


def _refused_without_nhwc_path(case) -> bool:
    """The cases an op may refuse in NHWC: shortcuts that do not sum elementwise (inputs of other
    shapes, per-channel weights), the pools that are not windows (global average, depth maximum), and
    activations that mix a pixel's channels."""
    if case.op in ("shortcut", "shortcut_backward"):
        x, froms, weights_type = case.args[0], case.args[1], case.args[3]
        return weights_type == SHORTCUT_WEIGHTS["per_channel"] or any(f.shape != x.shape for f in froms)
    if case.op in ("pool", "pool_backward"):
        return case.args[0] not in ("max", "local_avg")
    return any(isinstance(a, str) and a in CHANNEL_MIXING for a in case.args)


def test_every_op_takes_nhwc_activations_or_refuses_them():
    ref, ops = _core.Ops("reference"), _core.Ops(gpu_devices.device("pocl"))
    ops.layout = "nhwc"
    cases = [c for c in CASES + TRAIN_CASES if c.op in ACTIVATION_OPS]
    failed, refused = [], []
    for c in cases:
        try:
            r = check_case(ref, ops, c)
        except DarknetError as e:
            assert "was passed to an op that runs on NCHW tensors only" in str(e), (c.id, e)
            refused.append(c)
            continue
        if not r.ok:
            failed.append(f"{c.id}: {r.message}")
    assert not failed, f"{len(failed)} of {len(cases)} cases:\n" + "\n".join(failed[:10])
    # (an op without the path still runs a tensor whose two orders agree: 1x1 planes, one channel)
    assert refused and all(_refused_without_nhwc_path(c) for c in refused), [c.id for c in refused]
    assert len(cases) - len(refused) > 400 and not ops.fallback_counts(), ops.fallback_counts()
    with pytest.raises(DarknetError, match=r"layout nhwc: cpu holds NCHW only"):
        _core.Ops("cpu").layout = "nhwc"
