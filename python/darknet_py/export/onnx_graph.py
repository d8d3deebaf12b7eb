"""A small ONNX graph builder for the exporter: unique tensor names, constants, nodes, the model.

The `onnx` package is an optional extra (`pip install "darknet-engine[onnx]"`); `require_onnx` imports it
or says how to install it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from .._core import DarknetError

# Opset 13: Split/Slice/ReduceSum/Resize with tensor inputs, NonMaxSuppression, Softmax on one axis;
# read by ONNX Runtime >= 1.6, OpenCV DNN 4.x, TensorRT 7+ and most other runtimes people deploy on.
OPSET = 13


def require_onnx() -> Any:
    """The `onnx` module, or a DarknetError that says how to install it."""
    try:
        import onnx
    except ImportError:
        raise DarknetError('ONNX export needs the onnx package: pip install "darknet-engine[onnx]" '
                           "(or pip install onnx)") from None
    return onnx


class Graph:
    """Nodes and initializers of one ONNX graph. Every method returns the name(s) of its output tensor(s)."""

    def __init__(self, half: bool = False) -> None:
        self.onnx = require_onnx()
        # the type of float constants: float16 in an fp16 model (export --precision fp16) until the heads,
        # float32 from there on (the heads are cast back to fp32 before outputs and post-processing)
        self.float_type: type = np.float16 if half else np.float32
        # built in place: copying hundreds of MB of weights between protobuf messages costs seconds
        self.proto = self.onnx.ModelProto()
        self.nodes: List[Any] = []
        self._used: Dict[str, int] = {}

    def name(self, hint: str) -> str:
        """A tensor or node name not used before: `hint`, else hint_2, hint_3, ..."""
        n = self._used.get(hint, 0) + 1
        self._used[hint] = n
        return hint if n == 1 else f"{hint}_{n}"

    def const(self, value: Union[np.ndarray, Sequence[float], float, int], hint: str = "const",
              dtype: Optional[type] = None) -> str:
        """An initializer holding `value` (float_type unless it is an integer array or dtype says otherwise)."""
        arr = np.asarray(value)
        if dtype is None:
            dtype = np.int64 if arr.dtype.kind in "iu" else self.float_type
        with np.errstate(over="ignore"):  # -FLT_MAX (max pooling's padding) is -inf in float16, as in the engine
            arr = np.asarray(arr, dtype=dtype)  # no copy when it already is (weights run to hundreds of MB)
        name = self.name(hint)
        t = self.proto.graph.initializer.add()
        t.name = name
        P = self.onnx.TensorProto
        t.data_type = {np.dtype(np.int64): P.INT64, np.dtype(np.float16): P.FLOAT16}.get(arr.dtype, P.FLOAT)
        t.dims.extend(arr.shape)
        t.raw_data = np.ascontiguousarray(arr).astype("<" + arr.dtype.str[1:], copy=False).tobytes()  # little-endian
        return name

    def ints(self, values: Sequence[int], hint: str = "ints") -> str:
        """An int64 1-D initializer (shapes, axes, slice bounds)."""
        return self.const(np.asarray(list(values), dtype=np.int64), hint, np.int64)

    def node(self, op: str, inputs: Sequence[str], hint: Optional[str] = None, outputs: int = 1,
             out: Optional[str] = None, **attrs: Any) -> Any:
        """Adds one node; returns its output name (or a list when outputs > 1). `out` names the output exactly."""
        base = hint or op.lower()
        names = [out] if out is not None else [self.name(base if k == 0 else f"{base}_out{k}") for k in range(outputs)]
        if out is not None:
            self._used[out] = self._used.get(out, 0) + 1
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), names, name=self.name(f"{base}_node"), **attrs))
        return names[0] if outputs == 1 else names

    # ---- shorthands used by several layers ------------------------------------------------------
    def reshape(self, x: str, shape: Sequence[int], hint: str = "reshape") -> str:
        return self.node("Reshape", [x, self.ints(shape, f"{hint}_shape")], hint)

    def slice(self, x: str, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int], hint: str = "slice") -> str:
        return self.node("Slice", [x, self.ints(starts, f"{hint}_starts"), self.ints(ends, f"{hint}_ends"),
                                   self.ints(axes, f"{hint}_axes")], hint)

    def scalar_op(self, op: str, x: str, value: float, hint: str) -> str:
        """x (op) value for a float constant: Mul, Add, Div, Greater..."""
        return self.node(op, [x, self.const(np.float32(value), f"{hint}_k")], hint)

    def model(self, inputs: Sequence[Any], outputs: Sequence[Any], graph_name: str,
              metadata: Optional[Dict[str, str]] = None) -> Any:
        """The ModelProto, at OPSET, with the lowest IR version that opset needs (older runtimes read it)."""
        helper = self.onnx.helper
        model = self.proto
        graph = model.graph
        graph.name = graph_name
        graph.node.extend(self.nodes)
        graph.input.extend(inputs)
        graph.output.extend(outputs)
        opset = [helper.make_opsetid("", OPSET)]
        model.opset_import.extend(opset)
        model.producer_name = "darknet_py"
        model.ir_version = helper.find_min_ir_version_for(opset)
        if metadata:
            helper.set_model_props(model, metadata)
        return model
