"""The GPU devices the GPU backend's tests run on. In CI: the OpenCL devices: two CPU runtimes that the test extra installs
with pip (pyopencl[oclgrind,pocl]). Oclgrind is a simulator that runs the kernel text with a data-race
and out-of-bounds checker (conftest.py turns it on and fails the session on any report); pocl compiles
the same text for the CPU, fast enough for whole networks. Both run the same GpuBackend code as a
CUDA or Metal device would, only the Device underneath differs. On a machine with an NVIDIA GPU
(and a module built with CUDA) also "cuda"; elsewhere its tests skip with "no CUDA device".
"""
from typing import Optional

import pytest

from darknet_py import _core

MISSING = ('no {} OpenCL runtime found: pip install ".[test]" brings it (pyopencl[oclgrind,pocl]); '
           "`darknet_py info` says what was found")


_ALL = _core.devices()  # enumerating opens every runtime: once per session


def _find(match) -> Optional[str]:
    for d in _ALL:
        if d["found"] and d["kind"] == "opencl" and match(d):
            return d["id"]
    return None


OCLGRIND = _find(lambda d: "Oclgrind" in d["name"])
POCL = _find(lambda d: "Oclgrind" not in d["name"] and not d["is_gpu"])  # pocl's "pthread-<cpu>"
GPU = _find(lambda d: d["is_gpu"])  # a real OpenCL GPU, where the machine has one (never in CI)
CUDA = next((d["id"] for d in _ALL if d["found"] and d["kind"] == "cuda"), None)
_WHY_NO_CUDA = next((d["why"] for d in _ALL if d["kind"] == "cuda" and not d["found"]), "")
CUDA_MISSING = _WHY_NO_CUDA if _WHY_NO_CUDA.startswith("no CUDA device") else "no CUDA device: " + _WHY_NO_CUDA
DEVICES = {"oclgrind": OCLGRIND, "pocl": POCL, "opencl_gpu": GPU, "cuda": CUDA}


def device(label: str) -> str:
    """The device id for a label ("oclgrind", "pocl", "cuda", ...), or a skip that says why it is missing."""
    if not DEVICES.get(label):
        pytest.skip(CUDA_MISSING if label == "cuda" else MISSING.format(label))
    return DEVICES[label]
