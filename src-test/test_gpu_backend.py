"""The GPU backend (src-lib/gpu) end to end, on the OpenCL CPU runtimes of gpu_devices.py: the same
GpuBackend and kernel text that CUDA and Metal devices run, checked against the CPU backend.

Oclgrind (a simulator, with its race and bounds checker) runs small networks and every kernel at group
sizes 1 to 256; pocl (compiled) runs the reference cfgs, the real yolov3-tiny, training and the CLI.
The per-op parity of every kernel against the reference backend is in test_ops.py.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpu_devices
from darknet_py import Network, _core
from darknet_py.model_files.cfgfiles import cfg_with_size
from darknet_py.model_files.demo import demo_files
from darknet_py.training.init_weights import darknet_init
from test_gradients_network import ALL_LAYERS_CFG, TRUTHS, YOLO_CFG
from test_ops import assert_close
from test_train import small_cfg

REL_TOL = 1e-4  # forward outputs, as max|gpu - cpu| / max|cpu| per layer
# Where a machine has a real OpenCL GPU (never in CI), the compiled-runtime tests run on it too.
COMPILED = ["pocl", "cuda"] + (["opencl_gpu"] if gpu_devices.GPU else [])


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / max(float(np.abs(want).max()), 1e-30))


def pair(tmp_path, cfg_text: str, device: str, seed: int = 1):
    """The same network (Darknet's random init from `seed`) on the CPU and on `device`."""
    path = tmp_path / "net.cfg"
    path.write_text(cfg_text)
    nets = []
    for d in ("cpu", device):
        net = _core.Net(str(path), d)
        darknet_init(net, seed)
        nets.append(net)
    return nets


# ---- kernels at every group size ------------------------------------------------------------
def group_size_cases():
    rng = np.random.default_rng(3)
    r = lambda *s: rng.uniform(-2, 2, s).astype(np.float32)  # noqa: E731
    x, dy, c = r(2, 5, 7, 9), r(2, 5, 7, 9), 5
    xn = r(2, 5, 7, 9)
    return [
        ("activate", (x, "mish")), ("activate", (x, "normalize_channels_softmax")),
        ("add_bias", (x, r(c))), ("pool", ("global_avg", x, 1, 1, 1, 0, [2, 5, 1, 1])),
        ("pool", ("max", x, 3, 2, 2, 2, [2, 5, 4, 5])), ("softmax", (x, 3, 0.7)),
        ("bias_backward", (dy, r(c))), ("batchnorm_train", (x, r(c), r(c), 1e-5)),
        ("batchnorm_backward", (dy, xn, r(c), np.abs(r(c)) + 0.1, 1e-5)),
        ("softmax_backward", (x, dy, 3, 0.7)),
        ("scale_channels_backward", (r(2, 5, 1, 1), x, False, dy)),
        ("scale_channels_backward", (r(2, 1, 7, 9), x, True, dy)),
        ("shortcut_backward", (x, [r(2, 5, 7, 9)], r(2 * 5), 2, 2, dy)),
        ("shortcut_backward", (x, [r(2, 3, 7, 9)], r(2), 1, 1, dy)),
        ("pool_backward", ("max", x, dy[:, :, :4, :5].copy(), 3, 2, 2, 2)),
        ("conv2d", (x, r(4, 5, 3, 3), 1, 1, 1, 1, 1, 7, 9)),
    ]


@pytest.mark.parametrize("limit", [1, 7, 64, 256])
def test_kernels_are_right_at_every_group_size(limit):
    gpu = _core.Ops(gpu_devices.device("oclgrind"))
    gpu.limit_group_size(limit)
    ref = _core.Ops("reference")
    for op, args in group_size_cases():
        want = getattr(ref, op)(*args)
        got = getattr(gpu, op)(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for k, (g, w) in enumerate(zip(got, want)):
            for gg, ww in (zip(g, w) if isinstance(w, list) else [(g, w)]):
                assert_close(gg, ww, 2e-5, 1e-4, f"{op} output {k} at group size {limit}")
    # gemm_f32 needs 16x16 = 256 threads per group: below that the CPU's GEMM runs it, counted
    assert ("gemm" in gpu.fallback_counts()) == (limit < 256), gpu.fallback_counts()


# ---- networks: forward ----------------------------------------------------------------------
def test_all_layer_types_forward_on_the_simulator(tmp_path):
    cpu, gpu = pair(tmp_path, ALL_LAYERS_CFG, gpu_devices.device("oclgrind"))
    x = np.random.default_rng(0).uniform(-1, 1, (4, 4, 9, 9)).astype(np.float32)
    layers = list(range(len(cpu.layers())))
    for i, (g, c) in enumerate(zip(gpu.forward(x, layers), cpu.forward(x, layers))):
        assert rel_err(g, c) < REL_TOL, f"layer {i} ({cpu.layers()[i]['type']}): {rel_err(g, c):.2e}"
    assert not any(gpu.fallback_ops()), gpu.fallback_ops()


SHARED_CFG = Path(__file__).resolve().parents[1].parent / "shared" / "cfg"
CFG_NAMES = sorted(p.name for p in SHARED_CFG.glob("*.cfg")) or ["(../shared/cfg absent)"]


SMALL = 64


@pytest.mark.parametrize("name", CFG_NAMES)
def test_reference_cfg_forward_equals_cpu(shared_cfg_dir, name, tmp_path):
    # every layer's output at a small input (pocl: Oclgrind would take minutes per cfg). 64x64: the same
    # layers and ops as at 128x128 in half the time (yolov4 on pocl: 1.45 s, 3.2 s); at 32x32 one cfg
    # (yolov4-sam-mish-csp-reorg-bfm) no longer builds, and the deepest maps of most would be 1x1
    path = cfg_with_size(str(shared_cfg_dir / name), SMALL, SMALL)
    try:
        cpu, gpu = pair(tmp_path, open(path).read(), gpu_devices.device("pocl"), seed=7)
    finally:
        os.unlink(path)
    x = np.random.default_rng(1).uniform(0, 1, (1, cpu.channels, SMALL, SMALL)).astype(np.float32)
    layers = list(range(len(cpu.layers())))
    worst = max((rel_err(g, c), i) for i, (g, c) in enumerate(zip(gpu.forward(x, layers), cpu.forward(x, layers))))
    assert worst[0] < REL_TOL, f"{name}: layer {worst[1]} differs by {worst[0]:.2e} (relative)"
    assert not any(gpu.fallback_ops()), f"{name}: ops fell back to the CPU: {gpu.fallback_ops()}"


def test_real_yolov3_tiny_detects_the_same_as_cpu(yolov3_tiny):
    from test_real_weights import _photos

    files = (yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"])
    cpu, gpu = Network(*files, device="cpu"), Network(*files, device=gpu_devices.device("pocl"))
    count = 0
    # the three photos with the most detections (camera 5, coins 7: overlapping low scores, motorcycle 2);
    # the other four (0 to 2 each) took the same path for 4/7 of the test's time
    for name, img in ((k, v) for k, v in _photos().items() if k in ("camera", "coins", "motorcycle_left")):
        # "compare" raises unless the device decode equals the host decode, and returns the device's rows
        # ("device" returns the same rows: test_device_postproc_compares_equal_on_opencl[pocl])
        want, got = cpu.detect(img, thresh=0.1), gpu.detect(img, thresh=0.1, postproc="compare")
        assert [d.class_id for d in got] == [d.class_id for d in want], name
        for g, w in zip(got, want):
            assert abs(g.confidence - w.confidence) < 1e-4, (name, g, w)
            assert max(abs(a - b) for a, b in zip(g.box, w.box)) < 0.5, (name, g, w)
        count += len(want)
    assert count > 10  # the photos hold detections to compare


# ---- training -------------------------------------------------------------------------------
def train_losses(net, steps: int, batch: int, size: int, classes: int, seed: int, lr: float = 0.002):
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        x = rng.uniform(0, 1, (batch, 3, size, size)).astype(np.float32)
        truths = [np.array([[*rng.uniform(0.2, 0.8, 2), *rng.uniform(0.1, 0.4, 2), rng.integers(classes)]],
                           np.float32) for _ in range(batch)]
        net.forward_train(x, [])
        losses.append(sum(h["loss"] for h in net.yolo_loss(truths)))
        net.backward()
        net.update(lr, batch)
    return np.array(losses)


@pytest.mark.parametrize("label", COMPILED)
def test_training_iterations_match_cpu(tmp_path, label):
    # 20 iterations from the same Darknet init and batches: batchnorm statistics, leaky, maxpool, the
    # yolo loss and SGD with momentum and decay, all on the device
    cfg = small_cfg(classes=2, size=64, batch=4, filters=(8, 16), head=16, anchors="8,8, 14,14, 22,22")
    cpu, gpu = pair(tmp_path, cfg, gpu_devices.device(label))
    want = train_losses(cpu, 20, 4, 64, 2, seed=11)
    got = train_losses(gpu, 20, 4, 64, 2, seed=11)
    assert np.all(np.abs(got - want) <= 1e-3 * np.abs(want)), f"losses\ncpu {want}\ngpu {got}"
    assert not any(gpu.fallback_ops()), gpu.fallback_ops()
    w_cpu, w_gpu = cpu.params(0)["weights"], gpu.params(0)["weights"]
    assert rel_err(w_gpu, w_cpu) < 1e-3  # the trained weights too


def test_training_on_the_simulator(tmp_path):
    cpu, gpu = pair(tmp_path, YOLO_CFG, gpu_devices.device("oclgrind"))
    x = np.random.default_rng(2).uniform(0, 1, (2, 3, 8, 8)).astype(np.float32)
    for step in range(3):
        for net in (cpu, gpu):
            net.forward_train(x, [])
        want, got = cpu.yolo_loss(TRUTHS), gpu.yolo_loss(TRUTHS)
        assert abs(got[0]["loss"] - want[0]["loss"]) <= 1e-3 * want[0]["loss"], (step, got, want)
        for net in (cpu, gpu):
            net.backward()
            net.update(0.01, 2)


# ---- the yolo loss on the device -------------------------------------------------------------
# A [yolo] layer right on the input: cpu and devices see the same head, so these compare the loss
# kernels alone (not the convolutions before them). Options that change the loss's paths, each with
# several anchors per truth (iou_thresh < 1) and, but for one, label smoothing.
YOLO_LOSS_OPTIONS = {
    "mse": "iou_thresh=0.2\nlabel_smooth_eps=0.1",
    "giou": "iou_loss=giou\niou_normalizer=0.07\niou_thresh=0.2\nlabel_smooth_eps=0.1\nmax_delta=5",
    "diou": "iou_loss=diou\niou_normalizer=0.07\niou_thresh=0.2\nlabel_smooth_eps=0.1",
    "ciou": "iou_loss=ciou\niou_normalizer=0.07\niou_thresh=0.2\nlabel_smooth_eps=0.1",
    "new_coords": "new_coords=1\nscale_x_y=1.05\niou_loss=ciou\niou_normalizer=0.05\niou_thresh=0.2\nlabel_smooth_eps=0.1",
    # predictions above truth_thresh get deltas in the per-prediction pass; smooth objectness; max boxes
    "truth_thresh": "iou_loss=giou\nobjectness_smooth=1\nignore_thresh=0.2\ntruth_thresh=0.3\niou_thresh=0.2\nmax=6",
    # focal_loss scales the class deltas (delta_yolo_class); a cell with two truths keeps the plain branch
    "focal": "focal_loss=1\niou_thresh=0.2\ntruth_thresh=0.3\nlabel_smooth_eps=0.1",
}


def yolo_head_cfg(options: str) -> str:
    return f"""[net]
batch=3
width=16
height=16
channels=27

[yolo]
mask=0,2,3
anchors=1,1.5, 2,2, 3,2.5, 4,5, 6,6
num=5
classes=4
{options}
"""


def many_truths(classes: int = 4):
    rng = np.random.default_rng(5)
    out = []
    for k in (17, 9, 0):
        t = np.concatenate([rng.uniform(0.02, 0.98, (k, 2)), rng.uniform(0.05, 0.5, (k, 2)),
                            rng.integers(0, classes, (k, 1))], axis=1).astype(np.float32)
        if k:
            t[3, :4] = t[1, :4]
            t[3, 4] = (t[1, 4] + 1) % classes  # a second truth in the same cell, another class
            t[5, 4] = -1  # no class: skipped
            t[6, 4] = classes  # out of range: skipped
        out.append(t)
    return out


def yolo_head_input(options: str) -> np.ndarray:
    # new_coords reads x, y, w, h without a logistic: keep them in 0..1 as a trained head's are
    lo, hi = (0.05, 0.95) if "new_coords" in options else (-3.0, 3.0)
    return np.random.default_rng(4).uniform(lo, hi, (3, 27, 16, 16)).astype(np.float32)


def yolo_loss_on(tmp_path, device: str, options: str):
    path = tmp_path / f"head-{device.replace(':', '-')}.cfg"
    path.write_text(yolo_head_cfg(options))
    net = _core.Net(str(path), device)
    net.forward_train(yolo_head_input(options), [])
    stats = net.yolo_loss(many_truths())[0]
    return stats, net.delta(0), net


@pytest.mark.parametrize("kind", list(YOLO_LOSS_OPTIONS))
def test_yolo_loss_statistics_and_deltas_equal_cpu(tmp_path, kind):
    want, want_delta, _ = yolo_loss_on(tmp_path, "cpu", YOLO_LOSS_OPTIONS[kind])
    assert want["count"] > 17 + 9 - 4, want  # several anchors per truth
    labels = [label for label in COMPILED + ["oclgrind"] if gpu_devices.DEVICES.get(label)]
    if not labels:
        pytest.skip(gpu_devices.MISSING.format("pocl or Oclgrind"))
    for label in labels:
        got, got_delta, net = yolo_loss_on(tmp_path, gpu_devices.device(label), YOLO_LOSS_OPTIONS[kind])
        assert got["count"] == want["count"], (label, got, want)
        for key in want:
            assert abs(got[key] - want[key]) <= 1e-5 * abs(want[key]), (label, key, got, want)
        err = float(np.abs(got_delta - want_delta).max())
        assert err <= 1e-5, f"{kind} on {label}: deltas differ by {err:.2e}"
        assert not any(net.fallback_ops()), net.fallback_ops()


def test_yolo_loss_kernels_have_no_races_on_the_simulator(tmp_path):
    # conftest also fails the whole session on any report; this names the kernels that caused it
    from conftest import oclgrind_reports

    before = len(oclgrind_reports())
    for kind in ("truth_thresh", "new_coords"):
        yolo_loss_on(tmp_path, gpu_devices.device("oclgrind"), YOLO_LOSS_OPTIONS[kind])
    assert oclgrind_reports()[before:] == ""


# ---- what crosses between host and device ---------------------------------------------------
@pytest.mark.parametrize("label", COMPILED)
def test_bytes_moved_per_training_iteration_and_per_detect(tmp_path, label):
    cfg = small_cfg(classes=2, size=64, batch=4, filters=(8, 16), head=16)
    _, net = pair(tmp_path, cfg, gpu_devices.device(label))
    x = np.random.default_rng(0).uniform(0, 1, (4, 3, 64, 64)).astype(np.float32)
    truths = [np.array([[0.3, 0.4, 0.2, 0.3, 1], [0.6, 0.6, 0.3, 0.2, 0]], np.float32)] + \
        [np.array([[0.5, 0.5, 0.4, 0.4, 1]], np.float32)] * 2 + [np.zeros((0, 5), np.float32)]

    def iteration():
        net.forward_train(x, [])
        net.yolo_loss(truths)
        net.backward()
        net.update(0.001, 4)

    iteration()  # the first one also uploads what stays (the heads' anchors)
    before = net.bytes_moved()
    iteration()
    after = net.bytes_moved()
    # up: the batch and the truths ([batch, most boxes of an image, 5] floats, once for all heads);
    # down: per head, 8 per-image sums (YOLO_LOSS_STATS in kernels/yolo_loss.h). Nothing head-sized.
    truth_bytes = 4 * 2 * 5 * 4
    stats_bytes = len(net.yolo_layers) * 4 * 8 * 4
    assert after["up"] - before["up"] == x.nbytes + truth_bytes
    assert after["down"] - before["down"] == stats_bytes
    # detect: up the batch; down per head the per-image candidate counts (int32), then only the used
    # records (x, y, w, h, objectness, index, classes probabilities: kernels/yolo_decode.h)
    heads = net.forward(x, list(net.yolo_layers))
    record = 6 + 2
    candidates = sum(int((h.reshape(4, -1, 7, *h.shape[2:])[:, :, 4] > 0.25).sum()) for h in heads)
    assert candidates > 0  # the records' bytes are counted, not only the counts
    before = net.bytes_moved()
    net.detect(x, [(64, 64)] * 4, 0.25, 0.45, False)
    after = net.bytes_moved()
    down = len(heads) * 4 * 4 + candidates * record * 4
    assert (after["up"] - before["up"], after["down"] - before["down"]) == (x.nbytes, down)
    # the old path: every head comes down
    before = net.bytes_moved()
    net.detect(x, [(64, 64)] * 4, 0.25, 0.45, False, "cpu")
    after = net.bytes_moved()
    assert after["down"] - before["down"] == sum(h.nbytes for h in heads)


# ---- detection's decode on the device (yolo_candidates) ----------------------------------
def _demo_frame():
    import cv2

    cap = cv2.VideoCapture(demo_files()["video"])
    ok, frame = cap.read()
    cap.release()
    assert ok
    return frame


def test_device_postproc_on_the_cpu_backend_equals_the_host_decode():
    import cv2

    f = demo_files()
    net = Network(f["cfg"], f["weights"], f["names"], device="cpu")
    images = [cv2.imread(f["image"]), _demo_frame()]
    for img in images:
        want = net.detect(img, thresh=0.1, postproc="cpu")
        assert want and net.detect(img, thresh=0.1, postproc="device") == want
        assert net.detect(img, thresh=0.1, postproc="compare") == want
    assert net.detect_batch(images, thresh=0.1) == net.detect_batch(images, thresh=0.1, postproc="cpu")
    ref = Network(f["cfg"], f["weights"], f["names"], device="reference")
    assert ref.detect(images[0], thresh=0.1) == ref.detect(images[0], thresh=0.1, postproc="cpu")


@pytest.mark.parametrize("label,size", [("pocl", None), ("oclgrind", 64)])
def test_device_postproc_compares_equal_on_opencl(label, size, tmp_path):
    import cv2

    from conftest import oclgrind_reports

    f = demo_files()
    cfg = cfg_with_size(f["cfg"], size, size) if size else f["cfg"]
    try:
        net = Network(cfg, f["weights"], f["names"], device=gpu_devices.device(label))
    finally:
        if size:
            os.unlink(cfg)
    before = len(oclgrind_reports())
    img = cv2.imread(f["image"])
    got = net.detect(img, thresh=0.1, postproc="compare")  # raises at the first difference
    if label != "oclgrind":
        # "device" returns the rows "compare" checked (src-bindings/_core.cpp runs the same forward and
        # device decode for both): host code, the same on every runtime. Under Oclgrind a second call
        # would run no kernel the first did not, for half the test's time (about 28 s of 56 in CI).
        assert got == net.detect(img, thresh=0.1, postproc="device")
    assert oclgrind_reports()[before:] == ""


def test_bad_postproc_names_the_choices():
    import cv2

    f = demo_files()
    net = Network(f["cfg"], f["weights"], f["names"], device="cpu")
    with pytest.raises(ValueError, match="'device', 'cpu', 'compare'"):
        net.detect(cv2.imread(f["image"]), postproc="gpu")
    with pytest.raises(ValueError, match="postproc"):
        net._net.detect(np.zeros((1, 3, *net.input_size[::-1]), np.float32), [(10, 10)], 0.25, 0.45, False, "gpu")


# ---- the Python API on a device -------------------------------------------------------------
def test_params_are_copies_on_a_device_and_set_params_writes_back():
    f = demo_files()
    net = Network(f["cfg"], f["weights"], f["names"], device=gpu_devices.device("pocl"))
    cpu = Network(f["cfg"], f["weights"], f["names"], device="cpu")
    p = net.params(0)
    p["biases"][...] += 1.0  # a copy: the network does not change
    assert np.array_equal(net.params(0)["biases"], cpu.params(0)["biases"])
    net.set_params(0, {"biases": p["biases"]})
    assert np.array_equal(net.params(0)["biases"], cpu.params(0)["biases"] + 1.0)
    with pytest.raises(ValueError, match="has no parameter 'bias'.*biases"):
        net.set_params(0, {"bias": p["biases"]})
    with pytest.raises(ValueError, match=f"needs {p['biases'].size} values"):
        net.set_params(0, {"biases": np.zeros(3, np.float32)})


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("label", COMPILED)
def test_what_a_device_derives_from_parameters_follows_every_write(tmp_path, label, precision):
    # A device keeps the half copies of the weights and the folded batchnorm between forwards
    # (Backend::set_params_version), and CUDA records forwards that leave them out: after set_params,
    # load_weights and a training step the forward must see the new values, as the CPU network given the
    # same writes does.
    cfg = small_cfg(classes=2, size=32, batch=2, filters=(8,), head=8, anchors="8,8, 14,14, 22,22", burn_in=0)
    cpu, gpu = pair(tmp_path, cfg, gpu_devices.device(label))
    gpu.precision = precision
    if precision == "fp16":  # a scale the first step's gradients fit, so that it applies as on the CPU
        gpu.loss_scale = 64.0
    x = np.random.default_rng(2).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    tol = 1e-4 if precision == "fp32" else 2e-2
    last = None

    def check(stage):
        nonlocal last
        want, got = cpu.forward(x, [4])[0], gpu.forward(x, [4])[0]
        assert rel_err(gpu.forward(x, [4])[0], got) == 0, stage  # a second forward, from what is kept
        assert rel_err(got, want) < tol, (stage, rel_err(got, want))
        assert last is None or rel_err(got, last) > 10 * tol, stage  # the write changed the output
        last = got

    check("first forward")
    bn = {k: v * f for (k, v), f in zip(cpu.params(0).items(), (1.5, 0.5, -1.0, 3.0, -0.7))}
    for net in (cpu, gpu):  # biases, scales, rolling mean and variance (the fold), weights (the half copy)
        net.set_params(0, bn)
    check("set_params")
    for net in (cpu, gpu):
        net.set_params(3, {"weights": net.params(3)["weights"] * -2.0})
    check("set_params of the head")
    darknet_init(cpu, 9)
    cpu.save_weights(str(tmp_path / "init9.weights"))
    for net in (cpu, gpu):
        net.load_weights(str(tmp_path / "init9.weights"), -1)
    check("load_weights")
    for net in (cpu, gpu):
        train_losses(net, 1, 2, 32, 2, seed=4, lr=0.05)
    check("a training step")


def test_network_moves_between_devices(tmp_path):
    f = demo_files()
    cpu = Network(f["cfg"], f["weights"], f["names"], device="cpu")
    net = Network(f["cfg"], f["weights"], f["names"], device="cpu").to(gpu_devices.device("pocl"))
    assert net.device == gpu_devices.device("pocl")
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 256, 256)).astype(np.float32)
    for g, c in zip(net.forward(x), cpu.forward(x)):
        assert rel_err(g, c) < REL_TOL
    net.save_weights(tmp_path / "from_gpu.weights")
    cpu.save_weights(tmp_path / "from_cpu.weights")
    assert (tmp_path / "from_gpu.weights").read_bytes() == (tmp_path / "from_cpu.weights").read_bytes()
    assert net.to("cpu").device == "cpu" and np.array_equal(net.params(0)["weights"], cpu.params(0)["weights"])


def test_an_op_without_a_kernel_falls_back_and_is_counted(capfd):
    # gemm_f32 works in 16x16 tiles of 256 threads: where a device allows fewer, GEMM runs on the CPU
    gpu, ref = _core.Ops(gpu_devices.device("pocl")), _core.Ops("reference")
    gpu.limit_group_size(64)
    rng = np.random.default_rng(0)
    a, b, c = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((5, 7), (7, 3), (5, 3)))
    for _ in range(2):
        assert_close(gpu.gemm(False, False, 1.0, a, b, 0.5, c), ref.gemm(False, False, 1.0, a, b, 0.5, c), 1e-6, 1e-6,
                     "gemm fallback")
    assert gpu.fallback_counts() == {"gemm": 2}
    assert capfd.readouterr().err.count("runs gemm on the CPU") == 1  # reported once


def test_auto_never_picks_a_cpu_runtime():
    resolved, log = _core.resolve_device("auto")
    found = [d for d in _core.devices() if d["found"]]
    if any(d["is_gpu"] for d in found):
        pytest.skip("this machine has a GPU: auto may pick it")
    assert resolved == "cpu"
    assert sum("not a GPU" in line for line in log) == len(found), log


def test_device_names_are_checked():
    with pytest.raises(ValueError, match="unknown device 'gpu'.*opencl:N"):
        Network(demo_files()["cfg"], device="gpu")
    with pytest.raises(ValueError, match="opencl:9"):
        _core.Net(str(demo_files()["cfg"]), "opencl:9")


# ---- the command line -----------------------------------------------------------------------
def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "darknet_py", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_detect_on_a_device_from_the_environment(tmp_path):
    pocl = gpu_devices.device("pocl")
    runs = {}
    for device in ("cpu", pocl):
        r = cli("detect", "--json", str(tmp_path / f"{device}.json"), "--out", str(tmp_path / device),
                env={"DARKNET_PY_DEVICE": device})
        assert r.returncode == 0, r.stderr
        runs[device] = json.loads((tmp_path / f"{device}.json").read_text())
    assert runs[pocl]["model"]["device"] == pocl and runs["cpu"]["model"]["device"] == "cpu"
    boxes = {d: [(x["class_id"], x["box"]) for img in runs[d]["results"] for x in img["detections"]] for d in runs}
    assert boxes[pocl] == boxes["cpu"] and len(boxes["cpu"]) >= 3
    r = cli("detect", "--device", "gpu")
    assert r.returncode == 2 and "unknown device 'gpu'" in r.stderr


def test_info_lists_devices_and_coverage(tmp_path):
    r = cli("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert "Oclgrind Simulator" in info["devices"] and "not a GPU" in info["devices"]
    (tmp_path / "all.cfg").write_text(ALL_LAYERS_CFG)
    r = cli("info", "--coverage", str(tmp_path / "all.cfg"), "--device", gpu_devices.device("pocl"), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["layers"]
    assert len(rows) == len(_core.Net(str(tmp_path / "all.cfg"), "cpu").layers())
    assert all(row["cpu_ops"] == [] for row in rows), rows
