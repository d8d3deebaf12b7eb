"""The whole extension built with clang (macOS's compiler; the suite's own build uses the default
compiler, GCC on Linux), then the op parity tests (cpu against reference) and the dispatch tests run
against that build with each CPU kernel copy this machine executes forced in turn. Catches
GCC-only constructs and clang-only miscompiles in the vector kernels.

About 3 minutes on 2 cores from scratch (build/clang-linux is reused). Skips, saying so, where no
clang++ is installed (Debian: apt-get install clang-16).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import module_parity

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "clang-linux"


def _clang() -> str:
    names = ["clang++"] + [f"clang++-{v}" for v in range(30, 13, -1)]
    found = next((shutil.which(n) for n in names if shutil.which(n)), None)
    if not found:
        pytest.skip("no clang++ on PATH (Debian: apt-get install clang-16): the clang build is not checked")
    return found


def test_clang_builds_the_extension_and_passes_op_parity(tmp_path):
    if not sys.platform.startswith("linux"):
        pytest.skip("the clang build check runs on Linux (on macOS clang is the suite's own compiler)")
    clang = _clang()
    for tool in ("cmake", "ninja"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not found on PATH")
    pybind11 = pytest.importorskip("pybind11", reason="pybind11 (the test extra) builds the bindings")
    r = subprocess.run(["cmake", "-S", str(REPO), "-B", str(BUILD), "-G", "Ninja", f"-DCMAKE_CXX_COMPILER={clang}",
                        "-DDARKNET_PY_MODULE=ON", *module_parity.QUICK_BUILD,
                        # CUDA's kernels are nvcc's work, not clang's: one architecture is enough here
                        "-DDARKNET_PY_CUDA_ARCHS=90",
                        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                        f"-DPython_EXECUTABLE={sys.executable}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run(["ninja", "-C", str(BUILD), "_core"], capture_output=True, text=True, timeout=2400)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    warnings = [line for line in r.stdout.splitlines() if "warning:" in line]
    assert not warnings, "clang warns:\n" + "\n".join(warnings[:40])

    # the package's Python files with the clang-built module beside them
    pkg = tmp_path / "site" / "darknet_py"
    shutil.copytree(REPO / "python" / "darknet_py", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    (module,) = BUILD.glob("_core*.so")
    shutil.copy2(module, pkg / module.name)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    for line in module_parity.run_per_isa(sys.executable, tmp_path / "site", tmp_path, env):
        print(line)
