"""The GPU backend's speed on one device, against our CPU backend on the same machine.

    python benchmarks/gpu_backend_timing.py --device opencl:0 [--models yolov4-tiny,yolov3-tiny]
                                            [--rounds 20] [--batch 16] [--cpu]

Per model (seeded random weights, the cfg's own input size): batch-1 forward latency, batch-N
forward images/s, and a batch-N training iteration (forward_train, Darknet's yolo loss on random
truths, backward, SGD) in images/s; medians of --rounds runs after warm-up. --cpu also times our CPU
backend in alternating blocks for the ratio column. Host<->device bytes per training iteration
come from the device's counters. This is a first figure for the shared GPU backend over a device
(OpenCL here); the comparisons against PyTorch belong to the CUDA work (compare_gpu.py).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
from darknet_py import _core  # noqa: E402


def timed(fn, rounds: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(raw, batch: int, rounds: int) -> dict:
    last = len(raw.layers()) - 1
    x1, xb = (np.random.default_rng(s).random((n, raw.channels, raw.height, raw.width), dtype=np.float32)
              for s, n in ((1, 1), (2, batch)))
    truths = [np.array([[0.5, 0.5, 0.2, 0.3, 0]], np.float32)] * batch

    def step():
        raw.forward_train(xb, [])
        raw.yolo_loss(truths)
        raw.backward()
        raw.update(1e-6, batch)

    out = {"latency_ms": 1e3 * timed(lambda: raw.forward(x1, [last]), rounds),
           "forward_img_s": batch / timed(lambda: raw.forward(xb, [last]), rounds),
           "train_img_s": batch / timed(step, max(3, rounds // 4))}
    before = raw.bytes_moved()
    step()
    after = raw.bytes_moved()
    out["train_MB_up"] = (after["up"] - before["up"]) / 1e6
    out["train_MB_down"] = (after["down"] - before["down"]) / 1e6
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", required=True, help="e.g. opencl:0 (darknet_py info lists the devices)")
    p.add_argument("--models", default="yolov4-tiny,yolov3-tiny")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--cpu", action="store_true", help="also time our CPU backend (alternating blocks)")
    args = p.parse_args()
    info = {d["id"]: d for d in _core.devices() if d["found"]}
    if args.device not in info:
        raise SystemExit(f"no device {args.device!r}; found: {', '.join(info) or 'none'}")
    d = info[args.device]
    print(f"device {args.device}: {d['name']} ({d['vendor']}, driver {d['driver']}); CPU {bc.cpu_model()}, "
          f"{_core.get_threads()} threads")
    for name in args.models.split(","):
        model = next(m for m in bc.MODELS if m.name == name)
        with tempfile.TemporaryDirectory() as tmp:
            net, cfg, weights = bc.random_model(model, tmp)
            nets = {"device": _core.Net(cfg, args.device)}
            if args.cpu:
                nets["cpu"] = _core.Net(cfg, "cpu")
            for raw in nets.values():
                raw.load_weights(weights, -1)
        if args.cpu:  # the same outputs first: a fast wrong answer is no result
            x = np.random.default_rng(3).random((2, nets["cpu"].channels, model.size, model.size), dtype=np.float32)
            heads = list(nets["cpu"].yolo_layers)
            errs = [float(np.abs(g - c).max() / np.abs(c).max())
                    for g, c in zip(nets["device"].forward(x, heads), nets["cpu"].forward(x, heads))]
            print(f"{name}: heads on the device vs cpu, max relative difference {max(errs):.2e}")
        results = {k: measure(raw, args.batch, args.rounds) for k, raw in nets.items()}
        r = results["device"]
        line = (f"{name} {model.size}: batch-1 {r['latency_ms']:.2f} ms, batch-{args.batch} forward "
                f"{r['forward_img_s']:.1f} img/s, training {r['train_img_s']:.1f} img/s "
                f"({r['train_MB_up']:.1f} MB up, {r['train_MB_down']:.1f} MB down per iteration)")
        if "cpu" in results:
            c = results["cpu"]
            line += (f"; cpu: {c['latency_ms']:.2f} ms, {c['forward_img_s']:.1f} img/s, {c['train_img_s']:.1f} img/s"
                     f" -> device/cpu speed-up {c['latency_ms'] / r['latency_ms']:.2f}x, "
                     f"{r['forward_img_s'] / c['forward_img_s']:.2f}x, {r['train_img_s'] / c['train_img_s']:.2f}x")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
