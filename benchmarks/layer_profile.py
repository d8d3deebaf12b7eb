"""Per-layer milliseconds of our engine next to ONNX Runtime's and OpenVINO's per-node times, on the same network.

    python benchmarks/layer_profile.py [--model yolov4-tiny] [--threads 2] [--runs 20] [--batch 1]
                                       [--rounds 2] [--cfg FILE.cfg] [--no-openvino] [--nodes]

The network is built as compare.py builds it (the model's cfg at its benchmark size, seeded random
weights, seeded input); ONNX Runtime runs our ONNX export of it (peer_engines: spinning off,
intra-op threads = --threads) after its outputs were checked against ours. Ours: `_core.Net.layer_ms()`
after each forward (wall time of each layer, its parallel loops included). ONNX Runtime:
SessionOptions.enable_profiling, the `*_kernel_time` events of each timed run. The exporter names
every node of layer i `l<i>_...` (onnx_layers.LayerSpec.hint), and ONNX Runtime's fusions keep the
name of the node they fuse into, so a node name gives its layer; nodes it adds itself (layout
reorders of its NCHWc transformer) have no layer and are listed as 'unattributed'. OpenVINO (where it is
installed): the same export compiled as compare.py races it, PERF_COUNT on, the real time of every
executed node of `get_profiling_info()` after each timed run, mapped to layers by the same names
(openvino_layers.py says how its fused nodes keep them).

Each layer's row also gives its FLOPs (the layer table's BFLOPs, times the batch), its bytes (input +
output + parameters, fp32) and the kernel each peer ran: OpenVINO's exec_type per node with the memory
layout it wrote (from the runtime model: acdb is NHWC, aBcd8b/aBcd16b blocked NCHW8c/16c), ONNX
Runtime's op type ('NCHWc' where its NCHWc transformer rewrote the node) and execution provider.

Runs alternate between the engines in --rounds blocks of --runs / --rounds forwards each (blocks,
not single runs: one engine's idle threads then cannot steal the cores from the other's run). Every
figure is the median over the timed runs; the totals are the medians of the per-run sums, and the
wall time per forward of each engine is given too (profiling adds a little to ONNX Runtime's).
Needs onnx and onnxruntime (openvino for its column; --no-openvino leaves it out, --nodes lists
OpenVINO's nodes of the last run with their kernels); OpenCV is not needed. --cfg profiles any cfg
instead of a named model (at its own [net] size).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402
import openvino_layers as ovl  # noqa: E402
import peer_engines as pe  # noqa: E402

import darknet_py  # noqa: E402
from darknet_py import _core  # noqa: E402

NODE_LAYER = re.compile(r"^l(\d+)_")
PAUSE_S = 0.3


def node_layer(name: str) -> Optional[int]:
    """The layer index our exporter encoded in a node name (l<i>_...), or None for a node it did not make."""
    m = NODE_LAYER.match(name)
    return int(m.group(1)) if m else None


def build(model: Optional[str], cfg: Optional[str], batch: int, workdir: str):
    """(net, ModelFiles) as compare.py prepares them: seeded random weights, the ONNX export at `batch`."""
    if cfg:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net = darknet_py.Network(cfg, device="cpu")
        bc.fill_random(net)
        weights = os.path.join(workdir, "model.weights")
        net.save_weights(weights)
    else:
        net, cfg, weights = bc.random_model(bc.find_model(model), workdir)
    return net, pe.prepare(net, cfg, weights, batch, workdir, need_onnx=True)


def ort_per_run(events: List[dict], timed: List[Tuple[float, float]]) -> List[Dict[object, float]]:
    """Per timed run (given as (start, end) in the profile's microseconds), ms per layer index, with the
    unattributed nodes under ('unattributed', op type)."""
    runs: List[Dict[object, float]] = [defaultdict(float) for _ in timed]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        ts = float(e["ts"])
        k = next((i for i, (b, end) in enumerate(timed) if b <= ts <= end), None)
        if k is None:
            continue  # a warm-up run
        name = e["name"][: -len("_kernel_time")]
        layer = node_layer(name)
        key = layer if layer is not None else ("unattributed", e.get("args", {}).get("op_name", "?"))
        runs[k][key] += float(e["dur"]) / 1e3
    return runs


def ort_kernels(events: List[dict], share: float = 0.05) -> Dict[int, str]:
    """Per layer, the op types ONNX Runtime ran for it (>= `share` of its time, slowest first) with their
    provider: 'Conv NCHWc (CPU)' where its NCHWc transformer rewrote the node (blocked layout)."""
    per: Dict[int, Dict[Tuple[str, str], float]] = defaultdict(lambda: defaultdict(float))
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        name = e["name"][: -len("_kernel_time")]
        layer = node_layer(name)
        if layer is None:
            continue
        args = e.get("args", {})
        provider = args.get("provider", "?").replace("ExecutionProvider", "")
        # the NCHWc transformer renames the node it rewrites <name>_nchwc: its blocked layout
        op = args.get("op_name", "?") + (" NCHWc" if name.endswith("_nchwc") else "")
        per[layer][(op, provider)] += float(e["dur"])
    out: Dict[int, str] = {}
    for layer, ks in per.items():
        total = sum(ks.values())
        keep = [k for k, us in sorted(ks.items(), key=lambda kv: -kv[1]) if total <= 0 or us >= share * total]
        out[layer] = "; ".join(f"{op} ({prov})" for op, prov in keep)
    return out


def layer_bytes(net, i: int, layer: dict, batch: int) -> int:
    """Bytes a layer touches at least once in fp32: its input, its output and its parameters."""
    def count(shape) -> int:
        n = 1
        for d in shape:
            n *= int(d)
        return n
    params = sum(int(getattr(v, "size", 0)) for v in net.params(i).values())
    return 4 * (batch * (count(layer["input"]) + count(layer["output"])) + params)


def median_by_key(runs: List[Dict[object, float]]) -> Dict[object, float]:
    keys = {k for r in runs for k in r}
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}


def summary(layer: dict) -> str:
    """type and shape of one layer, short: 'conv 3x3/2 3x416x416 -> 32x208x208'."""
    c, h, w = layer["input"]
    oc, oh, ow = layer["output"]
    kind = layer["type"]
    params = layer.get("params") or ""
    m = re.search(r"(\d+)\s*x\s*(\d+)\s*/\s*(\d+)", params)
    if m and kind in ("conv", "max", "avg"):
        kind += f" {m.group(1)}x{m.group(2)}/{m.group(3)}"
    return f"{kind} {c}x{h}x{w} -> {oc}x{oh}x{ow}"


def profile(net, files: pe.ModelFiles, threads: int, runs: int, rounds: int, workdir: str,
            with_openvino: bool = True) -> dict:
    blob = bc.input_blob(net, files.batch)
    bc.set_threads(threads)
    ours = [o.copy() for o in net.forward(blob)]
    sess = pe.ort_session(files.onnx, threads, os.path.join(workdir, "ort_profile"))
    names = [o.name for o in sess.get_outputs()]

    def ort_run(x):
        return sess.run(names, {"input": x})

    bad = pe.mismatch("onnxruntime", files, ours, ort_run(blob))
    worst = bad.pop("worst")
    if bad:
        raise SystemExit("ONNX Runtime's outputs differ from ours (relative error > "
                         f"{pe.TOL}): " + ", ".join(f"{k} {v:.2e}" for k, v in bad.items()))
    ov = None
    if with_openvino:
        compiled = pe.openvino_model(files.onnx, threads, perf_count=True)
        ov_req, ov_run = pe.openvino_runner(compiled)
        bad = pe.mismatch("openvino", files, ours, ov_run(blob))
        ov_worst = bad.pop("worst")
        if bad:
            raise SystemExit("OpenVINO's outputs differ from ours (relative error > "
                             f"{pe.TOL}): " + ", ".join(f"{k} {v:.2e}" for k, v in bad.items()))
        worst = max(worst, ov_worst)
        ov = {"runs": [], "wall": [], "req": ov_req, "run": ov_run, "compiled": compiled}
    for _ in range(2):  # first runs allocate buffers and pick kernels
        net.forward(blob), ort_run(blob)
        if ov:
            ov["run"](blob)

    per_block = max(1, runs // rounds)
    ours_layers: List[List[float]] = []
    ours_wall: List[float] = []
    ort_wall: List[float] = []
    ort_windows: List[Tuple[float, float]] = []  # perf_counter times of the timed ONNX Runtime runs
    for _ in range(rounds):
        for _ in range(per_block):
            t = time.perf_counter()
            net.forward(blob)
            ours_wall.append(time.perf_counter() - t)
            ours_layers.append(list(net._net.layer_ms()))
        time.sleep(PAUSE_S)
        for _ in range(per_block):
            t = time.perf_counter()
            ort_run(blob)
            t1 = time.perf_counter()
            ort_wall.append(t1 - t)
            ort_windows.append((t, t1))
        time.sleep(PAUSE_S)
        if ov:
            for _ in range(per_block):
                t = time.perf_counter()
                ov["req"].infer({0: blob})
                ov["wall"].append(time.perf_counter() - t)
                ov["runs"].append(ovl.nodes(ov["req"].get_profiling_info()))
            time.sleep(PAUSE_S)
    prof_path = sess.end_profiling()
    events = json.loads(Path(prof_path).read_text(encoding="utf-8"))
    # the profile's timestamps are microseconds since the session started: place our windows on that
    # clock through the model_run events (one per sess.run, in order; the last len(ort_windows) are ours)
    model_runs = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                        if e.get("cat") == "Session" and e.get("name") == "model_run")
    if len(model_runs) < len(ort_windows):
        raise SystemExit(f"ONNX Runtime's profile holds {len(model_runs)} runs, expected >= {len(ort_windows)}")
    ort_runs = ort_per_run(events, model_runs[-len(ort_windows):])
    res = {"ov": None}
    if ov:
        ov_runs = [ovl.run_ms(r) for r in ov["runs"]]
        res = {"ov": median_by_key(ov_runs),
               "ov_total": statistics.median(sum(r.values()) for r in ov_runs),
               "ov_wall": statistics.median(ov["wall"]) * 1e3,
               "ov_kernels": ovl.kernels(ov["runs"][-1], ovl.runtime_layouts(ov["compiled"])),
               "ov_nodes": ov["runs"][-1]}
    return {**res, "ort_kernels": ort_kernels(events),
            "ours": [statistics.median(col) for col in zip(*ours_layers)],
            "ours_total": statistics.median(sum(r) for r in ours_layers),
            "ours_wall": statistics.median(ours_wall) * 1e3,
            "ort": median_by_key(ort_runs),
            "ort_total": statistics.median(sum(r.values()) for r in ort_runs),
            "ort_wall": statistics.median(ort_wall) * 1e3,
            "worst": worst, "runs": per_block * rounds}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def table(layers: List[dict], res: dict, flops: List[float], nbytes: List[int]) -> str:
    """One row per layer: its MFLOP and MB, each engine's ms, ours / peer, the kernels the peers ran."""
    ov, ort = res["ov"] or {}, res["ort"]
    lines = ["| layer | type and shape | MFLOP | MB | ours ms | OpenVINO ms | ONNX Runtime ms | ours / OV | "
             "ours / ORT | OpenVINO kernel [layout] | ONNX Runtime op (provider) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ovk, ortk = res.get("ov_kernels", {}), res["ort_kernels"]

    def cell(d: dict, i: int) -> str:
        if not res["ov"] and d is ov:
            return "-"
        return f"{d[i]:.3f}" if i in d else "none (no node)"

    for i, l in enumerate(layers):
        mine = res["ours"][i]
        lines.append(f"| {i} | {summary(l)} | {flops[i] * 1e3:.1f} | {nbytes[i] / 1e6:.2f} | {mine:.3f} | "
                     f"{cell(ov, i)} | {cell(ort, i)} | {_ratio(mine, ov.get(i, 0.0))} | "
                     f"{_ratio(mine, ort.get(i, 0.0))} | {ovk.get(i, '-')} | {ortk.get(i, '-')} |")
    for key in sorted(k for k in ov if not isinstance(k, int)):
        lines.append(f"| - | unattributed: {key[1]} (OpenVINO's own nodes) | | | - | {ov[key]:.3f} | - | | | | |")
    for key in sorted(k for k in ort if not isinstance(k, int)):
        lines.append(f"| - | unattributed: {key[1]} (ONNX Runtime's own nodes) | | | - | - | {ort[key]:.3f} | | | | |")
    ovt = f"{res['ov_total']:.2f}" if res["ov"] else "-"
    ovw = f"{res['ov_wall']:.2f}" if res["ov"] else "-"
    lines.append(f"| total | sum of the layers (median of per-run sums) | {sum(flops) * 1e3:.0f} | "
                 f"{sum(nbytes) / 1e6:.1f} | {res['ours_total']:.2f} | {ovt} | {res['ort_total']:.2f} | "
                 f"{_ratio(res['ours_total'], res.get('ov_total', 0.0))} | "
                 f"{_ratio(res['ours_total'], res['ort_total'])} | | |")
    lines.append(f"| wall | one forward, median | | | {res['ours_wall']:.2f} | {ovw} | {res['ort_wall']:.2f} | "
                 f"{_ratio(res['ours_wall'], res.get('ov_wall', 0.0))} | "
                 f"{_ratio(res['ours_wall'], res['ort_wall'])} | | |")
    return "\n".join(lines)


def by_type(layers: List[dict], res: dict) -> str:
    """The same times summed per layer type: where the gap is, at a glance."""
    ours: Dict[str, float] = defaultdict(float)
    ov: Dict[str, float] = defaultdict(float)
    ort: Dict[str, float] = defaultdict(float)
    for i, l in enumerate(layers):
        ours[l["type"]] += res["ours"][i]
        ov[l["type"]] += (res["ov"] or {}).get(i, 0.0)
        ort[l["type"]] += res["ort"].get(i, 0.0)
    lines = ["| type | ours ms | OpenVINO ms | ONNX Runtime ms | ours - OV ms | ours - ORT ms |",
             "|---|---|---|---|---|---|"]
    for t in sorted(ours, key=lambda t: ours[t] - ort[t], reverse=True):
        lines.append(f"| {t} | {ours[t]:.2f} | {ov[t]:.2f} | {ort[t]:.2f} | {ours[t] - ov[t]:+.2f} | "
                     f"{ours[t] - ort[t]:+.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="yolov4-tiny", help=f"one of {', '.join(m.name for m in bc.MODELS)}")
    p.add_argument("--cfg", help="profile this cfg (at its own size) instead of --model")
    p.add_argument("--threads", type=int, default=bc.usable_cpus())
    p.add_argument("--runs", type=int, default=20, help="timed forwards per engine")
    p.add_argument("--rounds", type=int, default=2, help="blocks per engine, alternating")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--no-openvino", action="store_true", help="leave OpenVINO out")
    p.add_argument("--nodes", action="store_true",
                   help="also list every node of OpenVINO's last timed run (name, type, kernel, status, ms)")
    a = p.parse_args(argv)
    if a.batch < 1 or a.runs < 1 or a.rounds < 1 or a.threads < 1:
        p.error("--batch, --runs, --rounds and --threads must be >= 1")
    why = pe.missing("onnxruntime")
    if why:
        print(f"ONNX Runtime cannot run: {why}", file=sys.stderr)
        return 2
    ov_why = "left out (--no-openvino)" if a.no_openvino else pe.missing("openvino")
    if ov_why:
        print(f"OpenVINO's column is empty: {ov_why}", file=sys.stderr)
    load_before = bc_loadavg()
    with tempfile.TemporaryDirectory() as d:
        net, files = build(None if a.cfg else a.model, a.cfg, a.batch, d)
        res = profile(net, files, a.threads, a.runs, max(1, min(a.rounds, a.runs)), d, with_openvino=not ov_why)
    layers = list(net.layers)
    flops = [float(l["bflops"]) * a.batch for l in layers]
    nbytes = [layer_bytes(net, i, l, a.batch) for i, l in enumerate(layers)]
    what = a.cfg or f"{a.model} {net.input_size[0]}x{net.input_size[1]}"
    ov_ver = f"OpenVINO {pe.version('openvino')}, " if not ov_why else ""
    print(f"{what}, batch {a.batch}, {a.threads} threads, {res['runs']} timed runs per engine, "
          f"ours {_core.cpu_isa()['active']} kernels, {ov_ver}ONNX Runtime {pe.version('onnxruntime')} "
          f"(outputs equal ours: worst relative error {res['worst']:.1e}); "
          f"load average before {load_before}, after {bc_loadavg()}")
    print()
    print(table(layers, res, flops, nbytes))
    print()
    print(by_type(layers, res))
    if a.nodes and res["ov"]:
        print()
        for n in res["ov_nodes"]:
            print(f"{n.name}\t{n.node_type}\t{n.exec_type}\t{'EXECUTED' if n.executed else 'not run'}\t{n.ms:.3f}")
    return 0


def bc_loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
