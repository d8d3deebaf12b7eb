"""Device names and the default device.

Names: "cpu", "reference" (the naive oracle backend), "opencl" / "opencl:N", "cuda" / "cuda:N" and
"metal" (once built in), and "auto": CUDA, then Metal, then an OpenCL GPU (never a CPU OpenCL runtime
or a simulator), then the CPU, each after a tiny functional check. DARKNET_PY_DEVICE sets the default.
"""
from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

from . import _core

ENV = "DARKNET_PY_DEVICE"
_NAME = re.compile(r"^(cpu|reference|auto|metal|(opencl|cuda)(:\d{1,6})?)$")


def default_device() -> str:
    """$DARKNET_PY_DEVICE, or "auto"."""
    return os.environ.get(ENV, "").strip() or "auto"


def check_name(name: str) -> str:
    """The name, or ValueError saying which names exist."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"unknown device {name!r}: use cpu, reference, opencl, opencl:N, cuda, cuda:N, metal or auto")
    return name


@functools.lru_cache(maxsize=None)
def resolve(name: str) -> str:
    """A concrete device name ("auto" resolved once per process). A GPU that "auto" passed over
    because it failed its check is printed once on stderr: without the failure it would have been
    chosen. CPU OpenCL runtimes and simulators are never chosen by "auto", so skipping them
    changes nothing and is not printed (`darknet_py info` lists every device)."""
    resolved, log = _core.resolve_device(check_name(name))
    for line in log:
        if not line.endswith("skipped: not a GPU"):
            print(f"darknet_py: device {line}", file=sys.stderr)
    return resolved


def devices() -> List[Dict[str, object]]:
    """`darknet_py.devices()`: every GPU device found (id, name, vendor, driver, memory_bytes, compute_units, is_gpu), and
    for each kind with none found a row with found=False and the reason."""
    return list(_core.devices())


def device_arg(text: str) -> str:
    """argparse type for --device."""
    try:
        return check_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """--device (and its old name --backend) for every command that runs a network."""
    parser.add_argument("--device", "--backend", dest="device", type=device_arg, default=None, metavar="DEVICE",
                        help="where the network runs: cpu, opencl[:N], cuda[:N], metal, reference (naive loops, "
                             f"for checking) or auto (default: ${ENV}, else auto: the first working GPU, else cpu)")


PRECISIONS = ("fp32", "fp16", "bf16")
# --precision's values: a storage type, or "auto" (auto_precision)
PRECISION_CHOICES = PRECISIONS + ("auto",)


def auto_precision(device: str) -> Tuple[str, str]:
    """(precision, why) for precision "auto" on a resolved device: bf16 on GPUs with native bf16
    (CUDA compute capability 8.0 and newer), fp16 (with loss scaling in training) on other GPUs (older
    CUDA, OpenCL GPUs, Apple GPUs, whose MSL has half natively; MPS declines half, so our kernels run),
    fp32 on CPUs and CPU OpenCL runtimes (no half there)."""
    kind = device.split(":")[0]
    if kind in ("cpu", "reference"):
        return "fp32", f"{device} runs fp32 only"
    # a bare "cuda" / "opencl" is device 0 of its kind (make_backend), listed as "cuda:0"
    listed = device if ":" in device or kind == "metal" else f"{device}:0"
    row = next((d for d in devices() if d.get("found") and d.get("id") == listed), None)
    if row is None or not row.get("is_gpu", True):
        return "fp32", f"{device} is not a GPU (a CPU OpenCL runtime or a simulator)"
    if kind == "cuda":
        m = re.search(r"compute capability (\d+)\.(\d+)", str(row.get("details", "")))
        if m and (int(m.group(1)), int(m.group(2))) >= (8, 0):
            return "bf16", f"{device} has native bf16 (compute capability {m.group(1)}.{m.group(2)})"
        return "fp16", f"{device} has no native bf16 (compute capability {m.group(1)}.{m.group(2)})" if m else \
            f"{device}: compute capability unknown"
    return "fp16", f"{device} is a GPU without a native bf16 path here"


def auto_precision_line(precision: str, why: str) -> Optional[str]:
    """The log line naming the half type "auto" chose and why; None where it chose fp32 (the CPU, CPU
    OpenCL runtimes): such a run is what it always was."""
    return None if precision == "fp32" else f"precision auto: {precision} ({why})"


def add_precision_option(parser: argparse.ArgumentParser, training: bool = False) -> None:
    """--precision for the commands that run a network (see Network.precision)."""
    what = ("fp16 / bf16 keep activations and their gradients in half on GPU devices; weights, "
            "gradients of weights and optimizer state stay fp32; fp16 scales the loss dynamically "
            "(the scale is in the log); the loader writes the batches in that half type too, half the bytes "
            "(DARKNET_PY_HALF_BATCHES=0: float32 batches, converted on the device); the CPU trains in fp32 only"
            if training else
            "fp16 / bf16 store activations in half on GPU devices (math in fp32, weights fp32); "
            "the CPU runs fp32 only")
    parser.add_argument("--precision", choices=PRECISION_CHOICES, default="auto",
                        help=f"storage type of the activations (default: %(default)s); {what}; auto: bf16 on GPUs "
                             "with native bf16 (CUDA compute capability 8.0+), fp16 on other GPUs, fp32 on CPUs, "
                             "named in the log")
