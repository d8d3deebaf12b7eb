"""The CPU kernels on 64-bit ARM Linux, under emulation: tools/arm64_emulated_ops.sh cross-compiles the
module for aarch64, where the CPU kernels have one copy, neon (cmake/cpu_isa.cmake), and runs the op
parity cases of test_ops.py there (cpu against reference, forward and backward, and the optimizer
steps) with Debian's arm64 Python under qemu-aarch64.

Skips, naming what is missing, without the cross compiler, qemu-aarch64 or the prepared arm64 Python
(`tools/arm64_emulated_ops.sh --check`); CI installs them (.ci/run). The first run cross-builds the
whole module (minutes on 2 cores); later runs reuse build/aarch64-linux.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "arm64_emulated_ops.sh"
EM_AARCH64 = 183  # ELF e_machine


def _script(*args: str, timeout: float) -> tuple[int, str]:
    # In its own session, so that a timeout kills the compilers or the emulator under it too.
    proc = subprocess.Popen(["bash", str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHON=sys.executable), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{SCRIPT.name} {' '.join(args)} did not finish in {timeout:.0f} s:\n{out[-6000:]}")
    return proc.returncode, out


@pytest.fixture(scope="module")
def emulated_run() -> str:
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT} not found (installed without sources)")
    if not shutil.which("bash"):
        pytest.skip("no bash to run tools/arm64_emulated_ops.sh")
    rc, out = _script("--check", timeout=120)
    if rc == 2:
        pytest.skip("; ".join(out.strip().splitlines()))
    assert rc == 0, out
    rc, out = _script(timeout=900)
    assert rc == 0, f"emulated op parity run failed (exit {rc}):\n{out[-12000:]}"
    return out


def _source_op_cases():
    # the cases the emulated run drew, from the same source file (the installed package may be older)
    spec = importlib.util.spec_from_file_location(
        "_arm64_op_cases", REPO / "python" / "darknet_py" / "diagnostics" / "op_cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_op_cases_pass_under_emulation(emulated_run):
    summary = [line for line in emulated_run.splitlines() if re.match(r"^\d+ \w+.* in [\d.]+s", line)]
    assert summary, f"no pytest summary in the output:\n{emulated_run[-6000:]}"
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary[-1])}
    cases = _source_op_cases()
    want = len(cases.CASES) + len(cases.TRAIN_CASES)
    assert counts.get("passed", 0) >= want, f"{summary[-1]}: expected every one of the {want} op cases to pass"
    assert set(counts) <= {"passed", "deselected", "warning", "warnings"}, summary[-1]


def test_module_is_aarch64_with_neon_kernels(emulated_run):
    report = re.search(r"^emulated: (\S+) (\S+) cpu_isa (\{.*\})$", emulated_run, re.M)
    assert report, f"no module report in the output:\n{emulated_run[-6000:]}"
    machine, path, isa = report[1], Path(report[2]), json.loads(report[3])
    assert machine == "aarch64"
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[4] == 2, f"{path} is not a 64-bit ELF file"
    assert int.from_bytes(header[18:20], "little") == EM_AARCH64, f"{path} is not an aarch64 module"
    assert isa["built"] == ["neon"] and isa["active"] == "neon" and isa["forced"] is None, isa
    assert "NEON" in isa["sgemm_kernel"], isa
