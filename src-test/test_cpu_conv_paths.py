"""Every fast convolution path of the cpu backend against the naive reference backend.

cpu_conv2d picks Winograd F(4,3) or F(2,3) for 3x3 stride-1 layers where its cost model says it
pays, else an implicit GEMM (B panels packed straight from the image; 1x1 stride-1 layers read
the image as it is). The op parity tests (test_ops.py) use small shapes where the cost model
picks the GEMM, so here DARKNET_PY_CONV_PATH forces each path on shapes that reach its edge
cases: tile rows that straddle register-tile vectors, images narrower than a vector, batches whose
tiles span images, both Winograd loop orders (filters or inputs transformed up front), stride-2
panels, partial tiles at every edge. The bound is test_ops.py's: errors of a sum of K products
grow like sqrt(K) times the sum of |products|; Winograd's transforms add rounding of the same
kind (F(4,3) measures ~2e-6 of that magnitude, the direct sum ~1e-7; the bound is 1e-6*sqrt(K)).
"""
from __future__ import annotations

import numpy as np
import pytest

from darknet_py import _core

PATHS = ["gemm", "winograd-f2", "winograd-f4"]
ACTIVATIONS = ["linear", "leaky", "relu", "relu6", "logistic", "tanh", "swish", "mish", "hard_mish", "elu", "selu",
               "gelu"]
DOT_TOL = 1e-6

# (batch, cin, h, w, cout, kernel, stride, pad): 3x3 stride-1 shapes are where Winograd applies
SHAPES = [
    (1, 64, 26, 26, 64, 3, 1, 1),    # tile rows of 7/13 tiles straddle 16-lane vectors
    (2, 24, 9, 17, 40, 3, 1, 1),     # batch: vectors hold tiles of two images
    (1, 16, 3, 2, 24, 3, 1, 1),      # narrower than a tile: one partial tile per row
    (3, 33, 6, 6, 70, 3, 1, 1),      # few tiles, many filters: inputs transformed up front
    (1, 32, 13, 13, 256, 3, 1, 1),   # few pixels, many filters: the GEMM splits the rows, not the pixels
    (1, 17, 20, 11, 9, 3, 1, 2),     # pad 2: output larger than the input
    (1, 32, 7, 5, 24, 3, 1, 0),      # pad 0
    (1, 19, 31, 29, 21, 3, 2, 1),    # stride 2: the GEMM's even-lane packing
    (1, 5, 20, 64, 12, 3, 2, 1),     # stride 2, 32-pixel rows: every panel vector reads one row segment
    (1, 3, 18, 130, 32, 3, 2, 1),    # stride 2, K = 27 (a first layer), 65-pixel rows: both packings
    (2, 21, 27, 53, 10, 1, 1, 0),    # 1x1 stride 1: B is the image itself, N not a multiple of 48
    (1, 9, 12, 50, 13, 5, 1, 2),     # 5x5: more taps than the segment loads handle at once
]


def conv_out(size, k, stride, pad):
    return (size + 2 * pad - k) // stride + 1


def run(path, monkeypatch, op, *args):
    monkeypatch.setenv("DARKNET_PY_CONV_PATH", path)
    return getattr(_core.Ops("cpu"), op)(*args)


def bound(ref, x, w, geom, scale=None):
    mag = ref.conv2d(np.abs(x), np.abs(w), *geom).astype(np.float64)
    if scale is not None:
        mag *= np.abs(scale).astype(np.float64)[None, :, None, None]
    return DOT_TOL * np.sqrt(w[0].size) * mag + 1e-6


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "n{}c{}-{}x{}-o{}-k{}s{}p{}".format(*s))
@pytest.mark.parametrize("path", PATHS)
def test_conv_path_matches_reference(path, shape, monkeypatch):
    n, cin, h, w, cout, k, s, pad = shape
    rng = np.random.default_rng(hash(shape) % 2**32)
    x = rng.uniform(-2, 2, (n, cin, h, w)).astype(np.float32)
    wt = rng.uniform(-2, 2, (cout, cin, k, k)).astype(np.float32)
    geom = (s, s, pad, 1, 1, conv_out(h, k, s, pad), conv_out(w, k, s, pad))
    ref = _core.Ops("reference")
    want = ref.conv2d(x, wt, *geom).astype(np.float64)
    got = run(path, monkeypatch, "conv2d", x, wt, *geom)
    err = np.abs(got - want)
    tol = bound(ref, x, wt, geom)
    assert (err <= tol).all(), f"{path}: worst error {(err / tol).max():.2f} x the bound"


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("path", PATHS)
def test_fused_epilogue_matches_reference(path, act, monkeypatch):
    """Folded batch norm and each activation, applied on the register tile (GEMM) or in the
    output transform (Winograd), vectorised (exp-based ones use a polynomial exp)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (1, 24, 14, 19)).astype(np.float32)
    wt = rng.uniform(-1, 1, (20, 24, 3, 3)).astype(np.float32)
    scale = rng.uniform(-0.5, 0.5, 20).astype(np.float32)
    shift = rng.uniform(-1, 1, 20).astype(np.float32)
    geom = (1, 1, 1, 1, 1, 14, 19)
    ref = _core.Ops("reference")
    for sc in (scale, None):
        want = ref.conv2d_affine_act(x, wt, *geom, sc, shift, act).astype(np.float64)
        got = run(path, monkeypatch, "conv2d_affine_act", x, wt, *geom, sc, shift, act)
        # activation slopes are <= 2 here; the activation itself is compared to ~1e-6 relative
        tol = 2 * bound(ref, x, wt, geom, sc) + 2e-6 * np.abs(want)
        err = np.abs(got - want)
        assert (err <= tol).all(), f"{path} {act}: worst error {(err / tol).max():.2f} x the bound"


def test_forcing_a_path_changes_the_arithmetic(monkeypatch):
    """The override really switches algorithms (else the tests above would test one path thrice):
    Winograd and the direct sum round differently, so their outputs are not bit-identical."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 16, 16)).astype(np.float32)
    wt = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    geom = (1, 1, 1, 1, 1, 16, 16)
    outs = {p: run(p, monkeypatch, "conv2d", x, wt, *geom) for p in PATHS}
    assert not np.array_equal(outs["gemm"], outs["winograd-f4"])
    assert not np.array_equal(outs["gemm"], outs["winograd-f2"])
    assert not np.array_equal(outs["winograd-f2"], outs["winograd-f4"])


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("n, cin, h, w, cout", [(2, 48, 21, 23, 56), (1, 32, 13, 13, 256)])
def test_thread_count_does_not_change_results(threads, n, cin, h, w, cout, monkeypatch):
    """Jobs split the output differently per thread count (a small image with many filters: by rows);
    each output is still summed in the same order, so results are bit-identical (and the pool survives
    being restarted)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    wt = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    geom = (1, 1, 1, 1, 1, h, w)
    old = _core.get_threads()
    try:
        _core.set_threads(2)
        base = {p: run(p, monkeypatch, "conv2d", x, wt, *geom) for p in PATHS}
        _core.set_threads(threads)
        for p in PATHS:
            assert np.array_equal(run(p, monkeypatch, "conv2d", x, wt, *geom), base[p]), p
    finally:
        _core.set_threads(old)


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("path", PATHS)
def test_epilogue_activation_is_darknets_formula(path, act, monkeypatch):
    """The vectorised activations alone: the same path's linear output, activated by the
    reference's scalar formula (activation.h), must match to a few float rounding steps."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-3, 3, (1, 16, 10, 21)).astype(np.float32)
    wt = rng.uniform(-1, 1, (24, 16, 3, 3)).astype(np.float32)
    scale = rng.uniform(0.2, 1.5, 24).astype(np.float32)
    shift = rng.uniform(-2, 2, 24).astype(np.float32)
    geom = (1, 1, 1, 1, 1, 10, 21)
    v = run(path, monkeypatch, "conv2d_affine_act", x, wt, *geom, scale, shift, "linear")
    assert np.abs(v).max() > 15, "inputs should reach the activations' saturated ranges"
    want = _core.Ops("reference").activate(v, act).astype(np.float64)
    got = run(path, monkeypatch, "conv2d_affine_act", x, wt, *geom, scale, shift, act)
    err = np.abs(got - want)
    # a few ulps (the polynomial exp is within ~1 ulp of libm's); Darknet's mish computes
    # log(exp(x) + 1) in float, which rounds to multiples of 2^-23 below x ~ -16 (the vectorised
    # mish does not), an error of up to |x| 2^-23
    tol = 2e-7 + 4e-7 * np.abs(want) + (1.2e-7 * np.abs(v) if act == "mish" else 0)
    assert (err <= tol).all(), f"{path} {act}: worst error {(err / tol).max():.2f} x the bound"


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("path", PATHS)
def test_nan_propagates_like_the_scalar_formulas(path, act, monkeypatch):
    """A NaN (a diverged weight) must come out of the fused epilogue wherever the scalar formula
    gives NaN (training stops on a NaN loss); the clamps of the vectorised exp must not absorb it."""
    rng = np.random.default_rng(13)
    x = rng.uniform(-1, 1, (1, 16, 9, 11)).astype(np.float32)
    wt = rng.uniform(-1, 1, (16, 16, 3, 3)).astype(np.float32)
    shift = rng.uniform(-1, 1, 16).astype(np.float32)
    shift[3] = np.nan
    geom = (1, 1, 1, 1, 1, 9, 11)
    v = run(path, monkeypatch, "conv2d_affine_act", x, wt, *geom, None, shift, "linear")
    want = _core.Ops("reference").activate(v, act)
    got = run(path, monkeypatch, "conv2d_affine_act", x, wt, *geom, None, shift, act)
    assert np.isnan(v[:, 3]).all()
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{path} {act}: NaN positions differ"


def test_yolo_activation_propagates_nan():
    x = np.random.default_rng(2).standard_normal((1, 255, 5, 7)).astype(np.float32)
    x[0, ::3, 2, 3] = np.nan
    got = _core.Ops("cpu").yolo_activate(x, 3, 80, False, 1.05)
    want = _core.Ops("reference").yolo_activate(x, 3, 80, False, 1.05)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=1e-7)
