"""Ours on CUDA against PyTorch on the same GPU: the same cfg and seeded weights, each engine in the
precisions its users run it in. PyTorch is a benchmark dependency only (`--help` and `--merge` need none).

Columns (`--columns group:precision,...`):
  ours:tf32, ours:fp32            ours in fp32 with TF32 allowed (DARKNET_PY_TF32=1) / not allowed
  ours_half:fp16, ours_half:bf16  ours with fp16 / bf16 activations and activation gradients (fp32 weights
                                  and optimizer; fp16 with dynamic loss scaling)
  torch:<p>                       PyTorch eager
  torch_compile:<p>               torch.compile(mode="default")
  torch_max_autotune:<p>          torch.compile(mode="max-autotune"): Triton autotuning and CUDA graphs
  PyTorch's <p>: fp16 (autocast float16, GradScaler in training) and bf16 (autocast bfloat16), both with
  the model and inputs channels_last; tf32 and fp32 (TF32 off) in the contiguous format.
Default: ours_half:fp16,ours_half:bf16,ours:tf32 and PyTorch's fp16 and bf16 in eager, torch_compile and
torch_max_autotune. The fp32 and tf32 columns of PyTorch and ours:fp32 run only when named.

How PyTorch runs: the cfg as a plain torch.nn module (`build_torch`) written with PyTorch's own ops
(nn.Conv2d, nn.BatchNorm2d, F.leaky_relu(x, 0.1), F.mish, F.silu for swish, torch.sigmoid, F.relu,
F.max_pool2d(padding=p // 2) for Darknet's total padding p, with an F.pad(-inf) first only where p is odd
and Darknet's extra bottom/right row is read, F.interpolate(nearest), torch.cat). Both engines get the
same weights; ours' heads are checked against PyTorch's fp32 heads, the compiled heads against eager
PyTorch's in the same precision (max relative differences printed). PyTorch's inputs are pinned host tensors copied with non_blocking=True (what a DataLoader with
pin_memory=True hands over), cudnn.benchmark on; in parentheses its figures with the batch already on the
GPU. Ours read NumPy batches in pinned memory (`Net.pin_memory`); `--ours-input pageable` reads plain
arrays through the engine's pinned staging buffers instead.
torch.compile: dynamic=False with automatic dynamic shapes off, so a batch-size change recompiles (the
recompile limit raised to 64); a fresh Inductor/Triton cache per worker, so each compile is cold. Eval:
`torch.compile(autocast + model)`, first at batch 1, then at batch 64. Training, in a worker of its own:
`torch.compile(autocast + model + loss)`, its backward compiled by AOTAutograd; the SGD step and the
GradScaler stay eager. max-autotune: `torch.compiler.cudagraph_mark_step_begin()` before every call,
gradients set to None before each step's graph replays, no output held across calls. compile_s_* = the
first call's wall time (synchronized) at that shape; the tables' footnotes give them.
`--compile-budget S` (default 420): the seconds a compiling worker's compiles may take together (eval:
batch 1 and batch 64); it is killed after S + 120 s and its cells say "no compile within S s" (a worker
that fails: "failed: <its last error line>"), its figures from before that kept.

Figures, each engine, column and phase (forward; training) in a subprocess of its own:
  - batch-1 latency, from the host input to the heads on the GPU, synchronized: ours with recorded
    forwards (CUDA graphs) and without; PyTorch eager captured in a CUDA graph and not; compiled columns
    their compiled call (max-autotune: CUDA graphs), each including the pinned input's upload.
  - batch-64 forward, images/s.
  - training, images/s (yolov4: batch 16): ours forward_train + Darknet's YOLO loss + backward + SGD as
    `train` queues them; PyTorch forward + an equal-cost loss on the heads (squared error against a fixed
    target, elementwise as Darknet's loss, in fp32) + backward + SGD with momentum and weight decay.
    Timed in blocks of 4 steps with one synchronization each, as a training loop runs.
  - peak training memory: ours the pool's peak reservation; PyTorch torch.cuda.max_memory_reserved over
    the timed steps (after the first steps' compiling / cudnn benchmarking and an empty_cache).
Floors: convolution FLOPs over the fp32, TF32 and bf16 dense peaks (training 3x the forward FLOPs), and
the activations' bytes (each layer's output written once and read once) over the memory bandwidth.

Runnable in pieces (one command may be limited in time): `--save-json FILE` writes every (model,
column, phase) result of this call as it comes; `--phases fwd` / `--phases train` runs one phase;
`--merge A.json,B.json` builds the tables from saved files without running anything (later files win
per model, column and phase), with the machine, versions, dates and commands of every piece.

    python benchmarks/compare_gpu.py --models yolov4-tiny --write /tmp/gpu.md
    python benchmarks/compare_gpu.py --models yolov4 --columns torch_max_autotune:bf16 --phases train \\
        --save-json /tmp/v4-mat-bf16-train.json
    python benchmarks/compare_gpu.py --merge /tmp/a.json,/tmp/b.json --write /tmp/gpu.md
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODELS = {"yolov4-tiny": 416, "yolov3-tiny": 416, "yolov7-tiny": 416, "yolov4-tiny-3l": 416, "yolov4": 608}
# yolov4 at 608 does not train at batch 64 in an 80 GB GPU (neither engine): it trains at batch 16
TRAIN_BATCH = {"yolov4": 16}
# dense peaks (fp32 without tensor cores, TF32 and bf16 tensor cores) and memory bandwidth, from NVIDIA's
# data sheets (the sparse tensor figures are twice these)
PEAKS = {"H100 80GB HBM3": (66.9e12, 494.7e12, 989.4e12, 3.35e12), "H100 PCIe": (51.2e12, 378e12, 756e12, 2.0e12),
         "H200": (66.9e12, 494.7e12, 989.4e12, 4.8e12)}
ACTIVATIONS = ("leaky", "mish", "logistic", "swish", "relu", "linear")
COMPILE_MODES = {"torch_compile": "default", "torch_max_autotune": "max-autotune"}
COMPILE_BUDGET_S = 420
TIMING_ALLOWANCE_S = 120  # a compiling worker's timeout is its budget plus this (setup, checks, timing)
EAGER_TIMEOUT_S = 300  # the workers that compile nothing


# ---- the cfg -------------------------------------------------------------------------------------
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


def pool_geometry(s: dict) -> tuple:
    """A [maxpool]'s size, stride and Darknet's total padding (default size - 1; top/left get half)."""
    st = int(s.get("stride", 1))
    k = int(s.get("size", st))
    return k, st, int(s.get("padding", k - 1))


def cfg_shapes(path: str) -> tuple:
    """Each layer's output (c, h, w) and the convolutions' FLOPs (a multiply-add = 2) for one image,
    from the cfg alone."""
    secs = read_cfg(path)
    c, h, w = (int(secs[0].get(k, d)) for k, d in (("channels", 3), ("height", 416), ("width", 416)))
    shapes, flops = [], 0
    for i, s in enumerate(secs[1:]):
        t = s["type"]
        if t == "convolutional":
            f, k = int(s["filters"]), int(s.get("size", 1))
            st, g = int(s.get("stride", 1)), int(s.get("groups", 1))
            pad = k // 2 if int(s.get("pad", 0)) else int(s.get("padding", 0))
            h, w = (h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1
            flops += 2 * k * k * (c // g) * f * h * w
            c = f
        elif t == "maxpool":
            k, st, p = pool_geometry(s)
            h, w = (h + p - k) // st + 1, (w + p - k) // st + 1
        elif t == "route":
            idx = [j if j >= 0 else i + j for j in (int(v) for v in s["layers"].split(","))]
            c = sum(shapes[j][0] for j in idx) // int(s.get("groups", 1))
            h, w = shapes[idx[0]][1:]
        elif t == "upsample":
            h, w = h * int(s.get("stride", 2)), w * int(s.get("stride", 2))
        elif t not in ("shortcut", "yolo"):
            raise ValueError(f"layer type {t} not in this benchmark")
        shapes.append((c, h, w))
    return shapes, flops


def sized_cfg(name: str, size: int, batch: int) -> str:
    """The shipped cfg at `size` with batch = subdivisions-free `batch` (a temporary file)."""
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


# ---- the cfg as a torch module ---------------------------------------------------------------------
def maxpool(x, k: int, st: int, p: int):
    """Darknet's max pool (total padding p, top/left p // 2, padded cells never win) in PyTorch's terms:
    F.max_pool2d with padding p // 2 wherever that gives Darknet's output size (p even; p odd where the
    extra bottom/right row is never read, as in the 2x2 stride-2 pools on even sizes), else an F.pad with
    -inf first (the 2x2 stride-1 pool of yolov3-tiny)."""
    import torch.nn.functional as F

    h, w = x.shape[-2:]
    same = all((d + p - k) // st == (d + 2 * (p // 2) - k) // st for d in (h, w))
    if p // 2 <= k // 2 and (p % 2 == 0 or same):
        return F.max_pool2d(x, k, st, p // 2)
    return F.max_pool2d(F.pad(x, (p // 2, p - p // 2, p // 2, p - p // 2), value=float("-inf")), k, st)


def build_torch(path: str, size: int):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def act(name, x):
        if name == "leaky":
            return F.leaky_relu(x, 0.1)
        if name == "mish":
            return F.mish(x)
        if name == "logistic":
            return torch.sigmoid(x)
        if name == "swish":
            return F.silu(x)
        if name == "relu":
            return F.relu(x)
        return x  # linear

    def activation(s, default):
        a = s.get("activation", default)
        if a not in ACTIVATIONS:
            raise ValueError(f"activation {a} not in this benchmark")
        return a

    class TorchDarknet(nn.Module):
        """The cfg's layers in order; `plan` holds each layer's parsed parameters, so that forward runs
        no cfg parsing, and only the outputs a later route or shortcut reads are kept."""

        def __init__(self):
            super().__init__()
            secs = read_cfg(path)
            self.net, self.layers = secs[0], secs[1:]
            self.mods = nn.ModuleList()
            self.plan = []
            channels, c = [], int(self.net.get("channels", 3))
            for i, s in enumerate(self.layers):
                t = s["type"]
                m = nn.Module()
                if t == "convolutional":
                    f, k = int(s["filters"]), int(s.get("size", 1))
                    stride, groups = int(s.get("stride", 1)), int(s.get("groups", 1))
                    pad = k // 2 if int(s.get("pad", 0)) else int(s.get("padding", 0))
                    bn = bool(int(s.get("batch_normalize", 0)))
                    m.conv = nn.Conv2d(c, f, k, stride, pad, groups=groups, bias=not bn)
                    if bn:
                        m.bn = nn.BatchNorm2d(f, eps=1e-5, momentum=0.01)
                    c = f
                    step = (t, bn, activation(s, "logistic"))
                elif t == "maxpool":
                    step = (t, *pool_geometry(s))
                elif t == "route":
                    idx = tuple(j if j >= 0 else i + j for j in (int(v) for v in s["layers"].split(",")))
                    g = int(s.get("groups", 1))
                    c = sum(channels[j] for j in idx) // g
                    step = (t, idx, g, int(s.get("group_id", 0)))
                elif t == "shortcut":
                    j = int(s["from"])
                    step = (t, j if j >= 0 else i + j, activation(s, "linear"))
                elif t == "upsample":
                    step = (t, int(s.get("stride", 2)))
                elif t == "yolo":
                    step = (t, len(s["mask"].split(",")), bool(int(s.get("new_coords", 0))),
                            float(s.get("scale_x_y", 1)))
                else:
                    raise ValueError(f"layer type {t} not in this benchmark")
                channels.append(c)
                self.mods.append(m)
                self.plan.append(step)
            self.keep = frozenset([j for st in self.plan if st[0] == "route" for j in st[1]] +
                                  [st[1] for st in self.plan if st[0] == "shortcut"])

        def forward(self, x):
            outs, heads = [], []
            for i, (step, m) in enumerate(zip(self.plan, self.mods)):
                t = step[0]
                if t == "convolutional":
                    x = m.conv(x)
                    if step[1]:
                        x = m.bn(x)
                    x = act(step[2], x)
                elif t == "maxpool":
                    x = maxpool(x, *step[1:])
                elif t == "route":
                    idx, g = step[1], step[2]
                    x = torch.cat([outs[j] for j in idx], 1) if len(idx) > 1 else outs[idx[0]]
                    if g > 1:
                        x = x.chunk(g, 1)[step[3]]
                elif t == "shortcut":
                    x = act(step[2], x + outs[step[1]])
                elif t == "upsample":
                    x = F.interpolate(x, scale_factor=step[1], mode="nearest")
                elif t == "yolo":
                    x = yolo_activate(x, *step[1:])
                    heads.append(x)
                outs.append(x if i in self.keep else None)
            return heads

    def yolo_activate(x, a, new_coords, sc):
        # Darknet's forward_yolo_layer: logistic on x, y, objectness and classes (not with
        # new_coords, whose cfgs activate in the conv before), then x, y scaled by scale_x_y
        n, c, h, w = x.shape
        x = x.view(n, a, c // a, h, w)
        if not new_coords:
            x = torch.cat([torch.sigmoid(x[:, :, :2]), x[:, :, 2:4], torch.sigmoid(x[:, :, 4:])], 2)
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


def first_call_s(fn, sync) -> float:
    """The wall time of one call, synchronized: a compile's time at a new shape."""
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def truths_for(batch: int, classes: int, rng):
    return [np.array([[*rng.uniform(0.2, 0.8, 2), *rng.uniform(0.05, 0.3, 2), rng.integers(classes)]
                      for _ in range(4)], np.float32) for _ in range(batch)]


class Progress(dict):
    """A worker's figures, written to its result file as each comes, with the stage it is in: what a
    worker killed for time leaves behind."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if self.path:
            Path(self.path).write_text(json.dumps(self))

    def stage(self, what: str) -> None:
        self["stage"] = what


def torch_versions(torch) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "triton": triton_version}


# ---- ours --------------------------------------------------------------------------------------
def run_ours(name: str, size: int, args, out: Progress) -> dict:
    import darknet_py

    rng = np.random.default_rng(0)
    out.stage("building")
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

    out["versions"] = torch_versions(torch)
    with torch.no_grad():
        want = [h.numpy() for h in model.eval()(torch.from_numpy(x1))]
    got = raw.forward(x1, heads)
    out["max_rel_diff_vs_torch"] = max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-12))
                                       for g, w in zip(got, want))
    sync = raw.synchronize
    x1 = pinned_input(raw, x1, args, out)  # as PyTorch's batch-1 input is
    out.stage("timing batch 1")
    for graphs in (True, False):
        raw.record_forwards = graphs
        out[f"b1_ms_{'graph' if graphs else 'eager'}"] = 1e3 * timed(lambda: raw.forward(x1, []), sync, 5, 30, 1.0)
    raw.record_forwards = True
    xb = rng.uniform(0, 1, (args.batch, 3, size, size)).astype(np.float32)
    xb = pinned_input(raw, xb, args, out)
    out.stage("timing batch 64")
    out["fwd_img_s"] = args.batch / timed(lambda: raw.forward(xb, []), sync, 3, 10, 2.0)
    out["layer_out_floats"] = sum(int(np.prod(s)) for s in layer_output_shapes(raw))
    out["ours"] = f"darknet_py {darknet_py.__version__}"
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


def run_ours_train(name: str, size: int, args, out: Progress) -> dict:
    """In a process of its own, so that the pool's peak is the training run's."""
    import darknet_py

    rng = np.random.default_rng(0)
    out.stage("building")
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
    xb = pinned_input(raw, xb, args, out)

    step = training_step(raw, xb, truths, batch)
    out.stage("timing training")
    out["train_img_s"] = batch / timed(step, raw.synchronize, 2, 3, 3.0, steps=4)
    out["peak_train_bytes"] = raw.memory_stats()["peak_reserved"]
    # fp16: a step skipped for overflow costs less than one applied; few may be, or the figure flatters
    out["skipped_steps"] = raw.skipped_steps
    return out


def layer_output_shapes(raw):
    return [tuple(layer["output"]) for layer in raw.layers()]


# ---- PyTorch -------------------------------------------------------------------------------------
def torch_autocast(torch, mode: str):
    """The autocast a PyTorch user runs `mode` under: float16 or bfloat16 for "fp16" / "bf16", off otherwise
    (compare_multi_gpu.py's DDP side shares it)."""
    return torch.autocast("cuda", dtype=torch.float16 if mode == "fp16" else torch.bfloat16,
                          enabled=mode in ("fp16", "bf16"))


def torch_setup(name: str, size: int, args, out: dict):
    """PyTorch as its users run args.mode: cudnn.benchmark on; "fp32" with TF32 off, "tf32" with TF32 on,
    "bf16" / "fp16" with TF32 on and the model and inputs channels_last. Returns torch, the model on the
    GPU and the upload of a pinned host tensor (non_blocking, as from a DataLoader with pin_memory=True)."""
    import torch

    tf32 = args.mode != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    fmt = torch.channels_last if args.mode in ("fp16", "bf16") else torch.contiguous_format
    path = sized_cfg(name, size, 1)
    model = build_torch(path, size).to(dev, memory_format=fmt)
    os.unlink(path)
    out["versions"] = torch_versions(torch)

    def upload(pinned):
        return pinned.to(dev, non_blocking=True).contiguous(memory_format=fmt)

    return torch, model, upload


def host_batch(torch, rng, n: int, size: int):
    return torch.from_numpy(rng.uniform(0, 1, (n, 3, size, size)).astype(np.float32)).pin_memory()


def train_targets(torch, model, x, mode: str):
    """Fixed fp32 targets shaped as the heads, for the squared-error loss."""
    with torch.no_grad(), torch_autocast(torch, mode):
        return [torch.rand(h.shape, device=h.device, dtype=torch.float32) for h in model(x)]


def squared_error(heads, targets):
    return sum(((h.float() - t) ** 2).sum() for h, t in zip(heads, targets))


def steady_peak(torch) -> None:
    """Releases the first steps' scratch (cudnn.benchmark's trials, the compilers' autotuning) and restarts
    the peak, so that the peak measured next is the training loop's."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def run_torch(name: str, size: int, args, out: Progress) -> dict:
    """PyTorch eager, forward: batch-1 latency eager and captured in a CUDA graph, batch-64 images/s."""
    out.stage("building")
    torch, model, upload = torch_setup(name, size, args, out)
    rng = np.random.default_rng(0)
    sync = torch.cuda.synchronize

    def run(x):
        with torch_autocast(torch, args.mode):
            return model(x)

    x1 = host_batch(torch, rng, 1, size)
    model.eval()
    with torch.no_grad():
        out.stage("timing batch 1")
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
        out.stage("timing batch 64")
        xb = host_batch(torch, rng, args.batch, size)
        out["fwd_img_s"] = args.batch / timed(lambda: run(upload(xb)), sync, 3, 10, 2.0)
        resident = upload(xb)
        out["fwd_img_s_resident"] = args.batch / timed(lambda: run(resident), sync, 3, 10, 2.0)
    return out


def torch_train_loop(torch, model, xt, upload, args, out: Progress, loss_of, graphs: bool, warmup: int,
                     first: str = "first step"):
    """SGD with momentum and weight decay, GradScaler for fp16 (AMP's recipe); `loss_of(x)` the forward
    and loss, eager or compiled. Times the steps from pinned host batches and from a resident one."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=args.mode == "fp16")
    sync = torch.cuda.synchronize

    def step(x):
        opt.zero_grad(set_to_none=True)  # before a CUDA graph's replay rewrites last step's gradients
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        loss = loss_of(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    n = len(xt)
    out.stage(first)
    out["first_step_s"] = first_call_s(lambda: step(upload(xt)), sync)
    for _ in range(warmup):  # CUDA graphs: recorded on the first calls after the compile
        step(upload(xt))
    steady_peak(torch)
    out.stage("timing training")
    out["train_img_s"] = n / timed(lambda: step(upload(xt)), sync, 1, 3, 3.0, steps=4)
    out["peak_train_bytes"] = torch.cuda.max_memory_reserved()
    resident = upload(xt)
    out["train_img_s_resident"] = n / timed(lambda: step(resident), sync, 1, 3, 3.0, steps=4)
    return out


def run_torch_train(name: str, size: int, args, out: Progress) -> dict:
    """PyTorch eager, training."""
    out.stage("building")
    torch, model, upload = torch_setup(name, size, args, out)
    rng = np.random.default_rng(0)
    xt = host_batch(torch, rng, TRAIN_BATCH.get(name, args.batch), size)
    model.train()
    targets = train_targets(torch, model, upload(xt), args.mode)

    def loss_of(x):
        with torch_autocast(torch, args.mode):
            heads = model(x)
        return squared_error(heads, targets)

    return torch_train_loop(torch, model, xt, upload, args, out, loss_of, False, 2)


def configure_dynamo(torch) -> None:
    """Static shapes: a new batch size recompiles (dynamic=False, automatic dynamic shapes off) within a
    raised recompile limit, instead of falling back to eager or to dynamic shapes."""
    import torch._dynamo

    cfg = torch._dynamo.config
    cfg.automatic_dynamic_shapes = False
    limit = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, limit, max(64, getattr(cfg, limit)))


def compiled_forward(torch, model, mode: str, compile_mode: str, graphs: bool, x1, xb, upload, sync,
                     out: Progress) -> dict:
    """torch.compile(autocast + model) in eval: batch 1 (first call = its compile, then the latency from
    the pinned host input), then batch 64 (a recompile, then images/s from pinned and resident input).
    The compiled heads at batch 1 are checked against the eager model's in the same precision."""

    def infer(x):
        with torch_autocast(torch, mode):
            return model(x)

    fn = torch.compile(infer, mode=compile_mode, dynamic=False)

    def call(x):
        if graphs:  # a new iteration: the last call's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        return fn(x)

    model.eval()
    with torch.no_grad():
        want = [h.float().clone() for h in infer(upload(x1))]
        out.stage("compiling batch 1")
        out["compile_s_fwd_b1"] = first_call_s(lambda: call(upload(x1)), sync)
        got = [h.float().clone() for h in call(upload(x1))]  # cloned before the next call
        out["max_rel_diff_vs_eager"] = max(float((g - w).abs().max() / w.abs().max().clamp_min(1e-12))
                                           for g, w in zip(got, want))
        out.stage("timing batch 1")
        out["b1_ms_compiled"] = 1e3 * timed(lambda: call(upload(x1)), sync, 10, 30, 1.0)
        out.stage("compiling batch 64")
        out["compile_s_fwd_b64"] = first_call_s(lambda: call(upload(xb)), sync)
        out.stage("timing batch 64")
        out["fwd_img_s"] = len(xb) / timed(lambda: call(upload(xb)), sync, 5, 10, 2.0)
        resident = upload(xb)
        out["fwd_img_s_resident"] = len(xb) / timed(lambda: call(resident), sync, 5, 10, 2.0)
    out.update(compile_counters(torch))
    return out


def compiled_train(torch, model, mode: str, compile_mode: str, graphs: bool, xt, upload, args,
                   out: Progress) -> dict:
    """torch.compile(autocast + model + loss) in training; the backward compiled by AOTAutograd on the
    first step, the SGD step and GradScaler eager. compile_s_train = the first step's wall time."""
    model.train()
    targets = train_targets(torch, model, upload(xt), mode)

    def loss_of(x):
        with torch_autocast(torch, mode):
            heads = model(x)
        return squared_error(heads, targets)

    fn = torch.compile(loss_of, mode=compile_mode, dynamic=False)
    out = torch_train_loop(torch, model, xt, upload, args, out, fn, graphs, 5, "compiling training")
    out["compile_s_train"] = out.pop("first_step_s")
    out.update(compile_counters(torch))
    return out


def compile_counters(torch) -> dict:
    """What Dynamo and Inductor made of the model: graphs compiled, graph breaks, CUDA graphs skipped."""
    from torch._dynamo.utils import counters

    return {"graphs": int(counters["stats"]["unique_graphs"]), "graph_breaks": int(sum(counters["graph_break"].values())),
            "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"])}


def run_torch_compiled(name: str, size: int, args, out: Progress) -> dict:
    """torch.compile, forward (args.group picks the mode)."""
    out.stage("building")
    torch, model, upload = torch_setup(name, size, args, out)
    configure_dynamo(torch)
    rng = np.random.default_rng(0)
    x1, xb = host_batch(torch, rng, 1, size), host_batch(torch, rng, args.batch, size)
    return compiled_forward(torch, model, args.mode, COMPILE_MODES[args.group], args.group == "torch_max_autotune",
                            x1, xb, upload, torch.cuda.synchronize, out)


def run_torch_compiled_train(name: str, size: int, args, out: Progress) -> dict:
    """torch.compile, training (args.group picks the mode)."""
    out.stage("building")
    torch, model, upload = torch_setup(name, size, args, out)
    configure_dynamo(torch)
    rng = np.random.default_rng(0)
    xt = host_batch(torch, rng, TRAIN_BATCH.get(name, args.batch), size)
    return compiled_train(torch, model, args.mode, COMPILE_MODES[args.group], args.group == "torch_max_autotune",
                          xt, upload, args, out)


WORKERS = {"ours": run_ours, "ours_train": run_ours_train, "torch": run_torch, "torch_train": run_torch_train,
           "compiled": run_torch_compiled, "compiled_train": run_torch_compiled_train}
# each column group's workers: (worker, phase); each runs in a subprocess of its own
GROUP_WORKERS = {"ours": [("ours", "fwd"), ("ours_train", "train")],
                 "ours_half": [("ours", "fwd"), ("ours_train", "train")],
                 "torch": [("torch", "fwd"), ("torch_train", "train")],
                 "torch_compile": [("compiled", "fwd"), ("compiled_train", "train")],
                 "torch_max_autotune": [("compiled", "fwd"), ("compiled_train", "train")]}
PHASES = ("fwd", "train")
# the training phase's figures; the rest are the forward phase's
TRAIN_KEYS = ("train_img_s", "train_img_s_resident", "peak_train_bytes", "compile_s_train", "skipped_steps")
PRECISION_LABELS = {"fp32": "fp32", "tf32": "TF32", "fp16": "fp16 autocast + GradScaler + channels_last",
                    "bf16": "bf16 autocast + channels_last"}
ENGINE_LABELS = {"torch": "PyTorch", "torch_compile": "PyTorch compile",
                 "torch_max_autotune": "PyTorch compile max-autotune"}
COLUMNS = [("ours", "fp32"), ("ours", "tf32"), ("ours_half", "fp16"), ("ours_half", "bf16")] + [
    (g, m) for g in ENGINE_LABELS for m in ("fp32", "tf32", "fp16", "bf16")]
LABELS = {("ours", "fp32"): "ours fp32", ("ours", "tf32"): "ours TF32", ("ours_half", "fp16"): "ours fp16",
          ("ours_half", "bf16"): "ours bf16",
          **{(g, m): f"{ENGINE_LABELS[g]} {PRECISION_LABELS[m]}" for g in ENGINE_LABELS for m in PRECISION_LABELS}}
DEFAULT_COLUMNS = [("ours_half", "fp16"), ("ours_half", "bf16"), ("ours", "tf32")] + [
    (g, m) for g in ENGINE_LABELS for m in ("fp16", "bf16")]


def column_name(col) -> str:
    return f"{col[0]}:{col[1]}"


def parse_columns(text: str) -> list:
    cols = [tuple(c.strip().split(":")) for c in text.split(",") if c.strip()]
    bad = [":".join(c) for c in cols if c not in LABELS]
    if bad:
        raise SystemExit(f"unknown columns {', '.join(bad)}; known: {', '.join(map(column_name, COLUMNS))}")
    return cols


# ---- running the workers ----------------------------------------------------------------------------
def one_line(text: str, limit: int = 160) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[-1] if lines else "no output"
    return line if len(line) <= limit else line[:limit - 3] + "..."


def run_worker(cmd: list, env: dict, result: str, timeout: float, budget: float | None) -> dict:
    """One worker subprocess (its own process group, killed whole on timeout): its figures, or its
    partial figures with "error" saying why it stopped."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, err = p.communicate()
        timed_out = True
    try:
        res = json.loads(Path(result).read_text())
    except (OSError, ValueError):
        res = {}
    stage = res.pop("stage", "starting")
    if timed_out:
        if budget is not None and stage.startswith("compiling"):
            res["error"] = f"no compile within {budget:g} s"
        else:
            res["error"] = f"timed out after {timeout:g} s ({stage})"
    elif p.returncode:
        res["error"] = f"failed: {one_line(err)}"
    if res.get("error"):
        print(f"{' '.join(cmd[2:])}: {res['error']}\n{(err or '')[-3000:]}", file=sys.stderr)
    return res


def run_column(model: str, group: str, mode: str, args) -> dict:
    """One column's figures for one model: {phase: figures (with "error" where the worker stopped)}."""
    res = {}
    for worker, phase in GROUP_WORKERS[group]:
        if phase not in args.phases:
            continue
        compiles = group in COMPILE_MODES
        with tempfile.TemporaryDirectory(prefix="compare_gpu-") as tmp:
            result = os.path.join(tmp, "result.json")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--group", group,
                   "--model", model, "--batch", str(args.batch), "--device", args.device, "--mode", mode,
                   "--ours-input", args.ours_input, "--result", result]
            env = {**os.environ, "DARKNET_PY_TF32": "1" if mode == "tf32" else "0"}
            if compiles:  # cold compiles: nothing cached by an earlier worker or run
                env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                           TRITON_CACHE_DIR=os.path.join(tmp, "triton"))
            timeout = args.compile_budget + TIMING_ALLOWANCE_S if compiles else EAGER_TIMEOUT_S
            t0 = time.perf_counter()
            res[phase] = run_worker(cmd, env, result, timeout, args.compile_budget if compiles else None)
            res[phase]["worker_s"] = round(time.perf_counter() - t0, 1)
        print(model, column_name((group, mode)), phase, json.dumps(res[phase]), file=sys.stderr, flush=True)
    return res


# ---- facts, saving and merging ------------------------------------------------------------------
def gpu_facts() -> tuple:
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        q = []
    name, driver = (q[0].split(", ") + ["?"])[:2] if q else ("?", "?")
    return name, driver, len(q)


def peaks_for(gpu: str) -> tuple:
    return next((v for k, v in PEAKS.items() if k in gpu), (None, None, None, None))


def source_state() -> str:
    """The engine's source: the commit, and whether the working tree differs from it."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return (head or "?") + (" with uncommitted changes" if dirty else "")


def run_facts(argv: list) -> dict:
    name, driver, count = gpu_facts()
    return {"gpu": name, "driver": driver, "gpus": count, "cpus": os.cpu_count(), "source": source_state(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "python benchmarks/compare_gpu.py " + shlex.join(argv), "versions": {}, "ours": None}


def result_key(model: str, col) -> str:
    return f"{model}|{column_name(col)}"


def save_json(path: str, facts: list, results: dict) -> None:
    """results: {(model, (group, mode)): {phase: figures}}."""
    data = {"facts": facts, "results": {result_key(m, c): v for (m, c), v in results.items()}}
    tmp = f"{path}.tmp"
    Path(tmp).write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def load_json(paths: list) -> tuple:
    """The saved files merged: later files win per (model, column, phase)."""
    facts, results = [], {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        facts += data.get("facts", [])
        for key, phases in data.get("results", {}).items():
            model, col = key.split("|", 1)
            col = tuple(col.split(":"))
            results.setdefault((model, col), {}).update(phases)
    return facts, results


def note_versions(facts: dict, results: dict) -> None:
    for phases in results.values():
        for r in phases.values():
            if r.get("versions"):
                facts["versions"] = r["versions"]
            if r.get("ours"):
                facts["ours"] = r["ours"]


# ---- the tables ----------------------------------------------------------------------------------
def md_cell(text: str) -> str:
    return str(text).replace("|", "/")


def phase_of(key: str) -> str:
    return "train" if key in TRAIN_KEYS else "fwd"


def figures(results: dict, model: str, col, key: str):
    """The (model, column) phase dict that carries `key`, or None."""
    r = results.get((model, col), {}).get(phase_of(key))
    return r if r and key in r else None


def cell_text(results: dict, model: str, col, key: str, fmt) -> str:
    r = results.get((model, col), {}).get(phase_of(key))
    if r is None:
        return "not run"
    if key in r:
        return fmt(r)
    return md_cell(r["error"]) if r.get("error") else "n/a"


def b1_best(r: dict) -> float:
    return min(r[k] for k in ("b1_ms_graph", "b1_ms_eager", "b1_ms_compiled") if k in r)


def table(title: str, models, cols, results: dict, key: str, fmt, best, ratio_note: str, floor=None) -> list:
    """A markdown table: a row per model, a cell per column (its error where its worker stopped, n/a where
    it has no `key` figure), then ours' best / PyTorch's best over every PyTorch column, eager and compiled."""
    head = ["model"] + [LABELS[c] for c in cols] + [f"ours / PyTorch ({ratio_note})"] + (["floor"] if floor else [])
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in models:
        cells = [cell_text(results, model, c, key, fmt) for c in cols]
        ours = [r for c in cols if c[0].startswith("ours") and (r := figures(results, model, c, key))]
        theirs = [r for c in cols if c[0].startswith("torch") and (r := figures(results, model, c, key))]
        ratio = f"{best(ours) / best(theirs):.2f}" if ours and theirs else "n/a"
        lines.append("| " + " | ".join([model] + cells + [ratio] + ([floor(model)] if floor else [])) + " |")
    return lines + [""]


def compile_note(models, cols, results: dict, keys: list, what: str) -> list:
    parts = []
    for model in models:
        for c in cols:
            if c[0] not in COMPILE_MODES:
                continue
            phases = results.get((model, c), {})
            got = [f"{r[k]:.0f}" for k in keys if (r := phases.get(phase_of(k))) and k in r]
            if got:
                parts.append(f"{model} {LABELS[c]} {' / '.join(got)}")
    return [f"Compile time, {what} (first call's wall time, cold caches), s: {'; '.join(parts)}.", ""] if parts else []


def facts_lines(facts: list, merge_command: str | None) -> list:
    def distinct(values):
        return list(dict.fromkeys(v for v in values if v))

    gpus = distinct(f"{f['gpu']} (driver {f['driver']}, {f.get('cpus', '?')} CPU cores)" for f in facts)
    vs = distinct(
        ", ".join(f"{k} {v[k2]}" for k, k2 in (("PyTorch", "torch"), ("CUDA", "cuda"), ("cuDNN", "cudnn"),
                                                 ("Triton", "triton")) if v.get(k2))
        for v in (f.get("versions") or {} for f in facts))
    ours = distinct(f.get("ours") for f in facts)
    sources = distinct(f.get("source") for f in facts)
    dates = distinct(f.get("date") for f in facts)
    lines = [f"Machine: {'; '.join(gpus) or '?'}.",
             f"Versions: {'; '.join(vs) or '?'}" + (f"; {', '.join(ours)}" if ours else "") +
             (f" (source {', '.join(sources)})" if sources else "") + ".",
             f"Date: {', '.join(dates) or '?'}.", "", "Commands:", ""]
    lines += [f"    {f['command']}" for f in facts if f.get("command")]
    if merge_command:
        lines += [f"    {merge_command}"]
    return lines + [""]


def report(facts: list, results: dict, models=None, cols=None, batch: int = 64, merge_command: str | None = None) -> str:
    present = {m for m, _ in results}
    models = models or [m for m in MODELS if m in present] + sorted(present - set(MODELS))
    used = {c for _, c in results}
    cols = cols or [c for c in COLUMNS if c in used]
    gpu = next((f["gpu"] for f in reversed(facts) if f.get("gpu") not in (None, "?")), "?")
    fp32_peak, tf32_peak, bf16_peak, bw = peaks_for(gpu)
    shape_cache = {}

    def costs(model):
        if model not in shape_cache:
            if model in MODELS:
                path = sized_cfg(model, MODELS[model], 1)
                shapes, flops = cfg_shapes(path)
                os.unlink(path)
                shape_cache[model] = (flops, sum(c * h * w for c, h, w in shapes))
            else:
                shape_cache[model] = (0, 0)
        return shape_cache[model]

    def floors(model, passes):
        """images/s at the fp32, TF32 and bf16 dense peaks; then at the memory bandwidth with every layer's
        output written and read once per pass in 4-byte and in 2-byte storage"""
        flops, floats = costs(model)
        f = flops * passes
        peaks = " / ".join(f"{pk / f:.0f}" if pk and f else "?" for pk in (fp32_peak, tf32_peak, bf16_peak))
        traffic = " / ".join(f"{bw / (floats * size * 2 * passes):.0f}" if bw and floats else "?" for size in (4, 2))
        return f"{peaks}; {traffic}"

    peak_text = (f"{fp32_peak / 1e12:.1f} / {tf32_peak / 1e12:.1f} / {bf16_peak / 1e12:.1f} TFLOP/s, "
                 f"{bw / 1e12:.2f} TB/s" if fp32_peak else "peaks unknown for this GPU")
    out = [f"# Ours (CUDA) vs PyTorch on {gpu}", ""] + facts_lines(facts, merge_command) + [
        f"Batch {batch} for forward and training (yolov4 at 608: training at batch {TRAIN_BATCH['yolov4']}); the "
        "other models at 416. PyTorch's inputs come from pinned host memory with non-blocking copies, "
        "`cudnn.benchmark` on; its figure with the batch already on the GPU is in parentheses. Ours read "
        "NumPy arrays in pinned memory (or pageable where the command says `--ours-input pageable`). "
        "PyTorch compile columns: torch.compile with dynamic=False, cold caches; max-autotune includes CUDA "
        "graphs. Ratios: the best of ours over the best of PyTorch's columns, eager and compiled. Floors: "
        f"images/s at the fp32 / TF32 / bf16 dense peaks ({peak_text}; training 3x the forward FLOPs), then "
        "at the memory bandwidth (each layer's output written and read once, three times in training) in "
        "fp32 / half storage.", ""]
    out += table("Training, images/s", models, cols, results, "train_img_s",
                 lambda r: f"{r['train_img_s']:.0f}" + (f" ({r['train_img_s_resident']:.0f})" if "train_img_s_resident" in r else ""),
                 lambda rs: max(r["train_img_s"] for r in rs), "higher is better", lambda m: floors(m, 3))
    out += compile_note(models, cols, results, ["compile_s_train"], "training step")
    out += table(f"Forward, batch {batch}, images/s", models, cols, results, "fwd_img_s",
                 lambda r: f"{r['fwd_img_s']:.0f}" + (f" ({r['fwd_img_s_resident']:.0f})" if "fwd_img_s_resident" in r else ""),
                 lambda rs: max(r["fwd_img_s"] for r in rs), "higher is better", lambda m: floors(m, 1))
    out += compile_note(models, cols, results, ["compile_s_fwd_b64"], f"forward at batch {batch}, after batch 1")
    out += table("Batch-1 latency, host input to heads, ms: CUDA graph (eager); compiled columns: the compiled call",
                 models, cols, results, "b1_ms",
                 lambda r: (f"{r['b1_ms_graph']:.2f} ({r['b1_ms_eager']:.2f})" if "b1_ms_graph" in r else
                            f"{b1_best(r):.2f}"),
                 lambda rs: 1 / min(b1_best(r) for r in rs), "speed: PyTorch ms / ours ms")
    out += compile_note(models, cols, results, ["compile_s_fwd_b1"], "forward at batch 1")
    out += table("Peak training memory, GiB", models, cols, results, "peak_train_bytes",
                 lambda r: f"{r['peak_train_bytes'] / 2**30:.1f}",
                 lambda rs: 1 / min(r["peak_train_bytes"] for r in rs), "PyTorch's least / ours' least")
    lines = []
    for model in models:
        flops, _ = costs(model)
        if flops:
            fwd = f"{bf16_peak / flops:.0f}" if bf16_peak else "?"
            train = f"{bf16_peak / (3 * flops):.0f}" if bf16_peak else "?"
            lines.append(f"- {model} at {MODELS.get(model, '?')}: {flops / 1e9:.2f} GFLOP per image (convolutions, "
                         f"a multiply-add = 2); at the bf16 dense peak: forward {fwd} images/s, training (3x) {train} "
                         "images/s.")
    if lines:
        out += ["FLOPs and the bf16 floor per model:", ""] + lines + [""]
    diffs = [f"{m} {LABELS[c]} {r['max_rel_diff_vs_torch']:.1e}" for m in models for c in cols
             if c[0].startswith("ours") and (r := figures(results, m, c, "max_rel_diff_vs_torch"))]
    if diffs:
        out += [f"Heads, ours against PyTorch fp32 at batch 1 (max relative difference): {'; '.join(diffs)}.", ""]
    diffs = [f"{m} {LABELS[c]} {r['max_rel_diff_vs_eager']:.1e}" for m in models for c in cols
             if c[0] in COMPILE_MODES and (r := figures(results, m, c, "max_rel_diff_vs_eager"))]
    if diffs:
        out += [f"Heads, compiled against eager PyTorch in the same precision at batch 1 (max relative "
                f"difference): {'; '.join(diffs)}.", ""]
    counts = [f"{m} {LABELS[c]} {phase} {r['graphs']} / {r['graph_breaks']} / {r['cudagraph_skips']}"
              for m in models for c in cols if c[0] in COMPILE_MODES for phase in PHASES
              if (r := results.get((m, c), {}).get(phase)) and "graphs" in r]
    if counts:
        out += [f"torch.compile's graphs / graph breaks / CUDA graphs skipped, per worker: {'; '.join(counts)}.", ""]
    skipped = [f"{m} {r['skipped_steps']}" for m in models
               if (r := results.get((m, ("ours_half", "fp16")), {}).get("train")) and "skipped_steps" in r]
    if skipped:
        out += [f"ours fp16 training steps skipped for overflow while timed (loss scaling): {'; '.join(skipped)}.", ""]
    return "\n".join(out)


# worker figures keyed for the tables: b1_ms is present where any batch-1 latency is
def with_b1(results: dict) -> dict:
    for phases in results.values():
        r = phases.get("fwd")
        if r and any(k in r for k in ("b1_ms_graph", "b1_ms_eager", "b1_ms_compiled")):
            r["b1_ms"] = b1_best(r)
    return results


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help=f"comma-separated (default: {','.join(MODELS)}; with --merge: those saved)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--columns", help="group:precision columns to run (default: "
                    + ",".join(map(column_name, DEFAULT_COLUMNS)) + "; with --merge: those saved); known: "
                    + ",".join(map(column_name, COLUMNS)))
    ap.add_argument("--phases", default="fwd,train",
                    help="fwd (batch-1 latency, batch-64 forward), train, or both (default)")
    ap.add_argument("--compile-budget", type=float, default=COMPILE_BUDGET_S,
                    help=f"seconds a compiling worker may spend on its compiles; it is killed after this plus "
                         f"{TIMING_ALLOWANCE_S} s (default %(default)s)")
    ap.add_argument("--save-json", help="write every (model, column, phase) result of this call here, as each comes")
    ap.add_argument("--merge", help="comma-separated JSON files from --save-json: build the tables from them, run nothing")
    ap.add_argument("--write", help="write the markdown tables to this file")
    ap.add_argument("--ours-input", choices=["pinned", "pageable"], default="pinned",
                    help="ours' batches: NumPy arrays in pinned memory (Net.pin_memory, as PyTorch's are; default) or "
                         "plain ones, copied into the engine's staging buffers first")
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--group", default="torch", choices=list(GROUP_WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"], help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        out = Progress(args.result)
        WORKERS[args.worker](args.model, MODELS[args.model], args, out)
        out.pop("stage", None)
        out["stage"] = "done"
        return 0
    if args.merge:
        facts, results = load_json([p for p in args.merge.split(",") if p])
        cols = parse_columns(args.columns) if args.columns else None
        models = args.models.split(",") if args.models else None
        merge_command = "python benchmarks/compare_gpu.py " + shlex.join(argv)
    else:
        cols = parse_columns(args.columns or ",".join(map(column_name, DEFAULT_COLUMNS)))
        models = (args.models or ",".join(MODELS)).split(",")
        unknown = [m for m in models if m not in MODELS]
        if unknown:
            raise SystemExit(f"unknown models {', '.join(unknown)}; known: {', '.join(MODELS)}")
        args.phases = [p for p in args.phases.split(",") if p]
        if any(p not in PHASES for p in args.phases):
            raise SystemExit(f"--phases: fwd, train or both, not {','.join(args.phases)}")
        facts, results, merge_command = [run_facts(argv)], {}, None
        for model in models:
            for c in cols:
                results[(model, c)] = run_column(model, *c, args)
                note_versions(facts[0], {(model, c): results[(model, c)]})
                if args.save_json:
                    save_json(args.save_json, facts, results)
    if args.merge and args.save_json:
        save_json(args.save_json, facts, results)
    text = report(facts, with_b1(results), models, cols, args.batch, merge_command)
    print(text)
    if args.write:
        Path(args.write).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
