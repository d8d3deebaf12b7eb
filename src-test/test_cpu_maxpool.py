"""The cpu backend's max pooling (src-lib/cpu/maxpool.cpp: a separable max, vectorized on the
interior) against the reference backend on values the op parity tests (test_ops.py, finite random
inputs) do not draw: -inf, NaN, and windows made only of them. Darknet's loop starts each window's max
at -FLT_MAX and skips NaN inputs (std::max(best, v) keeps best when v is NaN), so a window of -inf
and NaN gives -FLT_MAX; the fast path must give exactly the reference's values, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from darknet_py import _core

FLT_MAX = float(np.finfo(np.float32).max)

# (h, w, size, stride_y, stride_x, padding): the models' shapes at widths past one 16-float vector
GEOMETRIES = [(20, 40, 2, 2, 2, 1), (21, 37, 2, 2, 2, 1), (13, 37, 2, 1, 1, 1), (13, 45, 5, 1, 1, 4),
              (13, 13, 13, 1, 1, 12), (9, 50, 3, 1, 2, 2)]


def pool_out(size: int, k: int, stride: int, padding: int) -> int:
    return (size + padding - k) // stride + 1


@pytest.mark.parametrize("geom", GEOMETRIES, ids=lambda g: "{}x{}-k{}-s{}{}-p{}".format(*g))
def test_maxpool_special_values_match_reference(geom):
    h, w, k, sy, sx, pad = geom
    rng = np.random.default_rng(sum(geom))
    x = rng.uniform(-2, 2, (2, 3, h, w)).astype(np.float32)
    x[0, 0, : h // 2] = -np.inf          # whole windows of -inf: -FLT_MAX
    x[0, 1, ::3, ::2] = np.nan           # NaN among finite values: skipped
    x[0, 2, 2:2 + 2 * k] = np.nan        # whole windows of NaN: -FLT_MAX
    x[1, 0][rng.random((h, w)) < 0.3] = -np.inf
    x[1, 1][rng.random((h, w)) < 0.3] = np.nan
    shape = [2, 3, pool_out(h, k, sy, pad), pool_out(w, k, sx, pad)]
    want = np.asarray(_core.Ops("reference").pool("max", x, k, sy, sx, pad, shape))
    got = np.asarray(_core.Ops("cpu").pool("max", x, k, sy, sx, pad, shape))
    assert not np.isnan(want).any() and (want == -FLT_MAX).any()  # the case reaches both rules
    np.testing.assert_array_equal(got, want)
