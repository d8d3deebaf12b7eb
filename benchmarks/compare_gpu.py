"""Ours on CUDA against PyTorch on the same GPU, cfg and seeded weights, each in the precisions its
users run it in: ours fp32, TF32, and fp16 / bf16 activations and activation gradients (fp32 weights
and optimizer, fp16 with dynamic loss scaling); PyTorch fp32, TF32, and bf16 autocast with channels_last.

    python benchmarks/compare_gpu.py                                   # the five models, every column
    python benchmarks/compare_gpu.py --models yolov4-tiny --write /tmp/gpu.md
    python benchmarks/compare_gpu.py --columns ours:fp32,torch:bf16   # a subset of the columns
    python benchmarks/compare_gpu.py --columns ours:tf32,ours_half:fp16,ours_half:bf16,torch:bf16

PyTorch is a benchmark dependency only: the script builds each cfg as a plain torch.nn module (this
file, `TorchDarknet`), copies the same seeded weights into both engines and first checks that the
heads agree (max relative difference printed), then times, each engine and precision in its own
subprocess (so that peak memory is each one's own and neither's caching allocator disturbs the other):
  - batch-1 latency: ours with and without recorded forwards (CUDA graphs); PyTorch eager and captured
    in a CUDA graph. From a host input to the heads on the GPU, synchronized.
  - batch-64 forward, images/s.
  - batch-64 training, images/s: ours forward_train + Darknet's YOLO loss + backward + SGD; PyTorch
    forward + an equal-cost loss on the heads (squared error against a fixed target, elementwise as
    Darknet's loss, in fp32) + backward + SGD with momentum and weight decay. Timed in blocks of 4 steps
    with one synchronization each, as a training loop runs (ours reads each step's loss statistics
    after the next step's update is queued, as `train` does; PyTorch does not read its loss), so the
    next batch's upload may overlap the last step's backward.
  - peak GPU memory of the training run: ours the pool's peak reservation, PyTorch
    torch.cuda.max_memory_reserved.
PyTorch's input is what a DataLoader with pin_memory=True hands it: a pinned host tensor, copied with
non_blocking=True; its figures with the batch already on the GPU are reported beside them. Ours read
NumPy batches in pinned memory (`Net.pin_memory`, as PyTorch's are), uploaded by DMA alone;
`--ours-input pageable` reads plain NumPy arrays through the engine's pinned staging buffers instead
(a CPU copy first, whose speed depends on the host).
Floors: FLOPs over the fp32, TF32 and bf16 dense peaks (training: 3x the forward FLOPs), and the
activations' bytes (each layer's output written once and read once) over the memory bandwidth.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODELS = {"yolov4-tiny": 416, "yolov3-tiny": 416, "yolov7-tiny": 416, "yolov4-tiny-3l": 416, "yolov4": 608}
# yolov4 at 608 does not train at batch 64 in 80 GB (neither engine): it trains at batch 16
TRAIN_BATCH = {"yolov4": 16}
# dense peaks (fp32 without tensor cores, TF32 and bf16 tensor cores) and memory bandwidth of the GPUs we
# have measured on, from NVIDIA's data sheets (the sparse tensor figures are twice these)
PEAKS = {"H100 80GB HBM3": (66.9e12, 494.7e12, 989.4e12, 3.35e12), "H100 PCIe": (51.2e12, 378e12, 756e12, 2.0e12),
         "H200": (66.9e12, 494.7e12, 989.4e12, 4.8e12)}


# ---- the cfg as a torch module ---------------------------------------------------------------------
def read_cfg(path: str):
    sections = []
    for raw in Path(path).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            sections.append({"type": line.strip("[]")})
        elif "=" in line:
            k, v = line.split("=", 1)
            sections[-1][k.strip()] = v.strip()
    return sections


def build_torch(path: str, size: int):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def act(name, x):
        if name == "leaky":
            return F.leaky_relu(x, 0.1)
        if name == "mish":
            return x * torch.tanh(F.softplus(x))
        if name == "logistic":
            return torch.sigmoid(x)
        if name == "swish":
            return x * torch.sigmoid(x)
        if name == "relu":
            return F.relu(x)
        if name == "linear":
            return x
        raise ValueError(f"activation {name} not in this benchmark")

    class TorchDarknet(nn.Module):
        def __init__(self):
            super().__init__()
            secs = read_cfg(path)
            self.net, self.layers = secs[0], secs[1:]
            self.mods = nn.ModuleList()
            channels, c = [], int(self.net.get("channels", 3))
            for i, s in enumerate(self.layers):
                t = s["type"]
                m = nn.Module()
                if t == "convolutional":
                    f, k = int(s["filters"]), int(s.get("size", 1))
                    stride, groups = int(s.get("stride", 1)), int(s.get("groups", 1))
                    pad = k // 2 if int(s.get("pad", 0)) else int(s.get("padding", 0))
                    bn = int(s.get("batch_normalize", 0))
                    m.conv = nn.Conv2d(c, f, k, stride, pad, groups=groups, bias=not bn)
                    if bn:
                        m.bn = nn.BatchNorm2d(f, eps=1e-5, momentum=0.01)
                    c = f
                elif t == "route":
                    idx = [int(v) for v in s["layers"].split(",")]
                    idx = [j if j >= 0 else i + j for j in idx]
                    s["_idx"] = idx
                    c = sum(channels[j] for j in idx) // int(s.get("groups", 1))
                elif t == "shortcut":
                    j = int(s["from"])
                    s["_from"] = j if j >= 0 else i + j
                elif t not in ("maxpool", "upsample", "yolo"):
                    raise ValueError(f"layer type {t} not in this benchmark")
                channels.append(c)
                self.mods.append(m)

        def forward(self, x):
            outs, heads = [], []
            for i, (s, m) in enumerate(zip(self.layers, self.mods)):
                t = s["type"]
                if t == "convolutional":
                    x = m.conv(x)
                    if hasattr(m, "bn"):
                        x = m.bn(x)
                    x = act(s.get("activation", "logistic"), x)
                elif t == "maxpool":
                    k, st = int(s.get("size", s.get("stride", 1))), int(s.get("stride", 1))
                    p = int(s.get("padding", k - 1))  # Darknet: `padding` total, top-left gets half
                    x = F.max_pool2d(F.pad(x, (p // 2, p - p // 2, p // 2, p - p // 2), value=float("-inf")), k, st)
                elif t == "route":
                    x = torch.cat([outs[j] for j in s["_idx"]], 1)
                    g = int(s.get("groups", 1))
                    if g > 1:
                        x = x.chunk(g, 1)[int(s.get("group_id", 0))]
                elif t == "shortcut":
                    x = act(s.get("activation", "linear"), x + outs[s["_from"]])
                elif t == "upsample":
                    x = F.interpolate(x, scale_factor=int(s.get("stride", 2)), mode="nearest")
                elif t == "yolo":
                    x = yolo_activate(x, s)
                    heads.append(x)
                outs.append(x)
            return heads

    def yolo_activate(x, s):
        # Darknet's forward_yolo_layer: logistic on x, y, objectness and classes (not with
        # new_coords, whose cfgs activate in the conv before), then x, y scaled by scale_x_y
        n, c, h, w = x.shape
        a = len(s["mask"].split(","))
        x = x.view(n, a, c // a, h, w)
        if not int(s.get("new_coords", 0)):
            x = torch.cat([torch.sigmoid(x[:, :, :2]), x[:, :, 2:4], torch.sigmoid(x[:, :, 4:])], 2)
        sc = float(s.get("scale_x_y", 1))
        if sc != 1:
            x = torch.cat([x[:, :, :2] * sc - 0.5 * (sc - 1), x[:, :, 2:]], 2)
        return x.reshape(n, c, h, w)

    torch.manual_seed(0)
    model = TorchDarknet()
    with torch.no_grad():  # batchnorm statistics that are not the identity, so folding is exercised
        for m in model.mods:
            if hasattr(m, "bn"):
                m.bn.weight.uniform_(0.5, 1.5)
                m.bn.bias.uniform_(-0.1, 0.1)
                m.bn.running_mean.uniform_(-0.1, 0.1)
                m.bn.running_var.uniform_(0.5, 1.5)
    return model


def copy_weights(model, net) -> None:
    """The torch module's parameters into our network, in Darknet's names."""
    for i, m in enumerate(model.mods):
        if not hasattr(m, "conv"):
            continue
        p = {"weights": m.conv.weight.detach().cpu().numpy()}
        if hasattr(m, "bn"):
            p.update(biases=m.bn.bias, scales=m.bn.weight, rolling_mean=m.bn.running_mean,
                     rolling_variance=m.bn.running_var)
            p = {k: (v if isinstance(v, np.ndarray) else v.detach().cpu().numpy()) for k, v in p.items()}
        else:
            p["biases"] = m.conv.bias.detach().cpu().numpy()
        want = net.params(i)
        net.set_params(i, {k: np.ascontiguousarray(v, np.float32).reshape(want[k].shape) for k, v in p.items()})


def sized_cfg(name: str, size: int, batch: int) -> str:
    """The shipped cfg at `size` with batch = subdivisions-free `batch` (a temporary file)."""
    import tempfile

    lines = []
    for line in (REPO / "cfg" / f"{name}.cfg").read_text().splitlines():
        k = line.split("=", 1)[0].strip()
        if k in ("width", "height"):
            line = f"{k}={size}"
        elif k == "batch":
            line = f"batch={batch}"
        elif k == "subdivisions":
            line = "subdivisions=1"
        lines.append(line)
    fd, path = tempfile.mkstemp(suffix=f"-{name}.cfg")
    os.write(fd, "\n".join(lines).encode())
    os.close(fd)
    return path


# ---- timing ------------------------------------------------------------------------------------
def timed(fn, sync, warmup: int, min_runs: int, min_s: float, steps: int = 1) -> float:
    """Median seconds per call over at least min_runs blocks of `steps` calls and min_s seconds, synchronized
    once per block. steps > 1 times calls as a training loop runs them: the next step's host work (and
    upload) may overlap the last step's GPU work."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / steps)
    return float(np.median(times))


def truths_for(batch: int, classes: int, rng):
    return [np.array([[*rng.uniform(0.2, 0.8, 2), *rng.uniform(0.05, 0.3, 2), rng.integers(classes)]
                      for _ in range(4)], np.float32) for _ in range(batch)]


def run_ours(name: str, size: int, args) -> dict:
    import darknet_py

    rng = np.random.default_rng(0)
    out = {}
    path = sized_cfg(name, size, 1)
    net = darknet_py.Network(path, device=args.device)
    raw = net._net
    model = build_torch(path, size)
    # ours in half (the "ours_half" columns): activations in fp16 / bf16 after the fp32 weights are in
    precision = args.mode if args.mode in ("fp16", "bf16") else "fp32"
    copy_weights(model, net)
    net.precision = precision
    heads = list(raw.yolo_layers)
    out["bflops"] = raw.total_bflops()
    x1 = rng.uniform(0, 1, (1, 3, size, size)).astype(np.float32)
    import torch  # the heads must agree with PyTorch's before any figure counts

    with torch.no_grad():
        want = [h.numpy() for h in model.eval()(torch.from_numpy(x1))]
    got = raw.forward(x1, heads)
    out["max_rel_diff_vs_torch"] = max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-12))
                                       for g, w in zip(got, want))
    sync = raw.synchronize
    x1 = pinned_input(raw, x1, args, out)  # as PyTorch's batch-1 input is
    for graphs in (True, False):
        raw.record_forwards = graphs
        out[f"b1_ms_{'graph' if graphs else 'eager'}"] = 1e3 * timed(lambda: raw.forward(x1, []), sync, 5, 30, 1.0)
    raw.record_forwards = True
    xb = rng.uniform(0, 1, (args.batch, 3, size, size)).astype(np.float32)
    xb = pinned_input(raw, xb, args, out)
    out["fwd_img_s"] = args.batch / timed(lambda: raw.forward(xb, []), sync, 3, 10, 2.0)
    out["layer_out_floats"] = sum(int(np.prod(s)) for s in layer_output_shapes(raw))
    os.unlink(path)
    return out


def pinned_input(raw, xb, args, out: dict):
    """xb in pinned memory for ours' uploads (--ours-input pinned), as PyTorch's input is."""
    pinned = raw.pin_memory(xb) if args.ours_input == "pinned" else xb
    out["input_pinned"] = pinned is not xb
    return pinned


def training_step(raw, xb, truths, update_batch: int, all_reduce: bool = False):
    """Ours' training step as `train` runs it (training/queued_step.py): forward_train, the YOLO loss,
    backward and SGD queued whole (fp16: the overflow check and skip on the device), each step's loss
    statistics read after the next update is queued, and its update's check after the next step's
    statistics."""
    pending, updates = [], []

    def step():
        raw.forward_train(xb, [])
        queued = raw.queue_yolo_loss(truths)
        raw.backward(all_reduce=all_reduce)
        update = raw.queue_update(1e-4, update_batch)
        if pending:
            pending.pop().read()
        if updates:
            updates.pop().read()
        pending.append(queued)
        updates.append(update)

    return step


def run_ours_train(name: str, size: int, args) -> dict:
    """In a process of its own, so that the pool's peak is the training run's."""
    import darknet_py

    rng = np.random.default_rng(0)
    batch = TRAIN_BATCH.get(name, args.batch)
    path = sized_cfg(name, size, batch)  # the cfg's batch is Darknet's loss normalisation
    net = darknet_py.Network(path, device=args.device)
    raw = net._net
    copy_weights(build_torch(path, size), net)
    os.unlink(path)
    net.precision = args.mode if args.mode in ("fp16", "bf16") else "fp32"  # the ours_half columns
    heads = list(raw.yolo_layers)
    truths = truths_for(batch, raw.yolo_info(heads[-1])["classes"], rng)
    xb = rng.uniform(0, 1, (batch, 3, size, size)).astype(np.float32)
    out = {}
    xb = pinned_input(raw, xb, args, out)

    step = training_step(raw, xb, truths, batch)
    img_s = batch / timed(step, raw.synchronize, 2, 3, 3.0, steps=4)
    # fp16: a step skipped for overflow costs less than one applied; few may be, or the figure flatters
    return {**out, "train_img_s": img_s, "peak_train_bytes": raw.memory_stats()["peak_reserved"],
            "skipped_steps": raw.skipped_steps}


def layer_output_shapes(raw):
    return [tuple(layer["output"]) for layer in raw.layers()]


def torch_autocast(torch, mode: str):
    """The autocast a PyTorch user runs `mode` under: float16 or bfloat16 for "fp16" / "bf16", off otherwise
    (compare_multi_gpu.py's DDP side shares it)."""
    return torch.autocast("cuda", dtype=torch.float16 if mode == "fp16" else torch.bfloat16,
                          enabled=mode in ("fp16", "bf16"))


def run_torch(name: str, size: int, args) -> dict:
    """PyTorch as its users run it (args.mode): inputs in pinned host memory copied with non_blocking=True
    (what a DataLoader with pin_memory=True hands over), cudnn.benchmark on; "fp32" with TF32 off,
    "tf32" with TF32 on, "bf16" under autocast(bfloat16) with the model and inputs channels_last, "fp16"
    the same under autocast(float16), training through a GradScaler (AMP's recipe for fp16)."""
    import torch

    tf32 = args.mode != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    half = args.mode in ("fp16", "bf16")
    fmt = torch.channels_last if half else torch.contiguous_format
    path = sized_cfg(name, size, 1)
    model = build_torch(path, size).to(dev, memory_format=fmt)
    os.unlink(path)
    rng = np.random.default_rng(0)
    out = {}
    sync = torch.cuda.synchronize

    def upload(pinned):
        return pinned.to(dev, non_blocking=True).contiguous(memory_format=fmt)

    def run(x):
        with torch_autocast(torch, args.mode):
            return model(x)

    x1 = torch.from_numpy(rng.uniform(0, 1, (1, 3, size, size)).astype(np.float32)).pin_memory()
    model.eval()
    with torch.no_grad():
        out["b1_ms_eager"] = 1e3 * timed(lambda: run(upload(x1)), sync, 5, 30, 1.0)
        static_in = upload(x1)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                run(static_in)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run(static_in)

        def replay():
            static_in.copy_(x1, non_blocking=True)
            graph.replay()

        out["b1_ms_graph"] = 1e3 * timed(replay, sync, 5, 30, 1.0)
        xb = torch.from_numpy(rng.uniform(0, 1, (args.batch, 3, size, size)).astype(np.float32)).pin_memory()
        out["fwd_img_s"] = args.batch / timed(lambda: run(upload(xb)), sync, 3, 10, 2.0)
        resident = upload(xb)
        out["fwd_img_s_resident"] = args.batch / timed(lambda: run(resident), sync, 3, 10, 2.0)
    graph = resident = None  # freed before the training run's peak is taken
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model.train()
    xt = xb[:TRAIN_BATCH.get(name, args.batch)]
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    with torch.no_grad():
        targets = [t.uniform_(0, 1) for t in (h.new_empty(h.shape, dtype=torch.float32) for h in run(upload(xt)))]

    scaler = torch.amp.GradScaler("cuda", enabled=args.mode == "fp16")

    def step(x):
        heads = run(x)
        loss = sum(((h.float() - t) ** 2).sum() for h, t in zip(heads, targets))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    out["train_img_s"] = len(xt) / timed(lambda: step(upload(xt)), sync, 2, 3, 3.0, steps=4)
    out["peak_train_bytes"] = torch.cuda.max_memory_reserved()
    resident = upload(xt)
    out["train_img_s_resident"] = len(xt) / timed(lambda: step(resident), sync, 2, 3, 3.0, steps=4)
    out["versions"] = f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
    return out


WORKERS = {"ours": run_ours, "ours_train": run_ours_train, "torch": run_torch}
# the columns: (worker group, mode); ours in fp32 and with TF32 allowed (DARKNET_PY_TF32=1), ours with
# fp16 / bf16 activations and activation gradients (PRECISION.md)
COLUMNS = [("ours", "fp32"), ("ours", "tf32"), ("ours_half", "fp16"), ("ours_half", "bf16"), ("torch", "fp32"),
           ("torch", "tf32"), ("torch", "fp16"), ("torch", "bf16")]
LABELS = {("ours", "fp32"): "ours fp32", ("ours", "tf32"): "ours TF32", ("ours_half", "fp16"): "ours fp16",
          ("ours_half", "bf16"): "ours bf16", ("torch", "fp32"): "PyTorch fp32", ("torch", "tf32"): "PyTorch TF32",
          ("torch", "fp16"): "PyTorch fp16 autocast + GradScaler + channels_last",
          ("torch", "bf16"): "PyTorch bf16 autocast + channels_last"}
GROUP_WORKERS = {"ours": ["ours", "ours_train"], "ours_half": ["ours", "ours_train"], "torch": ["torch"]}


# ---- the table ----------------------------------------------------------------------------------
def gpu_facts():
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                       capture_output=True, text=True).stdout.strip().splitlines()
    name, driver = (q[0].split(", ") + ["?"])[:2] if q else ("?", "?")
    peak = next((v for k, v in PEAKS.items() if k in name), (None, None, None, None))
    return name, driver, peak


def run_column(model: str, group: str, mode: str, args) -> dict:
    """One column's figures for one model, each worker in a subprocess of its own."""
    res = {}
    for worker in GROUP_WORKERS[group]:
        cmd = [sys.executable, __file__, "--worker", worker, "--model", model, "--batch", str(args.batch),
               "--device", args.device, "--mode", mode, "--ours-input", args.ours_input]
        env = {**os.environ, "DARKNET_PY_TF32": "1" if mode == "tf32" else "0"}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode:
            print(f"{model} {worker} {mode} failed:\n{p.stderr[-3000:]}", file=sys.stderr)
            return {}
        res.update(json.loads(p.stdout.strip().splitlines()[-1]))
        print(model, worker, mode, res, file=sys.stderr)
    return res


def table(title: str, rows, cols, key: str, cell, best, ratio_note: str, floor=None) -> list:
    """A markdown table: a row per model, a cell per column (n/a where a column has no `key` figure, such
    as training in half), then ours' best / PyTorch's best."""
    head = ["model"] + [LABELS[c] for c in cols] + [f"ours / PyTorch ({ratio_note})"] + (["floor"] if floor else [])
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, res in rows:
        cells = [(cell(res[c]) if key in res[c] else "n/a") if res.get(c) else "failed" for c in cols]
        ours = [res[c] for c in cols if c[0].startswith("ours") and res.get(c) and key in res[c]]
        theirs = [res[c] for c in cols if c[0] == "torch" and res.get(c) and key in res[c]]
        ratio = f"{best(ours) / best(theirs):.2f}" if ours and theirs else "n/a"
        lines.append("| " + " | ".join([model] + cells + [ratio] + ([floor(res)] if floor else [])) + " |")
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: all five)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--columns", default=",".join(f"{g}:{m}" for g, m in COLUMNS),
                    help="which engine:precision columns to run (default: all)")
    ap.add_argument("--write", help="write the markdown tables to this file")
    ap.add_argument("--ours-input", choices=["pinned", "pageable"], default="pinned",
                    help="ours' batches: NumPy arrays in pinned memory (Net.pin_memory, as PyTorch's are; default) or "
                         "plain ones, copied into the engine's staging buffers first")
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args.model, MODELS[args.model], args)))
        return 0
    cols = [tuple(c.split(":")) for c in args.columns.split(",")]
    name, driver, (fp32_peak, tf32_peak, bf16_peak, bw) = gpu_facts()
    rows, versions = [], ""
    for model in args.models.split(","):
        res = {c: run_column(model, *c, args) for c in cols}
        versions = next((r["versions"] for r in res.values() if r.get("versions")), versions)
        rows.append((model, res))

    def bflops(res):
        return next((r["bflops"] for r in res.values() if r.get("bflops")), 0) * 1e9  # a multiply-add = 2

    def floors(res, passes):
        """images/s at the fp32, TF32 and bf16 tensor peaks; then at the memory bandwidth with every layer's
        output written and read once per pass in 4-byte and in 2-byte storage"""
        f = bflops(res) * passes
        flops = " / ".join(f"{pk / f:.0f}" if pk and f else "?" for pk in (fp32_peak, tf32_peak, bf16_peak))
        floats = next((r["layer_out_floats"] for r in res.values() if r.get("layer_out_floats")), 0)
        traffic = " / ".join(f"{bw / (floats * size * 2 * passes):.0f}" if bw and floats else "?" for size in (4, 2))
        return f"{flops}; {traffic}"

    out = [f"# Ours (CUDA) vs PyTorch on {name}", "",
           f"GPU: {name}, driver {driver}; {versions}; batch {args.batch} for forward and training (yolov4: training at "
           f"batch {TRAIN_BATCH['yolov4']}); `python benchmarks/compare_gpu.py`. PyTorch's inputs come from pinned host "
           "memory with non-blocking copies and `cudnn.benchmark` on; its figure with the batch already on the GPU is in "
           "parentheses. Ours read NumPy arrays, " + ("pinned by `Net.pin_memory`" if args.ours_input == "pinned" else
           "pageable, through our pinned staging") + " (uploaded ahead in training). Ratios: the best of "
           "ours over the best of PyTorch's columns. Floors: images/s at the fp32 / TF32 / bf16 dense tensor peaks "
           "(training: 3x the forward FLOPs), then at the memory bandwidth (each layer's output written and read once, "
           "three times in training) in fp32 / half storage.", ""]
    out += table("Training, images/s", rows, cols, "train_img_s",
                 lambda r: f"{r['train_img_s']:.0f}" + (f" ({r['train_img_s_resident']:.0f})" if "train_img_s_resident" in r else ""),
                 lambda rs: max(r["train_img_s"] for r in rs), "higher is better", lambda res: floors(res, 3))
    out += table("Forward, batch 64, images/s", rows, cols, "fwd_img_s",
                 lambda r: f"{r['fwd_img_s']:.0f}" + (f" ({r['fwd_img_s_resident']:.0f})" if "fwd_img_s_resident" in r else ""),
                 lambda rs: max(r["fwd_img_s"] for r in rs), "higher is better", lambda res: floors(res, 1))
    out += table("Batch-1 latency, host input to heads, CUDA graph (eager) ms", rows, cols, "b1_ms_graph",
                 lambda r: f"{r['b1_ms_graph']:.2f} ({r['b1_ms_eager']:.2f})",
                 lambda rs: 1 / min(r["b1_ms_graph"] for r in rs), "speed: PyTorch ms / ours ms")
    out += table("Peak training memory, GiB", rows, cols, "peak_train_bytes", lambda r: f"{r['peak_train_bytes'] / 2**30:.1f}",
                 lambda rs: 1 / min(r["peak_train_bytes"] for r in rs), "PyTorch's least / ours' least")
    diffs = ", ".join(f"{m} {next((r['max_rel_diff_vs_torch'] for r in res.values() if 'max_rel_diff_vs_torch' in r), float('nan')):.1e}"
                      for m, res in rows)
    out += [f"Heads, ours against PyTorch fp32 at batch 1 (max relative difference): {diffs}.", ""]
    half = "; ".join(f"{m} {LABELS[c]} {res[c]['max_rel_diff_vs_torch']:.1e}" for m, res in rows for c in cols
                     if c[0] == "ours_half" and res.get(c))
    if half:
        out += [f"Heads in half, against PyTorch fp32 at batch 1 (max relative difference): {half}.", ""]
    skipped = "; ".join(f"{m} {res[c]['skipped_steps']}" for m, res in rows for c in cols
                        if c == ("ours_half", "fp16") and res.get(c) and "skipped_steps" in res[c])
    if skipped:
        out += [f"fp16 training steps skipped for overflow while timed (loss scaling): {skipped}.", ""]
    text = "\n".join(out)
    print(text)
    if args.write:
        Path(args.write).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
