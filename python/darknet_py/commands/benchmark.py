"""`darknet_py benchmark CFG [WEIGHTS]`: detection speed on every device and precision this machine
has, what Darknet's `darknet speed` / `detector demo -benchmark` and Ultralytics' `benchmark` tell
their users, in one command.

Per device and precision: batch-1 latency from a host image (BGR uint8, as cv2.imread gives it) to its
detections, NMS included (Network.detect: resize, upload, forward, decode, NMS, download), as the
median and the 90th and 99th percentiles; the throughput of batches of --batch such images
(Network.detect_batch), images/s; with --train, the training step's images/s on a batch of that size
(forward, Darknet's YOLO loss, backward and SGD update, as `train` queues them, on synthetic boxes);
and each figure's ratio to the CPU's. Without WEIGHTS the network keeps Darknet's random
initialisation: the speed is the same, only the detections differ.

Devices: the CPU and every GPU found (CPU OpenCL runtimes and simulators are not GPUs: name them with
--device to include them). Precisions: every one the device runs (fp32 on the CPU).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

from ..exit_codes import PROG
from .argtypes import positive_float, positive_int

EXAMPLES = f"""\
examples:
  {PROG} benchmark yolov4-tiny.cfg yolov4-tiny.weights
  {PROG} benchmark yolov4-tiny --device cuda --precision fp16,bf16 --batch 32 --train
  {PROG} benchmark yolov3-tiny.cfg --json > speed.json
"""


def add_parser(sub, formatter) -> None:
    p = sub.add_parser("benchmark", help="detection speed on every device and precision here (and --train's)",
                       description="Detection speed on every device and precision this machine has: batch-1 latency "
                                   "(median, p90, p99)\nfrom a host image to its detections with NMS, batch throughput, "
                                   "and each against the CPU.", epilog=EXAMPLES, formatter_class=formatter)
    p.add_argument("cfg", metavar="CFG", help="network .cfg: a path or a shipped cfg's name")
    p.add_argument("weights", metavar="WEIGHTS", nargs="?", help="Darknet .weights (default: random initialisation)")
    p.add_argument("--device", metavar="LIST", help="comma-separated devices (default: cpu and every GPU found)")
    p.add_argument("--precision", metavar="LIST", help="comma-separated precisions (default: every one the device runs)")
    p.add_argument("--batch", type=positive_int, default=8, help="images per batch for the throughput (default: %(default)s)")
    p.add_argument("--seconds", type=positive_float, default=2.0,
                   help="time spent on each measurement, after a warm-up (default: %(default)s)")
    p.add_argument("--image", metavar="FILE", help="the image to detect in (default: the demo model's sample image)")
    p.add_argument("--train", action="store_true", help="also the training step's images/s at --batch")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_benchmark, parser=p)


def default_devices() -> List[str]:
    from ..devices import devices

    found = [str(d["id"]) for d in devices() if d["found"] and d["is_gpu"]]
    return ["cpu"] + found


def _timed(fn, seconds: float, at_least: int) -> List[float]:
    """Seconds per call: a warm-up call, then calls until `seconds` passed and `at_least` were made."""
    fn()
    times: List[float] = []
    start = time.perf_counter()
    while len(times) < at_least or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _train_step(net, batch: int, rng):
    """One training step as `train` queues it, on random images with two boxes each."""
    raw = net._net
    classes = max(1, net.classes)
    x = rng.random((batch, net.channels, raw.height, raw.width), dtype=np.float32)
    truths = [np.array([[0.3, 0.4, 0.2, 0.3, 0], [0.7, 0.6, 0.25, 0.2, classes - 1]], np.float32)] * batch

    def step():
        raw.forward_train(x, [])
        raw.queue_yolo_loss(truths)
        raw.backward()
        raw.queue_update(1e-5, batch).read()  # waits for the step: each call is one whole step

    return step


def measure(cfg: str, weights: Optional[str], device: str, precision: str, image: np.ndarray, batch: int,
            seconds: float, train: bool) -> Dict[str, Any]:
    from ..network import Network
    from ..training.init_weights import darknet_init

    net = Network(cfg, weights, device=device, precision=precision)
    if weights is None:
        darknet_init(net._net, 1)
    latency = np.array(_timed(lambda: net.detect(image), seconds, 10)) * 1e3
    images = [image] * batch
    per_batch = _timed(lambda: net.detect_batch(images), seconds, 3)
    row = {"device": net.device, "precision": precision, "latency_ms_p50": float(np.percentile(latency, 50)),
           "latency_ms_p90": float(np.percentile(latency, 90)), "latency_ms_p99": float(np.percentile(latency, 99)),
           "batch": batch, "images_per_second": batch / float(np.median(per_batch)),
           "detections": len(net.detect(image))}
    if train:
        step_seconds = _timed(_train_step(net, batch, np.random.default_rng(0)), seconds, 3)
        row["train_images_per_second"] = batch / float(np.median(step_seconds))
    return row


def _with_ratios(rows: List[Dict[str, Any]]) -> None:
    """Each row's speed against the CPU's fp32 row (latency: CPU ms / this ms; throughput: this / CPU)."""
    cpu = next((r for r in rows if r["device"] == "cpu" and r["precision"] == "fp32"), None)
    for r in rows:
        if cpu is None:
            continue
        r["latency_vs_cpu"] = cpu["latency_ms_p50"] / r["latency_ms_p50"]
        r["throughput_vs_cpu"] = r["images_per_second"] / cpu["images_per_second"]
        if "train_images_per_second" in r and "train_images_per_second" in cpu:
            r["train_vs_cpu"] = r["train_images_per_second"] / cpu["train_images_per_second"]


def format_table(cfg: str, rows: List[Dict[str, Any]]) -> str:
    train = any("train_images_per_second" in r for r in rows)
    head = ["device", "precision", "batch 1 ms p50", "p90", "p99", f"batch {rows[0]['batch']} images/s"]
    head += ["training images/s"] if train else []
    head += ["vs CPU (latency / throughput" + (" / training)" if train else ")")]
    lines = [f"{cfg}: detection from a host image to its detections (NMS included)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["device"], r["precision"], f"{r['latency_ms_p50']:.2f}", f"{r['latency_ms_p90']:.2f}",
                 f"{r['latency_ms_p99']:.2f}", f"{r['images_per_second']:.1f}"]
        if train:
            cells.append(f"{r['train_images_per_second']:.1f}" if "train_images_per_second" in r else "n/a")
        ratios = [r.get("latency_vs_cpu"), r.get("throughput_vs_cpu")] + ([r.get("train_vs_cpu")] if train else [])
        cells.append(" / ".join("n/a" if v is None else f"{v:.2f}x" for v in ratios))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cmd_benchmark(args: argparse.Namespace) -> int:
    from ..devices import check_name
    from ..media.sources import read_image
    from ..model_files.cfgfiles import resolve_cfg
    from ..model_files.demo import demo_files
    from ..network import Network

    cfg = resolve_cfg(args.cfg)
    image = read_image(args.image or demo_files()["image"])
    devices = [check_name(d.strip()) for d in args.device.split(",")] if args.device else default_devices()
    rows = []
    for device in devices:
        try:  # a device that cannot run is named and skipped; the others are measured
            runs = Network(cfg, device=device).precisions
        except (ValueError, RuntimeError) as e:
            print(f"{PROG}: {device}: {e}; skipped", file=sys.stderr)
            continue
        wanted = [p.strip() for p in args.precision.split(",")] if args.precision else runs
        for precision in wanted:
            if precision not in runs:
                print(f"{PROG}: {device} does not run {precision} (it runs: {', '.join(runs)}); skipped", file=sys.stderr)
                continue
            print(f"{PROG}: measuring {device} {precision} ...", file=sys.stderr)
            rows.append(measure(cfg, args.weights, device, precision, image, args.batch, args.seconds, args.train))
    if not rows:
        raise ValueError("nothing was measured: no device runs the precisions asked for")
    _with_ratios(rows)
    print(json.dumps({"cfg": cfg, "weights": args.weights, "results": rows}, indent=1) if args.json
          else format_table(cfg, rows))
    return 0
