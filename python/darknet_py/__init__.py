"""darknet_py: a Darknet-compatible YOLO engine."""
from ._core import DarknetError

__version__ = "0.1.0"
__all__ = ["DarknetError", "__version__"]
