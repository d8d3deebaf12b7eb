"""Lets the OpenCL backend find an OpenCL runtime on machines that have none installed system-wide.

The C++ OpenCL device opens the ICD loader itself with dlopen: first the path in
DARKNET_PY_OPENCL_LIBRARY, then libOpenCL.so.1 / libOpenCL.so. `pip install "pyopencl[oclgrind,pocl]"`
(the test extra) brings a loader and two CPU runtimes (ICDs) inside pyopencl's `.libs` folder: the
Oclgrind simulator, which reports data races and out-of-bounds accesses, and pocl, which compiles
kernels for the CPU (about 1000x faster). Neither is on the library path, and that loader needs help
to work outside pyopencl:

* DARKNET_PY_OPENCL_LIBRARY = .libs/libOpenCL-*.so*: the bundled loader, found by full path.
* PYOPENCL_HOME: pyopencl's patched loader reads it unconditionally (it segfaults inside
  clGetPlatformIDs when it is unset) and scans $PYOPENCL_HOME/.libs for .icd files.
* OCL_ICD_VENDORS = a folder of .icd files holding the libraries' full paths: the bundled .icd
  files name their library without a directory, which the loader's dlopen finds only through
  pyopencl's own RPATH. (LD_LIBRARY_PATH would also work but is read once at process start, too late
  to set from here.)
* POCL_CACHE_DIR: pocl's compiled-kernel cache, under the temp folder rather than ~/.cache.

Nothing is changed when the system has its own loader: OCL_ICD_VENDORS would then hide the system's
real GPU drivers, and the simulator is never chosen by device="auto" anyway. Values the user has
already set are never overridden.
"""
from __future__ import annotations

import ctypes.util
import glob
import hashlib
import importlib.util
import os
import tempfile
from typing import List, Optional


def _pyopencl_folder() -> Optional[str]:
    # find_spec locates the package without importing it (importing pyopencl loads its own loader).
    try:
        spec = importlib.util.find_spec("pyopencl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _bundled_icds(libs: str) -> List[str]:
    """Full paths of the ICD libraries that the .icd files in `libs` name (Oclgrind, pocl), sorted."""
    found = []
    for icd in sorted(glob.glob(os.path.join(libs, "*.icd"))):
        try:
            with open(icd, encoding="utf-8") as f:
                name = f.read().strip()
        except OSError:
            continue
        path = name if os.path.isabs(name) else os.path.join(libs, name)
        if name and os.path.isfile(path):
            found.append(path)
    return found


def _vendors_folder(icds: List[str]) -> str:
    """A folder of .icd files holding full library paths, for OCL_ICD_VENDORS: the loader then lists
    every bundled runtime (a single library path in OCL_ICD_VENDORS would list one)."""
    key = hashlib.sha1("\n".join(icds).encode()).hexdigest()[:12]
    folder = os.path.join(tempfile.gettempdir(), f"darknet_py-opencl-vendors-{key}")
    os.makedirs(folder, exist_ok=True)
    for path in icds:
        target = os.path.join(folder, os.path.basename(path) + ".icd")
        if not os.path.isfile(target):
            tmp = f"{target}.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(path + "\n")
            os.replace(tmp, target)  # atomic: concurrent processes never see half a file
    return folder


def configure_environment() -> None:
    """Points the OpenCL backend at pyopencl's bundled loader and ICDs (Oclgrind, pocl) when the system
    has no OpenCL loader, or when DARKNET_PY_OPENCL_LIBRARY already names that bundled loader. Must run
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
    icds = _bundled_icds(libs)
    vendors = None
    if icds and "OCL_ICD_VENDORS" not in os.environ:
        try:
            vendors = _vendors_folder(icds)
            os.environ["OCL_ICD_VENDORS"] = vendors
        except OSError:  # no writable temp folder: the first runtime alone
            os.environ["OCL_ICD_VENDORS"] = icds[0]
    # The loader also scans $PYOPENCL_HOME/.libs: pointing it at our folder (no .libs inside) keeps
    # each runtime from being listed twice.
    os.environ.setdefault("PYOPENCL_HOME", vendors or folder)
    # pocl caches compiled kernels; keep them out of the home folder of whoever runs the tests
    os.environ.setdefault("POCL_CACHE_DIR", os.path.join(tempfile.gettempdir(), "darknet_py-pocl-cache"))
