"""Frames per second of a video with and without `--track`: the demo model on a `synth --video`
clip, through the CLI's video path (decode -> detect -> track -> draw -> encode, as `darknet_py
detect clip.mp4 [--track]` runs it) and through Network.stream (decode -> detect -> track). The two
variants alternate, --rounds times each, so that a change in the shared machine's load hits both;
the table gives each one's median frames/s with the spread (min-max), the median of the rounds'
ratios to detection alone (each round's pair ran back to back) and the process's CPU time per frame
(all its threads: less sensitive than the wall clock to other work on a shared machine).

    python benchmarks/track_fps.py [--frames 150] [--size 640x480] [--objects 20] [--rounds 9]
"""
from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

from darknet_py.commands.runner import DetectOptions, Runner
from darknet_py.data.synth import parse_size
from darknet_py.data.synth_video import write_video
from darknet_py.media.sources import resolve_source
from darknet_py.model_files.demo import demo_network


def cli_path(net, clip: str, out_dir: str, track: bool, count_line: str = "") -> None:
    """The video path of `darknet_py detect clip [--track] [--count-line L]` (no --json: results
    are not kept, as the CLI keeps them only for --json)."""
    opt = DetectOptions(out_dir=out_dir, track="bytetrack" if track else None,
                        count_lines=[count_line] if count_line else [])
    runner = Runner(net, resolve_source(clip), opt, stdout=io.StringIO(), stderr=io.StringIO(), keep_results=False)
    runner.run()
    assert runner.outputs and not runner.failures


def stream_path(net, clip: str, track: bool) -> None:
    for _ in net.stream(clip, track=track):
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--size", type=parse_size, default=(640, 480))
    ap.add_argument("--objects", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    net = demo_network("cpu")
    with tempfile.TemporaryDirectory() as d:
        clip = os.path.join(d, "clip.mp4")
        write_video(clip, args.frames, args.size, args.objects, seed=args.seed)
        out = os.path.join(d, "out")
        w, h = args.size
        line = f"{w // 2},0,{w // 2},{h}"
        variants: Dict[str, Callable[[], None]] = {
            "detect clip.mp4": lambda: cli_path(net, clip, out, False),
            "detect clip.mp4 --track": lambda: cli_path(net, clip, out, True),
            f"detect clip.mp4 --count-line {line}": lambda: cli_path(net, clip, out, True, line),
            "Network.stream(clip)": lambda: stream_path(net, clip, False),
            "Network.stream(clip, track=True)": lambda: stream_path(net, clip, True),
        }
        for run in variants.values():  # warm-up: codec, buffers, imports
            run()
        fps: Dict[str, List[float]] = {k: [] for k in variants}
        cpu: Dict[str, List[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for name, run in variants.items():
                t0, c0 = time.perf_counter(), time.process_time()
                run()
                fps[name].append(args.frames / (time.perf_counter() - t0))
                cpu[name].append((time.process_time() - c0) / args.frames * 1000)
    print(f"clip: {args.frames} frames {args.size[0]}x{args.size[1]}, {args.objects} objects, seed {args.seed}; "
          f"{args.rounds} rounds, demo model on the CPU")
    print("| pipeline | frames/s: median (min-max) | frames/s against detection alone: median of the rounds | "
          "CPU ms/frame: median | CPU against detection alone |")
    print("| --- | --- | --- | --- | --- |")
    alone = {"detect": "detect clip.mp4", "stream": "Network.stream(clip)"}
    for name, v in fps.items():
        ref = alone["stream" if name.startswith("Network") else "detect"]
        m, c = statistics.median(v), statistics.median(cpu[name])
        paired = statistics.median(a / b for a, b in zip(v, fps[ref]))
        print(f"| `{name}` | {m:.1f} ({min(v):.1f}-{max(v):.1f}) | {paired * 100:.1f} % | "
              f"{c:.2f} | {c / statistics.median(cpu[ref]) * 100:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
