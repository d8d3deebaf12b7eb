"""Our engine against OpenCV DNN 4.x on the same network, weights, input and thread count.

    python benchmarks/compare.py [--threads N] [--models yolov4-tiny,yolov3-tiny] [--rounds 15]
                                 [--scaling] [--out benchmarks/RESULTS.md | --no-write]
    python benchmarks/compare.py --device metal [--models ...] [--rounds 15]

With --device, our engine on that GPU device against our CPU backend instead (compare_device.py:
latency, throughput, training, video frames/s and the issue's targets); it says so and exits 2 when
the device is not available.

Per model: both engines load the same cfg and the same seeded random weights (written by our
engine in Darknet's format, read by cv2.dnn.readNetFromDarknet), get the same input blob and the
same thread count, and are timed in alternating runs (ours, OpenCV, ours, ...) so that load from
other processes hits both alike; the table gives medians. GFLOP/s counts the network's
convolution FLOPs (Darknet's BFLOPs) over our median (Winograd layers count their direct-convolution
FLOPs, so this is an effective rate); '% of peak' divides it by the FMA peak that this script
measures on the same threads (bench_common.fma_peak, before and after the runs, the higher kept).
--scaling also times our engine on 1 thread for the speed-up column. The table and the machine
description replace the block between the markers in RESULTS.md; the notes around it are kept.
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List


sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402

BEGIN, END = "<!-- compare.py:begin -->", "<!-- compare.py:end -->"


def load_opencv(cfg: str, weights: str):
    import cv2

    if not hasattr(cv2.dnn, "readNetFromDarknet"):
        raise SystemExit(f"OpenCV {cv2.__version__} has no readNetFromDarknet (removed in 5.x): install opencv-python<5")
    net = cv2.dnn.readNetFromDarknet(cfg, weights)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    return net, net.getUnconnectedOutLayersNames()


def bench_model(model: bc.Model, threads: int, rounds: int, warmup: int, scaling: bool) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        net, cfg, weights = bc.random_model(model, d)
        cvnet, outs = load_opencv(cfg, weights)
    blob = bc.input_blob(net)
    n = model.rounds or rounds

    def ours() -> float:
        t = time.perf_counter()
        net.forward(blob)
        return time.perf_counter() - t

    def theirs() -> float:
        t = time.perf_counter()
        cvnet.setInput(blob)
        cvnet.forward(outs)
        return time.perf_counter() - t

    bc.set_threads(threads)
    for _ in range(warmup):  # first runs allocate buffers (both engines) and pick kernels (OpenCV)
        ours(), theirs()
    t_ours: List[float] = []
    t_cv: List[float] = []
    t_one: List[float] = []
    for r in range(n):
        # alternate which engine goes first, so neither always runs right after the other's cache damage
        if r % 2 == 0:
            t_ours.append(ours()), t_cv.append(theirs())
        else:
            t_cv.append(theirs()), t_ours.append(ours())
        if scaling:
            bc.set_threads(1)
            if r == 0:
                ours()  # warm-up at the new thread count
            t_one.append(ours())
            bc.set_threads(threads)
    res = {
        "ours_ms": statistics.median(t_ours) * 1e3,
        "cv_ms": statistics.median(t_cv) * 1e3,
        "gflop": net._net.total_bflops(),
        "rounds": n,
    }
    if scaling:
        res["one_ms"] = statistics.median(t_one) * 1e3
    return res


def table(rows: List[dict], peak: float, scaling: bool) -> str:
    head = ["model", "input", "rounds", "ours ms", "OpenCV ms", "ours/OpenCV", "GFLOP", "ours GFLOP/s", "% of peak",
            "OpenCV GFLOP/s"]
    if scaling:
        head += ["ours 1-thread ms", "speed-up"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        gfs = r["gflop"] / (r["ours_ms"] / 1e3)
        cells = [r["model"], f"{r['size']}x{r['size']}", str(r["rounds"]), f"{r['ours_ms']:.1f}", f"{r['cv_ms']:.1f}",
                 f"{r['ours_ms'] / r['cv_ms']:.2f}", f"{r['gflop']:.2f}", f"{gfs:.0f}", f"{100 * gfs / peak:.0f}%",
                 f"{r['gflop'] / (r['cv_ms'] / 1e3):.0f}"]
        if scaling:
            cells += [f"{r['one_ms']:.1f}", f"{r['one_ms'] / r['ours_ms']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(path: Path, block: str) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n\n"
    new = f"{BEGIN}\n{block}\n{END}"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + new + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=bc.usable_cpus(), help="threads for both engines (default: all usable)")
    p.add_argument("--models", default=",".join(m.name for m in bc.MODELS), help="comma-separated model names")
    p.add_argument("--rounds", type=int, default=15, help="timed runs per engine (yolov4 always runs once)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--scaling", action="store_true", help="also time our engine on 1 thread")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "RESULTS.md"))
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--device", help="compare our engine on this GPU device (e.g. metal) with our CPU instead")
    a = p.parse_args(argv)
    if a.device:
        from compare_device import run

        return run(a.device, a.models, a.rounds)
    models = [bc.find_model(m.strip()) for m in a.models.split(",") if m.strip()]

    peak = bc.fma_peak(a.threads)
    print(f"FMA peak: {peak.gflops:.0f} GFLOP/s ({peak.method})", flush=True)
    rows = []
    for m in models:
        r = bench_model(m, a.threads, a.rounds, a.warmup, a.scaling)
        r.update(model=m.name, size=m.size)
        rows.append(r)
        print(f"{m.name} {m.size}: ours {r['ours_ms']:.1f} ms, OpenCV {r['cv_ms']:.1f} ms, "
              f"ratio {r['ours_ms'] / r['cv_ms']:.2f}" + (f", 1 thread {r['one_ms']:.1f} ms" if a.scaling else ""),
              flush=True)
    # measured again at the end, the higher reading kept: a reading taken while another process
    # shares the cores is low, and the peak is what the machine can do
    again = bc.fma_peak(a.threads)
    if again.gflops > peak.gflops:
        peak = again
    print(f"FMA peak (best of the readings before and after): {peak.gflops:.0f} GFLOP/s", flush=True)
    tab = table(rows, peak.gflops, a.scaling)
    print()
    print(tab)
    if not a.no_write:
        desc = bc.machine_description(a.threads)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        block = "\n".join(
            [f"Measured {stamp} by `python benchmarks/compare.py --threads {a.threads} --rounds {a.rounds}"
             f"{' --scaling' if a.scaling else ''}` (batch 1, medians of alternating runs).", ""]
            + [f"- {k}: {v}" for k, v in desc.items()]
            + [f"- FMA peak: {peak.gflops:.0f} GFLOP/s ({peak.method})", "", tab])
        write_results(Path(a.out), block)
        print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
