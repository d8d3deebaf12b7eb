"""What `darknet_py info` reports: version, build, CPU and backends."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from typing import Dict, List, Tuple

# CPU features that matter to the kernels (x86 SIMD widths, FMA, ARM NEON/dot product)
_INTERESTING = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "amx_tile", "neon", "asimd", "asimddp", "sve", "fp16")


def _sysctl(key: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=2).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_info() -> Tuple[str, List[str]]:
    """(CPU model, features of interest that it has): /proc/cpuinfo on Linux, sysctl on macOS,
    the platform module elsewhere."""
    model, flags = "", set()
    if sys.platform.startswith("linux") and os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "hardware", "cpu model") and not model:
                    model = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    elif sys.platform == "darwin":
        model = _sysctl("machdep.cpu.brand_string")
        flags = {f.lower().replace(".", "_") for f in
                 (_sysctl("machdep.cpu.features") + " " + _sysctl("machdep.cpu.leaf7_features")).split()}
        if platform.machine() == "arm64":
            flags |= {"neon", "asimd"}  # every Apple silicon core has them
            if _sysctl("hw.optional.arm.FEAT_DotProd") == "1":
                flags.add("asimddp")
    model = model or platform.processor() or platform.machine() or "unknown"
    return model, [f for f in _INTERESTING if f in flags]


def info() -> Dict[str, object]:
    """Everything `darknet_py info` prints, as a dict."""
    import cv2
    import numpy as np

    from .. import __version__
    from .. import _core
    from ..model_files.cfgfiles import shipped_dir, shipped_files

    build = dict(_core.build_info())
    model, features = cpu_info()
    compiled = set(build.get("backends", []))
    backends = {name: ("available" if name in compiled else "not built") for name in ("cpu", "reference")}
    found = _core.devices()
    gpus = [d for d in found if d["found"]]
    backends["opencl"] = (f"{sum(d['kind'] == 'opencl' for d in gpus)} device(s)" if any(d["kind"] == "opencl" for d in gpus)
                          else "none found")
    backends["metal"] = "available" if build.get("metal") else "not built"
    n_cuda = sum(d["kind"] == "cuda" for d in gpus)
    backends["cuda"] = (f"{n_cuda} device(s)" if n_cuda else "built, no device") if build.get("cuda") else "not built"
    return {
        "version": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "compiler": build.get("compiler", "unknown"),
        "CPU kernels": cpu_kernels(),
        "native build": "yes (-march=native)" if build.get("native_build") else "no (portable)",
        "BLAS": build.get("blas", "unknown"),
        "CPU": model,
        "CPU features": ", ".join(features) or "none detected",
        "logical CPUs": os.cpu_count() or 0,
        "threads": _core.get_threads(),
        "backends": ", ".join(f"{k}: {v}" for k, v in backends.items()),
        "devices": "; ".join(_describe(d) for d in found),
        "device auto": _auto_choice(),
        "OpenCV": cv2.__version__,
        "NumPy": np.__version__,
        "shipped cfgs": f"{shipped_dir()} ({', '.join(shipped_files('.cfg')) or 'none'})",
    }


def cpu_kernels() -> str:
    """The copy of the CPU kernels in use and why, e.g. "avx2 (6x16 tile, ...; chosen for this CPU from:
    avx512, avx2, generic)"; the error instead when $DARKNET_PY_ISA asks for one that cannot run."""
    from .. import _core

    isa = _core.cpu_isa()
    built = ", ".join(isa["built"])
    if isa["error"]:
        return f"none: {isa['error']}"
    why = f"forced by $DARKNET_PY_ISA={isa['forced']}" if isa["forced"] else "chosen for this CPU"
    return f"{isa['active']} ({isa['sgemm_kernel']}; {why} from: {built})"


def _describe(d: Dict[str, object]) -> str:
    if not d["found"]:
        return f"{d['kind']}: none ({d['why']})"
    kind = "GPU" if d["is_gpu"] else "not a GPU, never chosen by auto"
    details = f", {d['details']}" if d.get("details") else ""
    return (f"{d['id']}: {d['name']} ({d['vendor']}, {int(d['memory_bytes']) >> 20} MiB, {d['compute_units']} compute "
            f"units, driver {d['driver']}{details}; {kind})")


def _auto_choice() -> str:
    from .. import _core
    from ..devices import ENV

    resolved, log = _core.resolve_device("auto")
    env = os.environ.get(ENV)
    return resolved + (f" (${ENV}={env} overrides it)" if env else "") + "".join(f"; {line}" for line in log)


def format_info(d: Dict[str, object]) -> str:
    width = max(len(k) for k in d)
    return "\n".join(f"{k + ':':<{width + 1}} {v}" for k, v in d.items())
