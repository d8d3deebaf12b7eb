"""darknet_py: a Darknet-compatible YOLO engine with a C++ core.

    import cv2, darknet_py
    net = darknet_py.Network("yolov4-tiny.cfg", "yolov4-tiny.weights", "coco.names")
    detections = net.detect(cv2.imread("dog.jpg"))
"""
from .diagnostics.cuda_runtime import configure_environment as _configure_cuda
from .diagnostics.opencl_runtime import configure_environment as _configure_opencl

_configure_opencl()  # before the engine first looks for OpenCL devices
_configure_cuda()  # and for cuBLAS

from ._core import DarknetError  # noqa: E402
from .network import Detection, Network, read_names  # noqa: E402
from .evaluation.evaluate import compute_map  # noqa: E402
from .training.train import StopTraining, TrainingDiverged, TrainResult, train  # noqa: E402
from .outputs.draw import draw_detections as annotate  # noqa: E402
# the function replaces the submodule of the same name as the package's attribute, so that
# `darknet_py.devices()` works; the submodule stays importable (`from darknet_py.devices import resolve`)
from .devices import devices  # noqa: E402


def metal_source() -> str:
    """The Metal Shading Language text a Mac compiles for the GPU kernels (prelude + kernel text)."""
    from ._core import kernel_source

    return kernel_source("metal")


map = compute_map  # darknet_py.map(data, cfg, weights, ...): Darknet's `detector map`

__version__ = "0.1.0"
__all__ = ["DarknetError", "Detection", "Network", "StopTraining", "TrainResult", "TrainingDiverged", "annotate",
           "compute_map", "devices", "metal_source", "read_names", "train", "__version__"]
