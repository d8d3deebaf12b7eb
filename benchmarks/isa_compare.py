"""Two builds of darknet_py side by side, e.g. the run-time dispatched build against a
-march=native one (DARKNET_PY_NATIVE=ON), or two forced copies of one build.

The dispatched-build check (the dispatched build within 3 % of the native one), end to end, from the
repository root in an environment with the test extra (pip install ".[test]"), offline:

    tools/isa_native_vs_dispatch.sh                  # both builds into /tmp/darknet_isa, then this script

or by hand (with the index reachable: pip fetches the build requirements and numpy/opencv):

    python -m venv /tmp/darknet_isa/venv-native && python -m venv /tmp/darknet_isa/venv-dispatch
    /tmp/darknet_isa/venv-native/bin/pip install . -Cbuild-dir=/tmp/darknet_isa/build-native \
        -Ccmake.define.DARKNET_PY_NATIVE=ON
    /tmp/darknet_isa/venv-dispatch/bin/pip install . -Cbuild-dir=/tmp/darknet_isa/build-dispatch \
        -Ccmake.define.DARKNET_PY_NATIVE=OFF
    python benchmarks/isa_compare.py --a /tmp/darknet_isa/venv-native/bin/python \
        --b /tmp/darknet_isa/venv-dispatch/bin/python       # B/A <= 1.03 is the target

(the separate build dirs keep the two configurations, and the checkout's build/, apart). General form:

    python benchmarks/isa_compare.py --a /path/venv_native/bin/python --b /path/venv_dispatch/bin/python
        [--b-env DARKNET_PY_ISA=avx2] [--models yolov4-tiny,yolov3-tiny] [--threads 2] [--blocks 6] [--runs 10]

Each block is one fresh process per build (A then B, then B then A, ...: alternating, so load from
other processes hits both alike) that loads the model with seeded random weights, warms up and
times --runs batch-1 forwards; its median is the block's figure. The table gives, per model, the
median over blocks of each build and the ratio B/A (the median of the per-pair ratios), then the
fastest block of each and their ratio (steadier where other processes share the cores).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_BLOCK = r"""
import json, statistics, sys, tempfile, time
sys.path.insert(0, {here!r})
import bench_common as bc
from darknet_py import _core
bc.set_threads({threads})
with tempfile.TemporaryDirectory() as d:
    net, cfg, weights = bc.random_model(bc.find_model({model!r}), d)
blob = bc.input_blob(net)
for _ in range(2):
    net.forward(blob)
times = []
for _ in range({runs}):
    t = time.perf_counter()
    net.forward(blob)
    times.append(time.perf_counter() - t)
print(json.dumps({{"ms": 1000 * statistics.median(times), "isa": _core.cpu_isa()["active"],
                  "native": _core.build_info()["native_build"]}}))
"""


def block(python: str, env: dict, model: str, threads: int, runs: int) -> dict:
    code = _BLOCK.format(here=str(HERE), threads=threads, model=model, runs=runs)
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode != 0:
        raise SystemExit(f"{python} failed:\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def parse_env(items):
    return dict(kv.split("=", 1) for kv in items or [])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="python of build A (the baseline of the ratio)")
    p.add_argument("--b", required=True, help="python of build B")
    p.add_argument("--a-env", action="append", help="VAR=value for A's processes (repeatable)")
    p.add_argument("--b-env", action="append", help="VAR=value for B's processes (repeatable)")
    p.add_argument("--models", default="yolov4-tiny,yolov3-tiny")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    envs = {"A": parse_env(args.a_env), "B": parse_env(args.b_env)}
    pythons = {"A": args.a, "B": args.b}
    for model in args.models.split(","):
        ms = {"A": [], "B": []}
        labels = {}
        for i in range(args.blocks):
            for which in ("AB" if i % 2 == 0 else "BA"):
                r = block(pythons[which], envs[which], model, args.threads, args.runs)
                ms[which].append(r["ms"])
                labels[which] = f"{'native' if r['native'] else 'dispatched'}:{r['isa']}"
            print(f"  {model} block {i + 1}: A {ms['A'][-1]:.1f} ms, B {ms['B'][-1]:.1f} ms", file=sys.stderr)
        ratios = [b / a for a, b in zip(ms["A"], ms["B"])]
        print(f"{model}: A ({labels['A']}) {statistics.median(ms['A']):.1f} ms, B ({labels['B']}) "
              f"{statistics.median(ms['B']):.1f} ms, B/A {statistics.median(ratios):.3f} "
              f"(per-block ratios {', '.join(f'{r:.3f}' for r in ratios)}; {args.blocks} blocks x {args.runs} runs, "
              f"{args.threads} threads)")
        # other processes only ever add time, so on a shared machine the fastest block of each
        # build is the steadier figure of the two
        print(f"{model}: fastest block A {min(ms['A']):.1f} ms, B {min(ms['B']):.1f} ms, "
              f"B/A {min(ms['B']) / min(ms['A']):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
