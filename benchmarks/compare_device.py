"""Our engine on a GPU device (default: metal) against our CPU backend on the same machine, with the
device's targets; run by `python benchmarks/compare.py --device metal`.

Per model (yolov4-tiny, yolov3-tiny; seeded random weights, the cfg's input size): batch-1 forward
latency, batch-16 forward images/s, a batch-16 training iteration (forward_train, yolo loss, backward,
SGD) in images/s, and back-to-back batch-1 frames/s (the video pipeline's engine part: upload,
forward, heads down; no decode or drawing). Device outputs are first checked against the CPU's.
Targets: >= 3x our CPU at batch-1 detection, >= 10x at batch-16 training, faster than
PyTorch MPS. PyTorch is not compared yet: this repository has no PyTorch port of the networks; the
line says so instead of printing a number. When the device is absent the script says why and exits 2.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
from gpu_backend_timing import measure  # noqa: E402
from darknet_py import _core  # noqa: E402

TARGETS = {"latency": 3.0, "train": 10.0}


def frames_per_second(raw, frames: int = 30) -> float:
    last = len(raw.layers()) - 1
    x = np.random.default_rng(5).random((1, raw.channels, raw.height, raw.width), dtype=np.float32)
    raw.forward(x, [last])
    t = time.perf_counter()
    for _ in range(frames):
        raw.forward(x, [last])
    return frames / (time.perf_counter() - t)


def torch_line(device: str) -> str:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "PyTorch: not installed, not compared"
    mps = device == "metal" and torch.backends.mps.is_available()
    return ("PyTorch %s (MPS %s): not compared: no PyTorch port of the networks in this repository yet"
            % (torch.__version__, "available" if mps else "unavailable"))


def run(device: str, models: str, rounds: int, batch: int = 16) -> int:
    found = {d["id"]: d for d in _core.devices() if d["found"]}
    if device not in found:
        why = [d["why"] for d in _core.devices() if d["kind"] == device.split(":")[0] and not d["found"]]
        print(f"{device}: not available here ({why[0] if why else 'darknet_py info lists the devices'}); "
              f"nothing measured", file=sys.stderr)
        return 2
    d = found[device]
    print(f"device {device}: {d['name']} ({d['vendor']}); CPU {bc.cpu_model()}, {_core.get_threads()} threads")
    for name in models.split(","):
        model = bc.find_model(name.strip())
        with tempfile.TemporaryDirectory() as tmp:
            _, cfg, weights = bc.random_model(model, tmp)
            nets = {"device": _core.Net(cfg, device), "cpu": _core.Net(cfg, "cpu")}
            for raw in nets.values():
                raw.load_weights(weights, -1)
        x = np.random.default_rng(3).random((2, nets["cpu"].channels, model.size, model.size), dtype=np.float32)
        heads = list(nets["cpu"].yolo_layers)
        err = max(float(np.abs(g - c).max() / np.abs(c).max())
                  for g, c in zip(nets["device"].forward(x, heads), nets["cpu"].forward(x, heads)))
        print(f"{name}: heads on {device} vs cpu, max relative difference {err:.2e}")
        r = {k: measure(raw, batch, rounds) for k, raw in nets.items()}
        fps = {k: frames_per_second(raw) for k, raw in nets.items()}
        lat = r["cpu"]["latency_ms"] / r["device"]["latency_ms"]
        fwd = r["device"]["forward_img_s"] / r["cpu"]["forward_img_s"]
        train = r["device"]["train_img_s"] / r["cpu"]["train_img_s"]
        print(f"  batch-1 forward   {r['device']['latency_ms']:8.2f} ms   cpu {r['cpu']['latency_ms']:8.2f} ms   "
              f"{lat:5.2f}x (target >= {TARGETS['latency']:.0f}x: {'met' if lat >= TARGETS['latency'] else 'NOT met'})")
        print(f"  batch-{batch} forward  {r['device']['forward_img_s']:8.1f} img/s cpu "
              f"{r['cpu']['forward_img_s']:8.1f} img/s {fwd:5.2f}x")
        print(f"  batch-{batch} training {r['device']['train_img_s']:8.1f} img/s cpu {r['cpu']['train_img_s']:8.1f} "
              f"img/s {train:5.2f}x (target >= {TARGETS['train']:.0f}x: "
              f"{'met' if train >= TARGETS['train'] else 'NOT met'})")
        print(f"  video (batch-1 back to back) {fps['device']:6.1f} fps   cpu {fps['cpu']:6.1f} fps")
    print(torch_line(device))
    return 0
