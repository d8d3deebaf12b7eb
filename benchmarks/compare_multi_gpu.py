"""Data-parallel training throughput on 1, 2 and 4 GPUs of one host: ours (one process per GPU,
gradients summed by NCCL in buckets during the backward) against PyTorch DDP with the same model
(the cfg built as a torch module by compare_gpu.build_torch), 64 images per GPU per step, pinned
inputs on both. Scaling efficiency = images/s on N / (N x images/s on 1).

    python benchmarks/compare_multi_gpu.py                       # yolov4-tiny 416, 1/2/4 GPUs, all columns
    python benchmarks/compare_multi_gpu.py --gpus 1,2 --columns ours:fp32,torch:fp32 --write /tmp/mg.md

Columns: ours fp32, TF32 (DARKNET_PY_TF32=1), fp16 and bf16; PyTorch DDP fp32, TF32, fp16 autocast +
GradScaler + channels_last and bf16 autocast + channels_last.
Also for ours at the largest N: the all-reduce bus bandwidth of our collective for 1 GiB (NCCL-tests'
busbw = bytes / seconds x 2 (N - 1) / N), the time one all-reduce of the model's gradients takes
alone, and the step time on 1 and on N GPUs: what the step gains on N (the all-reduce not hidden under
the backward, the loss all-reduce, the ranks' synchronization) is the difference of the last two.
Last, every rank times the same step without the all-reduce, all at once: a data-parallel step goes at
its slowest rank's pace, so the spread between ranks is loss that no communication change recovers.
Each (column, N) runs in fresh processes, one per GPU; each rank writes its figures as JSON.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_gpu as cg  # noqa: E402 (the torch model, weights copy, sized cfg and timer are shared)

COLUMNS = [("ours", "fp32"), ("ours", "tf32"), ("ours", "fp16"), ("ours", "bf16"), ("torch", "fp32"), ("torch", "tf32"),
           ("torch", "fp16"), ("torch", "bf16")]
LABELS = {("ours", "fp32"): "ours fp32", ("ours", "tf32"): "ours TF32", ("ours", "fp16"): "ours fp16",
          ("ours", "bf16"): "ours bf16", ("torch", "fp32"): "PyTorch DDP fp32", ("torch", "tf32"): "PyTorch DDP TF32",
          ("torch", "fp16"): "PyTorch DDP fp16 autocast + GradScaler + channels_last",
          ("torch", "bf16"): "PyTorch DDP bf16 autocast + channels_last"}


def rank_env() -> tuple:
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def worker_ours(args) -> dict:
    import darknet_py
    from darknet_py import _core
    from darknet_py.distributed import RankInfo, init_process_group

    rank, world = rank_env()
    device = f"cuda:{rank}" if args.kind == "cuda" else args.kind
    path = cg.sized_cfg(args.model, args.size, args.batch)
    net = darknet_py.Network(path, device=device)
    raw = net._net
    if rank == 0 and args.kind == "cuda":  # (the CPU check runs where torch is not installed)
        cg.copy_weights(cg.build_torch(path, args.size), net)
    os.unlink(path)
    if args.mode in ("fp16", "bf16"):  # half activations; the gradients all-reduced are the fp32 weights'
        net.precision = args.mode
    group = init_process_group(RankInfo(rank, world, rank), device)
    group.collective.broadcast_params(raw, 0)
    _core.set_collective(raw, group.collective, args.bucket_mb)
    rng = np.random.default_rng(rank)
    heads = list(raw.yolo_layers)
    truths = cg.truths_for(args.batch, raw.yolo_info(heads[-1])["classes"], rng)
    xb = rng.uniform(0, 1, (args.batch, 3, args.size, args.size)).astype(np.float32)
    out = {}
    xb = cg.pinned_input(raw, xb, args, out)

    step = cg.training_step(raw, xb, truths, args.batch * world, all_reduce=world > 1)
    seconds = cg.timed(step, raw.synchronize, 2, 5, args.seconds, steps=4)
    out.update(img_s=world * args.batch / seconds, step_ms=1e3 * seconds, collective=group.collective.name)
    if world > 1:
        stats = _core.reduce_stats(raw)
        out["grad_mib"], out["buckets"] = stats["bytes"] / 2 ** 20, stats["buckets"]
        out["reduce_alone_ms"] = 1e3 * _core.all_reduce_bench(group.collective, device, out["grad_mib"], 20)
        t = _core.all_reduce_bench(group.collective, device, args.busbw_mib, 10)
        out["busbw_gb_s_1gib"] = args.busbw_mib * 2 ** 20 / t * 2 * (world - 1) / world / 1e9
        # The same step without the all-reduce, every rank at once: a data-parallel step runs at its
        # slowest rank's pace, so the spread of these says how much of the loss is not communication.
        alone = cg.training_step(raw, xb, truths, args.batch * world)
        out["alone_ms"] = 1e3 * cg.timed(alone, raw.synchronize, 2, 5, args.seconds, steps=4)
    return out


def worker_torch(args) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = rank_env()
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    tf32 = args.mode != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda", rank)
    half = args.mode in ("fp16", "bf16")
    fmt = torch.channels_last if half else torch.contiguous_format
    path = cg.sized_cfg(args.model, args.size, 1)
    torch.manual_seed(0)
    model = cg.build_torch(path, args.size).to(dev, memory_format=fmt)
    os.unlink(path)
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    rng = np.random.default_rng(rank)
    xb = torch.from_numpy(rng.uniform(0, 1, (args.batch, 3, args.size, args.size)).astype(np.float32)).pin_memory()

    def upload():
        return xb.to(dev, non_blocking=True).contiguous(memory_format=fmt)

    def run(x):
        with cg.torch_autocast(torch, args.mode):
            return ddp(x)

    with torch.no_grad():
        targets = [torch.rand(h.shape, device=dev) for h in run(upload())]

    scaler = torch.amp.GradScaler("cuda", enabled=args.mode == "fp16")  # AMP's recipe for fp16

    def step():
        heads = run(upload())
        loss = sum(((h.float() - t) ** 2).sum() for h, t in zip(heads, targets))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    seconds = cg.timed(step, torch.cuda.synchronize, 2, 5, args.seconds, steps=4)
    out = {"img_s": world * args.batch / seconds,
           "versions": f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl_version(torch)}"}
    dist.destroy_process_group()
    return out


def nccl_version(torch) -> str:
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def run_column(group: str, mode: str, n: int, args) -> dict:
    """n processes of this script, one per GPU; rank 0's JSON."""
    port = 29500 + int(time.time() * 1000) % 2000
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "rank0.json")
        procs = []
        for r in range(n):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), DARKNET_PY_TF32="1" if mode == "tf32" else "0")
            # the cores shared among the ranks as `darknet_py train --gpus` shares them (distributed/launch.py)
            env.setdefault("DARKNET_PY_THREADS", str(max(1, (os.cpu_count() or 1) // n)))
            cmd = [sys.executable, __file__, "--worker", group, "--mode", mode, "--model", args.model,
                   "--size", str(args.size), "--batch", str(args.batch), "--seconds", str(args.seconds),
                   "--bucket-mb", str(args.bucket_mb), "--busbw-mib", str(args.busbw_mib), "--kind", args.kind,
                   "--ours-input", args.ours_input,
                   "--result", result]
            procs.append(subprocess.Popen(cmd, env=env))
        end = time.monotonic() + 600
        while any(p.poll() is None for p in procs) and time.monotonic() < end:
            if any(p.poll() for p in procs):  # one failed: the others would wait for it
                break
            time.sleep(0.1)
        for p in procs:
            if p.poll() is None:
                p.kill()
        codes = [p.wait() for p in procs]
        if any(codes):
            return {"error": f"exit codes {codes}"}
        with open(result) as f:
            out = json.load(f)
        if "alone_ms" in out:  # every rank's step without the all-reduce
            ranks = [out] + [json.load(open(f"{result}.{r}")) for r in range(1, n)]
            out["alone_ms"] = [r["alone_ms"] for r in ranks]
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolov4-tiny")
    ap.add_argument("--size", type=int, default=416)
    ap.add_argument("--batch", type=int, default=64, help="images per GPU per step")
    ap.add_argument("--gpus", default="1,2,4", help="GPU counts to run (default 1,2,4; those above the machine's skip)")
    ap.add_argument("--columns", default=",".join(f"{g}:{m}" for g, m in COLUMNS))
    ap.add_argument("--seconds", type=float, default=5.0, help="timing per run, at least")
    ap.add_argument("--bucket-mb", type=float, default=4.0,
                    help="our gradient buckets (default 4: yolov4-tiny has 23 MiB of gradients; PyTorch DDP: 25, its first 1)")
    ap.add_argument("--busbw-mib", type=float, default=1024.0, help="the bus-bandwidth all-reduce's size")
    ap.add_argument("--kind", default="cuda", help="cuda; cpu runs ours on CPU ranks (the script's own check)")
    ap.add_argument("--ours-input", choices=["pinned", "pageable"], default="pinned",
                    help="ours' batches in pinned memory (Net.pin_memory, as PyTorch's are; default) or plain NumPy arrays")
    ap.add_argument("--write", help="append the markdown table to this file")
    ap.add_argument("--worker", choices=["ours", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        out = (worker_ours if args.worker == "ours" else worker_torch)(args)
        rank = int(os.environ["RANK"])
        with open(args.result if rank == 0 else f"{args.result}.{rank}", "w") as f:
            json.dump(out, f)
        return 0
    import darknet_py

    gpus = [d for d in darknet_py._core.devices() if d["kind"] == "cuda" and d["found"]]
    available = len(gpus) if args.kind == "cuda" else 4
    counts = [n for n in (int(x) for x in args.gpus.split(",")) if n <= available]
    cols = [tuple(c.split(":")) for c in args.columns.split(",")]
    rows = {}
    for g, m in cols:
        for n in counts:
            rows[(g, m, n)] = r = run_column(g, m, n, args)
            print(g, m, n, json.dumps(r), flush=True)
    lines = [f"### {args.model} {args.size}, {args.batch} images per GPU per step ({gpus[0]['name'] if gpus else '?'})",
             "", "| engine | " + " | ".join(f"{n} GPU{'s' if n > 1 else ''} img/s (eff.)" for n in counts) +
             f" | all-reduce busbw {args.busbw_mib:g} MiB | gradients' all-reduce alone; step on 1 / on N |"
             " each rank's step without the all-reduce, fastest / slowest |", "|---" * (len(counts) + 4) + "|"]
    for g, m in cols:
        one = rows[(g, m, counts[0])].get("img_s") if counts and counts[0] == 1 else None
        cells = []
        for n in counts:
            r = rows[(g, m, n)]
            if "img_s" not in r:
                cells.append(r.get("error", "?"))
                continue
            eff = f" ({r['img_s'] / (n * one):.3f})" if one and n > 1 else ""
            cells.append(f"{r['img_s']:.0f}{eff}")
        big = rows[(g, m, counts[-1])] if counts else {}
        bw = f"{big['busbw_gb_s_1gib']:.0f} GB/s" if "busbw_gb_s_1gib" in big else "-"
        hide = "-"
        if "reduce_alone_ms" in big and one:
            hide = (f"{big['reduce_alone_ms']:.2f} ms ({big.get('grad_mib', 0):.0f} MiB); "
                    f"{rows[(g, m, 1)]['step_ms']:.1f} / {big['step_ms']:.1f} ms")
        spread = f"{min(big['alone_ms']):.1f} / {max(big['alone_ms']):.1f} ms" if "alone_ms" in big else "-"
        lines.append(f"| {LABELS[(g, m)]} | " + " | ".join(cells) + f" | {bw} | {hide} | {spread} |")
    versions = next((r["versions"] for r in rows.values() if "versions" in r), "")
    lines += ["", f"{versions}; ours: {darknet_py._core.nccl_status()[1]}", ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        with open(args.write, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
