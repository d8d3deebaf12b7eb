"""Darknet's activations as ONNX nodes, with the engine's formulas (src-lib/activation.h).

Each builder takes the graph and the pre-activation tensor and returns the activated tensor. Where
ONNX has the exact operator it is used (LeakyRelu 0.1, Relu, Clip, Sigmoid, Tanh, Elu, Selu with
Darknet's constants); the rest are composed from elementwise nodes.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from .onnx_graph import Graph

# Darknet's normalize_channels(_softmax) add this to the per-pixel sum (activate_array_normalize_channels*)
NORMALIZE_EPS = 0.0001


def _linear(g: Graph, x: str, hint: str) -> str:
    return x


def _leaky(g: Graph, x: str, hint: str) -> str:
    return g.node("LeakyRelu", [x], hint, alpha=0.1)


def _relu(g: Graph, x: str, hint: str) -> str:
    return g.node("Relu", [x], hint)


def _relu6(g: Graph, x: str, hint: str) -> str:
    return g.node("Clip", [x, g.const(np.float32(0), f"{hint}_lo"), g.const(np.float32(6), f"{hint}_hi")], hint)


def _logistic(g: Graph, x: str, hint: str) -> str:
    return g.node("Sigmoid", [x], hint)


def _tanh(g: Graph, x: str, hint: str) -> str:
    return g.node("Tanh", [x], hint)


def _swish(g: Graph, x: str, hint: str) -> str:  # x * logistic(x)
    return g.node("Mul", [x, g.node("Sigmoid", [x], f"{hint}_sigmoid")], hint)


def _mish(g: Graph, x: str, hint: str) -> str:
    # x * tanh(softplus(x)). Darknet's softplus returns x above 20 and exp(x) below -20, which equal
    # log(1 + e^x) to float precision there (ONNX Softplus), so the results agree to rounding.
    sp = g.node("Softplus", [x], f"{hint}_softplus")
    return g.node("Mul", [x, g.node("Tanh", [sp], f"{hint}_tanh")], hint)


def _hard_mish(g: Graph, x: str, hint: str) -> str:
    # x > 0: x; -2 < x <= 0: x^2/2 + x = x (x/2 + 1); else 0: all of it is x * clip(x/2 + 1, 0, 1)
    half = g.scalar_op("Mul", x, 0.5, f"{hint}_half")
    gate = g.node("Clip", [g.scalar_op("Add", half, 1.0, f"{hint}_plus1"), g.const(np.float32(0), f"{hint}_lo"),
                           g.const(np.float32(1), f"{hint}_hi")], f"{hint}_gate")
    return g.node("Mul", [x, gate], hint)


def _elu(g: Graph, x: str, hint: str) -> str:
    return g.node("Elu", [x], hint, alpha=1.0)


def _selu(g: Graph, x: str, hint: str) -> str:  # Darknet's constants, not ONNX's defaults
    return g.node("Selu", [x], hint, alpha=1.6732, gamma=1.0507)


def _gelu(g: Graph, x: str, hint: str) -> str:
    # 0.5 x (1 + tanh(0.797885 x + 0.035677 x^3))
    x3 = g.node("Mul", [x, g.node("Mul", [x, x], f"{hint}_x2")], f"{hint}_x3")
    u = g.node("Add", [g.scalar_op("Mul", x, 0.797885, f"{hint}_lin"), g.scalar_op("Mul", x3, 0.035677, f"{hint}_cub")],
               f"{hint}_u")
    t1 = g.scalar_op("Add", g.node("Tanh", [u], f"{hint}_tanh"), 1.0, f"{hint}_1pt")
    return g.node("Mul", [g.scalar_op("Mul", x, 0.5, f"{hint}_halfx"), t1], hint)


def _normalize_channels(g: Graph, x: str, hint: str, softmax: bool = False) -> str:
    # per pixel: f(x_c) / (eps + sum over channels of f), f = relu or exp (Darknet subtracts no maximum)
    f = g.node("Exp" if softmax else "Relu", [x], f"{hint}_f")
    total = g.node("ReduceSum", [f, g.ints([1], f"{hint}_axis")], f"{hint}_sum", keepdims=1)
    return g.node("Div", [f, g.scalar_op("Add", total, NORMALIZE_EPS, f"{hint}_sum_eps")], hint)


def _normalize_channels_softmax(g: Graph, x: str, hint: str) -> str:
    return _normalize_channels(g, x, hint, softmax=True)


ACTIVATIONS: Dict[str, Callable[[Graph, str, str], str]] = {
    "linear": _linear, "leaky": _leaky, "relu": _relu, "relu6": _relu6, "logistic": _logistic, "tanh": _tanh,
    "swish": _swish, "mish": _mish, "hard_mish": _hard_mish, "elu": _elu, "selu": _selu, "gelu": _gelu,
    "normalize_channels": _normalize_channels, "normalize_channels_softmax": _normalize_channels_softmax,
}


def activate(g: Graph, x: str, name: str, hint: str) -> str:
    """x after Darknet's activation `name` (as written in the cfg)."""
    return ACTIVATIONS[name](g, x, hint)
