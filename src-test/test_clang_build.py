"""The CPU kernels built with clang (macOS's compiler; the suite's own build uses the default compiler,
GCC on Linux): every x86-64 copy of them (AVX-512, AVX2+FMA, the baseline) and the run-time dispatch
that picks one, through CMakeLists.txt with clang as the compiler, with no warning. The vector code is
where compiler-specific constructs live (GCC's __builtin_shuffle was one); the rest of the extension is
compiled by clang for macOS in test_macos_cross.py. To keep CI's time, the module is not linked here:
built whole with clang (`cmake -DCMAKE_CXX_COMPILER=clang++ -DDARKNET_PY_MODULE=ON`), it passes the op
parity tests with each copy forced (checked by hand; docs/building_and_testing.md, Other compilers and platforms).

About a minute on 2 cores from scratch (build/clang-linux is reused). Skips, saying so, where no
clang++ is installed (Debian: apt-get install clang-16) or the machine is not x86-64.
"""
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import module_parity

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "clang-linux"
COPIES = ["darknet_cpu_avx512", "darknet_cpu_avx2", "darknet_cpu_generic"]


def _clang() -> str:
    names = ["clang++"] + [f"clang++-{v}" for v in range(30, 13, -1)]
    found = next((shutil.which(n) for n in names if shutil.which(n)), None)
    if not found:
        pytest.skip("no clang++ on PATH (Debian: apt-get install clang-16): the clang build is not checked")
    return found


def test_clang_builds_every_cpu_kernel_copy_without_warnings():
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the x86-64 kernel copies are built on x86-64 Linux (on macOS clang is the suite's own compiler)")
    clang = _clang()
    for tool in ("cmake", "ninja"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not found on PATH")
    r = subprocess.run(["cmake", "-S", str(REPO), "-B", str(BUILD), "-G", "Ninja", f"-DCMAKE_CXX_COMPILER={clang}",
                        "-DDARKNET_PY_CUDA=OFF", *module_parity.QUICK_BUILD], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "darknet_py: CPU kernel copies: avx512;avx2;generic" in r.stdout
    dispatch = "CMakeFiles/darknet_engine.dir/src-lib/cpu/cpu_isa.cpp.o"
    subprocess.run(["ninja", "-C", str(BUILD), "-t", "clean", *COPIES, dispatch], capture_output=True)
    r = subprocess.run(["ninja", "-C", str(BUILD), *COPIES, dispatch], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    warnings = [line for line in r.stdout.splitlines() if "warning:" in line]
    assert not warnings, "clang warns:\n" + "\n".join(warnings[:40])
    objects = [p for c in COPIES for p in BUILD.glob(f"CMakeFiles/{c}.dir/**/*.o")]
    assert len(objects) == 3 * len(re.findall(r"src-lib/cpu/\w+\.cpp", (REPO / "cmake/cpu_isa.cmake").read_text()))
