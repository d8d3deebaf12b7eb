"""forward() of a host batch in parts (Network::forward_kept): on a device that uploads beside its work, a
batch of two or more equal parts of `forward_part` images runs part by part, part k+1 going up while part k
runs. Checked on pocl through the upload_ahead checker (a device that offers upload_ahead and notes every
broken promise: an upload into a buffer that work queued since the previous upload used, or that was
allocated since), and on CUDA where there is one:
- the heads of the batch in parts are those of its parts forwarded one by one, bit for bit (the same shape
  runs the same kernels), and those of the whole batch within float rounding;
- the parts after the first go up ahead (parts - 1 upload_ahead calls a batch), and no promise is broken,
  in fp32 and fp16, with the network in NCHW and NHWC, and from a half batch;
- forward_part = 0, a batch of fewer than two parts and a batch that does not split evenly run whole.
"""
import os

import numpy as np
import pytest

import gpu_devices
from darknet_py import _core
from darknet_py.training.init_weights import darknet_init
from test_train import small_cfg

SIZE = 64


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    path = tmp_path_factory.mktemp("parts") / "net.cfg"
    path.write_text(small_cfg(classes=2, size=SIZE, batch=4, filters=(8, 16), head=16))
    return str(path)


def batch(n, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (n, 3, SIZE, SIZE)).astype(np.float32)


def checked_net(cfg, precision="fp32", layout="nchw", monkeypatch=None):
    if monkeypatch:
        monkeypatch.setenv("DARKNET_PY_LAYOUT", layout)
    net = _core.Net(cfg, gpu_devices.device("pocl"))
    darknet_init(net, 3)
    checker = _core.upload_ahead_device(gpu_devices.device("pocl"))
    _core.run_network_on(net, checker.device)
    net.precision = precision
    return net, checker


def one_by_one(net, x, part, heads):
    outs = [net.forward(x[k:k + part], heads) for k in range(0, len(x), part)]
    return [np.concatenate([o[h] for o in outs]) for h in range(len(heads))]


@pytest.mark.parametrize("precision,layout", [("fp32", "nchw"), ("fp16", "nchw"), ("fp16", "nhwc")])
def test_parts_give_the_heads_of_their_forwards_and_keep_the_promise(cfg, monkeypatch, precision, layout):
    net, checker = checked_net(cfg, precision, layout, monkeypatch)
    heads = list(net.yolo_layers) + [1, -1]  # a layer inside the net, and one counted from the end
    x = batch(12)
    net.forward_part = 4
    for call in range(3):  # the first calls allocate and record; later ones replay
        got = net.forward(x, heads)
        assert checker.calls().get("upload_ahead") == 2 * (call + 1)
    assert checker.notes() == []
    want = one_by_one(net, x, 4, heads)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.shape[0] == 12
        np.testing.assert_array_equal(g, w)
    net.forward_part = 0
    whole = net.forward(x, heads)
    for g, w in zip(got, whole):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 if precision == "fp32" else 2e-2)
    assert checker.calls().get("upload_ahead") == 6  # whole: no part went up ahead


def test_a_half_batch_goes_up_in_parts(cfg):
    net, checker = checked_net(cfg, "fp16")
    x = batch(8, seed=1).astype(np.float16)
    heads = list(net.yolo_layers)
    net.forward_part = 4
    got = net.forward(x, heads)
    assert checker.calls().get("upload_ahead") == 1 and checker.notes() == []
    np.testing.assert_array_equal(got[0], one_by_one(net, x, 4, heads)[0])
    np.testing.assert_array_equal(got[0], net.forward(x.astype(np.float32), heads)[0])  # the device's rounding


@pytest.mark.parametrize("n,part", [(4, 4), (7, 4), (10, 4), (12, 0)])
def test_batches_that_do_not_split_run_whole(cfg, n, part):
    net, checker = checked_net(cfg)
    net.forward_part = part
    heads = list(net.yolo_layers)
    got = net.forward(batch(n), heads)[0]
    assert got.shape[0] == n
    assert checker.calls().get("upload_ahead") is None
    net.forward_part = 0
    np.testing.assert_array_equal(got, net.forward(batch(n), heads)[0])


def test_forward_part_refuses_a_negative_count(cfg):
    net = _core.Net(cfg, "cpu")
    assert net.forward_part == int(os.environ.get("DARKNET_PY_FORWARD_PART") or 16)
    with pytest.raises(ValueError, match="forward_part: images must be 0 \\(whole batches\\) or more, got -1"):
        net.forward_part = -1


def test_cuda_parts_from_pinned_memory(cfg):
    net = _core.Net(cfg, gpu_devices.device("cuda"))
    darknet_init(net, 3)
    net.precision = "fp16"
    heads = list(net.yolo_layers)
    x = net.pin_memory(batch(32, seed=2))
    net.forward_part = 8
    for _ in range(3):
        got = net.forward(x, heads)[0]
    np.testing.assert_array_equal(got, one_by_one(net, x, 8, heads)[0])
