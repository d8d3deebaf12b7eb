"""Batchnorm fused with the activation in training: [convolutional] and [connected] with
batch_normalize and an elementwise activation run Backend::batchnorm_activate_train / _backward,
which GpuBackend computes without the activation's own passes (the activation inside
batchnorm_normalize; its gradient inside batchnorm_activate_backward_partial, at the output for
linear, leaky and relu, at the pre-activation formed again from x_norm for mish). The op-by-op parity
is in test_ops.py / test_half_precision.py (op_cases.py, half_op_cases.py); here a whole training step on pocl (the
same kernel text as CUDA and Metal) against the same step with the fusion switched off
(DARKNET_PY_FUSED_BATCHNORM=0: batchnorm, then the activation, as separate ops):
- fp32: every layer's output, every delta, the loss and the updated weights bit for bit (the fused
  kernels compute the same fp32 expression per element, and the same sums in the same order);
- fp16 / bf16: the fused forward rounds act(batchnorm) once where the composition rounds twice,
  so outputs agree within one rounding of the format; the backward is the composition's exactly;
- which kernels run: no activation pass and no pre-activation copy, and on a device with its own
  batchnorm (Metal's MPSGraph, modelled by a host fast-path device) the activation runs around it,
  with the same results.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpu_devices
from darknet_py import _core
from darknet_py.training.init_weights import darknet_init

SIZE, BATCH, CLASSES = 8, 2, 2
ENV = "DARKNET_PY_FUSED_BATCHNORM"


def _conv(activation: str, bn: bool = True, filters: int = 8, size: int = 3) -> str:
    return (f"[convolutional]\n{'batch_normalize=1' if bn else ''}\nfilters={filters}\nsize={size}\nstride=1\n"
            f"pad=1\nactivation={activation}\n\n")


# one conv + batchnorm per activation: the gradient read off the output (leaky, linear, relu) or formed
# from x_norm (mish), then a head
CFG = (f"[net]\nbatch={BATCH}\nwidth={SIZE}\nheight={SIZE}\nchannels=3\nmomentum=0.9\ndecay=0.0005\n"
       f"learning_rate=0.01\n\n" + _conv("leaky") + _conv("linear") + _conv("relu") + _conv("mish") +
       _conv("linear", bn=False, filters=3 * (CLASSES + 5), size=1) +
       f"[yolo]\nmask=0,1,2\nanchors=2,2, 4,4, 6,6\nclasses={CLASSES}\nnum=3\n")
LAYERS = list(range(5))


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    path = tmp_path_factory.mktemp("bn_act") / "bn_act.cfg"
    path.write_text(CFG)
    return str(path)


def _step(cfg, device, monkeypatch, fused: bool, precision: str = "fp32", on=None):
    """One training step (forward, yolo loss, backward, SGD update) from Darknet's init; returns the
    layers' outputs and deltas, the loss and the updated parameters. on: a test Device to run on."""
    monkeypatch.setenv(ENV, "1" if fused else "0")
    net = _core.Net(cfg, device)
    darknet_init(net, 3)
    if on is not None:
        _core.run_network_on(net, on)
    net.precision = precision
    if precision == "fp16":  # a loss scale these gradients fit: the step applies, as in fp32
        net.loss_scale = 1024.0
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, (BATCH, 3, SIZE, SIZE)).astype(np.float32)
    truths = [np.array([[0.5, 0.5, 0.4, 0.3, k % CLASSES]], np.float32) for k in range(BATCH)]
    outputs = [np.array(o) for o in net.forward_train(x, LAYERS)]
    loss = sum(h["loss"] for h in net.yolo_loss(truths))
    net.backward()
    deltas = [net.delta(i) for i in LAYERS]
    net.update(0.01, BATCH)
    params = [net.params(i) for i in LAYERS]
    assert not any(net.fallback_ops()), net.fallback_ops()
    return outputs, deltas, loss, params


def test_fused_step_equals_the_composition_bit_for_bit_in_fp32(cfg, monkeypatch):
    device = gpu_devices.device("pocl")
    fused, composed = _step(cfg, device, monkeypatch, True), _step(cfg, device, monkeypatch, False)
    for what, a, b in [("output", fused[0], composed[0]), ("delta", fused[1], composed[1])]:
        for i, (u, v) in enumerate(zip(a, b)):
            assert np.array_equal(u, v), f"layer {i} {what}: max |diff| {np.abs(u - v).max()}"
    assert fused[2] == composed[2]
    for i, (u, v) in enumerate(zip(fused[3], composed[3])):
        for name in u:
            assert np.array_equal(u[name], v[name]), f"layer {i} {name} after the update"
    assert fused[2] > 0 and any(np.abs(d).max() > 0 for d in fused[1])  # a step that moved something


UNIT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}  # unit roundoff of the formats


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_fused_step_in_half_is_the_composition_within_one_rounding(cfg, monkeypatch, precision):
    u, device = UNIT[precision], gpu_devices.device("pocl")
    fused = _step(cfg, device, monkeypatch, True, precision)
    composed = _step(cfg, device, monkeypatch, False, precision)
    # the first layer's output from the same inputs: leaky(v) rounded once (fused), or v rounded and
    # then 0.1 v rounded again (composed): within 3 roundings of each other, and not everywhere equal
    a, b = fused[0][0], composed[0][0]
    assert np.all(np.abs(a - b) <= 3 * u * np.abs(b)), np.abs(a - b).max()
    assert not np.array_equal(a, b)
    # the later layers see those differences through their batch statistics (measured on pocl: at
    # most 1.3 u in norm); the loss 0.12 u (fp16), 0.09 u (bf16). The deltas are not compared: the
    # batchnorm backward of this 128-value batch cancels so much that bf16 alone moves them 20 % from
    # fp32 (the composition; the fused step 5 %); the backward is test_fused_ops_are_the_composition_exactly's
    for i in LAYERS:
        off = np.linalg.norm(fused[0][i] - composed[0][i]) / np.linalg.norm(composed[0][i])
        assert off < 5 * u, (i, off)
    assert abs(fused[2] - composed[2]) <= u * composed[2]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", [(3, 5, 6, 7), (5, 260, 1, 1)])  # the second: the batch split 2 + 2 + 1
def test_fused_ops_are_the_composition_exactly(precision, shape):
    # batchnorm_activate_backward stores g = dy * act'(y) over dy and sums the stored g, as
    # activate_backward then batchnorm_backward do: the same bits in every storage type
    ops = _core.Ops(gpu_devices.device("pocl"))
    ops.storage = precision
    rng = np.random.default_rng(11)
    x, dy = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    scale, bias = rng.uniform(0.2, 2, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    # mish and swish take their gradient at the pre-activation x_norm * scale + bias, formed from the
    # stored x_norm in fp32: the composition's argument in fp32 (in half the composition would round it)
    for act in ("leaky", "relu", "linear") + (("mish", "swish") if precision == "fp32" else ()):
        y, xn, _, var = ops.batchnorm_activate_train(x, scale, bias, 1e-5, act)
        fused = ops.batchnorm_activate_backward(dy, y, xn, scale, bias, var, 1e-5, act)
        pre = xn * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)  # float32, unfused
        at = y if act in ("leaky", "relu", "linear") else pre
        composed = ops.batchnorm_backward(ops.activate_backward(at, dy, act), xn, scale, var, 1e-5)
        for k, (f, c) in enumerate(zip(fused, composed)):
            assert np.array_equal(f, c), (act, k, np.abs(f - c).max())
        # the forward: the same in fp32; within the double rounding in half
        y_composed = ops.activate(ops.batchnorm_train(x, scale, bias, 1e-5)[0], act)
        bound = 0 if precision == "fp32" else 3 * UNIT[precision] * np.abs(y_composed)
        assert np.all(np.abs(y - y_composed) <= bound), (act, np.abs(y - y_composed).max())


def _kernels(test_device) -> dict:
    return {k[len("kernel "):]: n for k, n in test_device.calls().items() if k.startswith("kernel ")}


def test_fusion_leaves_no_activation_pass_and_no_pre_activation_copy(cfg, monkeypatch):
    counted = {}
    for fused in (True, False):
        dev = _core.kernel_counting_device(gpu_devices.device("pocl"))
        _step(cfg, gpu_devices.device("pocl"), monkeypatch, fused, on=dev.device)
        counted[fused] = _kernels(dev)
    on, off = counted[True], counted[False]
    # fused: leaky, relu and mish fold into batchnorm's passes, mish without its pre-activation copy
    assert "activate_f32" not in on and "activate_backward_f32" not in on
    assert off.get("activate_f32") == 3 and off.get("activate_backward_f32") == 3  # leaky, relu, mish
    assert on.get("batchnorm_activate_backward_partial_f32") == 3  # leaky, relu, mish (linear: plain batchnorm)
    assert on.get("batchnorm_backward_partial_f32") == 1 and off.get("batchnorm_backward_partial_f32") == 4
    assert on.get("batchnorm_normalize_f32") == off.get("batchnorm_normalize_f32") == 4
    assert off["copy_channels_f32"] - on["copy_channels_f32"] == 1  # mish's pre-activation copy
    assert sum(on.values()) == sum(off.values()) - 7  # three activation passes fewer each way, one copy


def test_a_device_with_its_own_batchnorm_runs_the_activation_around_it(cfg, monkeypatch):
    # Metal's MPSGraph batchnorm (fp32) has no activation: the forward runs activate after it, the
    # backward hands it the gradient the fused partial pass left in dy. Modelled on pocl by a device
    # whose fast paths run on the host (the CPU backend): the same step as pocl's own kernels
    pocl = gpu_devices.device("pocl")
    dev = _core.host_fast_path_device(pocl)
    got = _step(cfg, pocl, monkeypatch, True, on=dev.device)
    want = _step(cfg, pocl, monkeypatch, True)
    calls = dev.calls()
    assert calls["batchnorm_train"] == 4 and calls["batchnorm_backward"] == 4
    assert calls["kernel activate_f32"] == 3 and calls["kernel batchnorm_activate_backward_partial_f32"] == 3
    assert "kernel batchnorm_normalize_f32" not in calls and "kernel batchnorm_backward_data_f32" not in calls
    for i in LAYERS:  # the CPU's sums run in another order: float32 rounding apart
        np.testing.assert_allclose(got[0][i], want[0][i], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[1][i], want[1][i], rtol=1e-3, atol=1e-5 * np.abs(want[1][i]).max())
    assert got[2] == pytest.approx(want[2], rel=1e-4)
