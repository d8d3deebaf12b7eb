"""Training in half precision (issue 19; src-lib/gpu/PRECISION.md): activations and their gradients
in fp16 / bf16, weights, their gradients and the optimizer in fp32, fp16 with dynamic loss scaling.

Checked against the same training in fp32 on the same device, from the same Darknet init and
batches, through every layer type a YOLO cfg trains in half (conv + batchnorm + leaky, maxpool,
route, upsample, shortcut, two [yolo] heads). Tolerances follow from the formats: an activation
stored in fp16 carries a relative error up to 2^-11, in bf16 2^-8; after a forward and backward
through the net's 12 layers and a few SGD steps the loss agrees with fp32 within 1 % (fp16) and
4 % (bf16), several times what one rounding per layer gives.

Runs on pocl (CPU OpenCL, in CI) and on CUDA where there is one.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpu_devices
from darknet_py import DarknetError, _core
from darknet_py.training.init_weights import darknet_init
from test_gpu_backend import rel_err

DEVICES = ["pocl", "cuda"]
SIZE, BATCH, CLASSES = 32, 2, 2
# conv-bn-leaky stages, a maxpool, a shortcut, a head at stride 4; a route + upsample to a head at stride 2
CFG = f"""[net]
batch={BATCH}
width={SIZE}
height={SIZE}
channels=3
momentum=0.9
decay=0.0005
learning_rate=0.002

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=mish

[shortcut]
from=-2
activation=linear

[maxpool]
size=2
stride=2

[convolutional]
size=1
stride=1
pad=1
filters={3 * (CLASSES + 5)}
activation=linear

[yolo]
mask=3,4,5
anchors=4,4, 6,6, 8,8, 10,10, 14,14, 20,20
classes={CLASSES}
num=6

[route]
layers=-4

[upsample]
stride=1

[convolutional]
size=1
stride=1
pad=1
filters={3 * (CLASSES + 5)}
activation=linear

[yolo]
mask=0,1,2
anchors=4,4, 6,6, 8,8, 10,10, 14,14, 20,20
classes={CLASSES}
num=6
"""
LOSS_TOL = {"fp16": 0.01, "bf16": 0.04}


def _device(label: str) -> str:
    return gpu_devices.device(label)


def _net(tmp_path, device: str, precision: str, seed: int = 3):
    path = tmp_path / "half_train.cfg"
    path.write_text(CFG)
    net = _core.Net(str(path), device)
    darknet_init(net, seed)
    net.precision = precision
    return net


def _batches(steps: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = rng.uniform(0, 1, (BATCH, 3, SIZE, SIZE)).astype(np.float32)
        truths = [np.array([[*rng.uniform(0.3, 0.7, 2), *rng.uniform(0.15, 0.4, 2), rng.integers(CLASSES)]],
                           np.float32) for _ in range(BATCH)]
        yield x, truths


def _train(net, steps: int, lr: float = 0.002):
    """Per step: the loss and whether update applied the step."""
    out = []
    for x, truths in _batches(steps):
        net.forward_train(x, [])
        loss = sum(h["loss"] for h in net.yolo_loss(truths))
        net.backward()
        out.append((loss, net.update(lr, BATCH)))
    return out


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("label", DEVICES)
def test_half_training_follows_fp32(tmp_path, label, precision):
    device = _device(label)
    full, half = _net(tmp_path, device, "fp32"), _net(tmp_path, device, precision)
    want, got = _train(full, 8), _train(half, 8)
    assert all(applied for _, applied in want + got), got  # fp16 starts at 2^16: no overflow on this net
    want_l, got_l = np.array([w for w, _ in want]), np.array([g for g, _ in got])
    assert np.all(np.abs(got_l - want_l) <= LOSS_TOL[precision] * want_l), f"fp32 {want_l}\n{precision} {got_l}"
    assert got_l[-1] < got_l[0]  # it learns
    for layer in (0, 3, 6, 10):  # first, mish, head convolutions: the fp32 master weights moved alike
        w_full, w_half = full.params(layer)["weights"], half.params(layer)["weights"]
        moved = rel_err(w_full, _net(tmp_path, device, "fp32").params(layer)["weights"])
        assert rel_err(w_half, w_full) < 0.1 * moved + 1e-6, (layer, rel_err(w_half, w_full), moved)
    assert not any(half.fallback_ops()), half.fallback_ops()
    # the deltas below the heads are half tensors read back as fp32; the heads' own are fp32
    assert half.delta(2).dtype == np.float32 and np.isfinite(half.delta(2)).all()


@pytest.mark.parametrize("label", DEVICES)
def test_fp16_overflow_skips_the_step_halves_the_scale_and_recovers(tmp_path, label):
    net = _net(tmp_path, _device(label), "fp16")
    net.loss_scale = 2.0 ** 24  # far above what the gradients fit in fp16 at: forced overflow
    before = {k: v.copy() for k, v in net.params(0).items()}
    scales, applied = [], []
    for x, truths in _batches(16):
        net.forward_train(x, [])
        net.yolo_loss(truths)
        net.backward()
        scales.append(net.loss_scale)
        applied.append(net.update(0.002, BATCH))
        if not applied[-1]:
            assert all(np.array_equal(v, before[k]) for k, v in net.params(0).items())  # nothing moved
            assert all(not g.any() for g in net.gradients(0).values())  # the overflowed gradients are dropped
    skipped = applied.index(True)
    assert skipped >= 1 and not any(applied[:skipped]) and all(applied[skipped:]), applied
    assert scales[:skipped + 1] == [2.0 ** (24 - k) for k in range(skipped + 1)]  # halved per skipped step
    assert net.skipped_steps == skipped
    # recovered: the steps after apply and keep the scale that fits
    assert net.loss_scale == scales[skipped] and np.isfinite(net.params(0)["weights"]).all()
    assert not np.array_equal(net.params(0)["weights"], before["weights"])


def test_loss_scale_belongs_to_fp16(tmp_path):
    net = _net(tmp_path, _device("pocl"), "bf16")
    assert net.loss_scale == 1.0
    with pytest.raises(DarknetError, match=r"loss_scale: only fp16 training scales its loss \(this network is in bf16\)"):
        net.loss_scale = 8.0
    net.precision = "fp16"
    assert net.loss_scale == 65536.0
    with pytest.raises(DarknetError, match=r"loss_scale: loss_scale must be a number in \[2\^-16, 2\^24\], got inf"):
        net.loss_scale = float("inf")


# ---- train() and the command line ------------------------------------------------------------------
def test_train_in_fp16_logs_the_loss_scale_and_saves_fp32_weights(tmp_path, capsys):
    import io

    from darknet_py import train
    from darknet_py.data.synth import generate
    from test_train import small_cfg, weights_floats

    data = generate(str(tmp_path / "ds"), images=8, classes=2, size=(64, 64), seed=5, valid_fraction=0.25, workers=1)
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(small_cfg(classes=2, size=64, batch=4, lr=0.002, burn_in=0, max_batches=3, filters=(8, 16),
                             head=16, anchors="8,8, 14,14, 22,22"))
    log = io.StringIO()
    r = train(data, str(cfg), out_dir=str(tmp_path / "out"), device=_device("pocl"), precision="fp16", seed=3,
              workers=1, chart=False, stream=log, progress=False)
    text = log.getvalue()
    assert r.iteration == 3 and r.skipped_steps == 0, text
    assert "loss scale 65536" in text and "fp16 loss scaling: 0 step(s) skipped for overflow" in text, text
    assert np.isfinite(weights_floats(r.final)).all()  # .weights stay fp32 (Darknet reads them)
    from darknet_py.commands.cli import main

    rc = main(["train", data, str(cfg), "--device", "cpu", "--precision", "bf16", "--out", str(tmp_path / "cpu")])
    assert rc == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "darknet_py: error: precision bf16 does not run on cpu (it runs: fp32)"


# ---- the demo model retrained in half on CUDA (the GPU machine; about 3 minutes on an H100) -----------
@pytest.mark.skipif(not gpu_devices.CUDA, reason="needs a CUDA GPU: the demo model's full schedule")
def test_demo_retrain_in_half_matches_fp32(tmp_path):
    import time

    import darknet_py
    from darknet_py.data.synth import generate
    from darknet_py.model_files.demo import demo_files

    data = generate(str(tmp_path / "shapes"), images=6000, classes=4, size=(256, 256), seed=1, valid_fraction=0.05)
    valid = generate(str(tmp_path / "valid"), images=100, classes=4, size=(256, 256), seed=20250101, valid_fraction=0)
    cfg = demo_files()["cfg"]
    found = {}
    for precision in ("fp32", "fp16", "bf16"):  # the README's recipe of the demo model, in each precision
        t0 = time.perf_counter()
        r = darknet_py.train(data, cfg, out_dir=str(tmp_path / precision), device="cuda", precision=precision,
                             seed=1, quiet=True, chart=False)
        seconds = time.perf_counter() - t0
        m = darknet_py.compute_map(valid, cfg, r.final, progress=False).map
        found[precision] = m
        print(f"demo retrain {precision}: {seconds:.1f} s, {r.images_per_second:.0f} images/s, mAP@0.5 {m:.4f}, "
              f"steps skipped for overflow {r.skipped_steps}")
    for precision in ("fp16", "bf16"):
        assert abs(found[precision] - found["fp32"]) <= 0.005, found
