"""What compare.py and the pytest-benchmark suite share: the benchmarked models, seeded random
weights (the same file is loaded by our engine and by OpenCV, so both compute the same network),
the machine description and the FMA peak that efficiencies are quoted against."""
from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

import numpy as np

import darknet_py
from darknet_py import _core
from darknet_py.model_files.cfgfiles import cfg_with_size, resolve_cfg


class Model(NamedTuple):
    name: str  # a cfg shipped with the package (python -m darknet_py info lists them)
    size: int  # network input width = height
    rounds: Optional[int] = None  # timed runs; None = the caller's default (yolov4 is slow: one)


# The benchmarked models: tiny models at their usual sizes, yolov4 at 608 once.
MODELS: List[Model] = [
    Model("yolov4-tiny", 416),
    Model("yolov3-tiny", 416),
    Model("yolov4-tiny-3l", 608),
    Model("yolov7-tiny", 416),
    Model("yolov4", 608, rounds=1),
]


def find_model(name: str) -> Model:
    for m in MODELS:
        if m.name == name:
            return m
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(m.name for m in MODELS)}")


REPO_CFG = Path(__file__).resolve().parents[1] / "cfg"


def model_cfg(name: str) -> str:
    """The cfg shipped with the installed package, else the repository's cfg/ (a source checkout)."""
    try:
        return resolve_cfg(name)
    except FileNotFoundError:
        p = REPO_CFG / f"{name}.cfg"
        if p.is_file():
            return str(p)
        raise


def sized_cfg(model: Model, workdir: str) -> str:
    """The model's cfg with its [net] size set to model.size, copied into workdir."""
    tmp = cfg_with_size(model_cfg(model.name), model.size, model.size)
    dst = os.path.join(workdir, f"{model.name}-{model.size}.cfg")
    shutil.move(tmp, dst)
    return dst


def fill_random(net: "darknet_py.Network", seed: int = 0) -> None:
    """He-scaled weights and plausible batch-norm statistics, so activations neither vanish nor
    explode through the network (with all-zero weights a GEMM could skip work and look fast)."""
    rng = np.random.default_rng(seed)
    for i in range(len(net.layers)):
        p = net.params(i)
        for k, v in p.items():
            if k == "weights":
                v[...] = rng.standard_normal(v.shape) * np.sqrt(2.0 / max(1, v[0].size))
            elif k == "rolling_variance":
                v[...] = rng.uniform(0.5, 2.0, v.shape)
            elif k == "scales":
                v[...] = rng.uniform(0.5, 1.5, v.shape)
            else:
                v[...] = rng.uniform(-0.1, 0.1, v.shape)
        net.set_params(i, p)  # (params are views on the CPU, copies on a GPU)


def random_model(model: Model, workdir: str, seed: int = 0):
    """(Network, cfg path, weights path) with seeded random weights saved in Darknet's format."""
    cfg = sized_cfg(model, workdir)
    net = darknet_py.Network(cfg, device="cpu")
    fill_random(net, seed)
    weights = os.path.join(workdir, f"{model.name}-{model.size}.weights")
    net.save_weights(weights)
    return net, cfg, weights


def input_blob(net: "darknet_py.Network", batch: int = 1, seed: int = 1) -> np.ndarray:
    w, h = net.input_size
    return np.random.default_rng(seed).random((batch, net.channels, h, w), dtype=np.float32)


def set_threads(n: int) -> None:
    """Our engine's and OpenCV's process-wide thread counts (ONNX Runtime and OpenVINO fix theirs per
    session); OpenCV's only where it is installed."""
    _core.set_threads(n)
    try:
        import cv2
    except ImportError:
        return
    cv2.setNumThreads(n)


# ---------------------------------------------------------------------------------------------
# The machine


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            return subprocess.check_output(["sysctl", "-n", "machdep.cpu.brand_string"], text=True).strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return platform.processor() or platform.machine()


def isa_flags() -> List[str]:
    """The vector ISA extensions that matter for fp32 GEMM, as the CPU reports them."""
    wanted = ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512vl", "amx_tile", "neon", "asimd", "sve"]
    flags: set = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags |= set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if platform.machine() in ("arm64", "aarch64"):
        flags.add("neon")
    return [f for f in wanted if f in flags]


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_description(threads: int) -> Dict[str, str]:
    import cv2

    return {
        "CPU": cpu_model(),
        "cores usable (affinity)": str(usable_cpus()),
        "threads used": str(threads),
        "ISA": " ".join(isa_flags()) or "unknown",
        "darknet_py build": str(_core.build_info()),
        "OpenCV": cv2.__version__,
        "Python / NumPy": f"{platform.python_version()} / {np.__version__}",
    }


# ---------------------------------------------------------------------------------------------
# FMA peak: a compiled loop of independent FMAs on every thread (the ceiling no GEMM can pass),
# with a large GEMM of our own as the fallback where no C++ compiler is found.

_FMA_SRC = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#if defined(__AVX512F__)
constexpr int VW = 16;
#elif defined(__AVX__)
constexpr int VW = 8;
#else
constexpr int VW = 4;
#endif
typedef float vec __attribute__((vector_size(VW * 4)));
// 12 independent accumulator chains: enough to cover FMA latency x FMA ports on current cores
static float chains(long iters) {
    vec m, c;
    for (int i = 0; i < VW; ++i) { m[i] = 0.999999f; c[i] = 1e-7f; }
    vec a0 = m, a1 = m + c, a2 = m - c, a3 = m * m, a4 = a0 + a1, a5 = a1 + a2, a6 = a2 + a3, a7 = a3 + a4,
        a8 = a4 + a5, a9 = a5 + a6, a10 = a6 + a7, a11 = a7 + a8;
    for (long it = 0; it < iters; ++it) {
#define F(x) x = x * m + c;
        F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7) F(a8) F(a9) F(a10) F(a11)
        // keeps the chains in registers and stops the compiler from folding the loop
        asm volatile("" : "+w"(a0), "+w"(a1), "+w"(a2), "+w"(a3), "+w"(a4), "+w"(a5), "+w"(a6), "+w"(a7),
                     "+w"(a8), "+w"(a9), "+w"(a10), "+w"(a11));
    }
    vec s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    return s[0];
}
int main(int argc, char** argv) {
    int nt = atoi(argv[1]);
    long iters = atol(argv[2]);
    double best = 0;
    for (int rep = 0; rep < 7; ++rep) {
        std::vector<std::thread> th;
        std::vector<float> sink(nt);
        auto t0 = std::chrono::steady_clock::now();
        for (int t = 0; t < nt; ++t) th.emplace_back([&, t] { sink[t] = chains(iters); });
        for (auto& t : th) t.join();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double g = 2.0 * VW * 12 * iters * nt / s / 1e9;
        if (g > best) best = g;
    }
    printf("%.2f %d\n", best, VW);
}
"""


class Peak(NamedTuple):
    gflops: float
    method: str


def fma_peak(threads: int) -> Peak:
    """The best of 7 runs of the FMA loop on `threads` threads (GFLOP/s, an FMA counted as 2)."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx:
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "fma.cpp"), os.path.join(d, "fma")
            Path(src).write_text(_FMA_SRC.replace('"+w"', '"+v"') if _is_x86() else _FMA_SRC)
            flags = ["-O2", "-std=c++17", "-pthread", "-march=native" if _is_x86() else "-mcpu=native"]
            try:
                subprocess.run([cxx, *flags, src, "-o", exe], check=True, capture_output=True, timeout=120)
                out = subprocess.run([exe, str(threads), "20000000"], check=True, capture_output=True, text=True,
                                     timeout=300).stdout.split()
                return Peak(float(out[0]), f"FMA loop, {out[1]}-float vectors, {threads} threads, best of 7")
            except (OSError, subprocess.SubprocessError, IndexError, ValueError):
                pass
    return gemm_peak(threads)


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def gemm_peak(threads: int, n: int = 1536) -> Peak:
    """Our own SGEMM on n x n x n (a lower bound of the peak: no GEMM reaches it)."""
    _core.set_threads(threads)
    ops = _core.Ops("cpu")
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(3))
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        ops.gemm(False, False, 1.0, a, b, 0.0, c)
        best = min(best, time.perf_counter() - t)
    return Peak(2.0 * n ** 3 / best / 1e9, f"our SGEMM {n}^3, {threads} threads (no compiler for the FMA loop)")


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (VmHWM on Linux, ru_maxrss elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return r / (1024 * 1024 if sys.platform == "darwin" else 1024)
