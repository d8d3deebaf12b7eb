"""The engines compare.py races: ours, OpenCV DNN, ONNX Runtime and OpenVINO, each behind one adapter.

An adapter loads one model (the same cfg and seeded random weights for all: OpenCV reads the Darknet
files, ONNX Runtime and OpenVINO our ONNX export of them), runs a blob on a fixed thread count and says
how far its outputs are from ours. compare.py times only engines whose outputs equal ours:

- ONNX Runtime, OpenVINO: every yolo head within 1e-4 of its scale (max|diff| / max|ours|), the bound
  of the export tests (src-test/test_export_onnx.py).
- OpenCV: its Region layout, compared per column group (box centre, size, objectness, classes) within
  1e-4, as src-test/test_opencv_parity.py does; OpenCV gets a copy of the cfg with thresh=0 and
  nms_threshold=0 in [yolo] so that no class column is zeroed and no NMS runs inside it.

Worker threads must not keep the cores busy between runs (they would steal them from the next engine's
block): ONNX Runtime gets allow_spinning=0; OpenVINO's and OpenCV's pools sleep when idle; ours spins
~100 us after each parallel loop before sleeping (src-lib/cpu/thread_pool.cpp).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

import darknet_py
from darknet_py import _core

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src-test"))
from helpers_darknet import rel_err, rewrite_cfg, yolo_to_opencv  # noqa: E402

TOL = 1e-4
ENGINES = ("ours", "opencv", "onnxruntime", "openvino")
LABELS = {"ours": "ours", "opencv": "OpenCV", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


@dataclass
class ModelFiles:
    """One model as every engine gets it: our Network (seeded random weights), its cfg and .weights, the
    OpenCV copy of the cfg, and the ONNX export at `batch`."""
    net: darknet_py.Network
    cfg: str
    weights: str
    opencv_cfg: str
    onnx: str
    batch: int


def prepare(net: darknet_py.Network, cfg: str, weights: str, batch: int, workdir: str,
            need_onnx: bool = True) -> ModelFiles:
    text = Path(cfg).read_text(encoding="utf-8")
    cv_cfg = os.path.join(workdir, "opencv.cfg")
    Path(cv_cfg).write_text(rewrite_cfg(text, per_section={"yolo": dict(thresh=0, nms_threshold=0)}),
                            encoding="utf-8")
    onnx_path = os.path.join(workdir, f"model-b{batch}.onnx")
    if need_onnx:
        net.export_onnx(onnx_path, batch=batch)
    return ModelFiles(net, cfg, weights, cv_cfg, onnx_path, batch)


def missing(engine: str) -> Optional[str]:
    """Why `engine` cannot run here (its package is missing), or None."""
    need = {"opencv": ("cv2", "opencv-python<5"), "onnxruntime": ("onnxruntime", "onnxruntime"),
            "openvino": ("openvino", "openvino")}
    if engine == "ours":
        return None
    if engine not in need:
        return f"unknown engine (choose from {', '.join(ENGINES)})"
    module, pip_name = need[engine]
    try:
        mod = __import__(module)
    except ImportError:
        return f"the {module} package is not installed (pip install '{pip_name}' or '.[bench]')"
    if engine == "onnxruntime" or engine == "openvino":
        try:
            import onnx  # noqa: F401  (the export needs it)
        except ImportError:
            return "the onnx package is not installed: our model cannot be exported (pip install onnx)"
    if engine == "opencv" and not hasattr(mod.dnn, "readNetFromDarknet"):
        return f"OpenCV {mod.__version__} has no readNetFromDarknet (removed in 5.x): install opencv-python<5"
    return None


def version(engine: str) -> str:
    if engine == "ours":
        return f"darknet_py {darknet_py.__version__}, kernels: {_core.cpu_isa()['active']}"
    if missing(engine):
        return "not installed"
    if engine == "opencv":
        import cv2
        return cv2.__version__
    if engine == "onnxruntime":
        import onnxruntime as ort
        return ort.__version__
    import openvino as ov
    return ov.get_version()


Runner = Callable[[np.ndarray], List[np.ndarray]]


def load(engine: str, files: ModelFiles, threads: int) -> Runner:
    """A function blob -> outputs (one per yolo head, in net.yolo_layers order) for `engine` on `threads`
    threads. Our engine's and OpenCV's thread counts are process-wide: bench_common.set_threads first."""
    return {"ours": _ours, "opencv": _opencv, "onnxruntime": _onnxruntime, "openvino": _openvino}[engine](
        files, threads)


def _ours(files: ModelFiles, threads: int) -> Runner:
    return files.net.forward


def _opencv(files: ModelFiles, threads: int) -> Runner:
    import cv2

    net = cv2.dnn.readNetFromDarknet(files.opencv_cfg, files.weights)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    names = net.getUnconnectedOutLayersNames()
    # OpenCV names its yolo outputs yolo_<layer index>: order them as ours
    order = [names.index(f"yolo_{i}") for i in files.net.yolo_layers] if files.net.yolo_layers else [0]

    def run(blob):
        net.setInput(blob)
        outs = net.forward(names)
        return [outs[i] for i in order]
    return run


def ort_session(onnx_path: str, threads: int, profile_prefix: str = ""):
    """ONNX Runtime's CPU session as the race runs it (profiling on with a file prefix)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # idle workers sleep instead of spinning (spinning would steal the cores from the next block)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])


def _onnxruntime(files: ModelFiles, threads: int) -> Runner:
    sess = ort_session(files.onnx, threads)
    names = [o.name for o in sess.get_outputs()]
    return lambda blob: sess.run(names, {"input": blob})


OPENVINO_CONFIG = {"INFERENCE_NUM_THREADS": None, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def openvino_model(onnx_path: str, threads: int, perf_count: bool = False):
    """OpenVINO's CPU compiled model as the race runs it (OPENVINO_CONFIG at `threads`), checked to run
    what was asked; with perf_count, its per-node counters on (PERF_COUNT)."""
    import openvino as ov

    core = ov.Core()
    supported = set(core.get_property("CPU", "SUPPORTED_PROPERTIES"))
    absent = [k for k in OPENVINO_CONFIG if k not in supported]
    if absent:
        raise RuntimeError(f"OpenVINO {ov.get_version()}'s CPU plugin lacks the properties {absent}")
    config = {**OPENVINO_CONFIG, "INFERENCE_NUM_THREADS": threads}
    if perf_count:
        config["PERF_COUNT"] = True
    compiled = core.compile_model(core.read_model(onnx_path), "CPU", config)
    # the plugin may adjust a hint: check that it runs what was asked
    threads_got = compiled.get_property("INFERENCE_NUM_THREADS")
    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    if int(threads_got) != threads or precision != ov.Type.f32:
        raise RuntimeError(f"OpenVINO compiled the model for {threads_got} threads in {precision}, "
                           f"not {threads} in f32")
    return compiled


def openvino_runner(compiled):
    """(infer request, a function blob -> outputs) for an OpenVINO compiled model."""
    req = compiled.create_infer_request()
    outs = list(compiled.outputs)

    def run(blob):
        req.infer({0: blob})
        return [req.get_tensor(o).data.copy() for o in outs]
    return req, run


def _openvino(files: ModelFiles, threads: int) -> Runner:
    return openvino_runner(openvino_model(files.onnx, threads))[1]


def mismatch(engine: str, files: ModelFiles, ours: List[np.ndarray], theirs: List[np.ndarray]) -> Dict[str, float]:
    """Outputs whose relative error against ours exceeds TOL, {name: error}; {'worst': e} is added always."""
    errors: Dict[str, float] = {}
    net = files.net
    if len(ours) != len(theirs):
        return {"output count": float("inf"), "worst": float("inf")}
    for k, (mine, ref) in enumerate(zip(ours, theirs)):
        layer = net.yolo_layers[k] if net.yolo_layers else None
        if engine != "opencv" or layer is None:
            if mine.size != ref.size:
                errors[f"output {k} shape"] = float("inf")
                continue
            errors[f"yolo_{layer}" if layer is not None else "output"] = rel_err(ref.reshape(mine.shape), mine)
            continue
        info = net._net.yolo_info(layer)
        w, h = net.input_size
        rows = ref.reshape(files.batch, -1, ref.shape[-1])  # OpenCV stacks the images' rows
        for b in range(files.batch):
            conv = yolo_to_opencv(mine[b], info, w, h)
            if conv.shape != rows[b].shape:
                errors[f"yolo_{layer} shape"] = float("inf")
                break
            for group, cols in (("xy", slice(0, 2)), ("wh", slice(2, 4)), ("obj", slice(4, 5)),
                                ("cls", slice(5, None))):
                key = f"yolo_{layer}.{group}"
                errors[key] = max(errors.get(key, 0.0), rel_err(rows[b][:, cols], conv[:, cols]))
    worst = max(errors.values()) if errors else 0.0
    bad = {k: v for k, v in errors.items() if not v <= TOL}
    bad["worst"] = worst
    return bad
