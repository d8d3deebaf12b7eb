"""Where a training iteration's GPU time goes, by kernel, on CUDA (needs PyTorch for its profiler).

    python benchmarks/profile_gpu_training.py --model yolov7-tiny [--batch 64] [--steps 4] [--tf32]
    python benchmarks/profile_gpu_training.py --model yolov4-tiny --precision bf16 [--host]

Builds the shipped cfg at 416 with compare_gpu.py's seeded weights, warms up (cuDNN times its
algorithms in the first iteration), then records --steps training iterations with torch.profiler,
whose CUPTI tracing sees every kernel of the process, ours and cuDNN's included. The iteration is
compare_gpu.training_step, the step as `train` runs it: forward_train, the YOLO loss, backward and
SGD queued, each step's loss statistics read one step later. Prints the kernels by total GPU time
with their share of the iterations' kernel time, and the wall time per iteration.

    python benchmarks/profile_gpu_training.py --model yolov4-tiny --precision bf16 --forward --batch 1

--forward profiles the forward instead (host input to heads on the device, recorded as a CUDA graph after
the first call, as compare_gpu.py times batch-1 latency), and also prints each iteration's GPU span (first
kernel's start to last one's end) against its busy time: what is left is the gaps between kernels.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_gpu as cg  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolov7-tiny", choices=list(cg.MODELS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--tf32", action="store_true", help="DARKNET_PY_TF32=1")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"], help="the activations' storage type")
    ap.add_argument("--forward", action="store_true", help="profile forward(x) instead of a training step")
    ap.add_argument("--host", action="store_true",
                    help="also the CUDA runtime calls by host time (a synchronizing call, an allocation per step)")
    args = ap.parse_args(argv)
    if args.tf32:
        os.environ["DARKNET_PY_TF32"] = "1"
    import darknet_py
    from torch.profiler import ProfilerActivity, profile

    size = cg.MODELS[args.model]
    path = cg.sized_cfg(args.model, size, args.batch)
    net = darknet_py.Network(path, device="cuda")
    raw = net._net
    cg.copy_weights(cg.build_torch(path, size), net)
    os.unlink(path)
    net.precision = args.precision
    rng = np.random.default_rng(0)
    truths = cg.truths_for(args.batch, raw.yolo_info(list(raw.yolo_layers)[-1])["classes"], rng)
    xb = rng.uniform(0, 1, (args.batch, 3, size, size)).astype(np.float32)
    if args.forward:
        xb = raw.pin_memory(xb)  # as compare_gpu.py times the forward

    step = (lambda: raw.forward(xb, [])) if args.forward else cg.training_step(raw, xb, truths, args.batch)
    for _ in range(3):
        step()
    raw.synchronize()
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.host else [])
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        raw.synchronize()
        wall = (time.perf_counter() - t0) / args.steps
    total, count, spans = defaultdict(float), defaultdict(int), []
    host, host_count = defaultdict(float), defaultdict(int)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            total[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            count[e.name] += 1
            spans.append((e.time_range.start, e.time_range.end))
        elif e.name.startswith("cu"):  # a CUDA runtime or driver call, from any library of the process
            host[e.name] += e.cpu_time_total
            host_count[e.name] += 1
    gpu = sum(total.values())
    print(f"{args.model} batch {args.batch} {args.precision}{' TF32' if args.tf32 else ''}: {1e3 * wall:.1f} ms wall per iteration, "
          f"{gpu / 1e3 / args.steps:.1f} ms of kernels and copies per iteration ({args.batch / wall:.0f} images/s)")
    if spans:
        spans.sort()
        busy, end = 0.0, spans[0][0]
        for a, b in spans:  # the union of the kernels' intervals
            busy += max(0.0, b - max(a, end))
            end = max(end, b)
        print(f"GPU span {(end - spans[0][0]) / 1e3 / args.steps:.3f} ms per iteration, busy {busy / 1e3 / args.steps:.3f} ms, "
              f"{len(spans) // args.steps} kernels and copies")
    print(f"{'ms/iter':>8} {'share':>6} {'calls':>6}  name")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{us / 1e3 / args.steps:8.2f} {100 * us / gpu:5.1f}% {count[name] // args.steps:6d}  {name[:110]}")
    if args.host:
        print(f"\nCUDA calls by host time:\n{'ms/iter':>8} {'calls':>6}  name")
        for name, us in sorted(host.items(), key=lambda kv: -kv[1])[:12]:
            print(f"{us / 1e3 / args.steps:8.2f} {host_count[name] // args.steps:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
