"""What the tests that build the engine themselves share: the CMake options that keep their builds
quick (clang, the cross builds), and a runner of the op parity tests (cpu against reference) and the
dispatch tests against a darknet_py built another way than the one under test (the wheel, installed
in a fresh venv), once per CPU kernel copy this machine executes (DARKNET_PY_ISA), checking first
that the darknet_py imported is that build's."""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# CMake options of the test builds (clang, the cross builds) that keep CI's time down: no LTO
# (pybind11's -flto), and the bindings at -O0 (they take most of a build at -O3: the engine and the
# CPU kernels keep their own -O3, from CMakeLists.txt and cmake/cpu_isa.cmake)
QUICK_BUILD = ["-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF", "-DCMAKE_BUILD_TYPE=Quick"]
# the GPU backend's runtimes are not ISA copies; about 10 s per copy on 2 cores
PARITY_TESTS = ["test_ops.py", "test_isa_dispatch.py"]
PARITY_SELECTION = "not oclgrind and not pocl and not opencl and not cuda"

_RUN = r"""
import sys, pytest
from pathlib import Path
import darknet_py._core as core
root = Path(sys.argv[1]).resolve()
if not Path(core.__file__).resolve().is_relative_to(root):
    sys.exit(f"imported {core.__file__}, not the build under test (in {root})")
sys.exit(pytest.main(sys.argv[2:]))
"""


def runnable_isas(python: str, cwd: Path, env: dict) -> list:
    probe = "import darknet_py._core as c; print(','.join(c.cpu_isa()['runnable']))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd, env=env)
    return out.stdout.strip().split(",")


def run_per_isa(python: str, root: Path, cwd: Path, env: dict = None) -> list:
    """The pytest summary line of each run; asserts each passed with at least one test."""
    env = dict(os.environ if env is None else env)
    tests = [str(REPO / "src-test" / t) for t in PARITY_TESTS]
    summaries = []
    for isa in runnable_isas(python, cwd, env):
        r = subprocess.run([python, "-c", _RUN, str(root), *tests, "-q", "-x", "-p", "no:cacheprovider",
                            "-k", PARITY_SELECTION], capture_output=True, text=True, cwd=cwd,
                           env=dict(env, DARKNET_PY_ISA=isa), timeout=1200)
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        assert r.returncode == 0, f"DARKNET_PY_ISA={isa}:\n{r.stdout[-4000:]}{r.stderr[-2000:]}"
        assert " passed" in last and "failed" not in last, r.stdout[-500:]
        summaries.append(f"DARKNET_PY_ISA={isa}: {last}")
    return summaries
