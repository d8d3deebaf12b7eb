"""Where the CUDA device finds cuBLAS when it comes from pip rather than a CUDA toolkit.

The engine opens cuBLAS at run time (src-cuda/cublas_api.cpp) from DARKNET_PY_CUBLAS_LIBRARY, the
loader's search path, or the toolkit it was built with. PyTorch and `pip install nvidia-cublas` put it
in site-packages (nvidia/cu13/lib or nvidia/cublas/lib), where the loader does not look: this points
the engine there. Must run before the first CUDA device is opened.
"""
import glob
import os
import sys

ENV = "DARKNET_PY_CUBLAS_LIBRARY"


def configure_environment() -> None:
    if os.environ.get(ENV) or not sys.platform.startswith("linux"):
        return
    for folder in sys.path:
        found = sorted(glob.glob(os.path.join(folder, "nvidia", "*", "lib", "libcublas.so.13")))
        if found:
            os.environ[ENV] = found[0]
            return
