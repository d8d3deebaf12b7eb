"""Our engine against OpenCV DNN 4.x, ONNX Runtime and OpenVINO on the same network, weights, input and
thread count.

    python benchmarks/compare.py [--threads N] [--models yolov4-tiny,yolov3-tiny] [--batch 1,8]
                                 [--engines ours,opencv,onnxruntime,openvino] [--rounds 5] [--runs 10]
                                 [--scaling] [--write [--out benchmarks/RESULTS.md]]
    python benchmarks/compare.py --device metal [--models ...] [--rounds 15]

With --device, our engine on that GPU device against our CPU backend instead (compare_device.py:
latency, throughput, training, video frames/s and the device's targets); it says so and exits 2 when
the device is not available.

Per model and batch, every engine computes the same network: our engine builds it from the cfg with
seeded random weights; OpenCV reads the same cfg and weights (Darknet format); ONNX Runtime and
OpenVINO run our ONNX export of it (Network.export_onnx) at that batch. Before timing, each peer's
outputs are checked against ours (peer_engines.py says how); an engine whose outputs differ, or whose
package is missing, is not timed and the output says why. Timing: each engine runs a block of --runs
forwards (fewer at batch 8: --runs / batch, at least 3), blocks alternate between the engines (the
order rotates each round) with a 0.5 s pause between blocks, --rounds rounds; the table gives the
median over all timed runs. Blocks rather than interleaved single runs: one engine's idle worker
threads then cannot steal the cores from the next engine's run.

The table: ms per batch for each engine, ours / the best peer and the target (ours <= 0.9x
the best of the three peers); 'per round' is the lowest and highest ratio of ours to that peer
within one round (their blocks seconds apart), which shows how far one run's ratio can be trusted on
a machine whose speed drifts. GFLOP/s counts the network's convolution FLOPs (Darknet's BFLOPs, times
the batch) over our median (Winograd layers count their direct-convolution FLOPs: an effective
rate); '% of peak' divides it by the FMA peak measured on the same threads (bench_common.fma_peak,
before and after the runs, the higher kept). --scaling also times our engine on 1 thread. The
table is printed; with --write, it and the machine description (with /proc/loadavg before and
after) also replace the block between the markers in RESULTS.md (or --out); the notes around it
are kept. Without --write nothing is written: a trial run leaves the recorded results alone.
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
import peer_engines as pe  # noqa: E402
from darknet_py import _core  # noqa: E402

BEGIN, END = "<!-- compare.py:begin -->", "<!-- compare.py:end -->"
TARGET = 0.9  # the CPU race's target: ours <= 0.9x the best peer
PAUSE_S = 0.5
PEERS = ("opencv", "onnxruntime", "openvino")


def load_engines(files: pe.ModelFiles, engines: List[str], threads: int, blob) -> Dict[str, pe.Runner]:
    """The engines that load and whose outputs equal ours; prints a line per engine either way."""
    ref = [o.copy() for o in files.net.forward(blob)]
    runners: Dict[str, pe.Runner] = {}
    for e in engines:
        if e == "ours":
            runners[e] = pe.load(e, files, threads)
            continue
        why = pe.missing(e)
        if why:
            print(f"  {pe.LABELS[e]}: skipped, {why}", flush=True)
            continue
        try:
            run = pe.load(e, files, threads)
            bad = pe.mismatch(e, files, ref, run(blob))
        except Exception as ex:  # noqa: BLE001 (a peer that cannot load our model: say so, race the rest)
            print(f"  {pe.LABELS[e]}: not timed, it failed to load or run the model: {ex}", flush=True)
            continue
        worst = bad.pop("worst")
        if bad:
            print(f"  {pe.LABELS[e]}: NOT TIMED, its outputs differ from ours (relative error > {pe.TOL}): "
                  + ", ".join(f"{k} {v:.2e}" for k, v in bad.items()), flush=True)
            continue
        print(f"  {pe.LABELS[e]}: outputs equal ours (worst relative error {worst:.1e} <= {pe.TOL})", flush=True)
        runners[e] = run
    return runners


def bench_model(model: bc.Model, batch: int, engines: List[str], threads: int, rounds: int, runs: int,
                scaling: bool) -> dict:
    with tempfile.TemporaryDirectory() as d:
        net, cfg, weights = bc.random_model(model, d)
        need_onnx = any(e in ("onnxruntime", "openvino") for e in engines)
        files = pe.prepare(net, cfg, weights, batch, d, need_onnx)
        blob = bc.input_blob(net, batch)
        bc.set_threads(threads)
        runners = load_engines(files, engines, threads, blob)  # every engine has read its files now
    if model.rounds:  # yolov4: slow, one run
        rounds, per_block = model.rounds, 1
    else:
        per_block = runs if batch == 1 else max(3, runs // batch)

    def block(run) -> List[float]:
        out = []
        for _ in range(per_block):
            t = time.perf_counter()
            run(blob)
            out.append(time.perf_counter() - t)
        return out

    for run in runners.values():  # first runs allocate buffers and pick kernels
        run(blob), run(blob)
    times: Dict[str, List[float]] = {e: [] for e in runners}
    round_ms: Dict[str, List[float]] = {e: [] for e in runners}  # each round's block median
    if scaling:
        times["ours 1 thread"] = []
    names = list(runners)
    for r in range(rounds):
        for e in names[r % len(names):] + names[:r % len(names)]:  # rotate: no engine always follows another
            b = block(runners[e])
            times[e] += b
            round_ms[e].append(statistics.median(b) * 1e3)
            time.sleep(PAUSE_S)
        if scaling:
            _core.set_threads(1)
            runners["ours"](blob)  # the pool restarts: a warm-up run at the new count
            times["ours 1 thread"] += block(runners["ours"])
            _core.set_threads(threads)
            time.sleep(PAUSE_S)
    res = {e: statistics.median(t) * 1e3 for e, t in times.items()}
    return {"ms": res, "round_ms": round_ms, "gflop": net._net.total_bflops() * batch, "runs": per_block * rounds}


def round_ratios(row: dict, peer: str) -> List[float]:
    """ours / peer within each round: the two blocks ran seconds apart, so a slow drift of the machine
    (other tenants of a VM, clock changes) cancels out; their spread shows what one run's ratio is worth."""
    rm = row["round_ms"]  # bench_model keeps a list for every engine it timed
    return [o / p for o, p in zip(rm["ours"], rm[peer])]


def table(rows: List[dict], engines: List[str], peak: float, scaling: bool) -> str:
    peers = [e for e in engines if e in PEERS]
    head = (["model", "input", "batch", "runs"] + [f"{pe.LABELS[e]} ms" for e in engines]
            + (["ours / best peer", "per round", f"target <= {TARGET}"] if peers else [])
            + ["GFLOP", "ours GFLOP/s", "% of peak"])
    if scaling:
        head += ["ours 1-thread ms", "speed-up"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ms = r["ms"]
        cells = [r["model"], f"{r['size']}x{r['size']}", str(r["batch"]), str(r["runs"])]
        cells += [f"{ms[e]:.1f}" if e in ms else "not timed" for e in engines]
        if peers:
            timed = {e: ms[e] for e in peers if e in ms}
            if timed and "ours" in ms:
                best = min(timed, key=timed.get)
                ratio = ms["ours"] / timed[best]
                per_round = round_ratios(r, best)
                spread = f"{min(per_round):.2f}-{max(per_round):.2f}" if len(per_round) > 1 else "-"
                cells += [f"{ratio:.2f} ({pe.LABELS[best]})", spread, "met" if ratio <= TARGET else "missed"]
            else:
                cells += ["-", "-", "-"]
        gfs = r["gflop"] / (ms["ours"] / 1e3) if "ours" in ms else 0
        cells += [f"{r['gflop']:.2f}", f"{gfs:.0f}", f"{100 * gfs / peak:.0f}%"]
        if scaling:
            one = ms["ours 1 thread"]
            cells += [f"{one:.1f}", f"{one / ms['ours']:.2f}x"]
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


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=bc.usable_cpus(),
                   help="threads for every engine (default: all usable)")
    p.add_argument("--models", default=",".join(m.name for m in bc.MODELS), help="comma-separated model names")
    p.add_argument("--batch", default="1", help="comma-separated batch sizes (e.g. 1,8)")
    p.add_argument("--engines", default="ours," + ",".join(PEERS), help="comma-separated; 'ours' is always timed")
    p.add_argument("--rounds", type=int, default=5, help="blocks per engine (yolov4 always runs once)")
    p.add_argument("--runs", type=int, default=10, help="timed runs per block at batch 1 (batch b: runs/b, >= 3)")
    p.add_argument("--scaling", action="store_true", help="also time our engine on 1 thread")
    p.add_argument("--write", action="store_true", help="also write the table into --out (default: print only)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "RESULTS.md"),
                   help="with --write: the results file (default: benchmarks/RESULTS.md)")
    p.add_argument("--no-write", action="store_true", help=argparse.SUPPRESS)  # the old default, still accepted
    p.add_argument("--device", help="compare our engine on this GPU device (e.g. metal) with our CPU instead")
    a = p.parse_args(argv)
    if a.device:
        from compare_device import run

        return run(a.device, a.models, a.rounds)
    models = [bc.find_model(m.strip()) for m in a.models.split(",") if m.strip()]
    batches = [int(b) for b in a.batch.split(",") if b.strip()]
    engines = ["ours"] + [e.strip() for e in a.engines.split(",") if e.strip() and e.strip() != "ours"]
    unknown = [e for e in engines if e not in pe.ENGINES]
    if unknown or any(b < 1 for b in batches):
        p.error(f"unknown engines {unknown} (choose from {', '.join(pe.ENGINES)})" if unknown else "batch must be >= 1")

    load_before = loadavg()
    print(f"load average before: {load_before}", flush=True)
    peak = bc.fma_peak(a.threads)
    print(f"FMA peak: {peak.gflops:.0f} GFLOP/s ({peak.method})", flush=True)
    rows = []
    for m in models:
        for b in batches:
            print(f"{m.name} {m.size} batch {b}:", flush=True)
            r = bench_model(m, b, engines, a.threads, a.rounds, a.runs, a.scaling)
            r.update(model=m.name, size=m.size, batch=b)
            rows.append(r)
            print("  " + ", ".join(f"{pe.LABELS.get(e, e)} {v:.1f} ms" for e, v in r["ms"].items()), flush=True)
    # measured again at the end, the higher reading kept: a reading taken while another process
    # shares the cores is low, and the peak is what the machine can do
    again = bc.fma_peak(a.threads)
    if again.gflops > peak.gflops:
        peak = again
    load_after = loadavg()
    print(f"FMA peak (best of the readings before and after): {peak.gflops:.0f} GFLOP/s", flush=True)
    print(f"load average after: {load_after}", flush=True)
    tab = table(rows, engines, peak.gflops, a.scaling)
    print()
    print(tab)
    if a.write and not a.no_write:
        desc = bc.machine_description(a.threads)
        desc["darknet_py CPU kernels"] = str(_core.cpu_isa())
        for e in engines:
            desc[f"{pe.LABELS[e]} version"] = pe.version(e)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        cmd = (f"python benchmarks/compare.py --write --threads {a.threads} --models {a.models} --batch {a.batch} "
               f"--engines {','.join(engines)} --rounds {a.rounds} --runs {a.runs}{' --scaling' if a.scaling else ''}")
        block = "\n".join(
            [f"Measured {stamp} by `{cmd}` (medians over blocks of runs, blocks alternating between engines).", ""]
            + [f"- {k}: {v}" for k, v in desc.items()]
            + [f"- FMA peak: {peak.gflops:.0f} GFLOP/s ({peak.method})",
               f"- load average (1, 5, 15 min) before: {load_before}; after: {load_after}", "", tab])
        write_results(Path(a.out), block)
        print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
