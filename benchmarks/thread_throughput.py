"""Detect throughput of threads serving requests: 1 thread, 2 threads sharing one Network (their calls
take turns), and 2 threads each with its own clone() (one copy of the weights; they run in parallel).

    python benchmarks/thread_throughput.py                      # the bundled demo model
    python benchmarks/thread_throughput.py --cfg yolov3-tiny.cfg --weights yolov3-tiny.weights --repeats 5
    python benchmarks/thread_throughput.py --engine-threads 1   # each call single-threaded (set_threads)

Each configuration runs for --seconds after a warm-up, --repeats times, in alternation; the output is
images/s per run (min / median / max) for each configuration.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import cv2

import darknet_py
from darknet_py import _core

DEMO = os.path.join(os.path.dirname(darknet_py.__file__), "models", "demo")


def throughput(nets, image, seconds: float) -> float:
    """Images per second of len(nets) threads, thread i detecting on nets[i] in a loop."""
    done = [0] * len(nets)
    stop = time.perf_counter() + seconds
    start = threading.Barrier(len(nets) + 1)

    def work(i):
        start.wait()
        while time.perf_counter() < stop:
            nets[i].detect(image)
            done[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(nets))]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cfg", default=os.path.join(DEMO, "shapes-demo.cfg"))
    p.add_argument("--weights", default=os.path.join(DEMO, "shapes-demo.weights"))
    p.add_argument("--image", default=os.path.join(DEMO, "sample.jpg"))
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--engine-threads", type=int, default=0, help="CPU threads per call (0: the default)")
    a = p.parse_args()
    if a.engine_threads:
        _core.set_threads(a.engine_threads)
    net = darknet_py.Network(a.cfg, a.weights, device="cpu")
    image = cv2.imread(a.image)
    configs = {"1 thread": [net], "2 threads, one shared network": [net, net], "2 threads, a clone each": [net, net.clone()]}
    for nets in configs.values():
        throughput(nets, image, 0.5)  # warm-up
    runs = {name: [] for name in configs}
    for _ in range(a.repeats):
        for name, nets in configs.items():
            runs[name].append(throughput(nets, image, a.seconds))
    print(f"{os.path.basename(a.cfg)}, {_core.get_threads()} engine threads, {os.cpu_count()} CPUs, "
          f"{a.repeats} runs of {a.seconds:g} s each (images/s: min / median / max)")
    for name, r in runs.items():
        print(f"  {name:32s} {min(r):7.1f} / {statistics.median(r):7.1f} / {max(r):7.1f}")


if __name__ == "__main__":
    main()
