"""Where the CUDA device finds cuBLAS, cuDNN and NCCL when they come from pip rather than a CUDA toolkit.

The engine opens both at run time (src-cuda/cublas_api.cpp, cudnn_api.cpp) from
DARKNET_PY_CUBLAS_LIBRARY / DARKNET_PY_CUDNN_LIBRARY, the loader's search path, or the toolkit it was
built with. PyTorch and `pip install nvidia-cublas nvidia-cudnn-cu13` put them in site-packages
(nvidia/cu13/lib, nvidia/cublas/lib, nvidia/cudnn/lib), where the loader does not look: this points
the engine there. Must run before the first CUDA device is opened.
"""
import glob
import os
import sys

# environment variable -> the library file it names
LIBRARIES = {"DARKNET_PY_CUBLAS_LIBRARY": "libcublas.so.13", "DARKNET_PY_CUDNN_LIBRARY": "libcudnn.so.9",
             "DARKNET_PY_NCCL_LIBRARY": "libnccl.so.2"}  # NCCL: pip's nvidia-nccl-cu13 (nvidia/nccl/lib)


def configure_environment() -> None:
    if not sys.platform.startswith("linux"):
        return
    for env, name in LIBRARIES.items():
        if os.environ.get(env):
            continue
        for folder in sys.path:
            found = sorted(glob.glob(os.path.join(folder, "nvidia", "*", "lib", name)))
            if found:
                os.environ[env] = found[0]
                break
