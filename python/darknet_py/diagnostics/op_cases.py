"""The op parity cases (after ggml's test-backend-ops), shared by src-test/test_ops.py and
`darknet_py selftest`: every op of the Backend contract, forward and backward, on seeded random
shapes, each with the tolerance its result must meet against the naive `reference` backend.

A Case is one op call: `getattr(_core.Ops(backend), case.op)(*case.args)`. Its absolute tolerance
is case.atol, times case.scale(ref) where a scale is given (sums of many products: the bound grows
with their magnitude), plus case.rtol relative. CASES are the forward ops, TRAIN_CASES the backward
passes and optimizer steps. The cases are drawn from fixed seeds when this module is imported, so
every run and every machine sees the same inputs. The same cases in fp16 / bf16 storage, with the
tolerances the formats add, are half_op_cases.py's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

import numpy as np

# Every activation name of src-lib/activation.cpp (test_activation_list_is_complete keeps it so).
ACTIVATIONS = ["linear", "leaky", "relu", "relu6", "logistic", "tanh", "swish", "mish", "hard_mish", "elu", "selu",
               "gelu", "normalize_channels", "normalize_channels_softmax"]

SHORTCUT_WEIGHTS = {"none": 0, "per_feature": 1, "per_channel": 2}
SHORTCUT_NORM = {"none": 0, "relu": 1, "softmax": 2}

# Tolerances. Elementwise ops compute the same float32 formula in every backend, so they get
# rtol 1e-5 with a 1e-6 absolute floor (values are O(1); the floor covers results near zero,
# e.g. tanh written as 2/(1+exp(-2x))-1 cancels there). Sums of K products (gemm, conv) are
# compared against the reference's double-precision sum with an error bound that grows like
# sqrt(K) times the magnitude sum_k |a_k b_k| (random rounding errors add up as a random walk);
# measured errors are < 1e-7 of that, and dropping a single term (an error of ~1/K of the
# magnitude) is still caught for every K used here (K < 10^4).
RTOL, ATOL = 1e-5, 1e-6
DOT_TOL = 1e-6


# ---------------------------------------------------------------------------------------------
# Comparison


@dataclass
class Comparison:
    ok: bool
    max_error: float    # largest |got - want| over the finite elements (0 for none)
    worst_ratio: float  # largest |got - want| / allowed error (<= 1 passes)
    message: str = ""   # what differs, when not ok


def compare(got: np.ndarray, want: np.ndarray, atol, rtol: float) -> Comparison:
    """got against want, element by element: |got - want| <= atol + rtol * |want| (atol may be an
    array of per-element bounds)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return Comparison(False, float("inf"), float("inf"), f"shape {got.shape} != {want.shape}")
    # Non-finite values (e.g. -FLT_MAX from an empty pooling window stays finite, but exp overflow
    # would not) must appear in the same places with the same value.
    fin = np.isfinite(want)
    if not np.array_equal(fin, np.isfinite(got)) or not np.array_equal(got[~fin], want[~fin], equal_nan=True):
        return Comparison(False, float("inf"), float("inf"), "non-finite values differ")
    atol = np.broadcast_to(np.asarray(atol, dtype=np.float64), want.shape)
    # the non-finite places (equal, checked above) count as 0 here: inf - inf would warn and be NaN
    got64, want64 = np.where(fin, got, 0).astype(np.float64), np.where(fin, want, 0).astype(np.float64)
    err = np.abs(got64 - want64)
    bound = atol + rtol * np.abs(want64)
    max_error = float(err[fin].max()) if fin.any() else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / bound)
    worst = float(ratio[fin].max()) if fin.any() else 0.0
    bad = fin & (err > bound)
    if not bad.any():
        return Comparison(True, max_error, worst)
    i = np.unravel_index(np.argmax(np.where(fin, err - bound, -np.inf)), want.shape)
    return Comparison(False, max_error, worst,
                      f"{bad.sum()} of {want.size} elements differ; worst at {i}: got {got[i]!r}, "
                      f"want {want[i]!r}, |err| {err[i]:.3g} > bound {bound[i]:.3g}")


def assert_close(got: np.ndarray, want: np.ndarray, atol, rtol: float, what: str) -> None:
    c = compare(got, want, atol, rtol)
    if not c.ok:
        raise AssertionError(f"{what}: {c.message}")


# ---------------------------------------------------------------------------------------------
# Cases: one op call with its arguments and tolerance

rng = np.random.default_rng(20240601)


@dataclass
class Case:
    id: str
    op: str
    args: tuple
    atol: float = ATOL
    rtol: float = RTOL
    # per-element magnitude the absolute tolerance scales with (sums of many products)
    scale: Optional[Callable[[object], np.ndarray]] = None


def rand(*shape, lo=-2.0, hi=2.0) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def gemm_cases() -> List[Case]:
    out = []
    # 1x1x1, odd sizes around the micro-kernel tile (6x16, or 12x32 with AVX-512), K > 256 (one
    # packing block), N > 3072 (one column block), and beta = 0 with NaN in C (BLAS: C is not read).
    shapes = [(1, 1, 1), (7, 13, 19), (37, 129, 300), (6, 16, 256), (5, 17, 257), (13, 33, 513), (12, 32, 7),
              (25, 31, 1), (2, 3100, 9), (3, 3073, 270), (61, 47, 600), (1, 200, 1000), (97, 1, 33)]
    for M, N, K in shapes:
        for ta in (False, True):
            for tb in (False, True):
                alpha, beta = [(1.0, 0.0), (1.0, 1.0), (0.5, -1.5), (-2.0, 0.25)][rng.integers(4)]
                A = rand(K, M) if ta else rand(M, K)
                B = rand(N, K) if tb else rand(K, N)
                C = rand(M, N)
                if beta == 0:
                    C[...] = np.nan

                def scale(_, A=A, B=B, C=C, ta=ta, tb=tb, alpha=alpha, beta=beta, K=K):
                    a, b = (np.abs(A.T) if ta else np.abs(A)), (np.abs(B.T) if tb else np.abs(B))
                    mag = abs(alpha) * (a.astype(np.float64) @ b)
                    if beta != 0:
                        mag += abs(beta) * np.abs(C)
                    return np.sqrt(K) * mag

                out.append(Case(f"gemm-{M}x{N}x{K}-t{int(ta)}{int(tb)}-a{alpha}-b{beta}", "gemm",
                                (ta, tb, alpha, A, B, beta, C), atol=DOT_TOL, rtol=0, scale=scale))
    return out


def conv_out(size: int, k: int, stride: int, pad: int, dil: int, darknet_layer_rule: bool) -> int:
    # backend.h's rule counts the dilated extent; Darknet's conv layer ignores dilation in the
    # output size (taps that fall outside then read zeros). Both must work.
    extent = k if darknet_layer_rule else dil * (k - 1) + 1
    return (size + 2 * pad - extent) // stride + 1


def conv_case(tag, n, cin, h, w, cout, kh, kw, sy, sx, pad, dil, groups, layer_rule=False) -> Case:
    oh, ow = conv_out(h, kh, sy, pad, dil, layer_rule), conv_out(w, kw, sx, pad, dil, layer_rule)
    assert oh > 0 and ow > 0 and cin % groups == 0 and cout % groups == 0, tag  # the op does not check
    x, wt = rand(n, cin, h, w), rand(cout, cin // groups, kh, kw)
    K = cin // groups * kh * kw

    def scale(ref, x=x, wt=wt, args=(sy, sx, pad, dil, groups, oh, ow), K=K):
        return np.sqrt(K) * ref.conv2d(np.abs(x), np.abs(wt), *args)

    cid = f"conv-{tag}-n{n}c{cin}-{h}x{w}-o{cout}-k{kh}x{kw}-s{sy}{sx}-p{pad}-d{dil}-g{groups}"
    return Case(cid, "conv2d", (x, wt, sy, sx, pad, dil, groups, oh, ow), atol=DOT_TOL, rtol=0, scale=scale)


def conv_cases() -> List[Case]:
    out = []
    # every kernel size x every grouping, with random stride (incl. stride_x != stride_y), pad,
    # dilation, batch, odd spatial sizes and channel counts that are not multiples of 8/16
    for k in (1, 3, 5, 7):
        for gmode in ("g1", "g2", "dw"):
            for _ in range(3):
                groups_base = int(rng.integers(1, 4)) * 2 + 1  # 3, 5, 7 channels per group
                cin = {"g1": int(rng.integers(1, 12)), "g2": 2 * groups_base, "dw": int(rng.integers(2, 12))}[gmode]
                groups = {"g1": 1, "g2": 2, "dw": cin}[gmode]
                cout = groups * int(rng.integers(1, 4)) if gmode != "g1" else int(rng.integers(1, 20))
                sy, sx = [(1, 1), (2, 2), (1, 2), (2, 1)][rng.integers(4)]
                pad, dil = int(rng.integers(0, 3)), int(rng.integers(1, 3))
                n = int(rng.integers(1, 3))
                h, w = int(rng.integers(dil * (k - 1) + 1, 20)), int(rng.integers(dil * (k - 1) + 1, 20))
                out.append(conv_case(f"{gmode}", n, cin, h, w, cout, k, k, sy, sx, pad, dil, groups,
                                     layer_rule=bool(rng.integers(2)) and dil > 1 and pad > 0))
    out += [
        conv_case("odd13x7", 2, 3, 13, 7, 5, 3, 3, 1, 1, 1, 1, 1),
        conv_case("1x1in", 1, 5, 1, 1, 7, 1, 1, 1, 1, 0, 1, 1),
        conv_case("1x1in-k3", 2, 3, 1, 1, 4, 3, 3, 1, 1, 1, 1, 1),
        conv_case("1x1in-k3-s2", 1, 6, 1, 1, 9, 3, 3, 2, 2, 1, 1, 3),
        conv_case("direct1x1", 2, 19, 9, 11, 23, 1, 1, 1, 1, 0, 1, 1),  # no-im2col path
        conv_case("1x1-pad", 1, 4, 5, 6, 3, 1, 1, 1, 1, 1, 1, 1),
        conv_case("1x1-s2", 1, 4, 7, 9, 3, 1, 1, 2, 2, 0, 1, 1),
        conv_case("K>256", 1, 37, 11, 9, 21, 3, 3, 1, 1, 1, 1, 1),  # K = 333
        conv_case("K-7x7", 1, 29, 9, 9, 10, 7, 7, 2, 1, 2, 1, 1),  # K = 1421
        conv_case("N>3072", 1, 3, 67, 61, 17, 3, 3, 1, 1, 1, 1, 1),  # 4087 output pixels
        conv_case("dil2-pad2", 2, 6, 15, 10, 8, 3, 3, 1, 1, 2, 2, 2),
        conv_case("layer-dil", 1, 4, 12, 12, 4, 3, 3, 1, 1, 2, 2, 1, layer_rule=True),
        conv_case("rect-1x3", 1, 3, 8, 9, 5, 1, 3, 1, 1, 1, 1, 1),
        conv_case("rect-5x3", 1, 3, 8, 9, 5, 5, 3, 2, 1, 2, 1, 1),
        conv_case("dw-big", 2, 33, 14, 13, 33, 3, 3, 2, 2, 1, 1, 33),
        conv_case("cout1", 1, 13, 7, 7, 1, 3, 3, 1, 1, 1, 1, 1),
    ]
    return out


def conv_affine_act_cases() -> List[Case]:
    # The fused inference path of [convolutional]: act(conv * scale[c] + shift[c]), scale may be None.
    # Each activation over a few conv geometries. The pre-activation tolerance t_v is the conv's,
    # times |scale|; elementwise activations have slopes <= 2 (selu's is 1.76 just below 0), the
    # channel-mixing ones are ratios over the pixel's channels: normalize_channels divides errors
    # by its sum S, the softmax variant's outputs move by at most 2 max_c t_v.
    out = []
    geoms = [c for c in conv_cases() if c.args[1].shape[0] % c.args[6] == 0]
    for i, act in enumerate(ACTIVATIONS * 2):
        base = geoms[(7 * i) % len(geoms)]
        x, w, sy, sx, pad, dil, groups, oh, ow = base.args
        cout, K = w.shape[0], w[0].size
        scale = None if i % 3 == 0 else rand(cout, lo=-0.5, hi=0.5)
        shift = rand(cout)
        geom = (sy, sx, pad, dil, groups, oh, ow)

        def tol(ref, x=x, w=w, geom=geom, scale=scale, shift=shift, act=act, K=K):
            sc = np.ones(w.shape[0]) if scale is None else np.abs(scale).astype(np.float64)
            t_v = DOT_TOL * np.sqrt(K) * ref.conv2d(np.abs(x), np.abs(w), *geom) * sc[None, :, None, None]
            if act == "normalize_channels":
                v = ref.conv2d_affine_act(x, w, *geom, scale, shift, "linear").astype(np.float64)
                S = 1e-4 + np.maximum(v, 0).sum(axis=1, keepdims=True)
                return 2 * t_v.max(axis=1, keepdims=True) / S
            if act == "normalize_channels_softmax":
                return 2 * t_v.max(axis=1, keepdims=True)
            return 2 * t_v

        out.append(Case(f"conv_affine_act-{act}-{'noscale' if scale is None else 'scale'}-{base.id[5:]}",
                        "conv2d_affine_act", (x, w, *geom, scale, shift, act), atol=1.0, rtol=RTOL,
                        scale=lambda ref, tol=tol: tol(ref) + ATOL))
    return out


def elementwise_cases() -> List[Case]:
    out = []
    shapes = [(1, 1, 1, 1), (2, 3, 5, 7), (1, 17, 13, 7), (2, 16, 8, 8), (1, 5, 1, 33)]
    for s in shapes:
        n, c, h, w = s
        out.append(Case(f"add_bias-{s}", "add_bias", (rand(*s), rand(c))))
        mean, var = rand(c), rand(c, lo=0.01, hi=3.0)
        out.append(Case(f"batchnorm-{s}", "batchnorm_inference",
                        (rand(*s), mean, var, rand(c), rand(c), 1e-5)))
        out.append(Case(f"mul-{s}", "mul", (rand(*s), rand(*s))))
        out.append(Case(f"scale_channels-c-{s}", "scale_channels", (rand(n, c, 1, 1), rand(*s), False)))
        out.append(Case(f"scale_channels-wh-{s}", "scale_channels", (rand(n, 1, h, w), rand(*s), True)))
        out.append(Case(f"fill-{s}", "fill", (list(s), float(rand(1)[0]))))
        out.append(Case(f"batchnorm_fold-{c}", "batchnorm_fold", (rand(c), rand(c), rand(c), var, 1e-5)))
        out.append(Case(f"rolling_update-{s}", "rolling_update", (rand(*s), rand(*s), 0.99)))
        out.append(Case(f"dropout_mask-{s}", "dropout_mask", (list(s), 0.3, 12345 + n * 7 + c), atol=0, rtol=0))
    # batch-norm with a near-zero variance: eps must sit inside the sqrt
    out.append(Case("batchnorm-tiny-var", "batchnorm_inference",
                    (rand(1, 3, 4, 4), rand(3), np.array([0, 1e-7, 1], np.float32), rand(3), rand(3), 1e-5)))
    for name in ACTIVATIONS:
        for s in [(1, 1, 1, 1), (2, 7, 5, 3), (1, 13, 9, 11), (1, 1, 1, 5000)]:
            # [-25, 25] crosses mish's softplus thresholds (+-20) and relu6's clamp
            out.append(Case(f"activate-{name}-{s}", "activate", (rand(*s, lo=-25, hi=25), name)))
    return out


def pool_out(size, k, stride, padding):
    return (size + padding - k) // stride + 1


def pool_cases() -> List[Case]:
    out = []
    for kind in ("max", "local_avg"):
        # Darknet defaults (stride 1, size = stride, padding = size - 1) and yolov3-tiny's size=2
        # stride=1, then random sizes/strides/paddings, including padding > size - 1 (windows
        # that only touch padding: max gives -FLT_MAX, avg gives 0).
        fixed = [(2, 2, 2, 1), (2, 1, 1, 1), (3, 1, 1, 2), (5, 1, 1, 4), (1, 1, 1, 0), (3, 2, 1, 2), (2, 1, 3, 0)]
        rnd = []
        for _ in range(10):
            k = int(rng.integers(1, 6))
            sy, sx = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            pad = [k - 1, 0, int(rng.integers(0, k + 2))][rng.integers(3)]
            rnd.append((k, sy, sx, pad))
        for k, sy, sx, pad in fixed + rnd:
            n, c = int(rng.integers(1, 3)), int(rng.integers(1, 10))
            h, w = int(rng.integers(max(1, k - pad), 16)), int(rng.integers(max(1, k - pad), 16))
            oh, ow = pool_out(h, k, sy, pad), pool_out(w, k, sx, pad)
            out.append(Case(f"pool-{kind}-n{n}c{c}-{h}x{w}-k{k}-s{sy}{sx}-p{pad}", "pool",
                            (kind, rand(n, c, h, w), k, sy, sx, pad, [n, c, oh, ow])))
    for s in [(1, 1, 1, 1), (2, 5, 7, 3), (1, 19, 13, 13), (1, 3, 1, 1)]:
        out.append(Case(f"pool-global_avg-{s}", "pool", ("global_avg", rand(*s), 1, 1, 1, 0, [s[0], s[1], 1, 1])))
    for (n, c, h, w), oc in [((1, 8, 5, 5), 4), ((2, 7, 3, 9), 3), ((1, 5, 4, 4), 1), ((1, 3, 2, 2), 5), ((1, 6, 1, 1), 6)]:
        out.append(Case(f"pool-max_depth-{n}x{c}x{h}x{w}-o{oc}", "pool",
                        ("max_depth", rand(n, c, h, w), 1, 1, 1, 0, [n, oc, h, w])))
    return out


prng = np.random.default_rng(20261123)  # own stream: the cases drawn before these keep their values


def maxpool_wide_cases() -> List[Case]:
    """Max pooling on rows wide enough for the CPU backend's vector path (src-lib/cpu/maxpool.cpp: several
    vectors of interior outputs plus a tail, at 8 and 16 floats per vector), in the shapes the models use
    (size 2 stride 2; size 2 stride 1 at 13x13; the SPP block's sizes 5, 9, 13 at stride 1), at even and
    odd widths (odd ones clip the last window), and unusual geometry (no padding, unequal strides,
    windows of padding only)."""
    out = []
    for n, c, h, w, k, sy, sx, pad in [(1, 3, 40, 40, 2, 2, 2, 1), (1, 2, 41, 37, 2, 2, 2, 1), (2, 3, 13, 13, 2, 1, 1, 1),
                                       (1, 2, 13, 13, 5, 1, 1, 4), (1, 2, 13, 13, 9, 1, 1, 8), (1, 2, 13, 13, 13, 1, 1, 12),
                                       (1, 2, 21, 45, 5, 1, 1, 4), (1, 2, 19, 70, 3, 2, 2, 2), (1, 2, 17, 35, 2, 2, 2, 0),
                                       (1, 2, 9, 50, 3, 1, 2, 2), (1, 1, 6, 40, 2, 3, 1, 5), (1, 2, 5, 3, 4, 1, 1, 3)]:
        oh, ow = pool_out(h, k, sy, pad), pool_out(w, k, sx, pad)
        x = prng.uniform(-2.0, 2.0, size=(n, c, h, w)).astype(np.float32)
        out.append(Case(f"pool-max-wide-n{n}c{c}-{h}x{w}-k{k}-s{sy}{sx}-p{pad}", "pool",
                        ("max", x, k, sy, sx, pad, [n, c, oh, ow])))
    return out


def data_movement_cases() -> List[Case]:
    out = []
    # copy_channels: route slices (groups/group_id) into a wider output
    for n, cx, cy, h, w, src, dst, cnt in [(1, 5, 9, 3, 7, 1, 4, 3), (2, 8, 8, 5, 5, 0, 0, 8), (2, 6, 11, 1, 1, 3, 8, 3),
                                           (1, 13, 20, 13, 7, 6, 0, 7)]:
        out.append(Case(f"copy_channels-{n}x{cx}->{cy}-{h}x{w}-s{src}d{dst}c{cnt}", "copy_channels",
                        (rand(n, cx, h, w), src, rand(n, cy, h, w), dst, cnt)))
    # shortcut: from-tensors with fewer / more channels (only the overlap is added), differing
    # spatial sizes (Darknet adds by flat per-sample index), weights per feature or per channel
    for wt in SHORTCUT_WEIGHTS:
        for norm in SHORTCUT_NORM:
            for from_cs in ([5], [3], [8], [5, 2, 9]):
                n, c, h, w = int(rng.integers(1, 3)), 5, 7, 6
                froms = [rand(n, fc, h, w) for fc in from_cs]
                nin = len(froms) + 1
                weights = {"none": np.zeros(0, np.float32), "per_feature": rand(nin),
                           "per_channel": rand(nin * c)}[wt]
                out.append(Case(f"shortcut-{wt}-{norm}-from{from_cs}-n{n}", "shortcut",
                                (rand(n, c, h, w), froms, weights, SHORTCUT_WEIGHTS[wt], SHORTCUT_NORM[norm])))
    out.append(Case("shortcut-spatial-mismatch", "shortcut",
                    (rand(2, 4, 6, 6), [rand(2, 4, 3, 3), rand(2, 2, 9, 9)], rand(3), 1, 0)))
    for s, stride, scale in [((1, 3, 4, 5), 2, 1.0), ((2, 5, 3, 3), 3, 0.5), ((1, 1, 1, 1), 4, -1.25),
                             ((1, 7, 13, 7), 1, 2.0)]:
        out.append(Case(f"upsample-{s}-s{stride}-x{scale}", "upsample", (rand(*s), stride, scale)))
    for s, stride, scale in [((1, 3, 8, 6), 2, 1.0), ((2, 5, 9, 9), 3, 0.25), ((1, 2, 7, 5), 2, 1.0),
                             ((1, 4, 13, 7), 3, -0.5), ((1, 1, 2, 2), 2, 1.0)]:
        # odd sizes: the rows/columns beyond out*stride are not part of any block
        out.append(Case(f"downsample_sum-{s}-s{stride}-x{scale}", "downsample_sum", (rand(*s), stride, scale)))
    # large enough for the CPU backend to split them over its threads (copy_ops.cpp: 64 KB and more
    # per thread), the copy's split falling inside a sample's block
    out.append(Case("copy_channels-3x40->56-32x32-s7d20c25-parallel", "copy_channels",
                    (rand(3, 40, 32, 32), 7, rand(3, 56, 32, 32), 20, 25)))
    for s, stride, scale in [((2, 24, 16, 16), 2, 1.5), ((1, 20, 9, 11), 3, 0.5)]:
        out.append(Case(f"upsample-{s}-s{stride}-x{scale}-parallel", "upsample", (rand(*s), stride, scale)))
    return out


def reorg_cases() -> List[Case]:
    # The two call conventions of src-lib/layers/reorg.cpp: [reorg3d] passes the OUTPUT's dims
    # to reorg_cpu, [reorg] (YOLOv2) the INPUT's, each with reverse = forward flag.
    out = []
    for n, c, h, w, s in [(1, 2, 4, 6, 2), (2, 3, 6, 6, 3), (1, 5, 2, 8, 2), (1, 1, 4, 4, 4)]:
        # [reorg3d] reverse=0: out = (c*s*s, h/s, w/s), called with the output dims
        oc, oh, ow = c * s * s, h // s, w // s
        out.append(Case(f"reorg3d-n{n}c{c}-{h}x{w}-s{s}", "reorg",
                        (rand(n, c, h, w), ow, oh, oc, s, False, [n, oc, oh, ow])))
        # [reorg] reverse=0 needs c divisible by s^2; called with the input dims
        c2 = c * s * s
        out.append(Case(f"reorg-n{n}c{c2}-{h}x{w}-s{s}", "reorg",
                        (rand(n, c2, h, w), w, h, c2, s, False, [n, c2 * s * s, h // s, w // s])))
        # [reorg] reverse=1: out = (c/s^2, h*s, w*s), input dims
        out.append(Case(f"reorg-rev-n{n}c{c2}-{h}x{w}-s{s}", "reorg",
                        (rand(n, c2, h, w), w, h, c2, s, True, [n, c, h * s, w * s])))
        # [reorg3d] reverse=1 needs c divisible by s^4; called with the output dims
        c4 = c * s ** 4
        out.append(Case(f"reorg3d-rev-n{n}c{c4}-{h}x{w}-s{s}", "reorg",
                        (rand(n, c4, h, w), w * s, h * s, c4 // (s * s), s, True, [n, c4 // (s * s), h * s, w * s])))
    return out


def head_cases() -> List[Case]:
    out = []
    for s, groups in [((1, 10, 1, 1), 1), ((2, 12, 1, 1), 3), ((1, 4, 5, 5), 4), ((2, 7, 3, 3), 7), ((1, 1000, 1, 1), 1)]:
        for temp in (1.0, 0.5, 2.3):
            out.append(Case(f"softmax-{s}-g{groups}-t{temp}", "softmax", (rand(*s, lo=-8, hi=8), groups, temp)))
    for anchors, classes, h, w in [(3, 80, 5, 7), (1, 1, 1, 1), (2, 3, 13, 13), (3, 20, 4, 4)]:
        for new_coords in (False, True):
            for sxy in (1.0, 1.05, 2.0):
                n = 2 if classes == 3 else 1
                out.append(Case(f"yolo-a{anchors}c{classes}-{h}x{w}-nc{int(new_coords)}-sxy{sxy}", "yolo_activate",
                                (rand(n, anchors * (5 + classes), h, w, lo=-6, hi=6), anchors, classes, new_coords, sxy)))
    return out


CASES = gemm_cases() + conv_cases() + conv_affine_act_cases() + elementwise_cases() + pool_cases() + data_movement_cases() + reorg_cases() + \
    head_cases() + maxpool_wide_cases()


# ---------------------------------------------------------------------------------------------
# Training ops

trng = np.random.default_rng(20240902)  # own stream: the forward cases above keep their values


def trand(*shape, lo=-2.0, hi=2.0) -> np.ndarray:
    return trng.uniform(lo, hi, size=shape).astype(np.float32)


def np_batchnorm_train(x, scale, bias, eps=1e-5):
    """Darknet's training batchnorm: batch mean and UNBIASED variance (variance_cpu divides by N-1)."""
    x = x.astype(np.float64)
    N = x.shape[0] * x.shape[2] * x.shape[3]
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = ((x - mean) ** 2).sum(axis=(0, 2, 3), keepdims=True) / (N - 1)
    xn = (x - mean) / np.sqrt(var + eps)
    return xn * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1), xn, mean.ravel(), var.ravel()



def np_softmax(x, groups=1, temperature=1.0):
    """Darknet's softmax over each group of a sample's flattened c*h*w (float64), for valid inputs of
    softmax_backward."""
    x = np.asarray(x, np.float64)
    g = x.reshape(x.shape[0], groups, -1)
    e = np.exp(g / temperature - g.max(axis=2, keepdims=True) / temperature)
    return (e / e.sum(axis=2, keepdims=True)).reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# Training ops: fast backends against the reference
#
# Tolerances as for the forward ops: one product per element (activation gradients, mul, dfrom of
# scale_channels and shortcut, pooling, optimizer steps) gets RTOL/ATOL; a sum of K products gets
# DOT_TOL * sqrt(K) times its magnitude sum |a_k b_k|. Cases with a magnitude set atol=1 and
# return the absolute bound of each output from `scale`.


def flat_outputs(out) -> List[np.ndarray]:
    """An op's result as a flat list of arrays: tuples and lists of arrays are unpacked, lists
    of floats (batchnorm mean/var, shortcut dweights) become arrays."""
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, (np.ndarray, tuple, list)) for o in out):
        return [a for o in out for a in flat_outputs(o)]
    return [np.asarray(out)]


def activation_is_elementwise(name: str) -> bool:
    return not name.startswith("normalize_channels")


def _conv_backward_cases(c: Case) -> List[Case]:
    x, w, sy, sx, pad, dil, groups, oh, ow = c.args
    geom = (sy, sx, pad, dil, groups)
    dy, dw0, dx0 = trand(x.shape[0], w.shape[0], oh, ow), trand(*w.shape), trand(*x.shape)
    k_w = x.shape[0] * oh * ow  # terms per weight gradient
    k_x = w.shape[0] // groups * w.shape[2] * w.shape[3]  # terms per input gradient
    # the magnitude includes the accumulated start value (the reference run on absolute values)
    return [Case("bw_weights-" + c.id[5:], "conv2d_backward_weights", (x, dy, dw0, *geom), atol=1.0, rtol=0,
                 scale=lambda ref: [DOT_TOL * np.sqrt(k_w) *
                                    ref.conv2d_backward_weights(np.abs(x), np.abs(dy), np.abs(dw0), *geom)]),
            Case("bw_data-" + c.id[5:], "conv2d_backward_data", (dy, w, dx0, *geom), atol=1.0, rtol=0,
                 scale=lambda ref: [DOT_TOL * np.sqrt(k_x) *
                                    ref.conv2d_backward_data(np.abs(dy), np.abs(w), np.abs(dx0), *geom)])]


def _batchnorm_cases(s, fused=()) -> List[Case]:
    """batchnorm_train and _backward on shape s, and batchnorm_activate_train and _backward with each
    activation in `fused` (some of FUSED_ACTIVATIONS)."""
    n, c, h, w = s
    N = n * h * w
    x = trand(*s) + trand(1, c, 1, 1, lo=-3, hi=3)  # channel means away from 0
    scale, bias, eps, dy = trand(c, lo=0.2, hi=2), trand(c), 1e-5, trand(*s)
    _, xn, mean, var = (a.astype(np.float32) for a in np_batchnorm_train(x, scale, bias, eps))
    inv = (1 / np.sqrt(var.astype(np.float64) + eps)).reshape(1, -1, 1, 1)
    sc, ax = np.abs(scale).reshape(1, -1, 1, 1).astype(np.float64), np.abs(x).astype(np.float64)
    # x_norm = (x - mean) * inv rounds to a few ulp of (|x| + |mean|) * inv; mean and var are
    # float64 sums in both backends
    xn_mag = (ax + np.abs(mean).reshape(1, -1, 1, 1)) * inv
    train_tol = [DOT_TOL * (xn_mag * sc + np.abs(bias).reshape(1, -1, 1, 1)), DOT_TOL * xn_mag,
                 DOT_TOL * ax.mean(axis=(0, 2, 3)), DOT_TOL * (ax ** 2).mean(axis=(0, 2, 3))]
    # dx = inv * (scale dy - mean(scale dy) - x_norm sum(scale dy x_norm) / (N - 1)): float32 terms
    a_dy, a_dyx = np.abs(dy).astype(np.float64), np.abs(dy * xn).astype(np.float64)
    dx_mag = inv * sc * (a_dy + a_dy.mean(axis=(0, 2, 3), keepdims=True) +
                         np.abs(xn) * a_dyx.sum(axis=(0, 2, 3), keepdims=True) / (N - 1))
    back_tol = [DOT_TOL * dx_mag, DOT_TOL * np.sqrt(N) * a_dyx.sum(axis=(0, 2, 3)),
                DOT_TOL * np.sqrt(N) * a_dy.sum(axis=(0, 2, 3))]
    out = [Case(f"batchnorm_train-{s}", "batchnorm_train", (x, scale, bias, eps), atol=1.0, rtol=0,
                scale=lambda ref: train_tol),
           Case(f"batchnorm_backward-{s}", "batchnorm_backward", (dy, xn, scale, var, eps), atol=1.0, rtol=0,
                scale=lambda ref: back_tol)]
    # Batchnorm with the activation (|act'| <= 1.1 for these: the bounds above hold for act(y) and for
    # the gradient dy * act'(y), with 10 % to spare for mish and swish); y = the forward's output, as
    # the layer passes it; the backward forms mish's and swish's pre-activation from x_norm, scale, bias
    y_bn = np_batchnorm_train(x, scale, bias, eps)[0]
    for act in fused:
        y = np_fused_activation(y_bn, act).astype(np.float32)
        grow = 1.0 if act in ("linear", "leaky", "relu") else 1.1
        out += [Case(f"batchnorm_activate_train-{act}-{s}", "batchnorm_activate_train", (x, scale, bias, eps, act),
                     atol=1.0, rtol=0, scale=lambda ref: train_tol),
                Case(f"batchnorm_activate_backward-{act}-{s}", "batchnorm_activate_backward",
                     (dy, y, xn, scale, bias, var, eps, act), atol=1.0, rtol=0,
                     scale=lambda ref, grow=grow: [grow * t for t in back_tol])]
    return out


# The activations batchnorm_activate_train / _backward are tested with: those whose gradient reads off
# their output (activation_gradient_from_output in src-lib/activation.h) and two that need their input
# (yolov4's mish, the csp models' swish), which the backward forms again from x_norm.
FUSED_ACTIVATIONS = ("linear", "leaky", "relu", "mish", "swish")


def np_fused_activation(v, act):
    """One of FUSED_ACTIVATIONS in float64 (Darknet's leaky: 0.1 x below zero)."""
    if act == "mish":
        return v * np.tanh(np.logaddexp(0, v))
    if act == "swish":
        return v / (1 + np.exp(-v))
    return {"linear": v, "leaky": np.where(v > 0, v, 0.1 * v), "relu": np.maximum(v, 0)}[act]


def _scale_channels_case(s, scale_wh: bool) -> Case:
    n, c, h, w = s
    sc, fr, dy = (trand(n, 1, h, w) if scale_wh else trand(n, c, 1, 1)), trand(*s), trand(*s)
    axes, k = ((1,), c) if scale_wh else ((2, 3), h * w)  # ds sums over the channels or the plane
    ds_tol = DOT_TOL * np.sqrt(k) * np.abs(dy * fr).astype(np.float64).sum(axis=axes, keepdims=True) + ATOL
    dfrom_tol = RTOL * np.abs(dy * sc) + ATOL
    return Case(f"scale_channels_backward-{'wh' if scale_wh else 'c'}-{s}", "scale_channels_backward",
                (sc, fr, scale_wh, dy), atol=1.0, rtol=0, scale=lambda ref: [ds_tol, dfrom_tol])


def _normalize_channels_tol(x, dy, name) -> np.ndarray:
    # dx_c = f'(x_c) (dy_c - sum_k dy_k f(x_k) / S) / S per pixel, S = eps + sum_k f(x_k): the
    # float32 sums over the C channels (cpu) err by ~sqrt(C) ulp of their terms
    x = x.astype(np.float64)
    f = np.maximum(x, 0) if name == "normalize_channels" else np.exp(x)
    df = (x > 0).astype(np.float64) if name == "normalize_channels" else np.exp(x)
    S = 1e-4 + f.sum(axis=1, keepdims=True)
    gy = (np.abs(dy) * f / S).sum(axis=1, keepdims=True)
    return DOT_TOL * np.sqrt(x.shape[1]) * df * (np.abs(dy) + gy) / S + ATOL


def _shortcut_tol(ref, x, froms, weights, wt, norm, dy) -> List[np.ndarray]:
    # dx and dfrom are one product each; dweights sums dy * input over the batch and the weight's
    # group, then goes through the normalisation's Jacobian (column sums <= 2/sum for relu, <= 2
    # for softmax, 1 without)
    outs = flat_outputs(ref.shortcut_backward(x, froms, weights, wt, norm, dy))
    tols = [RTOL * np.abs(o) + ATOL for o in outs[:-1]]
    if wt == SHORTCUT_WEIGHTS["none"]:
        return tols + [np.zeros(0)]
    nin = len(froms) + 1
    nch = x.shape[1] if wt == SHORTCUT_WEIGHTS["per_channel"] else 1
    mag = flat_outputs(ref.shortcut_backward(np.abs(x), [np.abs(f) for f in froms], np.ones_like(weights), wt,
                                             SHORTCUT_NORM["none"], np.abs(dy)))[-1]
    mag = mag.astype(np.float64).reshape(nin, nch).sum(axis=0)  # sum over the inputs of the group
    raw = weights.reshape(nin, nch).astype(np.float64)
    jac = {SHORTCUT_NORM["none"]: 1.0, SHORTCUT_NORM["relu"]: 2 / (1e-4 + np.maximum(raw, 0).sum(axis=0)),
           SHORTCUT_NORM["softmax"]: 2.0}[norm]
    dw_tol = DOT_TOL * np.sqrt(x.size) * jac * mag + ATOL
    return tols + [np.broadcast_to(dw_tol, (nin, nch)).ravel()]


def maxpool_tie_cases() -> List[Case]:
    """Max pooling's gradient where the window's maximum is not unique, and where it holds a NaN. Our
    rule, Darknet's (`val > max` in its maxpool kernels): the first strictly greatest tap in row-major
    window order takes the whole gradient; a NaN is never greater, so it never wins, and a window with
    nothing greater than -FLT_MAX passes no gradient. Uniform random floats never tie, so without these
    cases another rule (every tied tap, the last one, a NaN that wins) would pass the verdict and then
    change every gradient behind a ReLU (blocks of zeros) or a padded border. Values on a grid of 0.5
    are exact in fp16 and bf16, so the ties survive half storage."""
    out = []
    geometries = [(2, 2, 2, 1), (2, 1, 1, 1), (3, 1, 1, 2), (5, 1, 1, 4), (3, 2, 2, 0)]
    for k, sy, sx, pad in geometries:
        n, c, h, w = 2, 3, 9, 11
        oh, ow = pool_out(h, k, sy, pad), pool_out(w, k, sx, pad)
        quantised = (np.round(trand(n, c, h, w, lo=-1.5, hi=1.5) * 2) / 2).astype(np.float32)  # 7 levels: ties
        relu = np.maximum(quantised, 0)  # blocks of zeros, as behind a ReLU
        constant = np.full((n, c, h, w), 0.5, np.float32)  # every window one value
        nan = trand(n, c, h, w)
        nan.reshape(-1)[::7] = np.nan  # a NaN in most windows
        nan[0, 0, :3, :3] = np.nan  # windows of NaN only (and padding) pass no gradient
        for tag, x in (("quantised", quantised), ("relu", relu), ("constant", constant), ("nan", nan)):
            out.append(Case(f"pool_backward-max-ties-{tag}-k{k}-s{sy}{sx}-p{pad}", "pool_backward",
                            ("max", x, trand(n, c, oh, ow), k, sy, sx, pad)))
    return out


def training_cases() -> List[Case]:
    out = []
    # conv backward on every geometry of the forward parity (K > 256, N > 3072, groups, dilation...)
    for c in CASES:
        if c.op == "conv2d":
            out += _conv_backward_cases(c)
    for s in [(1, 1, 1, 1), (2, 3, 5, 7), (1, 17, 13, 7), (4, 16, 1, 1), (1, 5, 1, 33)]:
        n, c, h, w = s
        dy, db0 = trand(*s), trand(c)
        db_tol = DOT_TOL * np.sqrt(n * h * w) * (np.abs(db0) + np.abs(dy).sum(axis=(0, 2, 3)))
        out.append(Case(f"bias_backward-{s}", "bias_backward", (dy, db0), atol=1.0, rtol=0,
                        scale=lambda ref, t=db_tol: [t]))
        # batch statistics need two values; with the activations on one shape (the simulator's time: the
        # uneven split is src-test/test_batchnorm_activate.py's, against the composition on pocl)
        if n * h * w > 1:
            out += _batchnorm_cases(s, FUSED_ACTIVATIONS if s == (2, 3, 5, 7) else ())
        out.append(Case(f"mul_backward-{s}", "mul_backward", (trand(*s), trand(*s), dy)))
        out += [_scale_channels_case(s, False), _scale_channels_case(s, True)]
    out += _batchnorm_cases((5, 300, 2, 3))  # the batch split unevenly: images 2 + 2 + 1 (kernels/reduce.h)
    for name in ACTIVATIONS:
        for s in [(1, 1, 1, 1), (2, 7, 5, 3), (1, 13, 9, 11), (1, 1, 1, 5000)]:
            x, dy = trand(*s, lo=-25, hi=25), trand(*s)
            cid = f"activate_backward-{name}-{s}"
            if activation_is_elementwise(name):
                out.append(Case(cid, "activate_backward", (x, dy, name)))
            else:
                tol = _normalize_channels_tol(x, dy, name)
                out.append(Case(cid, "activate_backward", (x, dy, name), atol=1.0, rtol=0,
                                scale=lambda ref, t=tol: [t]))
    for c in CASES:
        if c.op == "pool":
            kind, x, k, sy, sx, pad, shape = c.args
            out.append(Case("pool_backward-" + c.id[5:], "pool_backward", (kind, x, trand(*shape), k, sy, sx, pad)))
        elif c.op == "copy_channels":
            x, src, y, dst, cnt = c.args
            out.append(Case("add_channels-" + c.id[14:], "add_channels", (trand(*y.shape), dst, x, src, cnt)))
        elif c.op == "shortcut":
            args = c.args + (trand(*c.args[0].shape),)
            out.append(Case("shortcut_backward-" + c.id[9:], "shortcut_backward", args, atol=1.0, rtol=0,
                            scale=lambda ref, a=args: _shortcut_tol(ref, *a)))
        elif c.op in ("upsample", "downsample_sum"):
            x, stride, scale = c.args
            n, ch, h, w = x.shape
            dy = trand(n, ch, h * stride, w * stride) if c.op == "upsample" else trand(n, ch, h // stride, w // stride)
            out.append(Case(c.op + "_backward-" + c.id[len(c.op) + 1:], c.op + "_backward",
                            (dy, stride, scale, list(x.shape))))
        elif c.op == "reorg":  # a permutation: exact
            x, w, h, ch, stride, forward, out_shape = c.args
            out.append(Case("reorg_backward-" + c.id, "reorg_backward",
                            (trand(*out_shape), w, h, ch, stride, forward, list(x.shape)), atol=0, rtol=0))
        elif c.op == "softmax":
            x, groups, temp = c.args
            y = np_softmax(x, groups, temp).astype(np.float32)
            out.append(Case("softmax_backward-" + c.id[8:], "softmax_backward", (y, trand(*x.shape), groups, temp)))
    out += maxpool_tie_cases()
    for n in (1, 37, 5000):  # 5000 crosses the cpu backend's 4096-element blocks
        w, g, m, v = trand(n), trand(n), trand(n, lo=-0.1, hi=0.1), trand(n, lo=0, hi=0.01)
        out.append(Case(f"sgd_update-{n}", "sgd_update", (w, g, m, 0.01, 0.9, 5e-4, 4)))
        out.append(Case(f"adam_update-{n}", "adam_update", (w, g, m, v, 0.001, 0.9, 0.999, 1e-7, 5e-4, 4, 3)))
    # fp16 training's overflow flag set: the step only drops the gradient (w and the moments stay, exactly)
    w, g, m, v = trand(37), trand(37), trand(37, lo=-0.1, hi=0.1), trand(37, lo=0, hi=0.01)
    out.append(Case("sgd_update-skip", "sgd_update", (w, g, m, 0.01, 0.9, 5e-4, 4, True), atol=0, rtol=0))
    out.append(Case("adam_update-skip", "adam_update", (w, g, m, v, 0.001, 0.9, 0.999, 1e-7, 5e-4, 4, 3, True),
                    atol=0, rtol=0))
    return out


def loss_scaling_cases() -> List[Case]:
    """The two ops of dynamic loss scaling. add_scaled(x, alpha, y, x_in_storage): y + alpha * x, one
    product and one sum per element; unscale_check(grad, factor, found): (grad * factor, found), found
    becoming 1 only where a product is not finite and never cleared (a found of 1 stays 1)."""
    out = []
    for s, alpha in [((1, 1, 1, 1), 1.0), ((2, 3, 5, 7), 1024.0), ((1, 1, 1, 5000), -0.5)]:
        for x_in_storage in (False, True):
            x, y = trand(*s), trand(*s)
            # two fp32 roundings (or one fused multiply-add) of terms of magnitude |y| + |alpha x|
            tol = RTOL * (np.abs(y) + abs(alpha) * np.abs(x)) + ATOL
            out.append(Case(f"add_scaled-{s}-a{alpha}-x{'S' if x_in_storage else 'f32'}", "add_scaled",
                            (x, alpha, y, x_in_storage), atol=1.0, rtol=0, scale=lambda ref, t=tol: [t]))
    big = trand(300) * 1e36  # times 1000: those above 3.4e35 in size overflow to inf
    nan = trand(70)
    nan[33] = np.nan
    for cid, g, factor, found in [("finite", trand(5000), 1 / 1024, 0.0), ("stays-found", trand(37), 0.5, 1.0),
                                  ("overflow", big, 1000.0, 0.0), ("nan", nan, 0.25, 0.0), ("inf-in", np.array([np.inf, 1], np.float32), 1.0, 0.0)]:
        out.append(Case(f"unscale_check-{cid}", "unscale_check", (g, factor, found), atol=0, rtol=0))
    return out


TRAIN_CASES = training_cases() + loss_scaling_cases()


def check_case(ref, ops, case: Case) -> Comparison:
    """Runs `case` on `ops` and on the reference `ref` (both _core.Ops) and compares every output;
    the result is the worst output's (the first failing one's message names it)."""
    want = flat_outputs(getattr(ref, case.op)(*case.args))
    got = flat_outputs(getattr(ops, case.op)(*case.args))
    if len(got) != len(want):
        return Comparison(False, float("inf"), float("inf"), f"{len(got)} outputs, reference has {len(want)}")
    scales = case.scale(ref) if case.scale else [None] * len(want)
    if len(want) == 1 and case.scale and not isinstance(scales, list):
        scales = [scales]  # forward cases return one array
    result = Comparison(True, 0.0, 0.0)
    for k, (g, w, s) in enumerate(zip(got, want, scales)):
        if s is not None:  # per-element bounds: the output's shape, flat, or one that broadcasts to it
            s = np.asarray(s)
            s = s.reshape(np.shape(w)) if s.size == np.size(w) else s
        atol = case.atol if s is None else case.atol * s
        c = compare(g, w, atol, case.rtol)
        if not c.ok:
            return Comparison(False, max(c.max_error, result.max_error), max(c.worst_ratio, result.worst_ratio),
                              (f"output {k}: " if len(want) > 1 else "") + c.message)
        result = Comparison(True, max(c.max_error, result.max_error), max(c.worst_ratio, result.worst_ratio))
    return result
