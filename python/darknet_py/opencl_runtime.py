"""Lets the OpenCL backend find an OpenCL runtime on machines that have none installed system-wide.

The C++ OpenCL device opens the ICD loader itself with dlopen: first the path in
DARKNET_PY_OPENCL_LIBRARY, then libOpenCL.so.1 / libOpenCL.so. `pip install "pyopencl[oclgrind]"`
brings a loader and the Oclgrind simulator (an ICD) inside pyopencl's `.libs` folder, but neither is
on the library path, and that loader needs help to work outside pyopencl:

* DARKNET_PY_OPENCL_LIBRARY = .libs/libOpenCL-*.so*: the bundled loader, found by full path.
* PYOPENCL_HOME = the pyopencl folder: pyopencl's patched loader reads it unconditionally (it
  segfaults inside clGetPlatformIDs when it is unset) and scans $PYOPENCL_HOME/.libs for .icd files.
  pyopencl sets the same value itself when imported.
* OCL_ICD_VENDORS = the full path of the ICD library: the bundled oclgrind.icd names the library
  without a directory, which the loader's dlopen finds only through pyopencl's own RPATH; a full
  library path in OCL_ICD_VENDORS is loaded directly. (LD_LIBRARY_PATH would also work but is read
  once at process start, too late to set from here.)

Nothing is changed when the system has its own loader: OCL_ICD_VENDORS would then hide the system's
real GPU drivers, and the simulator is never chosen by device="auto" anyway. Values the user has
already set are never overridden.
"""
from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
from typing import Optional


def _pyopencl_folder() -> Optional[str]:
    # find_spec locates the package without importing it (importing pyopencl loads its own loader).
    try:
        spec = importlib.util.find_spec("pyopencl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _bundled_icd(libs: str) -> Optional[str]:
    """Full path of the ICD library named by the first .icd file in `libs` (sorted), if it exists."""
    for icd in sorted(glob.glob(os.path.join(libs, "*.icd"))):
        try:
            with open(icd, encoding="utf-8") as f:
                name = f.read().strip()
        except OSError:
            continue
        path = name if os.path.isabs(name) else os.path.join(libs, name)
        if name and os.path.isfile(path):
            return path
    return None


def configure_environment() -> None:
    """Points the OpenCL backend at pyopencl's bundled loader and ICD (Oclgrind) when the system has
    no OpenCL loader, or when DARKNET_PY_OPENCL_LIBRARY already names that bundled loader. Must run
    before the first OpenCL call of the process (the loader reads these variables once)."""
    folder = _pyopencl_folder()
    if folder is None:
        return
    libs = os.path.join(folder, ".libs")
    loaders = sorted(glob.glob(os.path.join(libs, "libOpenCL*.so*")))
    if not loaders:
        return  # macOS/Windows wheels use the system's OpenCL
    chosen = os.environ.get("DARKNET_PY_OPENCL_LIBRARY")
    if chosen:
        # The user picked a loader: only complete the setup if it is pyopencl's own.
        if os.path.dirname(os.path.realpath(chosen)) != os.path.realpath(libs):
            return
    elif ctypes.util.find_library("OpenCL"):
        return  # a system loader exists; it reads /etc/OpenCL/vendors itself
    else:
        os.environ["DARKNET_PY_OPENCL_LIBRARY"] = loaders[0]
    os.environ.setdefault("PYOPENCL_HOME", folder)
    icd = _bundled_icd(libs)
    if icd:
        os.environ.setdefault("OCL_ICD_VENDORS", icd)
