"""Op parity harness (after ggml's test-backend-ops): every op of every fast backend is compared
with the naive `reference` backend on seeded random shapes, and the reference itself is checked
against independent NumPy formulas (Darknet's definitions, /work/notes_darknet_semantics.md), so
the oracle is not just trusted.

A new backend (metal, cuda) is covered by appending its name to BACKENDS; names that the module
was not built with are skipped.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import gpu_devices
from darknet_py import _core

# cpu, and the GPU backend on two OpenCL CPU runtimes (gpu_devices.py): Oclgrind (with its race and
# bounds checker) and pocl; cuda where there is an NVIDIA GPU (else its cases skip: "no CUDA device").
BACKENDS = ["cpu", "oclgrind", "pocl", "cuda"] + (["opencl_gpu"] if gpu_devices.GPU else [])
ORACLE = "reference"

# The cases themselves (and their tolerances) live in the package, shared with `darknet_py selftest`.
from darknet_py.diagnostics.op_cases import (ACTIVATIONS, ATOL, CASES, FUSED_ACTIVATIONS, RTOL,  # noqa: E402
                                 SHORTCUT_NORM, SHORTCUT_WEIGHTS, TRAIN_CASES, assert_close, check_case,
                                 conv_affine_act_cases, conv_cases, conv_out, data_movement_cases, gemm_cases,
                                 np_batchnorm_train, np_fused_activation, pool_cases, pool_out, rand,
                                 reorg_cases, trand)

# ---------------------------------------------------------------------------------------------
# Backend parity


@pytest.fixture(scope="module")
def ref():
    return _core.Ops(ORACLE)


# One Ops per backend for the whole file. pytest orders the module-scoped parameter sets so that other
# backends' tests come between the (backend, case) pairs of one backend, and each switch sets the
# `backend` fixture up anew: a new Ops 130 times for Oclgrind alone, each building the kernel program
# there (1.2 s), 158 s of the file's 410 s on 2 cores. No test here changes an Ops' settings
# (limit_group_size, layout), so one Ops serves them all, as the fixture meant.
_OPS = {}


def make_ops(name: str) -> "_core.Ops":
    if name not in _OPS:
        if name in gpu_devices.DEVICES:
            _OPS[name] = _core.Ops(gpu_devices.device(name))
        elif name not in _core.backends():
            pytest.skip(f"backend {name!r} is not built into this module (have {_core.backends()})")
        else:
            _OPS[name] = _core.Ops(name)
    return _OPS[name]


# Cases sized for the CPU backend's blocking (cpu/gemm.cpp: K > 256 is a second packing block, N > 3072
# a second column block). The GPU backend's GEMM works in 16x16 tiles of C and 16-deep slices of K
# (kernels/storage_kernels.h), so for it they take no path that smaller cases lack: partial tiles in M,
# N and K under each transposition (gemm-7x13x19, gemm-37x129x300), 194 tiles in a row (gemm-2x3100x9),
# up to 38 K slices (gemm-61x47x600); the N>3072 convolution is one image (im2col, then that GEMM) as
# conv-K>256 is. pocl runs them (the same kernel text, compiled); Oclgrind, a simulator, does not: there
# they took 8 to 31 s each in CI, about 170 s together.
CPU_BLOCKING_ONLY = ("gemm-3x3073x270-", "gemm-1x200x1000-", "conv-N>3072-", "bw_data-N>3072-", "bw_weights-N>3072-")


CONV_OPS = ("conv2d", "conv2d_affine_act", "conv2d_backward_weights", "conv2d_backward_data")


def _conv_geometry(case) -> tuple:
    """(input shape, weight shape, output plane, stride_y, stride_x, pad, dilation, groups) of a
    convolution-family case, whichever op's argument order it has."""
    if case.op == "conv2d_backward_weights":
        x, dy, w, sy, sx, pad, dil, groups = case.args
        plane = dy.shape[2] * dy.shape[3]
    elif case.op == "conv2d_backward_data":
        dy, w, x, sy, sx, pad, dil, groups = case.args
        plane = dy.shape[2] * dy.shape[3]
    else:
        x, w, sy, sx, pad, dil, groups, oh, ow = case.args[:9]
        plane = oh * ow
    return x.shape, w.shape, plane, sy, sx, pad, dil, groups


def conv_path(case) -> tuple:
    """What decides a convolution-family case's kernels and their index bounds on the GPU backend
    (src-lib/gpu/gpu_ops_conv.cpp): the op; the grouping (one group, several, depthwise); the direct
    path (1x1, stride 1, no padding: no im2col/col2im); whether it strides, pads, dilates; whether a
    GEMM covers several images (batch > 1, one group); whether each GEMM dimension spans more than
    one 16-wide tile; and for the fused forward whether a scale is passed and whether the activation
    reads across channels (normalize_channels*; the others are one element per thread). Kernel size,
    channel counts and plane sizes beyond that only lengthen the same loops."""
    (n, cin, _, _), (cout, _, kh, kw), plane, sy, sx, pad, dil, groups = _conv_geometry(case)
    cout_g, K = cout // groups, cin // groups * kh * kw
    grouping = "one" if groups == 1 else "depthwise" if groups == cin else "several"
    direct = (kh, kw, sy, sx, pad) == (1, 1, 1, 1, 0)
    gemm_n = plane * (n if groups == 1 else 1)
    fused = (case.args[9] is None, case.args[11].startswith("normalize_channels")) if case.op == "conv2d_affine_act" else ()
    return (case.op, grouping, direct, (sy, sx) != (1, 1), pad > 0, dil > 1, n > 1 and groups == 1,
            cout_g > 16, K > 16, gemm_n > 16, *fused)


def gemm_path(case) -> tuple:
    """What decides a gemm case's path and bounds in the GPU backend's tiled GEMM (16x16 tiles of C,
    16-deep slices of K; kernels/storage_kernels.h): the transpositions, whether C is read (beta != 0),
    and per dimension whether it spans more than one tile and whether its last tile is partial."""
    ta, tb, _, A, _, beta, C = case.args
    (M, N), K = C.shape, A.shape[0] if ta else A.shape[1]
    return ("gemm", ta, tb, beta != 0, *((d > 16, d % 16 != 0) for d in (M, N, K)))


def _multiply_adds(case) -> int:
    """The simulated work of a gemm or convolution-family case: multiply-adds, in whole tiles for gemm."""
    if case.op == "gemm":
        ta, _, _, A, _, _, C = case.args
        return int(np.prod([-(-d // 16) * 16 for d in (*C.shape, A.shape[0] if ta else A.shape[1])]))
    (n, _, _, _), w_shape, plane, *_ = _conv_geometry(case)
    return n * int(np.prod(w_shape)) * plane


def path(case):
    """The kernel path of a gemm or convolution-family case (gemm_path, conv_path); None for other ops."""
    return gemm_path(case) if case.op == "gemm" else conv_path(case) if case.op in CONV_OPS else None


def _cheapest_per_path() -> set:
    """The id of the cheapest case (_multiply_adds) of each path, among the cases Oclgrind runs."""
    best = {}
    for c in CASES + TRAIN_CASES:
        key = path(c)
        if key is not None and not c.id.startswith(CPU_BLOCKING_ONLY):
            if key not in best or _multiply_adds(c) < _multiply_adds(best[key]):
                best[key] = c
    return {c.id for c in best.values()}


# Oclgrind checks the kernels for races and out-of-bounds accesses; pocl and the cpu backend check
# every case's values. A gemm or convolution-family case whose path a cheaper case already takes adds
# no check on Oclgrind, only simulated work (the larger ones took 4 to 16 s each there on 2 cores):
# Oclgrind runs one case per path, the cheapest; pocl runs them all.
OCLGRIND_PATH_CASES = _cheapest_per_path()


def runs_on(backend_name: str, case) -> bool:
    if backend_name != "oclgrind":
        return True
    if path(case) is not None:
        return case.id in OCLGRIND_PATH_CASES
    return not case.id.startswith(CPU_BLOCKING_ONLY)


def pytest_generate_tests(metafunc):
    # (backend, case) pairs rather than their product, so that runs_on() decides; `backend` stays one
    # Ops per backend for the module (indirect, module scope). Ids as the product's: "<backend>-<case>".
    if {"backend", "case"} <= set(metafunc.fixturenames):
        cases = TRAIN_CASES if metafunc.function.__name__ == "test_training_op_matches_reference" else CASES
        pairs = [pytest.param(b, c, id=f"{b}-{c.id}") for b in BACKENDS for c in cases if runs_on(b, c)]
        metafunc.parametrize("backend,case", pairs, indirect=["backend"], scope="module")
    elif "backend" in metafunc.fixturenames:  # a test of its own on every backend
        metafunc.parametrize("backend", BACKENDS, indirect=True, scope="module")


@pytest.fixture(scope="module")
def backend(request):
    return make_ops(request.param)


def test_cases_oclgrind_leaves_to_pocl_have_smaller_twins():
    left = [c for c in CASES + TRAIN_CASES if not runs_on("oclgrind", c)]
    for prefix in CPU_BLOCKING_ONLY:  # a renamed case would otherwise quietly run again (or never be left out)
        assert any(c.id.startswith(prefix) for c in left), f"no case starts with {prefix!r}"
    # what Oclgrind still checks of the GEMM kernel: partial tiles in M, N and K under each transposition
    kept = [c.args for c in CASES if c.op == "gemm" and runs_on("oclgrind", c)]
    for ta in (False, True):
        for tb in (False, True):
            assert any(a[:2] == (ta, tb) and a[6].shape[0] % 16 and a[6].shape[1] % 16 and a[3].shape[0 if ta else 1] % 16
                       for a in kept), (ta, tb)
    assert max(a[6].shape[1] for a in kept) > 3072  # one case with a long row of tiles
    # every path of gemm and the convolution family still runs on Oclgrind (but those of the cases left
    # to pocl above, whose smaller twins the comment there names), each by exactly one case, no dearer
    # than any case on that path
    with_path = [c for c in CASES + TRAIN_CASES if path(c) is not None]
    on_oclgrind = {}
    for c in with_path:
        if runs_on("oclgrind", c):
            assert path(c) not in on_oclgrind, f"{c.id} and {on_oclgrind[path(c)].id} take one path"
            on_oclgrind[path(c)] = c
    for c in with_path:
        twin = on_oclgrind.get(path(c))
        if twin is None:
            assert c.id.startswith(CPU_BLOCKING_ONLY), f"{c.id}: no case of its path runs on Oclgrind"
        else:
            assert _multiply_adds(twin) <= _multiply_adds(c), (c.id, twin.id)
    # the path tells apart what changes the kernels or their bounds
    conv = [p for p in on_oclgrind if p[0] != "gemm"]
    assert len({p[:2] for p in conv}) == len(CONV_OPS) * 3  # each op in each grouping
    assert {p[2] for p in conv} == {p[-1] for p in conv if p[0] == "conv2d_affine_act"} == {False, True}


def test_op_matches_reference(backend, ref, case):
    result = check_case(ref, backend, case)
    assert result.ok, f"{case.id}: {result.message}"


# Training ops (gradients, optimizer steps) are covered by the training section at the end of this
# file: TRAIN_CASES (cpu vs reference), finite differences, and Darknet's update formulas.
TRAINING_OP = re.compile(r"_backward|_update$|_train$|^add_channels$")


def test_every_op_is_covered():
    # a new op bound in src-bindings/_core.cpp without parity cases fails here
    ops = {m for m in dir(_core.Ops) if not m.startswith("_")} - {"limit_group_size", "fallback_counts", "storage", "layout"}
    covered = {c.op for c in CASES + TRAIN_CASES}
    assert ops <= covered, f"ops without parity cases: {sorted(ops - covered)}"
    pool_kinds = {c.args[0] for c in CASES if c.op == "pool"}
    assert pool_kinds == {"max", "local_avg", "global_avg", "max_depth"}


def test_activation_list_is_complete():
    src = Path(__file__).resolve().parents[1] / "src-lib" / "activation.cpp"
    if not src.is_file():
        pytest.skip(f"{src} not found (installed without sources)")
    names = re.findall(r'\{"([a-z0-9_]+)",\s*Activation::', src.read_text())
    assert names and sorted(names) == sorted(ACTIVATIONS), f"activation.cpp has {names}"


# ---------------------------------------------------------------------------------------------
# The oracle checked against NumPy (formulas written from Darknet's sources, not from our C++)


def np_conv2d(x, w, sy, sx, pad, dil, groups, oh, ow):
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    # zero padding wide enough for every tap of every output pixel
    need_h, need_w = (oh - 1) * sy + (kh - 1) * dil + 1, (ow - 1) * sx + (kw - 1) * dil + 1
    xp = np.zeros((n, cin, max(need_h, h + pad), max(need_w, wd + pad)))
    xp[:, :, pad:pad + h, pad:pad + wd] = x[:, :, :xp.shape[2] - pad, :xp.shape[3] - pad]
    y = np.zeros((n, cout, oh, ow))
    og = cout // groups
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for ky in range(kh):
            for kx in range(kw):
                patch = xs[:, :, ky * dil: ky * dil + (oh - 1) * sy + 1: sy, kx * dil: kx * dil + (ow - 1) * sx + 1: sx]
                y[:, g * og:(g + 1) * og] += np.einsum("ncij,oc->noij", patch, ws[:, :, ky, kx])
    return y


def np_pool(x, k, sy, sx, padding, oh, ow, kind):
    # Darknet's maxpool / local_avgpool: window starts at -padding/2 (floor); padded taps never win
    # the max and are not counted by the average.
    n, c, h, w = x.shape
    off = -(padding // 2)
    y = np.zeros((n, c, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * sy + off, j * sx + off
            win = x[:, :, max(y0, 0):max(min(y0 + k, h), 0), max(x0, 0):max(min(x0 + k, w), 0)].astype(np.float64)
            if win.size == 0:
                y[:, :, i, j] = -np.finfo(np.float32).max if kind == "max" else 0.0
            else:
                y[:, :, i, j] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return y


def np_activation(x, name):
    x = x.astype(np.float64)
    logistic = 1 / (1 + np.exp(-x))
    softplus = np.where(x > 20, x, np.where(x < -20, np.exp(x), np.log1p(np.exp(x))))
    f = {
        "linear": x,
        "leaky": np.where(x > 0, x, 0.1 * x),
        "relu": x * (x > 0),
        "relu6": np.clip(x, 0, 6),
        "logistic": logistic,
        "tanh": 2 / (1 + np.exp(-2 * x)) - 1,
        "swish": x * logistic,
        "mish": x * np.tanh(softplus),
        "hard_mish": np.where(x > 0, x, np.where(x > -2, x * x / 2 + x, 0)),
        "elu": (x >= 0) * x + (x < 0) * (np.exp(x) - 1),
        "selu": (x >= 0) * 1.0507 * x + (x < 0) * 1.0507 * 1.6732 * (np.exp(x) - 1),
        "gelu": 0.5 * x * (1 + np.tanh(0.797885 * x + 0.035677 * x ** 3)),
    }
    if name in f:
        return f[name]
    # across channels per pixel; Darknet's eps 0.0001 in the sum, softmax without max subtraction
    if name == "normalize_channels":
        pos = np.maximum(x, 0)
        return np.where(x > 0, x / (0.0001 + pos.sum(axis=1, keepdims=True)), 0)
    if name == "normalize_channels_softmax":
        return np.exp(x) / (0.0001 + np.exp(x).sum(axis=1, keepdims=True))
    raise KeyError(name)


def np_shortcut(x, froms, weights, wt, norm):
    n, c, h, w = x.shape
    nin = len(froms) + 1
    flat = x.reshape(n, -1).astype(np.float64)
    per = flat.shape[1]
    if wt == "none":
        wmat = np.ones((nin, per))
    else:
        wv = weights.reshape(nin, -1).astype(np.float64)  # [input, 1 or channel]
        if norm == "relu":
            r = np.maximum(wv, 0)
            wv = r / (0.0001 + r.sum(axis=0))
        elif norm == "softmax":
            e = np.exp(wv - wv.max(axis=0))
            wv = e / (0.0001 + e.sum(axis=0))
        wmat = np.repeat(wv, per // wv.shape[1], axis=1)
    y = flat * wmat[0]
    for k, f in enumerate(froms):
        ff = f.reshape(n, -1).astype(np.float64)
        m = min(per, ff.shape[1])
        y[:, :m] += ff[:, :m] * wmat[k + 1, :m]
    return y.reshape(x.shape)


def np_reorg(x, w, h, c, stride, forward, out_shape):
    # blas.c reorg_cpu, transcribed from the notes (§1)
    xf, y = x.ravel(), np.zeros(int(np.prod(out_shape)), np.float32)
    batch = xf.size // (w * h * c)
    out_c = c // (stride * stride)
    b, k, j, i = np.meshgrid(np.arange(batch), np.arange(c), np.arange(h), np.arange(w), indexing="ij")
    in_index = i + w * (j + h * (k + c * b))
    c2, offset = k % out_c, k // out_c
    w2, h2 = i * stride + offset % stride, j * stride + offset // stride
    out_index = w2 + w * stride * (h2 + h * stride * (c2 + out_c * b))
    if forward:
        y[out_index.ravel()] = xf[in_index.ravel()]
    else:
        y[in_index.ravel()] = xf[out_index.ravel()]
    return y.reshape(out_shape)


ORACLE_CHECKS = []


def oracle(fn):
    ORACLE_CHECKS.append(fn)
    return fn


@oracle
def check_conv(ref):
    for c in conv_cases():
        x, w, sy, sx, pad, dil, groups, oh, ow = c.args
        got = ref.conv2d(*c.args)
        want = np_conv2d(x, w, sy, sx, pad, dil, groups, oh, ow)
        # the reference sums in double too: only the final rounding to float32 differs
        mag = np_conv2d(np.abs(x), np.abs(w), sy, sx, pad, dil, groups, oh, ow)
        assert_close(got, want, 1e-7 * mag + 1e-30, 1e-6, "reference " + c.id)


@oracle
def check_conv_affine_act(ref):
    for c in conv_affine_act_cases()[:len(ACTIVATIONS)]:
        x, w, sy, sx, pad, dil, groups, oh, ow, scale, shift, act = c.args
        v = np_conv2d(x, w, sy, sx, pad, dil, groups, oh, ow)
        v = v * (1 if scale is None else scale[None, :, None, None]) + shift[None, :, None, None]
        want = np_activation(v.astype(np.float32), act)
        mag = np_conv2d(np.abs(x), np.abs(w), sy, sx, pad, dil, groups, oh, ow)
        assert_close(ref.conv2d_affine_act(*c.args), want, 1e-6 * mag + 2e-6, 2e-5, "reference " + c.id)


@oracle
def check_gemm(ref):
    for c in gemm_cases()[::3]:
        ta, tb, alpha, A, B, beta, C = c.args
        a, b = (A.T if ta else A).astype(np.float64), (B.T if tb else B).astype(np.float64)
        want = alpha * (a @ b) + (beta * C if beta != 0 else 0)
        mag = abs(alpha) * (np.abs(a) @ np.abs(b)) + (abs(beta) * np.abs(C) if beta != 0 else 0)
        assert_close(ref.gemm(*c.args), want, 1e-6 * mag, 0, "reference " + c.id)


@oracle
def check_pool(ref):
    for c in pool_cases():
        kind, x, k, sy, sx, pad, shape = c.args
        got = ref.pool(*c.args)
        if kind in ("max", "local_avg"):
            want = np_pool(x, k, sy, sx, pad, shape[2], shape[3], kind)
        elif kind == "global_avg":
            want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
        else:  # max_depth: out channel g = max over input channels g, g+out_c, ...
            oc = shape[1]
            want = np.stack([x[:, g::oc].max(axis=1) if g < x.shape[1] else
                             np.full(x[:, 0].shape, -np.finfo(np.float32).max) for g in range(oc)], axis=1)
        assert_close(got, want, 1e-6, 1e-6, "reference " + c.id)


@oracle
def check_activations(ref):
    x = rand(2, 6, 5, 7, lo=-25, hi=25)
    x[0, 0, 0, :5] = [0.0, -2.0, 6.0, 20.0, -20.0]  # kinks and thresholds
    for name in ACTIVATIONS:
        # float32 expf/tanhf vs float64: a few ulp, plus an absolute floor near zero
        assert_close(ref.activate(x, name), np_activation(x, name), 2e-6, 2e-5, f"reference activate {name}")


@oracle
def check_shortcut(ref):
    for c in data_movement_cases():
        if c.op != "shortcut":
            continue
        x, froms, weights, wt, norm = c.args
        wt_name = {v: k for k, v in SHORTCUT_WEIGHTS.items()}[wt]
        norm_name = {v: k for k, v in SHORTCUT_NORM.items()}[norm]
        assert_close(ref.shortcut(*c.args), np_shortcut(x, froms, weights, wt_name, norm_name), 1e-6, 1e-5,
                     "reference " + c.id)


@oracle
def check_softmax_yolo_upsample(ref):
    x = rand(2, 12, 1, 1, lo=-8, hi=8)
    e = np.exp(x.reshape(2, 3, 4).astype(np.float64) / 0.5)
    assert_close(ref.softmax(x, 3, 0.5), (e / e.sum(axis=2, keepdims=True)).reshape(x.shape), 1e-7, 1e-5,
                 "reference softmax")
    x = rand(1, 2 * 8, 3, 4, lo=-6, hi=6)
    want = x.astype(np.float64).reshape(1, 2, 8, 3, 4).copy()
    logi = 1 / (1 + np.exp(-want))
    want[:, :, [0, 1, 4, 5, 6, 7]] = logi[:, :, [0, 1, 4, 5, 6, 7]]
    want[:, :, :2] = want[:, :, :2] * 1.05 - 0.5 * 0.05
    assert_close(ref.yolo_activate(x, 2, 3, False, 1.05), want.reshape(x.shape), 1e-6, 1e-5, "reference yolo")
    x = rand(2, 3, 4, 5)
    assert_close(ref.upsample(x, 3, 0.5), 0.5 * x.repeat(3, axis=2).repeat(3, axis=3), 0, 0, "reference upsample")
    x = rand(1, 2, 7, 9)
    want = 2.0 * x[:, :, :6, :9].reshape(1, 2, 2, 3, 3, 3).sum(axis=(3, 5))
    assert_close(ref.downsample_sum(x, 3, 2.0), want, 1e-6, 1e-6, "reference downsample_sum")


@oracle
def check_reorg(ref):
    for c in reorg_cases():
        assert_close(ref.reorg(*c.args), np_reorg(*c.args), 0, 0, "reference " + c.id)
    # [reorg3d] reverse=0 is a true space-to-depth: out[dy*s+dx block of c channels] = in[c, y*s+dy, x*s+dx]
    x = rand(2, 3, 4, 6)
    s = 2
    got = ref.reorg(x, 3, 2, 12, s, False, [2, 12, 2, 3])
    want = x.reshape(2, 3, 2, s, 3, s).transpose(0, 3, 5, 1, 2, 4).reshape(2, 12, 2, 3)
    assert_close(got, want, 0, 0, "reference reorg3d is space-to-depth")


@oracle
def check_state_ops(ref):
    x, v = rand(2, 3, 4, 5), rand(2, 3, 4, 5)
    assert_close(ref.fill([2, 3, 4, 5], 1.5), np.full((2, 3, 4, 5), 1.5, np.float32), 0, 0, "fill")
    assert_close(ref.rolling_update(x, v, 0.99), (0.99 * x + np.float32(0.01) * v).astype(np.float32), 1e-6, 1e-6,
                 "rolling_update")
    sc, b, mean, var = rand(7), rand(7), rand(7), rand(7, lo=0.01, hi=3)
    k, shift = ref.batchnorm_fold(sc, b, mean, var, 1e-5)
    want_k = sc / np.sqrt(var + np.float32(1e-5))
    assert_close(k, want_k, 1e-6, 1e-6, "batchnorm_fold scale")
    assert_close(shift, b - mean * want_k, 1e-6, 1e-6, "batchnorm_fold shift")


@oracle
def check_dropout_mask(ref):
    p = 0.3
    m = ref.dropout_mask([4, 16, 32, 32], p, 7).ravel()
    assert set(np.unique(m)) <= {0.0, np.float32(1 / (1 - p))}, "mask values are 0 or 1/(1-p)"
    assert abs((m == 0).mean() - p) < 0.01, f"drop rate {(m == 0).mean():.4f}, want {p}"
    assert np.array_equal(m, ref.dropout_mask([4, 16, 32, 32], p, 7).ravel()), "same seed, same mask"
    other = ref.dropout_mask([4, 16, 32, 32], p, 8).ravel()
    assert 0.3 < (m != other).mean() < 0.6, "another seed draws an independent mask"


@pytest.mark.parametrize("check", ORACLE_CHECKS, ids=lambda f: f.__name__)
def test_reference_matches_numpy(ref, check):
    check(ref)


# =============================================================================================
# Training ops: backward passes and optimizer steps
#
# Three independent checks:
#   * the reference backend's backward of every op against central finite differences of a
#     float64 NumPy FORWARD (the np_* functions above and numpy_darknet.py, written from Darknet's
#     C loops, not from our C++): L = sum(r * forward(inputs)) with random r, and the gradient is
#     checked for every input and parameter of the op;
#   * every fast backend against the reference on seeded random shapes, as the forward parity;
#   * sgd_update / adam_update against NumPy transcriptions of Darknet's update formulas.
# Conventions (backend.h, "training"): gradients are true derivatives dL/d(...); backward ops
# accumulate into their outputs (the bindings start from zeros or from the array passed in).

import numpy_darknet as nd  # noqa: E402  (independent float64 ports of Darknet's forwards)


# Central differences in float64 with h = 1e-6: truncation (~h^2 f''') and round-off (~1e-16 / h)
# are both below 1e-9 relative, so the reference value is exact for our purpose. The backward runs
# in float32: a few ulp per element, more where it sums many terms or cancels (batchnorm's mean
# subtraction), which is why the bound has an absolute part proportional to the array's largest
# gradient. Measured worst ratios |ours - fd| / (|fd| + max|fd|) are <= 5e-7; a missing or wrong
# term is an O(1) error, and even an eps-sized (1e-4) term is caught.
FD_H = 1e-6
GRAD_TOL = 1e-5


def fd_grad(forward: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r: np.ndarray, h: float = FD_H) -> np.ndarray:
    """dL/dx of L = sum(r * forward(x)) by central differences, one element at a time. The two
    outputs are subtracted before the weighted sum, so outputs that do not depend on x (-FLT_MAX
    from an empty pooling window) cancel exactly instead of swamping the sum."""
    x = np.array(x, np.float64)
    r = np.asarray(r, np.float64)
    g = np.empty_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        v = flat[i]
        flat[i] = v + h
        up = forward(x)
        flat[i] = v - h
        down = forward(x)
        flat[i] = v
        gflat[i] = np.sum(r * (up - down)) / (2 * h)
    return g


def assert_grad(got, fd: np.ndarray, what: str) -> None:
    """|got - fd| <= GRAD_TOL * (|fd| + max|fd|), element by element."""
    got, fd = np.asarray(got, np.float64), np.asarray(fd, np.float64)
    assert got.size == fd.size, f"{what}: {got.size} gradient values, finite differences have {fd.size}"
    scale = float(np.abs(fd).max()) if fd.size else 0.0
    assert_close(got.reshape(fd.shape), fd, GRAD_TOL * scale, GRAD_TOL, what + " vs finite differences")


FD_CHECKS = []
FD_COVERED = set()  # training ops with a finite-difference check


def fd_check(*ops):
    def register(fn):
        FD_CHECKS.append(fn)
        FD_COVERED.update(ops)
        return fn
    return register


def away_from(x: np.ndarray, kinks, margin=1e-3) -> np.ndarray:
    """Moves values within `margin` of a kink (where the forward is not differentiable) past it."""
    x = x.copy()
    for k in kinks:
        near = np.abs(x - k) < margin
        x[near] = k + 2 * margin
    return x


def distinct(*shape) -> np.ndarray:
    """A shuffled ramp: all values differ by >= 0.05 (>> FD_H), so a finite-difference step never
    changes which element wins a max."""
    return (trng.permutation(int(np.prod(shape))).reshape(shape) * 0.05 - 2.0).astype(np.float32)


# (n, cin, h, w, cout, kh, kw, stride_y, stride_x, pad, dilation, groups, Darknet's output-size rule)
CONV_FD_GEOMS = [
    (2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, False),   # 3x3, pad 1, batch 2
    (1, 4, 9, 7, 6, 3, 3, 2, 2, 1, 1, 2, False),   # stride 2, 2 groups
    (1, 3, 9, 9, 2, 3, 3, 1, 1, 2, 2, 1, False),   # dilation 2
    (1, 4, 11, 9, 4, 3, 3, 2, 2, 2, 2, 2, True),   # dilation 2, stride 2, groups; taps past the edge
    (1, 4, 7, 9, 4, 3, 3, 1, 2, 0, 1, 4, False),   # depthwise, stride_x 2, no padding
    (2, 2, 5, 7, 3, 1, 1, 2, 1, 0, 1, 1, False),   # 1x1, stride_y 2
    (1, 3, 6, 7, 2, 1, 3, 1, 1, 1, 1, 1, False),   # rectangular 1x3 kernel
    (1, 2, 7, 7, 3, 5, 5, 1, 1, 2, 1, 1, False),   # 5x5
]


@fd_check("conv2d_backward_weights", "conv2d_backward_data")
def fd_conv(ref):
    for n, cin, h, w, cout, kh, kw, sy, sx, pad, dil, groups, rule in CONV_FD_GEOMS:
        oh, ow = conv_out(h, kh, sy, pad, dil, rule), conv_out(w, kw, sx, pad, dil, rule)
        x, wt, r = trand(n, cin, h, w), trand(cout, cin // groups, kh, kw), trand(n, cout, oh, ow)
        geom = (sy, sx, pad, dil, groups)
        tag = f"n{n}c{cin}-{h}x{w}-o{cout}-k{kh}x{kw}-s{sy}{sx}-p{pad}-d{dil}-g{groups}"
        # the ops accumulate: start from random arrays and take the difference (float32 rounding
        # of the sum is ~1e-7 of it, well inside the tolerance)
        dw0, dx0 = trand(*wt.shape), trand(*x.shape)
        dw = ref.conv2d_backward_weights(x, r, dw0, *geom).astype(np.float64) - dw0
        dx = ref.conv2d_backward_data(r, wt, dx0, *geom).astype(np.float64) - dx0
        assert_grad(dw, fd_grad(lambda v: np_conv2d(x, v, *geom, oh, ow), wt, r), f"conv2d_backward_weights {tag}")
        assert_grad(dx, fd_grad(lambda v: np_conv2d(v, wt, *geom, oh, ow), x, r), f"conv2d_backward_data {tag}")


@fd_check("bias_backward")
def fd_bias(ref):
    for s in [(2, 5, 3, 7), (1, 1, 1, 1), (3, 4, 1, 1)]:
        x, b, r, db0 = trand(*s), trand(s[1]), trand(*s), trand(s[1])
        db = ref.bias_backward(r, db0).reshape(-1).astype(np.float64) - db0
        assert_grad(db, fd_grad(lambda v: x + v.reshape(1, -1, 1, 1), b, r), f"bias_backward {s}")


@fd_check("batchnorm_train", "batchnorm_backward")
def fd_batchnorm(ref):
    # conv-like shapes, a connected-like (N = batch) one, a small N = 3 (N = 2 is degenerate: the
    # output is +-1 whatever x, so the gradient is eps-sized cancellation), and a channel whose
    # variance (~1e-7) is below eps, where eps inside the sqrt matters
    for s in [(2, 5, 3, 3), (5, 4, 1, 1), (1, 3, 3, 1), (2, 3, 5, 7), (2, 2, 3, 3)]:
        x = trand(*s) + trand(1, s[1], 1, 1, lo=-3, hi=3)
        if s == (2, 2, 3, 3):
            x[:, 1] = 0.5 + 1e-3 * trand(s[0], *s[2:])
        scale, bias, r = trand(s[1], lo=0.2, hi=2), trand(s[1]), trand(*s)
        eps = 1e-5
        y, xn, mean, var = ref.batchnorm_train(x, scale, bias, eps)
        want = np_batchnorm_train(x, scale, bias, eps)
        for k, (got, w) in enumerate(zip((y, xn, mean, var), want)):
            # float32 results of float64 sums: a few ulp of the value, of |x| for the mean
            assert_close(got, w.reshape(np.shape(got)), 1e-6 * np.abs(x).max(), 1e-5, f"batchnorm_train {s} output {k}")
        dx, dscale, dbias = ref.batchnorm_backward(r, xn, scale, var, eps)
        fwd = lambda a, sc, b: np_batchnorm_train(a, sc, b, eps)[0]  # noqa: E731
        assert_grad(dx, fd_grad(lambda v: fwd(v, scale, bias), x, r), f"batchnorm_backward dx {s}")
        assert_grad(dscale, fd_grad(lambda v: fwd(x, v, bias), scale, r), f"batchnorm_backward dscale {s}")
        assert_grad(dbias, fd_grad(lambda v: fwd(x, scale, v), bias, r), f"batchnorm_backward dbias {s}")


@fd_check("batchnorm_activate_train", "batchnorm_activate_backward")
def fd_batchnorm_activate(ref):
    # the reference composes batchnorm_train and activate: act(batchnorm(x)) against NumPy, and its
    # backward (given the forward's output y) against finite differences, with every pre-activation
    # drawn away from the kink at 0 (the difference quotient straddles it otherwise)
    eps = 1e-5
    for s in [(2, 5, 3, 3), (5, 4, 1, 1)]:
        x, pre = None, np.zeros(1)
        while np.abs(pre).min() < 1e-3:
            x, scale, bias, r = trand(*s), trand(s[1], lo=0.2, hi=2), trand(s[1]), trand(*s)
            pre = np_batchnorm_train(x, scale, bias, eps)[0]
        for act in FUSED_ACTIVATIONS:
            fwd = lambda a, sc, b, act=act: np_fused_activation(np_batchnorm_train(a, sc, b, eps)[0], act)  # noqa: E731
            y, xn, mean, var = ref.batchnorm_activate_train(x, scale, bias, eps, act)
            assert_close(y, fwd(x, scale, bias), 1e-6 * np.abs(x).max(), 1e-5, f"batchnorm_activate_train {act} {s}")
            dx, dscale, dbias = ref.batchnorm_activate_backward(r, y, xn, scale, bias, var, eps, act)
            tag = f"batchnorm_activate_backward {act} {s}"
            assert_grad(dx, fd_grad(lambda v: fwd(v, scale, bias), x, r), tag + " dx")
            assert_grad(dscale, fd_grad(lambda v: fwd(x, v, bias), scale, r), tag + " dscale")
            assert_grad(dbias, fd_grad(lambda v: fwd(x, scale, v), bias, r), tag + " dbias")


def test_batchnorm_activate_refuses_an_activation_that_mixes_channels(backend):
    x, c = trand(2, 3, 2, 2), trand(3)
    with pytest.raises(ValueError, match="batchnorm_activate_train: activation normalize_channels mixes a pixel's"):
        backend.batchnorm_activate_train(x, c, c, 1e-5, "normalize_channels")
    with pytest.raises(ValueError, match="batchnorm_activate_backward: activation normalize_channels_softmax mixes"):
        backend.batchnorm_activate_backward(x, x, x, c, c, np.abs(c), 1e-5, "normalize_channels_softmax")


@fd_check("activate_backward")
def fd_activations(ref):
    x = trand(2, 5, 3, 4, lo=-6, hi=6)
    # past mish's softplus thresholds (+-20), relu6's clamp and hard_mish's floor; exp() large for
    # normalize_channels_softmax (Darknet subtracts no max there)
    x[0, :, 0, 0] = [-25, -21, 19.5, 21, 25]
    x[1, :, 0, 0] = [6.5, -2.5, -19.5, 0.3, 1.1]
    x = away_from(x, (0, 6, -2, 20, -20))
    r = trand(*x.shape)
    for name in ACTIVATIONS:
        got = ref.activate_backward(x, r, name)
        assert_grad(got, fd_grad(lambda v: np_activation(v, name), x, r), f"activate_backward {name}")


def np_maxpool_depth(x, oc):
    # out channel g = max over input channels g, g + oc, ...; -FLT_MAX where there is none
    return np.stack([x[:, g::oc].max(axis=1) if g < x.shape[1] else
                     np.full(x[:, 0].shape, -np.finfo(np.float32).max) for g in range(oc)], axis=1)


# (size, stride_y, stride_x, padding): Darknet's defaults, strides that differ per axis, padding
# beyond size - 1 (windows wholly in the padding: no gradient), size 1
POOL_FD_GEOMS = [(2, 2, 2, 1), (2, 1, 1, 1), (3, 1, 1, 2), (3, 2, 1, 2), (2, 1, 3, 0), (5, 1, 1, 4), (2, 1, 1, 4),
                 (1, 1, 1, 3), (4, 3, 2, 3)]


@fd_check("pool_backward")
def fd_pool(ref):
    for kind in ("max", "local_avg"):
        for k, sy, sx, pad in POOL_FD_GEOMS:
            n, c, h, w = 2, 2, 7, 6
            x = distinct(n, c, h, w) if kind == "max" else trand(n, c, h, w)
            oh, ow = pool_out(h, k, sy, pad), pool_out(w, k, sx, pad)
            r = trand(n, c, oh, ow)
            got = ref.pool_backward(kind, x, r, k, sy, sx, pad)
            fd = fd_grad(lambda v: np_pool(v, k, sy, sx, pad, oh, ow, kind), x, r)
            assert_grad(got, fd, f"pool_backward {kind} k{k} s{sy}{sx} p{pad}")
    for s in [(2, 3, 5, 7), (1, 1, 1, 1)]:
        x, r = trand(*s), trand(s[0], s[1], 1, 1)
        got = ref.pool_backward("global_avg", x, r, 1, 1, 1, 0)
        assert_grad(got, fd_grad(lambda v: v.mean(axis=(2, 3), keepdims=True), x, r), f"pool_backward global_avg {s}")
    for s, oc in [((2, 8, 3, 3), 3), ((1, 5, 2, 3), 1), ((1, 3, 2, 2), 5)]:  # oc > c: channels with no input
        x, r = distinct(*s), trand(s[0], oc, *s[2:])
        got = ref.pool_backward("max_depth", x, r, 1, 1, 1, 0)
        assert_grad(got, fd_grad(lambda v: np_maxpool_depth(v, oc), x, r), f"pool_backward max_depth {s} -> {oc}")


@fd_check("add_channels")
def fd_add_channels(ref):
    # add_channels is route's backward: the adjoint of copy_channels(x, src, y, dst, count)
    for n, cx, cy, h, w, src, dst, cnt in [(1, 5, 9, 3, 7, 1, 4, 3), (2, 8, 8, 5, 5, 0, 0, 8),
                                           (2, 6, 11, 1, 1, 3, 8, 3)]:
        x, base, r, dx0 = trand(n, cx, h, w), trand(n, cy, h, w), trand(n, cy, h, w), trand(n, cx, h, w)

        def copy(v, base=base, src=src, dst=dst, cnt=cnt):
            y = base.astype(np.float64)
            y[:, dst:dst + cnt] = v[:, src:src + cnt]
            return y

        got = ref.add_channels(r, dst, dx0, src, cnt).astype(np.float64) - dx0
        assert_grad(got, fd_grad(copy, x, r), f"add_channels {cx}->{cy} s{src} d{dst} c{cnt}")


@fd_check("shortcut_backward")
def fd_shortcut(ref):
    combos = [("none", "none")] + [(wt, nm) for wt in ("per_feature", "per_channel") for nm in SHORTCUT_NORM]
    cases = [(wt, nm, (n, 5, 3, 4), [(n, fc, 3, 4) for fc in fcs])
             for wt, nm in combos for n, fcs in [(2, [5]), (1, [3]), (1, [8]), (1, [5, 2, 9])]]
    # froms of other spatial sizes: Darknet adds them by flat per-sample index where it exists
    cases.append(("per_feature", "softmax", (2, 3, 4, 4), [(2, 3, 2, 2), (2, 2, 5, 5)]))
    for wt, norm, xs, fs in cases:
        x, froms, r = trand(*xs), [trand(*f) for f in fs], trand(*xs)
        nw = {"none": 0, "per_feature": len(fs) + 1, "per_channel": (len(fs) + 1) * xs[1]}[wt]
        weights = away_from(trand(nw), (0,))  # relu normalisation has a kink at 0
        dx, dfrom, dw = ref.shortcut_backward(x, froms, weights, SHORTCUT_WEIGHTS[wt], SHORTCUT_NORM[norm], r)
        tag = f"shortcut_backward {wt}/{norm} x{xs} from{[f[1:] for f in fs]}"

        def fwd(xx, ff, ww):
            return np_shortcut(xx, ff, ww, wt, norm)

        assert_grad(dx, fd_grad(lambda v: fwd(v, froms, weights), x, r), tag + " dx")
        for k in range(len(froms)):
            grad_k = fd_grad(lambda v: fwd(x, froms[:k] + [v] + froms[k + 1:], weights), froms[k], r)
            assert_grad(dfrom[k], grad_k, f"{tag} dfrom[{k}]")
        if wt != "none":
            assert_grad(dw, fd_grad(lambda v: fwd(x, froms, v), weights, r), tag + " dweights")
        else:
            assert len(dw) == 0


@fd_check("upsample_backward", "downsample_sum_backward")
def fd_upsample(ref):
    for s, stride, scale in [((1, 3, 4, 5), 2, 1.0), ((2, 2, 3, 3), 3, 0.5), ((1, 1, 1, 1), 4, -1.25)]:
        n, c, h, w = s
        x, r = trand(*s), trand(n, c, h * stride, w * stride)
        got = ref.upsample_backward(r, stride, scale, list(s))
        assert_grad(got, fd_grad(lambda v: nd.upsample(v, stride, scale), x, r), f"upsample_backward {s} s{stride}")
    # odd sizes: rows/columns beyond out * stride belong to no block and get no gradient
    for s, stride, scale in [((1, 3, 8, 6), 2, 1.0), ((2, 2, 9, 9), 3, 0.25), ((1, 2, 7, 5), 2, 1.0),
                             ((1, 4, 13, 7), 3, -0.5)]:
        n, c, h, w = s
        x, r = trand(*s), trand(n, c, h // stride, w // stride)
        got = ref.downsample_sum_backward(r, stride, scale, list(s))
        assert_grad(got, fd_grad(lambda v: nd.upsample(v, -stride, scale), x, r),
                    f"downsample_sum_backward {s} s{stride}")


@fd_check("reorg_backward")
def fd_reorg(ref):
    # both call conventions ([reorg3d] passes the output's dims, [reorg] the input's), both
    # directions; the forward is np_reorg (blas.c reorg_cpu transcribed), used as a permutation
    cases = [c for c in CASES if c.op == "reorg" and c.args[0].size <= 800]
    kinds = {c.id.split("-n")[0] for c in cases}
    assert kinds == {"reorg3d", "reorg", "reorg-rev", "reorg3d-rev"}, kinds
    for c in cases:
        x, w, h, ch, stride, forward, out_shape = c.args
        perm = np_reorg(np.arange(x.size, dtype=np.float32).reshape(x.shape), *c.args[1:]).astype(np.int64).ravel()
        assert np.array_equal(np.sort(perm), np.arange(x.size)), c.id + ": reorg is not a permutation"
        r = trand(*out_shape)
        got = ref.reorg_backward(r, w, h, ch, stride, forward, list(x.shape))
        assert_grad(got, fd_grad(lambda v: v.reshape(-1)[perm].reshape(out_shape), x, r), "reorg_backward " + c.id)


@fd_check("scale_channels_backward", "mul_backward")
def fd_scale_mul(ref):
    for s in [(2, 3, 5, 7), (1, 1, 1, 1), (1, 5, 1, 3)]:
        n, c, h, w = s
        fr, r = trand(*s), trand(*s)
        for wh in (False, True):
            sc = trand(n, 1, h, w) if wh else trand(n, c, 1, 1)
            ds, dfrom = ref.scale_channels_backward(sc, fr, wh, r)
            tag = f"scale_channels_backward {'wh' if wh else 'c'} {s}"
            assert_grad(ds, fd_grad(lambda v: fr * v, sc, r), tag + " ds")
            assert_grad(dfrom, fd_grad(lambda v: v * sc, fr, r), tag + " dfrom")
        a, b = trand(*s), trand(*s)
        da, db = ref.mul_backward(a, b, r)
        assert_grad(da, fd_grad(lambda v: v * b, a, r), f"mul_backward da {s}")
        assert_grad(db, fd_grad(lambda v: a * v, b, r), f"mul_backward db {s}")


@fd_check("softmax_backward")
def fd_softmax(ref):
    for s, groups in [((1, 10, 1, 1), 1), ((2, 12, 1, 1), 3), ((1, 4, 3, 3), 4), ((2, 7, 2, 2), 7)]:
        for temp in (1.0, 0.5, 2.3):
            x, r = trand(*s, lo=-4, hi=4), trand(*s)
            y = nd.softmax(x, groups, temp).astype(np.float32)  # what the forward hands to backward
            got = ref.softmax_backward(y, r, groups, temp)
            assert_grad(got, fd_grad(lambda v: nd.softmax(v, groups, temp), x, r),
                        f"softmax_backward {s} g{groups} t{temp}")


@pytest.mark.parametrize("check", FD_CHECKS, ids=lambda f: f.__name__)
def test_backward_matches_finite_differences(ref, check):
    global trng  # each check draws from its own seeded stream, so a failure reproduces when run alone
    trng = np.random.default_rng([20240902, FD_CHECKS.index(check)])
    check(ref)


# ---------------------------------------------------------------------------------------------
# Optimizer steps against Darknet's formulas


def np_sgd(w, grad, m, lr, momentum, decay, batch):
    # update_convolutional_layer: Darknet's *_updates buffer holds -grad plus the momentum it kept;
    # axpy(-decay*batch, w, upd); axpy(lr/batch, upd, w); scal(momentum, upd); the gradient restarts
    upd = m - grad - decay * batch * w
    return w + lr / batch * upd, np.zeros_like(grad), momentum * upd


def np_adam(w, grad, m, v, lr, b1, b2, eps, decay, batch, t):
    # adam_update_gpu, call by call; d is Darknet's update buffer (= -grad)
    d = -grad
    m, v = b1 * m, b2 * v                      # scal(B1, m); scal(B2, v)
    d = d - decay * batch * w                  # axpy(-decay*batch, w, d)
    m = m + (1 - b1) * d                       # axpy(1-B1, d, m)
    v = v + (1 - b2) * d * d                   # mul(d, d); axpy(1-B2, d, v)
    mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)  # adam_kernel
    return w + lr * mhat / (np.sqrt(np.abs(vhat)) + eps), np.zeros_like(grad), m, v


@pytest.fixture(scope="module", params=[ORACLE] + BACKENDS)
def any_backend(request):
    return make_ops(request.param)


@pytest.mark.parametrize("decay,batch", [(5e-4, 4), (0.0, 1)], ids=["decay-batch4", "nodecay-batch1"])
def test_optimizer_steps_match_darknet(any_backend, decay, batch):
    # four steps with fresh gradients, NumPy in float64 from the same start; 5250 values cross the
    # cpu backend's 4096-element blocks; a zero gradient must leave Adam's step finite
    shape = (3, 7, 250)
    rng_ = np.random.default_rng(7)
    u = lambda lo, hi: rng_.uniform(lo, hi, shape).astype(np.float32)  # noqa: E731
    w0, m0, v0 = u(-1, 1), u(-0.1, 0.1), u(0, 0.01)
    grads = [u(-2, 2) for _ in range(4)]
    grads[0].flat[0] = 0.0
    lr, momentum, b1, b2, eps = 0.01, 0.9, 0.9, 0.999, 1e-7

    w, m, want_w, want_m = w0, m0, w0.astype(np.float64), m0.astype(np.float64)
    for t, g in enumerate(grads, 1):
        w, g_out, m = any_backend.sgd_update(w, g, m, lr, momentum, decay, batch)
        want_w, want_g, want_m = np_sgd(want_w, g.astype(np.float64), want_m, lr, momentum, decay, batch)
        for got, want, what in [(w, want_w, "w"), (g_out, want_g, "grad"), (m, want_m, "m")]:
            assert_close(got.reshape(shape), want, ATOL, RTOL, f"sgd step {t}: {what}")

    w, m, v = w0, m0, v0
    want_w, want_m, want_v = w0.astype(np.float64), m0.astype(np.float64), v0.astype(np.float64)
    for t, g in enumerate(grads, 1):
        w, g_out, m, v = any_backend.adam_update(w, g, m, v, lr, b1, b2, eps, decay, batch, t)
        want_w, want_g, want_m, want_v = np_adam(want_w, g.astype(np.float64), want_m, want_v, lr, b1, b2, eps,
                                                 decay, batch, t)
        for got, want, what in [(w, want_w, "w"), (g_out, want_g, "grad"), (m, want_m, "m"), (v, want_v, "v")]:
            assert_close(got.reshape(shape), want, ATOL, RTOL, f"adam step {t}: {what}")


def test_optimizer_step_with_the_overflow_flag_set_only_drops_the_gradient(any_backend):
    # fp16 training's device-side skip (backend.h sgd_update's skip): w and the optimizer state stay
    # bit for bit, the gradient is zeroed as after an applied step; 5000 values cross the cpu blocks
    rng_ = np.random.default_rng(8)
    w, g, m, v = (rng_.uniform(-1, 1, 5000).astype(np.float32) for _ in range(4))
    got = any_backend.sgd_update(w, g, m, 0.01, 0.9, 5e-4, 4, skip=True)
    for have, want in zip(got, (w, np.zeros_like(g), m)):
        assert np.array_equal(have.ravel(), want)
    got = any_backend.adam_update(w, g, m, np.abs(v), 0.001, 0.9, 0.999, 1e-7, 5e-4, 4, 3, skip=True)
    for have, want in zip(got, (w, np.zeros_like(g), m, np.abs(v))):
        assert np.array_equal(have.ravel(), want)
    applied = any_backend.sgd_update(w, g, m, 0.01, 0.9, 5e-4, 4, skip=False)[0]
    assert not np.array_equal(applied.ravel(), w)  # the flag clear: the step applies


# ---------------------------------------------------------------------------------------------
# Training ops: fast backends against the reference (TRAIN_CASES, op_cases.py)


def test_training_op_matches_reference(backend, ref, case):
    result = check_case(ref, backend, case)
    assert result.ok, f"{case.id}: {result.message}"


def test_every_training_op_has_a_gradient_check():
    # every training op is compared with finite differences (or, for the optimizer steps, with
    # Darknet's formulas above); test_every_op_is_covered checks the cpu-vs-reference side
    ops = {m for m in dir(_core.Ops) if not m.startswith("_") and TRAINING_OP.search(m)}
    missing = ops - FD_COVERED - {"sgd_update", "adam_update", "rolling_update"}
    assert not missing, f"training ops without a finite-difference check: {sorted(missing)}"
    kinds = {c.args[0] for c in TRAIN_CASES if c.op == "pool_backward"}
    assert kinds == {"max", "local_avg", "global_avg", "max_depth"}


def _maxpool_backward_by_rule(x, dy, k, sy, sx, pad, rule):
    """Max pooling's gradient in numpy under a tie rule: "first" (ours and Darknet's: the first
    strictly greatest tap, a NaN never greater), "last" (the last of the tied taps), "all" (every tied
    tap gets the whole gradient) or "nan_wins" (a NaN in the window takes it, as a max that propagates
    NaN would)."""
    dx = np.zeros_like(x, dtype=np.float32)
    n, c, h, w = x.shape
    off = -(pad // 2)
    for b in range(n):
        for ch in range(c):
            for oy in range(dy.shape[2]):
                for ox in range(dy.shape[3]):
                    taps = [(iy, ix) for iy in range(oy * sy + off, oy * sy + off + k)
                            for ix in range(ox * sx + off, ox * sx + off + k) if 0 <= iy < h and 0 <= ix < w]
                    vals = [x[b, ch, iy, ix] for iy, ix in taps]
                    if rule == "nan_wins" and any(np.isnan(vals)):
                        winners = [taps[int(np.argmax(np.isnan(vals)))]]
                    else:
                        best = max([v for v in vals if v > -np.finfo(np.float32).max], default=None)
                        tied = [t for t, v in zip(taps, vals) if best is not None and v == best]
                        # nan_wins in a window without a NaN: the first, as ours
                        winners = {"first": tied[:1], "nan_wins": tied[:1], "last": tied[-1:], "all": tied}[rule]
                    for iy, ix in winners:
                        dx[b, ch, iy, ix] += dy[b, ch, oy, ox]
    return dx


def test_maxpool_tie_cases_fail_every_other_tie_rule(ref):
    # pool_backward's tie and NaN cases (op_cases.maxpool_tie_cases) are what an MPS path, or any
    # backend, is judged on: a rule other than ours must fail at least one of them, ours none
    class ByRule:
        def __init__(self, rule):
            self.rule = rule

        def pool_backward(self, kind, x, dy, k, sy, sx, pad):  # dx in x's shape, as the reference's
            return _maxpool_backward_by_rule(x, dy, k, sy, sx, pad, self.rule)

    cases = [c for c in TRAIN_CASES if c.id.startswith("pool_backward-max-ties-")]
    assert {c.id.split("-")[3] for c in cases} == {"quantised", "relu", "constant", "nan"}
    assert all(check_case(ref, ByRule("first"), c).ok for c in cases)
    for rule in ("last", "all", "nan_wins"):
        failed = [c.id for c in cases if not check_case(ref, ByRule(rule), c).ok]
        assert failed, f"the {rule!r} rule passes every tie case"
    # the uniform random cases alone cannot tell the rules apart: that is why the tie cases exist
    plain = [c for c in TRAIN_CASES if c.op == "pool_backward" and c.args[0] == "max" and "ties" not in c.id][:5]
    assert all(check_case(ref, ByRule("all"), c).ok for c in plain)
