"""Run-time choice of the CPU kernels (src-lib/cpu/isa.h, cpu_isa.cpp, cmake/cpu_isa.cmake).

The CPU kernels are built once per instruction set (x86-64: avx512, avx2, generic) and one is
picked once per process, so every check that forces a choice runs in a subprocess. The build-tree
check verifies the property the isolation step exists for: no copy defines a global symbol that
another copy, or the baseline code, could be linked against in its place.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from darknet_py import _core

REPO = Path(__file__).resolve().parents[1]
ISA = _core.cpu_isa()

# One conv + folded batch norm + leaky (the GEMM tile, its epilogue and the vectorised activation)
# and one plain GEMM through the forced copy, against the reference backend. Exits 3 with the
# error when the copy cannot be used.
_PROBE = r"""
import sys
import numpy as np
from darknet_py import _core
try:
    cpu = _core.Ops("cpu")
except Exception as e:
    print(type(e).__name__, e)
    sys.exit(3)
ref = _core.Ops("reference")
rng = np.random.default_rng(1)
x = rng.uniform(-1, 1, (2, 19, 13, 11)).astype(np.float32)
w = rng.uniform(-1, 1, (21, 19, 3, 3)).astype(np.float32)
scale, shift = rng.uniform(0.5, 1.5, 21).astype(np.float32), rng.uniform(-1, 1, 21).astype(np.float32)
args = (x, w, 1, 1, 1, 1, 1, 13, 11, scale, shift, "leaky")
err = np.abs(cpu.conv2d_affine_act(*args) - ref.conv2d_affine_act(*args)).max()
a = rng.uniform(-1, 1, (37, 70)).astype(np.float32)
b = rng.uniform(-1, 1, (70, 53)).astype(np.float32)
c = np.zeros((37, 53), np.float32)
err = max(err, np.abs(cpu.gemm(False, False, 1.0, a, b, 0.0, c) - a.astype(np.float64) @ b).max())
print(_core.cpu_isa()["active"], err)
"""


def _forced(isa: str, code: str = _PROBE) -> subprocess.CompletedProcess:
    env = dict(os.environ, DARKNET_PY_ISA=isa)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_report_is_consistent():
    assert ISA["built"], "no CPU kernel copy built in"
    assert set(ISA["runnable"]) <= set(ISA["built"])
    assert ISA["runnable"], "no built copy runs here: the last copy must be the target's baseline"
    if ISA["forced"] is None:
        # unforced: the widest copy this CPU executes (built lists widest first)
        assert ISA["error"] is None and ISA["active"] == ISA["runnable"][0]
        assert ISA["sgemm_kernel"]


@pytest.mark.parametrize("isa", ISA["built"])
def test_forced_copy_computes_right_or_refuses(isa):
    r = _forced(isa)
    if isa in ISA["runnable"]:
        assert r.returncode == 0, r.stdout + r.stderr
        active, err = r.stdout.split()
        assert active == isa
        assert float(err) < 1e-3, f"{isa} copy: max |cpu - reference| = {err}"
    else:
        # e.g. avx512 on a CPU without it: a clear error, never a fault or a quiet substitute
        assert r.returncode == 3, r.stdout + r.stderr
        assert f"DARKNET_PY_ISA={isa}: this CPU cannot execute" in r.stdout
        assert "unset DARKNET_PY_ISA" in r.stdout


def test_unknown_isa_is_a_clear_error():
    r = _forced("sse9")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "DARKNET_PY_ISA=sse9: no such CPU kernels in this build" in r.stdout
    assert ", ".join(ISA["built"]) in r.stdout
    # `darknet_py info` shows the error instead of failing
    r = _forced("sse9", "from darknet_py.diagnostics.sysinfo import cpu_kernels; print(cpu_kernels())")
    assert r.returncode == 0 and r.stdout.startswith("none: DARKNET_PY_ISA=sse9"), r.stdout + r.stderr


def test_info_names_the_copy():
    from darknet_py.diagnostics.sysinfo import cpu_kernels

    line = cpu_kernels()
    if ISA["error"] is None:
        assert line.startswith(ISA["active"] + " (") and ", ".join(ISA["built"]) in line


def _isolated_objects():
    found = sorted(REPO.glob("build/*/darknet_cpu_*_isolated.o"))
    if not found:
        pytest.skip("no isolated CPU kernel objects under build/ (not an x86-64 dispatching build from this tree)")
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) not found")
    return found


def test_copies_share_no_global_symbol():
    # The latest build dir holds one object per copy; every global symbol a copy defines must be its
    # own (its inline namespace isa_<name>, or the .<name> suffix the isolation step gives weak
    # functions and vtables), or the linker could resolve one copy's call, or the baseline's, to
    # another copy's code: an AVX-512 std::vector<float>::resize serving a CPU without AVX-512.
    objs = _isolated_objects()
    newest = max(objs, key=lambda p: p.stat().st_mtime).parent
    defined = {}
    for obj in sorted(newest.glob("darknet_cpu_*_isolated.o")):
        isa = re.match(r"darknet_cpu_(\w+?)_isolated\.o", obj.name).group(1)
        out = subprocess.run(["nm", "--defined-only", "-g", str(obj)], capture_output=True, text=True, check=True)
        names = {line.split()[-1]: line.split()[-2] for line in out.stdout.splitlines() if line.strip()}
        assert names, f"{obj} defines nothing"
        for name, kind in names.items():
            if kind in "uV" and not name.startswith("_ZTV"):
                continue  # weak data shared on purpose (static locals of inline functions, guards)
            assert f"isa_{isa}" in name or name.endswith("." + isa), f"{obj.name}: {name} ({kind}) is not {isa}'s own"
        defined[isa] = {n for n, k in names.items() if k not in "uV" or n.startswith("_ZTV")}
        # the linker merges COMDAT groups by signature even where it is a local symbol (GCC's D5/C5
        # groups of destructors and constructors), then drops the other copies' members: a process
        # that crashed at exit calling a null thread_local destructor taught us this one
        if shutil.which("readelf"):
            out = subprocess.run(["readelf", "-gW", str(obj)], capture_output=True, text=True, check=True).stdout
            for sig in re.findall(r"^COMDAT group section \[ *\d+\] `[^']*' \[(.+)\] contains", out, re.M):
                if names.get(sig) in ("V", "u") or re.match(r"_ZTS|_ZTI|_ZGV|DW\.ref\.", sig):
                    continue  # shared data
                assert f"isa_{isa}" in sig or sig.endswith("." + isa), f"{obj.name}: group {sig} is not {isa}'s own"
    assert len(defined) >= 2
    isas = sorted(defined)
    for i, a in enumerate(isas):
        for b in isas[i + 1:]:
            assert not defined[a] & defined[b], f"{a} and {b} both define {sorted(defined[a] & defined[b])[:5]}"
