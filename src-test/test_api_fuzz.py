"""Misuse of the Python API must raise DarknetError, never crash: the reproducers of the crashes found,
then a stateful fuzz (src-test/api_fuzz_driver.py, in a subprocess so that a segfault fails the test
with its seed and case instead of killing pytest).

CI runs a few hundred sequences; DARKNET_API_FUZZ_COUNT=N runs more. The sanitizer run (AddressSanitizer
+ UndefinedBehaviorSanitizer build, >= 10,000 sequences) is tools/sanitizer_fuzz.sh:

    tools/sanitizer_fuzz.sh build && tools/sanitizer_fuzz.sh run 1000 40 250
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from darknet_py import DarknetError, _core

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import api_fuzz_driver  # noqa: E402
import gpu_devices  # noqa: E402

COUNT = int(os.environ.get("DARKNET_API_FUZZ_COUNT", "300"))
SEED = int(os.environ.get("DARKNET_API_FUZZ_SEED", "20240611"))


@pytest.fixture
def yolo_net(tmp_path):
    cfg = tmp_path / "yolo.cfg"
    cfg.write_text(api_fuzz_driver.YOLO_CFG)
    return _core.Net(str(cfg), "cpu")


def blob(n, size=32):
    return np.random.default_rng(n).random((n, 3, size, size), dtype=np.float32)


def truths(n):
    return [np.array([[0.5, 0.5, 0.3, 0.3, 1]], np.float32)] * n


# ---- the reproducers ------------------------------------------------------------------------------


@pytest.mark.parametrize("after", ["yolo_loss", "backward", "set_delta", "delta"])
def test_forward_after_forward_train_invalidates_training_state(yolo_net, after):
    # The crash this guards against: forward_train on 2, forward on 64, then the loss or backward on stale deltas.
    yolo_net.forward_train(blob(2), [])
    yolo_net.forward(blob(64), [])
    call = {"yolo_loss": lambda: yolo_net.yolo_loss(truths(64)), "backward": yolo_net.backward,
            "set_delta": lambda: yolo_net.set_delta(-1, np.zeros(64 * 21 * 16 * 16, np.float32)),
            "delta": lambda: yolo_net.delta(-1)}[after]
    with pytest.raises(DarknetError, match=r"call forward_train\(x\) first \(forward\(\) or detect\(\)"):
        call()
    yolo_net.forward_train(blob(3), [])  # a new forward_train restores it
    yolo_net.yolo_loss(truths(3))
    yolo_net.backward()


def test_resize_and_set_backend_invalidate_training_state(yolo_net):
    yolo_net.forward_train(blob(2), [])
    yolo_net.resize_input(64, 64)
    with pytest.raises(DarknetError, match="resize_input"):
        yolo_net.backward()
    yolo_net.forward_train(blob(1, 64), [])
    yolo_net.set_backend("reference")
    with pytest.raises(DarknetError, match="set_backend"):
        yolo_net.yolo_loss(truths(1))


def test_truths_must_match_the_forward_train_batch(yolo_net):
    yolo_net.forward_train(blob(2), [])
    with pytest.raises(DarknetError, match=r"one array per image of the forward_train batch \(2\), got 3"):
        yolo_net.yolo_loss(truths(3))
    for bad, what in [(np.nan, "finite"), (0.5, "class"), (3e9, "class")]:
        t = np.array([[0.5, 0.5, 0.2, 0.2, bad]], np.float32)
        with pytest.raises(DarknetError, match=what):
            yolo_net.yolo_loss([t, t])
    # a whole-number class outside the net's classes is skipped, as Darknet's yolo layer skips it
    for skipped in (-1, 2):
        t = np.array([[0.5, 0.5, 0.2, 0.2, skipped]], np.float32)
        stats = yolo_net.yolo_loss([t, t])
        assert all(h["count"] == 0 for h in stats), stats
    with pytest.raises(DarknetError, match=r"\(k, 5\)"):
        yolo_net.yolo_loss([np.zeros((1, 4), np.float32)] * 2)


def test_empty_batch_is_refused_not_a_division_by_zero(yolo_net):
    # batch 0 used to kill the interpreter with SIGFPE in forward and forward_train
    for call in (yolo_net.forward, yolo_net.forward_train):
        with pytest.raises(DarknetError, match="input batch is 0"):
            call(np.zeros((0, 3, 32, 32), np.float32), [])


def test_preprocess_and_resize_refuse_empty_sizes():
    # preprocess(..., 0, -1, letterbox=True) used to segfault
    img = np.zeros((4, 4, 3), np.uint8)
    for w, h in [(0, 5), (5, -1), (0, 0)]:
        for letterbox in (False, True):
            with pytest.raises(DarknetError, match="must be in 1..65536"):
                _core.preprocess(img, w, h, letterbox)
    with pytest.raises(DarknetError, match="empty"):
        _core.resize_darknet(np.zeros((3, 0, 4), np.float32), 3, 3)


def test_layer_indices_and_arguments_name_what_is_wrong(yolo_net):
    with pytest.raises(DarknetError, match=r"gradients: layer index 99 is out of range: the network has 12 layers"):
        yolo_net.gradients(99)
    with pytest.raises(DarknetError, match="forward: layer index -13"):
        yolo_net.forward(blob(1), [-13])
    with pytest.raises(DarknetError, match="update: batch must be >= 1, got 0"):
        yolo_net.update(0.1, 0)
    yolo_net.forward_train(blob(2), [])
    with pytest.raises(DarknetError, match=r"set_delta: the delta of layer 11 must be of shape 2x21x16x16"):
        yolo_net.set_delta(11, np.zeros((1, 21, 16, 16), np.float32))
    yolo_net.set_delta(11, np.zeros(2 * 21 * 16 * 16))  # flat float64 of the right size converts
    assert yolo_net.delta(-1).shape == (2, 21, 16, 16)


@pytest.mark.parametrize("call, args, match", [
    ("gemm", (False, False, 1.0, np.ones((2, 3)), np.ones((4, 5)), 0.0, np.ones((2, 5))), "B must be of KxN"),
    ("conv2d", (np.ones((1, 2, 4, 4)), np.ones((3, 2, 3, 3)), 1, 1, 1, 1, 1, 9, 4), r"\(out_h, out_w\)"),
    ("conv2d", (np.ones((1, 2, 4, 4)), np.ones((3, 1, 3, 3)), 1, 1, 1, 1, 1, 4, 4), "w must be of shape Fx2"),
    ("add_bias", (np.ones((1, 2, 3, 3)), np.ones(5)), "b must be 2 values, got 5"),
    ("pool", ("max", np.ones((1, 1, 4, 4)), 2, 2, 2, 0, [1, 1, 9, 9]), "out_shape must be of shape 1x1x2x2"),
    ("copy_channels", (np.ones((1, 2, 3, 3)), 1, np.ones((1, 2, 3, 3)), 0, 2), r"\[src_c0, src_c0 \+ count\)"),
    ("upsample", (np.ones((1, 1, 2, 2)), 2 ** 31 - 1, 1.0), "at most"),
    ("reorg", (np.ones((1, 4, 2, 2)), 2, 2, 3, 2, True, [1, 1, 4, 4]), "w \\* h \\* c"),
    ("mul", (np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 3))), "b must be of shape 1x1x2x2"),
    ("sgd_update", (np.ones(3), np.ones(2), np.ones(3), 0.1, 0.9, 0.0, 1), "grad must be 3 values"),
    ("fill", ([1, -1, 2, 2], 0.0), "non-empty"),
    ("yolo_activate", (np.ones((1, 7, 2, 2)), 2, 1, False, 1.0), "anchors \\* \\(5 \\+ classes\\)"),
])
def test_ops_bindings_check_shapes(call, args, match):
    for backend in ("cpu", "reference"):
        with pytest.raises(DarknetError, match=match):
            getattr(_core.Ops(backend), call)(*args)


# ---- the stateful fuzz ----------------------------------------------------------------------------


def run_driver(tmp_path, count, seed, device="cpu", timeout=600):
    cmd = [sys.executable, str(HERE / "api_fuzz_driver.py"), "--seed", str(seed), "--count", str(count),
           "--device", device, "--out", str(tmp_path / "scratch")]
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, env=env)
    lines = proc.stdout.splitlines()
    summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    if proc.returncode == 0 and summary and not summary["failures"]:
        return summary
    cases = [l.split()[1] for l in lines if l.startswith("CASE ")]
    last = summary["failures"][0]["case"] if summary and summary["failures"] else (cases[-1] if cases else "?")
    how = (f"crashed with signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else
           "failed:\n" + "\n".join(json.dumps(f) for f in (summary or {}).get("failures", [])[:5]))
    replay = cmd[:cmd.index("--count")] + ["--case", str(last), "--device", device]
    pytest.fail(f"API fuzz (seed {seed}, device {device}) {how}\nin case {last}; replay (prints every call): "
                f"{' '.join(replay)}\nstderr (tail):\n{proc.stderr[-3000:]}", pytrace=False)


def test_api_fuzz_cpu(tmp_path):
    summary = run_driver(tmp_path, COUNT, SEED)
    stats = summary["stats"]
    assert stats["sequences ok"] == COUNT
    # both outcomes of the calls that matter, so that the fuzz cannot pass by refusing everything
    for action in ("forward_train", "backward", "yolo_loss", "set_delta", "ops", "detect", "load_weights"):
        assert stats.get(action + " ok", 0) > 0 and stats.get(action + " DarknetError", 0) > 0, (action, stats)


def test_api_fuzz_opencl_pocl(tmp_path):
    device = gpu_devices.device("pocl")
    summary = run_driver(tmp_path, max(10, COUNT // 15), SEED + 1, device)
    assert summary["stats"]["sequences ok"] == max(10, COUNT // 15)
