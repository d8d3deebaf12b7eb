"""The Python face of a Darknet network: load a .cfg/.weights pair, detect objects in images."""
from __future__ import annotations

import functools
import os
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import cv2
import numpy as np

from . import _core
from ._core import DarknetError
from .devices import default_device, resolve

if TYPE_CHECKING:
    from .export.coreml_model import CoreMLSummary
    from .export.onnx_model import ExportSummary

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Detection:
    """One detected object. The box is in pixels of the original image: (x, y) is the top-left corner.
    track_id: the object's identity across frames where it was tracked (Network.track, `detect
    --track`; from 1), else None."""

    class_id: int
    class_name: str
    confidence: float
    x: float
    y: float
    w: float
    h: float
    track_id: Optional[int] = None

    @property
    def box(self) -> Tuple[float, float, float, float]:
        return (self.x, self.y, self.w, self.h)

    @property
    def centre(self) -> Tuple[float, float]:
        return (self.x + self.w / 2, self.y + self.h / 2)

    def to_dict(self) -> dict:
        d = {"class_id": self.class_id, "class_name": self.class_name, "confidence": round(self.confidence, 6),
             "box": [round(v, 2) for v in self.box]}
        if self.track_id is not None:
            d["track_id"] = self.track_id
        return d


def read_names(path: PathLike) -> List[str]:
    """Reads a Darknet .names file: one class name per line."""
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def _existing(path: PathLike, what: str) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        if what == "weights file":  # (model_files/official.py says the same, naming the models)
            raise FileNotFoundError(f"weights file not found: {path} (the official weights: "
                                    "`darknet_py weights get NAME`; `darknet_py weights list` names them)")
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


def _model_file(path: PathLike, what: str, suffix: str) -> str:
    """A path, or the name of a cfg/names file shipped with the package (as the CLI takes them)."""
    from .model_files.cfgfiles import resolve_model_file

    return resolve_model_file(os.fspath(path), what, suffix)


def _serialized(method):
    """Runs a method under its network's lock. The engine serializes each call into one network itself;
    this makes a method that makes several (detect: the input size, then the forward) one step that
    no other thread's call on the same network interleaves with. Waiting for it releases the GIL."""
    @functools.wraps(method)
    def locked(self: "Network", *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


def _as_blob(blob) -> np.ndarray:
    """A batch for the engine: float32, or kept in a half batch's dtype (float16, uint16: batch_storage.py),
    which the engine takes only in the network's own precision (and says so otherwise)."""
    blob = np.asarray(blob)
    return blob if blob.dtype in (np.float16, np.uint16) else blob.astype(np.float32, copy=False)


class Network:
    """A Darknet network built from a .cfg file, optionally with .weights and class names.

    >>> net = Network("yolov4-tiny.cfg", "yolov4-tiny.weights", "coco.names")
    >>> for d in net.detect(cv2.imread("dog.jpg")):
    ...     print(d.class_name, d.confidence, d.box)

    Any method may be called from several threads at once: calls on one network run one at a time
    (in some order); separate networks, e.g. clone()s, run in parallel.
    """

    def __init__(self, cfg: PathLike, weights: Optional[PathLike] = None, names: Optional[PathLike] = None,
                 device: Optional[str] = None, *, backend: Optional[str] = None, precision: str = "auto") -> None:
        # device: see darknet_py.devices (None: $DARKNET_PY_DEVICE, else "auto"); backend: its old name;
        # precision: the activations' storage type, see the `precision` property
        self._lock = threading.RLock()
        self.precision_reason: Optional[str] = None  # the half type precision="auto" chose, and why
        self.cfg_path = _model_file(cfg, "cfg file", ".cfg")
        self._net = _core.Net(self.cfg_path, resolve(device or backend or default_device()))
        self.precision = precision
        for msg in self._net.warnings:
            warnings.warn(msg, stacklevel=2)
        self.weights_path: Optional[str] = None
        if weights is not None:
            self.load_weights(weights)
        self.names: List[str] = read_names(_model_file(names, "names file", ".names")) if names is not None else []

    def clone(self) -> "Network":
        """Another Network on the same device that shares this one's weights (no copy) and has its own
        activations: one clone per thread lets several threads detect in parallel for one copy of the
        weights. Changing the weights of either (load_weights, set_params, writing a params() view,
        training) first gives that one its own copy, so the other is unaffected."""
        with self._lock:
            twin = object.__new__(Network)
            twin._lock = threading.RLock()
            twin._net = self._net.clone()
            twin.cfg_path, twin.weights_path, twin.names = self.cfg_path, self.weights_path, list(self.names)
            return twin

    # ---- model files -------------------------------------------------------------------------
    @_serialized
    def resize_input(self, width: int, height: int) -> None:
        """Rebuilds the network for another input size (the cfg's width and height), keeping the weights;
        detect() then resizes images to it. Cfgs whose parameters depend on the size cannot."""
        self._net.resize_input(int(width), int(height))

    @_serialized
    def load_weights(self, path: PathLike, max_layers: Optional[int] = None) -> dict:
        """Loads Darknet .weights; with max_layers, only the first N layers (Darknet's `partial`).
        Returns the file header (major, minor, revision, seen)."""
        path = _existing(path, "weights file")
        before = len(self._net.warnings)
        header = self._net.load_weights(path, -1 if max_layers is None else int(max_layers))
        for msg in self._net.warnings[before:]:
            warnings.warn(msg, stacklevel=2)
        self.weights_path = path
        return header

    def save_weights(self, path: PathLike, max_layers: Optional[int] = None) -> None:
        """Writes Darknet .weights (version 0.2.5) atomically; with max_layers, only the first N layers'
        parameters (Darknet's `partial`: a backbone such as yolov4-tiny.conv.29)."""
        self._net.save_weights(os.fspath(path), -1 if max_layers is None else int(max_layers))

    def params(self, layer: int) -> dict:
        """The parameters of layer `layer`, in .weights file order. On the CPU they are writable NumPy
        views of the engine's memory; on a GPU they are copies: write them back with set_params.
        (A view taken before clone() writes to both networks: take it again after clone().)"""
        return self._net.params(layer)

    def set_params(self, layer: int, values: dict) -> None:
        """Writes parameters of layer `layer` from {name: array} (any device)."""
        self._net.set_params(layer, values)

    # ---- shape and description ---------------------------------------------------------------
    @property
    def input_size(self) -> Tuple[int, int]:
        """Network input (width, height) in pixels."""
        return (self._net.width, self._net.height)

    @property
    def channels(self) -> int:
        return self._net.channels

    @property
    def layers(self) -> "LayerTable":
        """The layers with their shapes and BFLOPs; prints as Darknet's table."""
        return LayerTable(self._net.layers(), self._net.layer_table())

    @property
    def yolo_layers(self) -> List[int]:
        return list(self._net.yolo_layers)

    @property
    def classes(self) -> int:
        ys = self._net.yolo_layers
        return self._net.yolo_info(ys[-1])["classes"] if ys else self._net.layers()[-1]["output"][0]

    @property
    def device(self) -> str:
        """Where the network runs: "cpu", "opencl:0", ... (see darknet_py.devices)."""
        return self._net.backend

    @device.setter
    @_serialized
    def device(self, name: str) -> None:
        self._net.set_backend(resolve(name))

    def to(self, device: str, precision: str = "auto") -> "Network":
        """Moves the parameters to another device (as torch's Module.to) and runs it in `precision`
        (see the `precision` property); returns self."""
        with self._lock:
            self.device = device
            self.precision = precision
        return self

    @property
    def precision(self) -> str:
        """Storage type of the activations: "fp32", "fp16" or "bf16" (set "auto", the default, for the
        device's fastest: devices.auto_precision, with the choice in `precision_reason`). Half runs on GPU
        devices (CUDA, Metal, OpenCL), for detection and training: weights stay fp32 (a half copy feeds
        each convolution), math accumulates in fp32, the yolo heads come back in fp32; fp16 training
        scales its loss dynamically (README's Half precision). Setting a precision the
        device cannot run raises DarknetError naming the ones it can (`precisions`). Setting `device`
        alone sets it back to fp32; `to(device)` chooses again ("auto")."""
        return self._net.precision

    @precision.setter
    @_serialized
    def precision(self, name: str) -> None:
        if name == "auto":  # devices.auto_precision: bf16, fp16 or fp32 by what the device has
            from .devices import auto_precision, auto_precision_line

            name, why = auto_precision(self.device)
            self.precision_reason = auto_precision_line(name, why)
        self._net.precision = str(name)

    @property
    def layout(self) -> str:
        """How the device holds the activations: "nchw", or "nhwc" (channels last) where its tensor-core
        convolutions read that without transposes (bf16 on CUDA with cuDNN; the environment variable
        DARKNET_PY_LAYOUT=nchw|nhwc|auto, read when the network is made or its precision or device set,
        overrides it). Every array the network hands out is NCHW either way."""
        return self._net.layout

    @property
    def precisions(self) -> List[str]:
        """The precisions this network's device runs: ["fp32"] on the CPU, all three on GPU devices."""
        return list(self._net.precisions)

    backend = device  # the old name

    # ---- inference -----------------------------------------------------------------------------
    @_serialized
    def preprocess(self, image: np.ndarray, letterbox: bool = False) -> np.ndarray:
        """BGR uint8 image -> float32 CHW RGB in [0, 1] at the network size (Darknet's resize)."""
        w, h = self.input_size
        return _core.preprocess(_as_image(image, self.channels), w, h, letterbox)

    @_serialized
    def forward(self, blob: np.ndarray) -> List[np.ndarray]:
        """Runs the network on an NxCxHxW float32 blob. Returns each yolo layer's output (after the
        head's activations, Darknet's layout), or the last layer's output for a classifier. A network in
        fp16 / bf16 also takes the blob in its own half type, uploaded as it is (float16, or uint16 holding
        bf16 bits: data/batch_storage.py)."""
        blob = _as_blob(blob)
        if blob.ndim == 3:
            blob = blob[None]
        outs = self._net.yolo_layers or [len(self._net.layers()) - 1]
        return self._net.forward(blob, list(outs))

    def pin_memory(self, blob: np.ndarray) -> np.ndarray:
        """A copy of a float32 blob in page-locked host memory of this network's device, as PyTorch's
        pin_memory() makes: forward() and training upload it by DMA alone, without first copying it into
        staging buffers on the CPU. Worth it for a buffer that is filled and uploaded again and again
        (fill it in place: `pinned[...] = next_batch`). The blob itself (as float32) on devices without
        such memory (the CPU, OpenCL, Metal). A half blob (see forward) stays half."""
        return self._net.pin_memory(_as_blob(blob))

    def detect(self, image: np.ndarray, thresh: float = 0.25, nms: float = 0.45,
               letterbox: bool = False, postproc: str = "device", clip: bool = True) -> List[Detection]:
        """Detects objects in one BGR uint8 image (as cv2.imread returns it). postproc, clip: see detect_blob."""
        return self.detect_batch([image], thresh, nms, letterbox, postproc, clip)[0]

    @_serialized
    def detect_batch(self, images: Iterable[np.ndarray], thresh: float = 0.25, nms: float = 0.45,
                     letterbox: bool = False, postproc: str = "device", clip: bool = True) -> List[List[Detection]]:
        """Detects objects in several images (any iterable: a list, a generator) in one forward pass;
        one list of detections per image."""
        _check_postproc(postproc)
        images = list(images)
        if not images:
            return []
        blob = np.stack([self.preprocess(im, letterbox) for im in images])
        sizes = [(im.shape[1], im.shape[0]) for im in images]
        return self.detect_blob(blob, sizes, thresh, nms, letterbox, postproc, clip)

    @_serialized
    def detect_blob(self, blob: np.ndarray, sizes: Sequence[Tuple[int, int]], thresh: float = 0.25,
                    nms: float = 0.45, letterbox: bool = False, postproc: str = "device",
                    clip: bool = True) -> List[List[Detection]]:
        """Detections from an already preprocessed NxCxHxW blob; `sizes` are the original (width, height).

        postproc: "device" (default) decodes, thresholds and compacts on the network's backend, so only the
        candidates come down; "cpu" downloads the yolo heads and decodes on the host; "compare" runs both and
        raises DarknetError at the first difference (class, confidence beyond 1e-4, box beyond 1e-3 px, a
        missing or extra detection), else returns the device's result. clip: boxes clipped to the image
        (those left empty dropped); clip=False gives them as the network predicts them, as Darknet's
        `detector map` matches them."""
        _check_postproc(postproc)
        if not 0 <= thresh < 1:
            raise DarknetError(f"thresh must be in [0, 1), got {thresh}")
        raw = self._net.detect(np.ascontiguousarray(blob, dtype=np.float32), [tuple(map(int, s)) for s in sizes],
                               float(thresh), float(nms), bool(letterbox), postproc, bool(clip))
        names = self.names
        return [[Detection(c, names[c] if c < len(names) else str(c), float(p), x, y, w, h)
                 for (c, p, x, y, w, h) in per_image] for per_image in raw]

    def detect_tiled(self, image: np.ndarray, tiles: Union[str, Tuple[int, int]] = "auto", overlap: float = 0.2,
                     thresh: float = 0.25, nms: float = 0.45, letterbox: bool = False) -> List[Detection]:
        """Detects small objects in a large image: overlapping tiles ("auto": at the network's input size;
        (rows, cols)) and the whole image downscaled, in one batch, merged so that an object cut by a
        tile border is one detection. See darknet_py.tiling."""
        from .tiling import detect_tiled

        return detect_tiled(self, image, tiles, overlap, thresh, nms, letterbox)

    def stream(self, source: Union[int, PathLike], thresh: float = 0.25, nms: float = 0.45, letterbox: bool = False,
               max_frames: Optional[int] = None, drop: bool = True, track: Union[bool, str] = False,
               **track_params) -> "Iterator[Tuple[np.ndarray, List[Detection]]]":
        """Yields (frame, detections) for every frame of `source`: a camera index (0), a stream URL
        (rtsp://, rtmp://, http(s)://), a video, an image, a folder, a glob or a list file, as
        `darknet_py detect` takes them. A generator: closing it (or leaving the for loop) releases
        the capture. A live source hands out its newest frame (drop=False: every frame); see
        darknet_py.media.stream. track=True (or a tracker's name: "bytetrack", "sort", "ocsort") gives each
        detection its track_id, as track() does."""
        from .media.stream import stream_detections

        return stream_detections(self, source, thresh, nms, letterbox, max_frames, drop, track or None,
                                 track_params)

    def track(self, source: Union[int, PathLike], tracker: str = "bytetrack", thresh: float = 0.25,
              nms: float = 0.45, letterbox: bool = False, max_frames: Optional[int] = None, drop: bool = True,
              **track_params) -> "Iterator[Tuple[np.ndarray, List[Detection]]]":
        """As stream(), with each detection's track_id set by `tracker` (Roboflow's trackers library:
        `pip install "darknet-engine[track]"`); track_params are the library's (lost_track_buffer,
        track_activation_threshold, minimum_iou_threshold, high_conf_det_threshold,
        minimum_consecutive_frames). A new tracker starts with each video; the images of a folder,
        in order, are one sequence. See darknet_py.tracking."""
        return self.stream(source, thresh, nms, letterbox, max_frames, drop, track=tracker, **track_params)

    # ---- export ---------------------------------------------------------------------------------
    @_serialized
    def export_onnx(self, path: PathLike, size: Optional[Tuple[int, int]] = None, batch: int = 1,
                    dynamic_batch: bool = False, postprocess: bool = False, thresh: float = 0.25,
                    nms: float = 0.45, precision: str = "fp32") -> "ExportSummary":
        """Writes the network as an ONNX model (needs `pip install "darknet-engine[onnx]"`). Its outputs are
        what forward returns (yolo_<layer> per head, or `output`), batchnorm folded into the convolutions;
        with postprocess=True, detections after decoding and NMS: boxes (x1, y1, x2, y2 relative to the
        input), scores, classes, batch_index. size=(width, height) exports at another input size;
        dynamic_batch=True leaves the batch open. precision="fp16": float16 weights and activations, float32
        input and outputs. See darknet_py.export.onnx_model."""
        from .export.onnx_model import export_onnx

        return export_onnx(self, path, size, batch, dynamic_batch, postprocess, thresh, nms, precision=precision)

    @_serialized
    def export_coreml(self, path: PathLike, size: Optional[Tuple[int, int]] = None, precision: str = "fp32",
                      thresh: float = 0.25, nms: float = 0.45) -> "CoreMLSummary":
        """Writes the network as a Core ML object detector, a .mlpackage (needs `pip install
        "darknet-engine[coreml]"`): an ML Program (macOS 13+) running the network and the yolo decode, then
        Core ML's NMS; input `image` (RGB, the network's size, or size=(width, height)), outputs
        `confidence` and `coordinates` as Vision reads them, self.names as class labels. precision="fp16":
        float16 weights and activations (the Neural Engine's). thresh, nms: the default thresholds. See
        darknet_py.export.coreml_model."""
        from .export.coreml_model import export_coreml

        return export_coreml(self, path, size, precision, thresh, nms)

    def class_name(self, class_id: int) -> str:
        """The name of class `class_id` (its number as text where the names file has fewer names)."""
        classes = self.classes
        if not 0 <= class_id < classes:
            raise DarknetError(f"class id {class_id} is out of range: this network has {classes} classes "
                               f"(0..{classes - 1})")
        return self.names[class_id] if class_id < len(self.names) else str(class_id)

    def __repr__(self) -> str:
        w, h = self.input_size
        return (f"Network({self.cfg_path!r}, {len(self._net.layers())} layers, input {w}x{h}x{self.channels}, "
                f"{self._net.total_bflops():.3f} BFLOPs, device={self.device!r})")


class LayerTable(list):
    """A list of per-layer dicts (index, type, line, input, output, bflops, params) that prints as a table."""

    def __init__(self, rows: list, text: str) -> None:
        super().__init__(rows)
        self._text = text

    def __str__(self) -> str:
        return self._text


POSTPROC = ("device", "cpu", "compare")


def _check_postproc(postproc: str) -> None:
    if postproc not in POSTPROC:
        raise DarknetError(f"postproc must be one of {', '.join(map(repr, POSTPROC))}, got {postproc!r}")


def _as_image(image: np.ndarray, channels: int) -> np.ndarray:
    """Checks the type and matches the network's channels as Darknet's load_image does: a grey image is
    repeated to 3 channels for a colour network, a colour image is converted to grey for a 1-channel one."""
    if not isinstance(image, np.ndarray):
        raise TypeError(f"image must be a NumPy array (BGR uint8, as cv2.imread returns), got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise TypeError(f"image must be uint8, got {image.dtype}")
    # OpenCV's colour conversions below would raise cv2.error on these: say what is wrong instead
    if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] not in (1, 3, 4)):
        raise DarknetError(f"image must be HxW (grey), HxWx3 (BGR) or HxWx4 (BGRA), got shape {image.shape}")
    if image.size == 0:
        raise DarknetError(f"image is empty (shape {image.shape})")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim == 2 and channels == 3:
        image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    elif image.ndim == 3 and channels == 1:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2GRAY if image.shape[2] == 4 else cv2.COLOR_BGR2GRAY)
    return np.ascontiguousarray(image)
