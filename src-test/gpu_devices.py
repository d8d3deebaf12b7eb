"""The OpenCL devices the GPU backend's tests run on: two CPU runtimes that the test extra installs
with pip (pyopencl[oclgrind,pocl]). Oclgrind is a simulator that runs the kernel text with a data-race
and out-of-bounds checker (conftest.py turns it on and fails the session on any report); pocl compiles
the same text for the CPU, fast enough for whole networks. Both run the same GpuBackend code as a
CUDA or Metal device would, only the Device underneath differs.
"""
from typing import Optional

import pytest

from darknet_py import _core

MISSING = ('no {} OpenCL runtime found: pip install ".[test]" brings it (pyopencl[oclgrind,pocl]); '
           "`darknet_py info` says what was found")


def _find(match) -> Optional[str]:
    for d in _core.devices():
        if d["found"] and d["kind"] == "opencl" and match(d):
            return d["id"]
    return None


OCLGRIND = _find(lambda d: "Oclgrind" in d["name"])
POCL = _find(lambda d: "Oclgrind" not in d["name"] and not d["is_gpu"])  # pocl's "pthread-<cpu>"
GPU = _find(lambda d: d["is_gpu"])  # a real OpenCL GPU, where the machine has one (never in CI)
DEVICES = {"oclgrind": OCLGRIND, "pocl": POCL, "opencl_gpu": GPU}


def device(label: str) -> str:
    """The device id for "oclgrind" or "pocl", or a skip that says how to install it."""
    if not DEVICES.get(label):
        pytest.skip(MISSING.format(label))
    return DEVICES[label]
