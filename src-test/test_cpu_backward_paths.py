"""The cpu backend's convolution gradients on every path they take, against the reference backend.

conv2d_backward_data runs stride-1 square kernels as a forward convolution of dY with the flipped,
channel-swapped filters, so it inherits cpu_conv2d's paths (Winograd F(2,3)/F(4,3), implicit GEMM),
which DARKNET_PY_CONV_PATH forces here on shapes where they apply; other geometries use W^T * dY
and col2im, 1x1 stride-1 layers add straight into dX. conv2d_backward_weights splits the batch
between threads (fixed ranges, odd batches here) and reads 1x1 stride-1 inputs as their own
column matrix. Both accumulate into the given start values. Bound as in test_ops.py: 1e-6 *
sqrt(terms) times the sum of |products| (the reference run on absolute values).
"""
from __future__ import annotations

import numpy as np
import pytest

from darknet_py import _core

PATHS = ["gemm", "winograd-f2", "winograd-f4"]
DOT_TOL = 1e-6

# (batch, cin, h, w, cout, kernel, stride, pad, groups)
SHAPES = [
    (3, 24, 13, 17, 40, 3, 1, 1, 1),   # 3x3 same: Winograd-eligible transposed convolution
    (2, 16, 9, 7, 12, 3, 1, 2, 1),     # pad 2: dY larger than dX, transposed padding 0
    (1, 10, 8, 11, 6, 3, 1, 0, 1),     # pad 0: transposed padding 2
    (3, 12, 10, 10, 8, 3, 1, 1, 2),    # groups: flipped filters per group
    (3, 20, 11, 9, 50, 1, 1, 0, 1),    # 1x1 stride 1: no im2col / col2im, N not a multiple of 48
    (2, 7, 15, 12, 9, 3, 2, 1, 1),     # stride 2: im2col / col2im with even-lane gathers
    (1, 6, 9, 9, 5, 1, 1, 1, 1),       # 1x1 with padding: the col2im path
]


def conv_out(size, k, stride, pad):
    return (size + 2 * pad - k) // stride + 1


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "n{}c{}-{}x{}-o{}-k{}s{}p{}g{}".format(*s))
@pytest.mark.parametrize("path", PATHS)
def test_conv_gradients_match_reference(path, shape, monkeypatch):
    n, cin, h, w, cout, k, s, pad, groups = shape
    monkeypatch.setenv("DARKNET_PY_CONV_PATH", path)
    rng = np.random.default_rng(sum(shape))
    oh, ow = conv_out(h, k, s, pad), conv_out(w, k, s, pad)
    x = rng.uniform(-2, 2, (n, cin, h, w)).astype(np.float32)
    wt = rng.uniform(-2, 2, (cout, cin // groups, k, k)).astype(np.float32)
    dy = rng.uniform(-2, 2, (n, cout, oh, ow)).astype(np.float32)
    dx0 = rng.uniform(-2, 2, x.shape).astype(np.float32)
    dw0 = rng.uniform(-2, 2, wt.shape).astype(np.float32)
    geom = (s, s, pad, 1, groups)
    ref, cpu = _core.Ops("reference"), _core.Ops("cpu")

    want = ref.conv2d_backward_data(dy, wt, dx0, *geom).astype(np.float64)
    got = cpu.conv2d_backward_data(dy, wt, dx0, *geom)
    tol = DOT_TOL * np.sqrt(cout // groups * k * k) * ref.conv2d_backward_data(
        np.abs(dy), np.abs(wt), np.abs(dx0), *geom) + 1e-6
    err = np.abs(got - want)
    assert (err <= tol).all(), f"backward_data {path}: worst error {(err / tol).max():.2f} x the bound"

    want = ref.conv2d_backward_weights(x, dy, dw0, *geom).astype(np.float64)
    got = cpu.conv2d_backward_weights(x, dy, dw0, *geom)
    tol = DOT_TOL * np.sqrt(n * oh * ow) * ref.conv2d_backward_weights(
        np.abs(x), np.abs(dy), np.abs(dw0), *geom) + 1e-6
    err = np.abs(got - want)
    assert (err <= tol).all(), f"backward_weights {path}: worst error {(err / tol).max():.2f} x the bound"
