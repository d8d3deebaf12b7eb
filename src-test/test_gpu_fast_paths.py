"""GpuBackend's vendor fast-path hooks (Device::conv2d, pool, batchnorm_train, ... in gpu/device.h),
proven without cuDNN or MPS: a test device wraps pocl's OpenCL device, claims every fast path and
computes it on the host with the CPU backend. Every op must then equal the reference backend, go
through the fast path exactly once, and launch none of the kernels it replaces."""
import numpy as np
import pytest

import gpu_devices
from darknet_py import _core

rng = np.random.default_rng(3)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def ref():
    return _core.Ops("reference")


@pytest.fixture
def dev():
    return _core.host_fast_path_device(gpu_devices.device("pocl"))


def kernels(dev):
    return {k[len("kernel "):] for k in dev.calls() if k.startswith("kernel ")}


def close(a, b):
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)


def test_convolution_forward_and_backward_take_the_fast_path(dev, ref):
    ops = _core.Ops(dev.device)
    x, w, dy = rand(2, 4, 7, 7), rand(6, 2, 3, 3), rand(2, 6, 4, 4)
    args = (2, 2, 1, 1, 2)  # stride y, x, pad, dilation, groups
    close(ops.conv2d(x, w, *args, 4, 4), ref.conv2d(x, w, *args, 4, 4))
    scale, shift = rand(6), rand(6)  # the inference path: conv (fast path), then our affine + activation kernel
    close(ops.conv2d_affine_act(x, w, *args, 4, 4, scale, shift, "leaky"),
          ref.conv2d_affine_act(x, w, *args, 4, 4, scale, shift, "leaky"))
    dx0, dw0 = rand(2, 4, 7, 7), rand(6, 2, 3, 3)
    close(ops.conv2d_backward_data(dy, w, dx0, *args), ref.conv2d_backward_data(dy, w, dx0, *args))
    close(ops.conv2d_backward_weights(x, dy, dw0, *args), ref.conv2d_backward_weights(x, dy, dw0, *args))
    calls = dev.calls()
    assert calls["conv2d"] == 2 and calls["conv2d_backward_data"] == 1 and calls["conv2d_backward_weights"] == 1
    assert not kernels(dev) & {"im2col_f32", "col2im_f32", "gemm_f32"}


@pytest.mark.parametrize("kind, name", [("max", "maxpool"), ("local_avg", "avgpool")])
def test_pooling_forward_and_backward_take_the_fast_path(dev, ref, kind, name):
    ops = _core.Ops(dev.device)
    x, dy = rand(2, 3, 9, 9), rand(2, 3, 5, 5)
    close(ops.pool(kind, x, 3, 2, 2, 2, [2, 3, 5, 5]), ref.pool(kind, x, 3, 2, 2, 2, [2, 3, 5, 5]))
    close(ops.pool_backward(kind, x, dy, 3, 2, 2, 2), ref.pool_backward(kind, x, dy, 3, 2, 2, 2))
    assert dev.calls()[name] == 1 and dev.calls()[name + "_backward"] == 1
    assert not kernels(dev) & {"maxpool_f32", "avgpool_local_f32", "maxpool_argmax_f32", "maxpool_backward_f32",
                               "maxpool_backward_disjoint_f32",
                               "avgpool_local_backward_f32"}


def test_batchnorm_training_forward_and_backward_take_the_fast_path(dev, ref):
    ops = _core.Ops(dev.device)
    y, scale, bias = rand(3, 4, 5, 5), rand(4), rand(4)
    close(ops.batchnorm_train(y, scale, bias, 1e-5), ref.batchnorm_train(y, scale, bias, 1e-5))
    dy, xn, var = rand(3, 4, 5, 5), rand(3, 4, 5, 5), np.abs(rand(4)) + 0.5
    close(ops.batchnorm_backward(dy, xn, scale, var, 1e-5), ref.batchnorm_backward(dy, xn, scale, var, 1e-5))
    assert dev.calls()["batchnorm_train"] == 1 and dev.calls()["batchnorm_backward"] == 1
    assert not kernels(dev) & {"batchnorm_partial_stats_f32", "batchnorm_combine_stats_f32", "batchnorm_normalize_f32",
                               "batchnorm_backward_partial_f32", "batchnorm_backward_combine_f32",
                               "batchnorm_backward_data_f32"}


def test_without_fast_paths_the_same_device_runs_its_kernels(ref):
    ops = _core.Ops(gpu_devices.device("pocl"))
    x, w = rand(1, 2, 6, 6), rand(3, 2, 3, 3)
    close(ops.conv2d(x, w, 1, 1, 1, 1, 1, 6, 6), ref.conv2d(x, w, 1, 1, 1, 1, 1, 6, 6))
