"""Half precision (src-lib/gpu/PRECISION.md): fp16 / bf16 activations on GPU devices.

- The host conversions (tensor copies of half tensors) against NumPy's float16 and ml_dtypes' bfloat16,
  bit for bit.
- The ops of storage_kernels.h in fp16 and bf16 against the reference backend, on pocl (OpenCL on the
  CPU: half storage needs no cl_khr_fp16, vload_half / vstore_half are core OpenCL 1.2), a few on
  Oclgrind (races, out-of-bounds accesses) and on CUDA where there is a GPU, with the tolerances of
  half_op_cases.half_cases (they follow from the formats: 2^-11 relative for fp16, 2^-8 for bf16).
- The training ops of storage_training.h (backward passes, training batchnorm, fill, add_scaled) in
  fp16 and bf16 the same way (half_op_cases.half_train_cases), and the loss-scaling ops (add_scaled,
  unscale_check) against NumPy.
- The convolutions' backward passes with half activations and gradients (half training), the same
  way (half_op_cases.half_conv_backward_cases): on pocl within the fp32 tolerance for the weight gradient
  (our kernels never round it to half), on CUDA within one half rounding more (cuDNN forms it in half).
- The precision API and its refusals, in Python and on the command line.
- The real yolov3-tiny on the test photos in fp16 and bf16 against fp32: same classes, boxes within
  1 px, confidences within 0.01 (a detection within 0.01 of the threshold may be on either side).
"""
from __future__ import annotations

import numpy as np
import pytest

import gpu_devices
from darknet_py import DarknetError, Network, _core
from darknet_py.diagnostics.half_op_cases import (HALF_CONV_BACKWARD_OPS, HALF_TRAIN_OPS, forms_dw_in_half,
                                                  half_cases, half_conv_backward_cases, half_train_cases, round_to)
from darknet_py.diagnostics.op_cases import check_case, compare, trand
from test_train import small_cfg

PRECISIONS = ["fp16", "bf16"]
HALF_OPS = ["conv2d", "conv2d_affine_act", "activate", "pool", "copy_channels", "shortcut", "upsample", "yolo_activate"]


# ---- host conversions ---------------------------------------------------------------------------
def _edge_values() -> np.ndarray:
    rng = np.random.default_rng(19)
    specials = [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e6, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0001,
                3 * 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 * (1 - 2.0 ** -12), 1e-30, np.inf, -np.inf, np.nan,
                3.4028235e38, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8]
    wide = rng.standard_normal(20000) * np.exp2(rng.integers(-30, 20, 20000))  # normal, subnormal, overflow
    bits = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)  # any pattern
    with np.errstate(over="ignore", invalid="ignore"):  # the huge ones overflow float32 to inf, as meant
        v = np.concatenate([specials, wide, bits]).astype(np.float32)
    return np.concatenate([v, -v])


def test_fp16_conversion_equals_numpy_bit_for_bit():
    v = _edge_values()
    got = _core.half_bits(v, "fp16")
    with np.errstate(over="ignore"):
        want = v.astype(np.float16).view(np.uint16)
    nan = np.isnan(v)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(_core.half_values(got[nan], "fp16")).all()
    every = np.arange(65536, dtype=np.uint16)  # every fp16 value widens exactly
    wide, want_wide = _core.half_values(every, "fp16"), every.view(np.float16).astype(np.float32)
    assert np.array_equal(wide, want_wide, equal_nan=True)


def test_bf16_conversion_equals_ml_dtypes_bit_for_bit():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (bfloat16 for NumPy) is not installed")
    v = _edge_values()
    got = _core.half_bits(v, "bf16")
    want = v.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(v)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(_core.half_values(got[nan], "bf16")).all()
    every = np.arange(65536, dtype=np.uint16)
    assert np.array_equal(_core.half_values(every, "bf16"), every.view(ml_dtypes.bfloat16).astype(np.float32),
                          equal_nan=True)


# ---- ops in half storage --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ref():
    return _core.Ops("reference")


@pytest.fixture(scope="module")
def cases(ref):
    """precision -> its half cases (drawing them runs the reference once per case)"""
    return {p: half_cases(p, ref) for p in PRECISIONS}


def _half_ops(label: str, precision: str):
    ops = _core.Ops(gpu_devices.device(label))
    ops.storage = precision
    return ops


@pytest.mark.parametrize("label", ["pocl", "cuda"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_half_ops_match_the_reference(ref, cases, label, precision):
    ops = _half_ops(label, precision)
    cases = cases[precision]
    assert {c.op for c in cases} == set(HALF_OPS)
    failed = [f"{c.id}: {r.message}" for c in cases for r in [check_case(ref, ops, c)] if not r.ok]
    assert not failed, f"{len(failed)} of {len(cases)} cases:\n" + "\n".join(failed[:10])
    assert not ops.fallback_counts(), ops.fallback_counts()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_half_kernels_have_no_races_on_the_simulator(ref, cases, precision):
    ops = _half_ops("oclgrind", precision)
    picked = []
    for c in cases[precision]:  # the first two cases of each op (the simulator is slow)
        if sum(1 for k in picked if k.op == c.op) < 2:
            picked.append(c)
    for c in picked:
        r = check_case(ref, ops, c)
        assert r.ok, f"{c.id}: {r.message}"


def test_the_half_tolerance_catches_a_wrong_rounding(ref, cases):
    """A result off by a few fp16 ulps more than the format allows fails: the tolerance is not vacuous."""
    ops = _core.Ops(_gpu())
    ops.storage = "fp16"
    case = next(c for c in cases["fp16"] if c.op == "upsample")
    want = ref.upsample(*case.args)
    allowed = case.atol * case.scale(ref) + case.rtol * np.abs(want)
    got = ops.upsample(*case.args)
    assert (np.abs(got - want) <= allowed).all()
    bumped = got + 4 * 2.0 ** -11 * np.abs(want) + 1e-3
    assert not (np.abs(bumped - want) <= allowed).all()


# ---- training ops in half storage ------------------------------------------------------------------
@pytest.fixture(scope="module")
def train_cases(ref):
    """precision -> its half training cases"""
    return {p: half_train_cases(p, ref) for p in PRECISIONS}


# ---- the convolutions' backward passes in half (training) ------------------------------------------


@pytest.fixture(scope="module")
def backward_cases(ref):
    """(precision, dw_in_half) -> the half conv backward cases, made on first use"""
    made = {}

    def get(precision, dw_in_half):
        if (precision, dw_in_half) not in made:
            made[precision, dw_in_half] = half_conv_backward_cases(precision, ref, dw_in_half)
        return made[precision, dw_in_half]
    return get


@pytest.mark.parametrize("label", ["pocl", "cuda"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_half_training_ops_match_the_reference(ref, train_cases, label, precision):
    ops = _half_ops(label, precision)
    cases = train_cases[precision]
    assert {c.op for c in cases} == set(HALF_TRAIN_OPS)
    failed = [f"{c.id}: {r.message}" for c in cases for r in [check_case(ref, ops, c)] if not r.ok]
    # the group reductions again with groups of 4 threads (7 allowed: the largest power of two below)
    ops.limit_group_size(7)
    reductions = [c for c in cases if c.op in ("bias_backward", "batchnorm_train", "batchnorm_backward",
                                               "batchnorm_activate_train", "batchnorm_activate_backward",
                                               "shortcut_backward")]
    failed += [f"{c.id} (groups of 4): {r.message}" for c in reductions for r in [check_case(ref, ops, c)] if not r.ok]
    assert not failed, f"{len(failed)} of {len(cases) + len(reductions)} cases:\n" + "\n".join(failed[:10])
    assert not ops.fallback_counts(), ops.fallback_counts()


@pytest.fixture(scope="module")
def simulator():
    """One Oclgrind Ops for every precision: it compiles the kernel text once (seconds)."""
    return _core.Ops(gpu_devices.device("oclgrind"))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_half_training_kernels_have_no_races_on_the_simulator(ref, train_cases, simulator, precision):
    ops = simulator
    ops.storage = precision
    by_op = {}
    for c in train_cases[precision]:  # the smallest case of each op (the simulator is slow)
        size = sum(np.size(a) for a in c.args if isinstance(a, np.ndarray))
        if c.op not in by_op or size < by_op[c.op][0]:
            by_op[c.op] = (size, c)
    for _, c in by_op.values():
        r = check_case(ref, ops, c)
        assert r.ok, f"{c.id}: {r.message}"


@pytest.mark.parametrize("label", ["pocl", "cuda"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_half_conv_backward_matches_the_reference(ref, backward_cases, label, precision):
    ops = _half_ops(label, precision)
    cases = backward_cases(precision, forms_dw_in_half(label, precision))
    assert {c.op for c in cases} == set(HALF_CONV_BACKWARD_OPS) and len(cases) > 90
    failed = [f"{c.id}: {r.message}" for c in cases for r in [check_case(ref, ops, c)] if not r.ok]
    assert not failed, f"{len(failed)} of {len(cases)} cases:\n" + "\n".join(failed[:10])
    assert not ops.fallback_counts(), ops.fallback_counts()
    dx = ops.conv2d_backward_data(*next(c for c in cases if c.op == "conv2d_backward_data").args)
    assert np.array_equal(round_to(dx, precision), dx)  # dx came back from half storage


# the paths of gpu_ops_conv.cpp in small cases (the simulator is slow): im2col and col2im over a run
# of 2 images (axis swaps of dy), 1x1 of one image (GEMM straight into dx), groups (image by image),
# and in fp16 1x1 over a run of 2 (x's axes swapped, col2im of a 1x1: 2 s there). bf16 differs from
# fp16 only in the load / store macros.
SIMULATED = {"fp16": ("-g1-n2c1-13x10-", "-1x1in-n1", "-dw-n1c2-12x12-", "-direct1x1-"),
             "bf16": ("-g1-n2c1-13x10-", "-1x1in-n1", "-dw-n1c2-12x12-")}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_half_conv_backward_has_no_races_on_the_simulator(ref, backward_cases, precision):
    ops = _half_ops("oclgrind", precision)
    picked = [c for c in backward_cases(precision, False) if any(t in c.id for t in SIMULATED[precision])]
    assert len(picked) == 2 * len(SIMULATED[precision]), [c.id for c in picked]
    for c in picked:
        r = check_case(ref, ops, c)
        assert r.ok, f"{c.id}: {r.message}"


def test_the_half_training_tolerance_catches_a_wrong_rounding(ref, train_cases):
    """An fp16 gradient off by a few ulps more than one rounding allows fails the case's bound."""
    ops = _half_ops("pocl", "fp16")
    case = next(c for c in train_cases["fp16"] if c.op == "upsample_backward")
    want, got = ref.upsample_backward(*case.args), ops.upsample_backward(*case.args)
    allowed = case.scale(ref)[0]
    assert (np.abs(got - want) <= allowed).all()
    assert not (np.abs(got + 4 * 2.0 ** -11 * np.abs(want) + 1e-3 - want) <= allowed).all()


@pytest.mark.parametrize("backend", ["reference", "cpu", "pocl"])
def test_loss_scaling_ops_match_numpy(backend):
    ops = _core.Ops(gpu_devices.device(backend) if backend == "pocl" else backend)
    x, y = trand(2, 3, 4, 5), trand(2, 3, 4, 5)
    got = ops.add_scaled(x, 512.0, y)
    want = y.astype(np.float64) + 512.0 * x.astype(np.float64)
    assert np.abs(got - want).max() <= 2 ** -22 * np.abs(want).max()
    g = np.array([1.0, -3.0, 6e37, np.inf, np.nan, 2.0 ** -20], np.float32)
    scaled, found = ops.unscale_check(g[:2], 0.125)
    assert np.array_equal(scaled.ravel(), [0.125, -0.375]) and found[0] == 0  # exact: powers of two
    scaled, found = ops.unscale_check(g[:2], 0.125, found=1.0)
    assert found[0] == 1  # never cleared
    for bad in ([2, 0], [3], [4]):  # overflow in the product, inf and NaN in the gradient
        scaled, found = ops.unscale_check(g[bad], 8.0)
        assert found[0] == 1 and not np.isfinite(scaled).all()
    scaled, found = ops.unscale_check(g[5:], 2.0 ** 30)
    assert scaled.ravel()[0] == 2.0 ** 10 and found[0] == 0


def test_fp32_only_training_ops_refuse_half_naming_precision_md():
    ops = _half_ops("pocl", "fp16")
    x = trand(1, 2, 3, 3)
    with pytest.raises(DarknetError, match=r"fp16 .* tensor was passed to an op that runs in fp32 only .*PRECISION\.md"):
        ops.pool_backward("global_avg", x, trand(1, 2, 1, 1), 1, 1, 1, 0)


def test_a_weight_gradient_rounded_to_half_fails_the_kernels_tolerance(ref, backward_cases):
    """The pocl tolerance tells the kernels' fp32 weight gradient from one formed in half first: dw0 +
    round_fp16(x * dy) fails it in most cases (so the pocl test checks that no half rounding happens)."""
    cases = [c for c in backward_cases("fp16", False) if c.op == "conv2d_backward_weights"]
    caught = 0
    for c in cases:
        x, dy, dw0, *geom = c.args
        want = ref.conv2d_backward_weights(*c.args)
        half_first = dw0 + round_to(ref.conv2d_backward_weights(x, dy, np.zeros_like(dw0), *geom), "fp16")
        caught += not compare(half_first, want, c.scale(ref)[0], 0.0).ok
    assert caught > 0.8 * len(cases), f"{caught} of {len(cases)}"


def test_storage_is_refused_where_it_does_not_run():
    with pytest.raises(DarknetError, match=r"precision fp16 does not run on cpu \(it runs: fp32\)"):
        _core.Ops("cpu").storage = "fp16"
    with pytest.raises(DarknetError, match=r"unknown precision 'fp8' \(known: fp32, fp16, bf16\)"):
        _core.Ops("cpu").storage = "fp8"


# ---- the precision API ------------------------------------------------------------------------------
def _gpu() -> str:
    """The GPU device the API tests run on: CUDA where there is one, else pocl."""
    return gpu_devices.CUDA or gpu_devices.device("pocl")


@pytest.fixture(scope="module")
def tiny_cfg(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("half") / "tiny.cfg"
    path.write_text(small_cfg(classes=2, size=32, batch=2))
    return str(path)


def test_cpu_refuses_half_naming_what_it_runs(tiny_cfg):
    with pytest.raises(DarknetError) as e:
        Network(tiny_cfg, device="cpu", precision="fp16")
    assert str(e.value) == "precision fp16 does not run on cpu (it runs: fp32)"
    net = Network(tiny_cfg, device="cpu")
    assert (net.precision, net.precisions) == ("fp32", ["fp32"])
    with pytest.raises(DarknetError, match="unknown precision 'half'"):
        net.precision = "half"


def test_precision_follows_the_network_between_devices(tiny_cfg):
    gpu = _gpu()
    net = Network(tiny_cfg, device=gpu, precision="bf16")
    assert (net.precision, net.precisions) == ("bf16", ["fp32", "fp16", "bf16"])
    x = np.random.default_rng(0).uniform(0, 1, (2, 3, 32, 32)).astype(np.float32)
    half = net.forward(x)
    net.to(gpu)  # to() without a precision: fp32
    assert net.precision == "fp32"
    full = net.forward(x)
    for h, f in zip(half, full):
        assert h.dtype == np.float32 and h.shape == f.shape
        assert np.abs(h - f).max() < 0.1 * np.abs(f).max()  # bf16 activations, same network
    assert net.to(gpu, "fp16").precision == "fp16"
    assert net.to("cpu").precision == "fp32"
    clone = Network(tiny_cfg, device=gpu, precision="fp16").clone()
    assert clone.precision == "fp16"


def test_a_layer_without_a_half_path_is_named(tmp_path):
    cfg = tmp_path / "classifier.cfg"
    cfg.write_text("[net]\nwidth=8\nheight=8\nchannels=3\n\n[convolutional]\nfilters=4\nsize=3\nactivation=leaky\n\n"
                   "[avgpool]\n\n[softmax]\n")
    net = Network(str(cfg), device=_gpu())
    with pytest.raises(DarknetError, match=r"precision fp16: layer 1 \[avg\] has no half path yet"):
        net.precision = "fp16"
    assert net.precision == "fp32"


def _cli(capsys, *args):
    """The command line in this process (a subprocess per call costs a second of imports): (status, stdout, stderr)."""
    from darknet_py.commands.cli import main

    try:
        rc = main(list(args))
    except SystemExit as e:  # argparse: --help, usage errors
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_refusals_are_one_line(tiny_cfg, tmp_path, capsys):
    img = tmp_path / "x.png"
    import cv2

    cv2.imwrite(str(img), np.zeros((32, 32, 3), np.uint8))
    rc, _, err = _cli(capsys, "detect", str(img), "--cfg", tiny_cfg, "--weights", _weights(tiny_cfg, tmp_path),
                      "--device", "cpu", "--precision", "fp16", "--out", str(tmp_path / "out"))
    assert rc == 1, err
    assert err.strip().splitlines()[-1] == "darknet_py: error: precision fp16 does not run on cpu (it runs: fp32)"
    rc, _, err = _cli(capsys, "detect", "--precision", "fp64")
    assert rc == 2 and "argument --precision: invalid choice: 'fp64'" in err
    rc, _, err = _cli(capsys, "selftest", "--device", "cpu", "--precision", "bf16", "--json", str(tmp_path / "r.json"))
    assert rc == 1 and err.strip().splitlines()[-1] == "darknet_py: error: precision bf16 does not run on cpu (it runs: fp32)"
    for cmd in ("detect", "map", "train"):
        assert "--precision {fp32,fp16,bf16,auto}" in _cli(capsys, cmd, "--help")[1]
    assert "--precision {fp32,fp16,bf16}" in _cli(capsys, "selftest", "--help")[1]  # it judges a named type


def test_selftest_in_half_runs_the_half_ops(tmp_path, capsys):
    path = tmp_path / "report.json"
    rc, out, _ = _cli(capsys, "selftest", "--device", _gpu(), "--precision", "fp16", "--quick", "--json", str(path))
    assert rc == 0, out
    import json

    report = json.loads(path.read_text())
    assert report["precision"] == "fp16" and report["passed"] and report["fast_paths"] == {}
    assert {r["op"] for r in report["ops"]} == set(HALF_OPS) | set(HALF_TRAIN_OPS) | set(HALF_CONV_BACKWARD_OPS)
    assert all(r["cases"] == 2 for r in report["ops"])
    assert "training: the training run compares with the CPU's fp32: not run in fp16" in out


def _weights(cfg: str, tmp_path) -> str:
    path = str(tmp_path / "tiny.weights")
    Network(cfg, device="cpu").save_weights(path)
    return path


# ---- the real yolov3-tiny ------------------------------------------------------------------------------
THRESH, CONF_TOL, BOX_TOL = 0.1, 0.01, 1.0


def _match(got, want, what):
    """Every detection of one list has one in the other of the same class, box within BOX_TOL pixels
    and confidence within CONF_TOL, except where its confidence is within CONF_TOL of THRESH (it may
    fall on either side of the threshold in the other precision)."""
    for a, others, side in ((want, got, "fp32"), (got, want, "half")):
        for d in a:
            m = [o for o in others if o.class_id == d.class_id and abs(o.confidence - d.confidence) < CONF_TOL
                 and max(abs(p - q) for p, q in zip(o.box, d.box)) < BOX_TOL]
            assert m or d.confidence < THRESH + CONF_TOL, f"{what}: {side} detection {d} has no match in {others}"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_real_yolov3_tiny_in_half_detects_as_fp32(yolov3_tiny, precision):
    """On CUDA every photo in fp16 and bf16; on pocl (CI: about 5 s a photo there) the photo with the most
    detections in fp16."""
    from test_real_weights import _photos

    if not gpu_devices.CUDA and precision == "bf16":
        pytest.skip("bf16 on the real yolov3-tiny runs where there is a CUDA device (CI time)")
    device = gpu_devices.CUDA or gpu_devices.device("pocl")
    photos = _photos() if gpu_devices.CUDA else {"coins": _photos()["coins"]}
    files = (yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"])
    full, half = Network(*files, device="cpu"), Network(*files, device=device, precision=precision)
    count = 0
    for name, img in photos.items():
        want, got = full.detect(img, thresh=THRESH), half.detect(img, thresh=THRESH)
        _match(got, want, f"{name} in {precision}")
        count += len(want)
    assert count >= (10 if gpu_devices.CUDA else 7)  # the photos hold detections to compare
    assert not any(half._net.fallback_ops())  # every op ran on the device


# ---- export --precision fp16 ---------------------------------------------------------------------------
def test_fp16_onnx_runs_in_onnx_runtime_as_the_engine_in_fp16(tmp_path, capsys):
    """The demo model exported in fp16: float16 initializers (half the file), float32 input and heads;
    ONNX Runtime's heads equal the fp32 export's within fp16's rounding; the CLI's --half writes it."""
    onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (pip install '.[test]')")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install '.[test]')")
    import cv2
    from darknet_py.model_files.demo import demo_files

    files = demo_files()
    net = Network(files["cfg"], files["weights"], device="cpu")
    image = cv2.imread(files["image"])
    blob = net.preprocess(image)[None]
    full, half = tmp_path / "fp32.onnx", tmp_path / "fp16.onnx"
    net.export_onnx(full)
    net.export_onnx(half, precision="fp16")
    model = onnx.load(str(half))
    types = {t.data_type for t in model.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types
    assert all(t.data_type != onnx.TensorProto.FLOAT or t.name.endswith(("_roi", "_scales"))
               for t in model.graph.initializer)  # Resize's roi and scales are float32 by definition
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert half.stat().st_size < 0.55 * full.stat().st_size

    def run(path):
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": blob})

    for h, f in zip(run(half), run(full)):
        assert h.dtype == np.float32
        # each of the ~10 layers rounds to fp16 (2^-11 relative); the heads are logistic outputs in [0, 1]
        assert np.abs(h - f).max() < 40 * 2.0 ** -11, np.abs(h - f).max()
    rc, _, err = _cli(capsys, "export", files["cfg"], files["weights"], "-o", str(tmp_path / "cli.onnx"), "--half")
    assert rc == 0, err
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "cli.onnx")).metadata_props}
    assert props["darknet_py.precision"] == "fp16"
