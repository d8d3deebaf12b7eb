"""benchmarks/compare_gpu.py's harness, on the CPU: the PyTorch model it builds from the cfgs (PyTorch's own
ops, Darknet's shapes and max pool), its torch.compile paths, its worker timeouts, and the tables it builds
from saved results. No GPU and no darknet_py extension needed; the tests that need torch skip without it
(`--help`, the merge and the timeouts need none)."""
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "compare_gpu.py"
NO_TORCH = "import sys, runpy; sys.modules['torch'] = None; sys.argv = [{path!r}] + {args!r}; " \
           "runpy.run_path({path!r}, run_name='__main__')"


@pytest.fixture(scope="module")
def cg():
    spec = importlib.util.spec_from_file_location("compare_gpu_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def run_without_torch(path: Path, args: list, **kw):
    """The script as `python path args...` where `import torch` fails, as on a machine without it."""
    return subprocess.run([sys.executable, "-c", NO_TORCH.format(path=str(path), args=list(args))],
                          capture_output=True, text=True, timeout=120, cwd=REPO, **kw)


def test_help_runs_without_torch():
    p = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for word in ("--compile-budget", "--save-json", "--merge", "torch_max_autotune", "max-autotune"):
        assert word in p.stdout
    p = run_without_torch(SCRIPT, ["--help"])
    assert p.returncode == 0, p.stderr
    p = run_without_torch(REPO / "benchmarks" / "compare_multi_gpu.py", ["--help"])  # it imports compare_gpu
    assert p.returncode == 0, p.stderr


# ---- the PyTorch model ----------------------------------------------------------------------------
def test_shapes_and_flops_of_every_cfg(cg, torch):
    """The module's heads are shaped as the cfg walk says, and its convolutions' FLOPs are the walk's."""
    for name in cg.MODELS:
        path = cg.sized_cfg(name, 64, 1)
        try:
            model = cg.build_torch(path, 64).eval()
            shapes, flops = cg.cfg_shapes(path)
        finally:
            os.unlink(path)
        counted = []

        def hook(m, inputs, output):
            k = m.kernel_size[0] * m.kernel_size[1]
            counted.append(2 * k * m.in_channels // m.groups * output[0].numel())

        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.register_forward_hook(hook)
        with torch.no_grad():
            heads = model(torch.rand(1, 3, 64, 64))
        want = [shapes[i] for i, step in enumerate(model.plan) if step[0] == "yolo"]
        assert [tuple(h.shape[1:]) for h in heads] == want, name
        assert sum(counted) == flops, name


def test_yolov4_runs_f_mish_and_pytorch_pools(cg, torch, monkeypatch):
    """yolov4's 72 mish convolutions call F.mish (not x * tanh(softplus(x))); its SPP pools (5/9/13, stride
    1, padding 4/8/12) and yolov4-tiny's 2x2 stride-2 pools run F.max_pool2d with no F.pad."""
    import torch.nn.functional as F

    calls = {"mish": 0, "leaky_relu": 0, "pad": 0, "pools": []}
    mish, leaky, pad, pool = F.mish, F.leaky_relu, F.pad, F.max_pool2d

    def counting(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper

    def forbidden(*a, **k):
        raise AssertionError("mish written out by hand")

    monkeypatch.setattr(F, "mish", counting("mish", mish))
    monkeypatch.setattr(F, "leaky_relu", counting("leaky_relu", leaky))
    monkeypatch.setattr(F, "pad", counting("pad", pad))
    monkeypatch.setattr(F, "max_pool2d", lambda x, *a, **k: calls["pools"].append(a) or pool(x, *a, **k))
    monkeypatch.setattr(F, "softplus", forbidden)
    monkeypatch.setattr(torch, "tanh", forbidden)
    for name, size, n_mish, n_leaky, pools in (
            ("yolov4", 96, 72, 35, [(5, 1, 2), (9, 1, 4), (13, 1, 6)]),
            ("yolov4-tiny", 64, 0, 19, [(2, 2, 0)] * 3)):
        path = cg.sized_cfg(name, size, 1)
        try:
            model = cg.build_torch(path, size).eval()
        finally:
            os.unlink(path)
        calls.update(mish=0, leaky_relu=0, pad=0, pools=[])
        with torch.no_grad():
            model(torch.rand(1, 3, size, size))
        assert (calls["mish"], calls["leaky_relu"], calls["pad"]) == (n_mish, n_leaky, 0), name
        assert calls["pools"] == pools, name


def test_every_activation_is_pytorchs(cg, torch, tmp_path, monkeypatch):
    """Each activation a cfg may name, against its formula; swish through F.silu."""
    import torch.nn.functional as F

    formulas = {"leaky": lambda x: torch.where(x > 0, x, 0.1 * x), "mish": lambda x: x * torch.tanh(F.softplus(x)),
                "logistic": lambda x: 1 / (1 + torch.exp(-x)), "swish": lambda x: x / (1 + torch.exp(-x)),
                "relu": lambda x: x.clamp_min(0), "linear": lambda x: x}
    assert set(formulas) == set(cg.ACTIVATIONS)
    silu_calls = []
    silu = F.silu
    monkeypatch.setattr(F, "silu", lambda x, *a, **k: silu_calls.append(1) or silu(x, *a, **k))
    for name, formula in formulas.items():
        cfg = tmp_path / f"{name}.cfg"
        cfg.write_text(textwrap.dedent(f"""\
            [net]
            width=16
            height=16
            channels=3

            [convolutional]
            filters=6
            size=3
            stride=1
            pad=1
            activation={name}

            [yolo]
            mask=0
            anchors=10,14
            classes=1
            num=1
            new_coords=1
            """))
        model = cg.build_torch(str(cfg), 16).eval()
        x = torch.randn(2, 3, 16, 16)
        with torch.no_grad():
            (got,) = model(x)
            want = formula(model.mods[0].conv(x))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert len(silu_calls) == 1


def darknet_maxpool(x: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
    """Darknet's forward_maxpool_layer: total padding p, the window's top-left at -p / 2, cells outside skipped."""
    n, c, h, w = x.shape
    oh, ow = (h + p - k) // s + 1, (w + p - k) // s + 1
    out = np.full((n, c, oh, ow), -np.inf, np.float32)
    for i in range(oh):
        for j in range(ow):
            for di in range(k):
                for dj in range(k):
                    y, xx = i * s - p // 2 + di, j * s - p // 2 + dj
                    if 0 <= y < h and 0 <= xx < w:
                        out[:, :, i, j] = np.maximum(out[:, :, i, j], x[:, :, y, xx])
    return out


@pytest.mark.parametrize("k,s,p,h", [(2, 2, 1, 8), (2, 2, 1, 7), (2, 1, 1, 13), (5, 1, 4, 9), (9, 1, 8, 9),
                                     (13, 1, 12, 9), (3, 2, 2, 9), (3, 1, 2, 6), (2, 2, 0, 8), (3, 2, 1, 8)])
def test_maxpool_is_darknets(cg, torch, k, s, p, h):
    x = torch.randn(2, 3, h, h + 1)
    got = cg.maxpool(x, k, s, p)
    np.testing.assert_array_equal(got.numpy(), darknet_maxpool(x.numpy(), k, s, p))


# ---- torch.compile, on the CPU ------------------------------------------------------------------------
TINY = """\
[net]
width=32
height=32
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=mish

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

[route]
layers=-1
groups=2
group_id=1

[convolutional]
batch_normalize=1
filters=8
size=1
stride=1
pad=1
activation=swish

[shortcut]
from=-2
activation=linear

[maxpool]
size=5
stride=1

[convolutional]
filters=18
size=1
stride=1
pad=1
activation=linear

[yolo]
mask=0,1,2
anchors=10,14, 23,27, 37,58
classes=1
num=3
"""


def test_compiled_forward_and_training(cg, torch, tmp_path, monkeypatch):
    """The compiled columns' code on a small cfg: batch 1 then batch 4 (a recompile, not a failure),
    the compiled heads equal to eager's, a training step through the compiled forward + loss, no graph
    breaks; with the CUDA-graph calls (mark_step_begin) on, which the CPU ignores."""
    import torch._dynamo

    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a, **k: 1)
    timed = cg.timed
    monkeypatch.setattr(cg, "timed", lambda fn, sync, warmup, runs, s, steps=1: timed(fn, sync, 1, 2, 0.0, steps))
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(TINY)
    model = cg.build_torch(str(cfg), 32)
    torch._dynamo.reset()
    cg.configure_dynamo(torch)
    out = cg.Progress(str(tmp_path / "fwd.json"))
    try:
        cg.compiled_forward(torch, model, "fp32", "default", True, torch.rand(1, 3, 32, 32), torch.rand(4, 3, 32, 32),
                            lambda x: x, lambda: None, out)
        for key in ("compile_s_fwd_b1", "compile_s_fwd_b64", "b1_ms_compiled", "fwd_img_s", "fwd_img_s_resident"):
            assert out[key] > 0, key
        assert out["max_rel_diff_vs_eager"] < 1e-4
        assert out["graphs"] == 2 and out["graph_breaks"] == 0  # one per batch size
        assert json.loads((tmp_path / "fwd.json").read_text())["stage"] == "timing batch 64"
        args = type("Args", (), {"mode": "fp32"})
        out = cg.compiled_train(torch, model, "fp32", "default", True, torch.rand(4, 3, 32, 32), lambda x: x, args,
                                cg.Progress(None))
        for key in ("compile_s_train", "train_img_s", "train_img_s_resident", "peak_train_bytes"):
            assert out[key] > 0, key
        assert out["graph_breaks"] == 0
    finally:
        torch._dynamo.reset()


# ---- workers that stop ------------------------------------------------------------------------------
def test_worker_timeout_and_failure(cg, tmp_path):
    result = tmp_path / "result.json"
    child = tmp_path / "child.pid"
    slow = textwrap.dedent(f"""\
        import json, subprocess, sys, time
        open({str(result)!r}, "w").write(json.dumps({{"b1_ms_compiled": 1.5, "stage": "compiling batch 64"}}))
        c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(child)!r}, "w").write(str(c.pid))
        time.sleep(60)
        """)
    t0 = time.monotonic()
    res = cg.run_worker([sys.executable, "-c", slow], dict(os.environ), str(result), 3, 420)
    assert time.monotonic() - t0 < 30
    assert res == {"b1_ms_compiled": 1.5, "error": "no compile within 420 s"}
    pid = int(child.read_text())  # the worker's own children go with it
    for _ in range(50):
        status = Path(f"/proc/{pid}/status")
        if not status.exists() or "zombie" in status.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail("the timed-out worker's child is still running")

    result.write_text(json.dumps({"stage": "timing training"}))
    res = cg.run_worker([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), str(result), 2, None)
    assert res == {"error": "timed out after 2 s (timing training)"}
    result.unlink()
    res = cg.run_worker([sys.executable, "-c", "raise RuntimeError('no kernel image | for this GPU')"],
                        dict(os.environ), str(result), 60, 420)
    assert res == {"error": "failed: RuntimeError: no kernel image | for this GPU"}


# ---- saved results, merged into tables --------------------------------------------------------------
def facts(command: str) -> dict:
    return {"gpu": "NVIDIA H200", "driver": "580.95.05", "gpus": 1, "cpus": 16, "source": "0123456789ab",
            "date": "2026-01-02 03:04 UTC", "command": command, "ours": "darknet_py 0.1.0",
            "versions": {"torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "triton": "3.6.0"}}


def fwd(img_s, b1, **extra):
    return {"fwd_img_s": img_s, "b1_ms_graph": b1, "b1_ms_eager": 2 * b1, **extra}


def train(img_s, gib, **extra):
    return {"train_img_s": img_s, "peak_train_bytes": gib * 2 ** 30, **extra}


def test_merge_builds_the_tables(cg, tmp_path):
    a, b, md = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "gpu.md"
    cmd_a = "python benchmarks/compare_gpu.py --models yolov4-tiny --save-json a.json"
    cmd_b = "python benchmarks/compare_gpu.py --models yolov4-tiny --columns torch_compile:bf16 --save-json b.json"
    cg.save_json(str(a), [facts(cmd_a)], {
        ("yolov4-tiny", ("ours_half", "bf16")): {"fwd": fwd(9200, 0.40, max_rel_diff_vs_torch=3e-3),
                                                 "train": train(3000, 4.0)},
        ("yolov4-tiny", ("torch", "bf16")): {"fwd": fwd(7000, 0.60, fwd_img_s_resident=9000),
                                             "train": train(2500, 5.0, train_img_s_resident=2700)},
        ("yolov4-tiny", ("torch_compile", "bf16")): {
            "fwd": {"fwd_img_s": 8000, "b1_ms_compiled": 0.50, "compile_s_fwd_b1": 31.0, "compile_s_fwd_b64": 22.0,
                    "max_rel_diff_vs_eager": 4e-3},
            "train": train(1000, 5.5, compile_s_train=70.0)},
        ("yolov4-tiny", ("torch_max_autotune", "bf16")): {
            "fwd": {"b1_ms_compiled": 0.30, "compile_s_fwd_b1": 300.0, "error": "no compile within 420 s"},
            "train": {"error": "failed: RuntimeError: out of memory"}}})
    cg.save_json(str(b), [facts(cmd_b)], {  # a later run of one phase of one column: it wins
        ("yolov4-tiny", ("torch_compile", "bf16")): {"train": train(3750, 5.5, compile_s_train=90.0)}})
    p = run_without_torch(SCRIPT, ["--merge", f"{a},{b}", "--write", str(md)])
    assert p.returncode == 0, p.stderr
    text = md.read_text()
    assert text.strip() == p.stdout.strip()
    for label in ("PyTorch compile bf16 autocast + channels_last", "PyTorch compile max-autotune bf16 autocast"):
        assert label in text
    rows = {}
    for line in text.splitlines():
        if line.startswith("### "):
            title = line[4:]
        elif line.startswith("| yolov4-tiny"):
            rows[title.split(",")[0]] = [c.strip() for c in line.strip("|").split("|")]
    # columns: model, ours bf16, PyTorch bf16, compile bf16, max-autotune bf16, ratio, floor
    assert rows["Training"][1:6] == ["3000", "2500 (2700)", "3750", "failed: RuntimeError: out of memory", "0.80"]
    assert rows["Forward"][1:6] == ["9200", "7000 (9000)", "8000", "no compile within 420 s", "1.15"]
    assert rows["Batch-1 latency"][1:6] == ["0.40 (0.80)", "0.60 (1.20)", "0.50", "0.30", "0.75"]
    assert rows["Peak training memory"][1:6] == ["4.0", "5.0", "5.5", "failed: RuntimeError: out of memory", "1.25"]
    flops = 6.91e9  # yolov4-tiny's convolutions at 416; the H200's bf16 dense peak and bandwidth
    fwd_floor, train_floor = 989.4e12 / flops, 989.4e12 / (3 * flops)
    floor = rows["Forward"][6].split(";")
    assert abs(float(floor[0].split("/")[2]) / fwd_floor - 1) < 0.01
    floats = float(floor[1].split("/")[0])  # 4-byte storage at 4.8 TB/s
    assert 4.8e12 / (floats * 8) > 1e6  # the activations' element count is the per-image one
    m = re.search(r"yolov4-tiny at 416: ([\d.]+) GFLOP per image.*forward (\d+) images/s, training \(3x\) (\d+)", text)
    assert m and abs(float(m[1]) - 6.91) < 0.01
    assert abs(int(m[2]) / fwd_floor - 1) < 0.01 and abs(int(m[3]) / train_floor - 1) < 0.01
    assert "4.80 TB/s" in text
    assert "training step (first call's wall time, cold caches), s: yolov4-tiny PyTorch compile bf16 " \
           "autocast + channels_last 90" in text
    assert "forward at batch 1 (first call's wall time, cold caches), s: yolov4-tiny PyTorch compile bf16 " \
           "autocast + channels_last 31; yolov4-tiny PyTorch compile max-autotune bf16 autocast + channels_last 300" in text
    for fact in ("NVIDIA H200 (driver 580.95.05, 16 CPU cores)", "PyTorch 2.11.0+cu130, CUDA 13.0, cuDNN 91900, "
                 "Triton 3.6.0", "darknet_py 0.1.0", "2026-01-02 03:04 UTC", cmd_a, cmd_b,
                 f"python benchmarks/compare_gpu.py --merge {a},{b} --write {md}"):
        assert fact in text, fact
    assert not re.search(r"\b(stop|issue) \d", text, re.I)
    # merged and saved again: the same tables
    c = tmp_path / "c.json"
    assert cg.main(["--merge", f"{a},{b}", "--save-json", str(c)]) == 0
    _, results = cg.load_json([str(c)])
    assert results[("yolov4-tiny", ("torch_compile", "bf16"))]["train"]["train_img_s"] == 3750
