"""End-to-end `train` throughput on real JPEG files against the engine's in-memory training step,
per precision and loader (threads or processes, worker count), and the loader alone.

    python benchmarks/train_throughput.py                       # CUDA if present, else the CPU
    python benchmarks/train_throughput.py --workers 1,2,4,8,14 --write /tmp/train_throughput.md
    python benchmarks/train_throughput.py --device cpu --images 128 --batch 16 --workers 1,2 --iterations 4

It writes a synthetic dataset with `darknet_py synth` (416x416 JPEGs) into a temporary folder and
trains yolov4-tiny adapted to its classes (batch --batch, subdivisions 1) from random weights:
  1. the loader alone: BatchLoader.next_batch images/s with threads and with processes, per worker
     count, and per worker (images/s / workers: the scaling per added core);
  2. the engine's training step on one batch already in memory, per precision: the ceiling. The step
     is compare_gpu.training_step, the step as `train` runs it (forward_train + YOLO loss + backward +
     the queued update, each step's loss statistics read one step later), the same that compare_gpu.py
     and profile_gpu_training.py time; median seconds per step over blocks of 4 steps with one
     synchronization each (compare_gpu.timed);
  3. `train()` itself per precision and loader: median seconds per iteration from its callback (the
     first --warmup iterations left out), images/s, the share of the iteration spent waiting for
     data, and the ratio to the in-memory step; and the mean and 90th percentile, with the count of slow
     iterations (over twice the median) and how many of them spent over half their time waiting for data:
     the log's throughput is the mean's, so slow iterations are what separates it from the median.
Each precision's runs are subprocesses with DARKNET_PY_TF32 set (fp32: 0, tf32: 1), as compare_gpu.py;
fp16 and bf16 train with half activations (`train(precision=...)`) and, as `train` does, batches in the
network's half type (data/batch_storage.py): the loader writes them so and the in-memory step feeds them
so. --half-batches on,off (the default) runs each half precision both ways (off: DARKNET_PY_HALF_BATCHES=0,
float32 batches converted on the device), for A/B; the loader-alone table has a row per --loader-storage.
--cache 0,auto (the default) runs the loader and train() without and with the image cache (decoded images
kept in memory the workers share, data/image_cache.py): warm-ups of a few epochs of --images put the timed
draws in a long run's steady state, where nearly every draw reads the cache (its share is printed).
--pin on,off runs each end-to-end case with the loader's batch buffers page-locked for the GPU (on: what train
does on CUDA, the batches go up by DMA from the workers' shared memory) and without (off:
DARKNET_PY_PIN_BATCHES=0, each batch copied into staging buffers by the training process's threads), for A/B.
--gpus N also runs the command line, `darknet_py train --gpus 0..N-1 --batch-mode per-gpu`, and reads its
closing `throughput:` line: what a user sees, the cache's cold first epoch included.

    python benchmarks/train_throughput.py --images 1024 --workers 1,8,14 --train-workers 14 --precisions bf16
    python benchmarks/train_throughput.py --images 1024 --loader-kinds processes --loader-warmup 100 --warmup 60
    python benchmarks/train_throughput.py --images 1024 --workers 14 --loader-only --gpus 4 --precisions bf16
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_gpu import timed, training_step  # noqa: E402


def adapted_cfg(classes: int, batch: int, size: int, out: str, burn_in: int = 1000) -> str:
    """yolov4-tiny with `classes` classes at size x size, batch `batch` in one subdivision, and its burn-in
    (from random weights at the full rate, training diverges within 100 iterations)."""
    from darknet_py.model_files.cfgfiles import resolve_cfg

    lines = []
    for line in Path(resolve_cfg("yolov4-tiny.cfg")).read_text().splitlines():
        key = line.split("=")[0].strip()
        if key == "classes":
            line = f"classes={classes}"
        elif key == "filters" and line.split("=")[1].strip() == "255":
            line = f"filters={3 * (5 + classes)}"
        elif key in ("batch", "subdivisions", "width", "height", "max_batches", "burn_in"):
            line = {"batch": f"batch={batch}", "subdivisions": "subdivisions=1", "width": f"width={size}",
                    "height": f"height={size}", "max_batches": "max_batches=100000", "burn_in": f"burn_in={burn_in}"}[key]
        lines.append(line)
    Path(out).write_text("\n".join(lines) + "\n")
    return out


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def process_minor_faults(pid: int) -> int:
    """Minor page faults of a live process so far (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])  # minflt: field 10
    except OSError:
        return 0


def loader_rate(data: str, cfg: str, batch: int, workers: int, processes: bool, batches: int,
                warmup: int = 2, batch_storage: str = "fp32", cache="auto") -> Dict[str, float]:
    """images/s of next_batch after `warmup` batches (the workers starting), and the CPU time per
    image of this process and its worker processes over the same batches: the cost that bounds images/s
    per core, unlike the wall time, whatever else the machine runs; and the worker processes' minor page
    faults per image: a worker maps a page of the shared batch buffers on its first write there (about
    500 faults per 416x416 image, 1-4 ms of CPU on a 2-core EPYC) until it has written every page of the
    ring, which takes many batches with many workers (loader_profile.py splits it). batch_storage: the
    batches' type (fp32, or a half network's fp16 / bf16). cache: BatchLoader's (decoded images kept in
    memory; 0: decoded at every draw); "hit_share": the timed batches' draws read from it."""
    from darknet_py.data import BatchLoader

    with BatchLoader.from_files(data, cfg, batch, seed=1, workers=workers, processes=processes,
                                storage=batch_storage, cache=cache) as loader:
        procs = getattr(loader._engine, "procs", [])

        def cpu() -> float:
            return time.process_time() + sum(process_cpu_seconds(p.pid) for p in procs)

        def faults() -> int:
            return sum(process_minor_faults(p.pid) for p in procs)

        def hits() -> Tuple[int, int]:
            stats = loader.cache.stats() if loader.cache is not None else {"hits": 0, "misses": 0}
            return stats["hits"], stats["misses"]

        for _ in range(warmup):
            loader.next_batch()
        t0, c0, f0, h0 = time.perf_counter(), cpu(), faults(), hits()
        for _ in range(batches):
            loader.next_batch()
        seconds, cpu_seconds, worker_faults = time.perf_counter() - t0, cpu() - c0, faults() - f0
        h1 = hits()
    draws = (h1[0] - h0[0]) + (h1[1] - h0[1])
    return {"images_per_s": batches * batch / seconds, "cpu_ms_per_image": 1e3 * cpu_seconds / (batches * batch),
            "faults_per_image": worker_faults / (batches * batch), "hit_share": (h1[0] - h0[0]) / max(1, draws)}


def storage(precision: str) -> str:
    """The engine precision of a table row: tf32 is fp32 storage with TF32 math (DARKNET_PY_TF32=1)."""
    return "fp32" if precision == "tf32" else precision


def engine_step(data: str, cfg: str, device: str, iterations: int, precision: str) -> Dict[str, float]:
    """The training step on one real augmented batch already in memory, as `train` runs it: `iterations`
    steps (rounded up to blocks of 4) after 3 of warm-up. The batch is in the type `train` loads
    (train.batch_storage: a half precision's own unless DARKNET_PY_HALF_BATCHES=0)."""
    from darknet_py import _core
    from darknet_py.data import BatchLoader, darknet_truth
    from darknet_py.training.init_weights import darknet_init
    from darknet_py.training.train import batch_storage

    raw = _core.Net(cfg, device)
    darknet_init(raw, 1)
    raw.precision = storage(precision)
    with BatchLoader.from_files(data, cfg, int(raw.net_options()["batch"]), seed=1, workers=0,
                                storage=batch_storage(storage(precision))) as loader:
        images, truths = loader.next_batch()
    truths = [darknet_truth(t) for t in truths]
    step = training_step(raw, images, truths, len(images))
    s = timed(step, raw.synchronize, warmup=3, min_runs=-(-iterations // 4), min_s=0.0, steps=4)
    return {"s_per_iteration": s, "images_per_s": len(images) / s}


def train_run(data: str, cfg: str, device: str, iterations: int, warmup: int, workers: int, kind: str,
              precision: str, cache="auto"):
    from darknet_py.training.train import train

    seconds, waits = [], []

    def callback(stats):
        seconds.append(stats["seconds"])
        waits.append(stats["load_seconds"])

    with tempfile.TemporaryDirectory() as out:
        r = train(data, cfg, out_dir=out, max_batches=iterations + warmup, workers=workers, loader_kind=kind,
                  device=device, seed=1, quiet=True, chart=False, callback=callback, precision=storage(precision),
                  cache_images=cache)
    s, w = np.array(seconds[warmup:]), np.array(waits[warmup:])
    batch = int(r.net.net_options()["batch"])
    slow = s > 2 * np.median(s)  # the iterations that pull the mean (what the log's throughput sums) up
    return {"s_per_iteration": float(np.median(s)), "images_per_s": batch / float(np.median(s)),
            "wait_share": float(np.sum(w) / np.sum(s)), "loader": r.loader, "cache": r.image_cache,
            "mean_s": float(np.mean(s)), "p90_s": float(np.percentile(s, 90)), "slow": int(np.sum(slow)),
            "slow_data_bound": int(np.sum(slow & (w > s / 2)))}


def run_env(precision: str, pin: bool = True, half_batches: Optional[bool] = None) -> Dict[str, str]:
    """The environment of a run in its own process: TF32 for the tf32 rows, and the A/B switches of train
    (DARKNET_PY_PIN_BATCHES; DARKNET_PY_HALF_BATCHES unless None, which leaves this process's)."""
    env = {**os.environ, "DARKNET_PY_TF32": "1" if precision == "tf32" else "0",
           "DARKNET_PY_PIN_BATCHES": "1" if pin else "0"}
    if half_batches is not None:
        env["DARKNET_PY_HALF_BATCHES"] = "1" if half_batches else "0"
    return env


def several_gpus_run(data: str, cfg: str, gpus: int, iterations: int, workers: int, precision: str,
                     cache, pin: bool = True) -> Dict[str, float]:
    """`darknet_py train --gpus 0,..,gpus-1 --batch-mode per-gpu` (each rank trains the cfg's whole batch) as a
    user runs it: its closing throughput line (images/s of all ranks over every iteration but the first, so
    the image cache's cold first epochs are in it, and the share of the time rank 0 waited for data)."""
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([sys.executable, "-m", "darknet_py", "train", cfg, data, "--gpus",
                            ",".join(str(g) for g in range(gpus)), "--batch-mode", "per-gpu", "--max-batches",
                            str(iterations), "--workers", str(workers), "--precision", storage(precision),
                            "--cache-images", str(cache if cache == "auto" else cache / 2 ** 30), "--seed", "1",
                            "--out", out], capture_output=True, text=True, env=run_env(precision, pin=pin), timeout=900)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("throughput: ")), None)
    if p.returncode or line is None:
        raise RuntimeError(f"train --gpus failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    words = line.split()
    return {"images_per_s": float(words[1]), "wait_share": float(words[6].rstrip("%")) / 100}


def child(args) -> int:
    """One measurement in this process (the parent sets DARKNET_PY_TF32); prints its JSON."""
    spec = json.loads(args.child)
    if spec["what"] == "engine":
        out = engine_step(spec["data"], spec["cfg"], spec["device"], spec["iterations"], spec["precision"])
    else:
        out = train_run(spec["data"], spec["cfg"], spec["device"], spec["iterations"], spec["warmup"],
                        spec["workers"], spec["kind"], spec["precision"], spec["cache"])
    print("RESULT " + json.dumps(out))
    return 0


def in_child(spec: dict, precision: str, half_batches: bool = True, pin: bool = True) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(dict(spec, precision=precision))],
                       capture_output=True, text=True, env=run_env(precision, pin, half_batches), timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{spec['what']} run failed ({p.returncode}):\n{p.stderr[-3000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--device", help="engine device (default: cuda if available, else cpu)")
    ap.add_argument("--images", type=int, default=2048, help="synthetic JPEGs (default 2048)")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--size", type=int, default=416, help="network and image size (default 416)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", default="1,2,4,8,14", help="worker counts of the loader-alone table")
    ap.add_argument("--train-workers", help="worker counts of the end-to-end runs (default: the largest two)")
    ap.add_argument("--precisions", default=None, help="fp32,tf32,fp16,bf16 on CUDA (default), fp32 elsewhere")
    ap.add_argument("--iterations", type=int, default=30, help="timed training iterations per run")
    ap.add_argument("--warmup", type=int, default=5, help="training iterations left out of the figures")
    ap.add_argument("--loader-batches", type=int, default=8, help="timed batches per loader-alone run")
    ap.add_argument("--loader-warmup", type=int, default=2,
                    help="batches before the timed ones (default 2); with many worker processes the first hundreds of "
                         "batches also pay for mapping the shared batch buffers' pages into each worker (the faults "
                         "column): more warm-up measures the steady state")
    ap.add_argument("--loader-only", action="store_true", help="only the loader-alone table")
    ap.add_argument("--loader-kinds", default="threads,processes",
                    help="the loader-alone table's workers: threads, processes or both (default)")
    ap.add_argument("--loader-storage", default="fp32,bf16",
                    help="batch types of the loader-alone table, a row each (default fp32,bf16: float32, and the "
                         "2-byte batches of half training; fp16 costs as bf16)")
    ap.add_argument("--half-batches", default="on,off",
                    help="fp16 / bf16 runs with half batches (on: what train does), float32 ones converted on the "
                         "device (off: DARKNET_PY_HALF_BATCHES=0), or both (default on,off: A/B)")
    ap.add_argument("--cache", default="0,auto",
                    help="the loader's image cache, a row (and end-to-end run) each: 0 (off: every draw decodes its "
                         "file), auto (train's default) or bytes (default 0,auto: A/B). With the cache, the warm-ups "
                         "should span a few epochs of --images so that the timed draws read it, as in a long run")
    ap.add_argument("--pin", default="on",
                    help="end-to-end runs with the batch buffers page-locked for the GPU (on: what train does), staged "
                         "by the CPU instead (off: DARKNET_PY_PIN_BATCHES=0), or both (on,off: A/B)")
    ap.add_argument("--gpus", type=int, default=0,
                    help="also `darknet_py train --gpus` on this many GPUs end to end (1: one, several: per-gpu batch mode, "
                         "--gpu-iterations iterations, --train-workers' largest a rank), per precision and --cache")
    ap.add_argument("--gpu-iterations", type=int, default=200)
    ap.add_argument("--write", help="also write the markdown tables to this file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    import darknet_py
    from darknet_py.devices import default_device, resolve
    from darknet_py.diagnostics.sysinfo import cpu_info

    device = resolve(args.device or default_device())  # "auto" -> the device it picks (cuda:0 ...)
    precisions = (args.precisions or ("fp32,tf32,fp16,bf16" if device.startswith("cuda") else "fp32")).split(",")
    workers = [int(w) for w in args.workers.split(",")]
    caches = [c if c == "auto" else int(c) for c in args.cache.split(",")]
    pins = [{"on": True, "off": False}[m] for m in args.pin.split(",")]
    train_workers = [int(w) for w in (args.train_workers.split(",") if args.train_workers else
                                      sorted(workers)[-2:])]
    out: List[str] = [f"## `train` throughput: yolov4-tiny, {args.classes} classes, {args.size}x{args.size}, "
                      f"batch {args.batch}, {args.images} JPEGs",
                      "", f"{cpu_info()[0]}, {os.cpu_count()} cores; device {device}; darknet_py "
                      f"{getattr(darknet_py, '__version__', '?')}", ""]

    def say(line: str) -> None:
        out.append(line)
        print(line, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "darknet_py", "synth", tmp, "--images", str(args.images), "--classes",
                        str(args.classes), "--size", f"{args.size}x{args.size}", "--workers",
                        str(os.cpu_count() or 1)], check=True, stdout=subprocess.DEVNULL)
        print(f"synth: {args.images} images in {time.perf_counter() - t0:.1f} s", flush=True)
        data = os.path.join(tmp, "shapes.data")
        cfg = adapted_cfg(args.classes, args.batch, args.size, os.path.join(tmp, "net.cfg"))

        say("### The loader alone (augmented batches, images/s; per worker in brackets; CPU ms per image; "
            "processes: the workers' minor page faults per image)")
        say("")
        say("| workers | " + " | ".join(str(w) for w in workers) + " |")
        say("|---|" + "---|" * len(workers))
        for batch_storage in args.loader_storage.split(","):
            for processes in [{"threads": False, "processes": True}[k] for k in args.loader_kinds.split(",")]:
                for cache in caches:
                    cells = []
                    for w in workers:
                        r = loader_rate(data, cfg, args.batch, w, processes, args.loader_batches, args.loader_warmup,
                                        batch_storage, cache)
                        rate = r["images_per_s"]
                        faults = f", {r['faults_per_image']:.0f} faults" if processes else ""
                        cached = f", {100 * r['hit_share']:.0f}% cached" if cache != 0 else ""
                        cells.append(f"{rate:.0f} ({rate / w:.0f}); {r['cpu_ms_per_image']:.2f} ms{faults}{cached}")
                    say(f"| {'processes' if processes else 'threads'}, {batch_storage}, cache {cache} | " +
                        " | ".join(cells) + " |")
        say("")

        if args.loader_only:
            precisions = []
        else:
            say("### End to end: `train` against the engine's in-memory step")
            say("")
            say("| precision | run | s/iteration | images/s | waiting for data | / in-memory step | mean, 90th "
                "percentile s; iterations over 2x the median (of them, over half waiting for data) |")
            say("|---|---|---|---|---|---|---|")
        half_modes = [{"on": True, "off": False}[m] for m in args.half_batches.split(",")]
        for precision in precisions:
            base = {"data": data, "cfg": cfg, "device": device, "iterations": args.iterations}
            for half in half_modes if storage(precision) != "fp32" else [True]:
                batches = "" if storage(precision) == "fp32" else (", half batches" if half else ", fp32 batches")
                step = in_child(dict(base, what="engine"), precision, half)
                say(f"| {precision} | in-memory step{batches} | {step['s_per_iteration']:.4f} | "
                    f"{step['images_per_s']:.1f} | | 1.00 | |")
                for kind, w, cache, pin in [(k, w, c, p) for k in args.loader_kinds.split(",") for w in train_workers
                                            for c in caches for p in pins]:
                    r = in_child(dict(base, what="train", warmup=args.warmup, workers=w, kind=kind, cache=cache),
                                 precision, half, pin)
                    cached = (f", cache {100 * r['cache']['hits'] / max(1, r['cache']['hits'] + r['cache']['misses']):.0f}"
                              "% of draws" if r["cache"] else ", no cache")
                    say(f"| {precision} | train, {r['loader']}{cached} | {r['s_per_iteration']:.4f} | "
                        f"{r['images_per_s']:.1f} | {100 * r['wait_share']:.1f}% | "
                        f"{r['images_per_s'] / step['images_per_s']:.2f} | {r['mean_s']:.4f}, {r['p90_s']:.4f}; "
                        f"{r['slow']} ({r['slow_data_bound']}) |")
        say("")
        if args.gpus:
            say(f"### `darknet_py train --gpus` on {args.gpus} GPUs, per-gpu batch mode (each rank {args.batch} images "
                f"a step), {max(train_workers)} workers a rank, {args.gpu_iterations} iterations")
            say("")
            say("| precision | cache | batches page-locked | images/s, all ranks | per GPU | rank 0 waiting for data |")
            say("|---|---|---|---|---|---|")
            for precision in args.precisions.split(",") if args.precisions else ["fp32", "tf32", "fp16", "bf16"]:
                for cache, pin in [(c, p) for c in caches for p in pins]:
                    r = several_gpus_run(data, cfg, args.gpus, args.gpu_iterations, max(train_workers), precision,
                                         cache, pin)
                    say(f"| {precision} | {cache} | {'yes' if pin else 'no'} | {r['images_per_s']:.0f} | "
                        f"{r['images_per_s'] / args.gpus:.0f} | {100 * r['wait_share']:.1f}% |")
            say("")
    if args.write:
        Path(args.write).write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
