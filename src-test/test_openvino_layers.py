"""benchmarks/openvino_layers.py's mapping of OpenVINO's per-node counters to our layers (pure
functions on hand-made records: OpenVINO itself is not needed)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import openvino_layers as ovl  # noqa: E402

N = ovl.Node
RUN = [N("input", "Parameter", "unknown_FP32", 0.0, False),
       N("l0_conv", "Convolution", "brgconv_avx2_FP32", 1.5, True),
       N("l0_bn_mul", "Multiply", "undef", 0.0, False),  # fused into l0_conv: not run
       N("l0_conv_input_reorder", "Reorder", "jit_uni_FP32", 0.02, True),
       N("l12_conv", "Convolution", "jit_avx2_1x1_FP32", 0.5, True),
       N("l12_conv_b", "Eltwise", "jit_avx2_FP32", 0.1, True),
       N("Reorder_123", "Reorder", "ref_any_FP32", 0.25, True),
       N("yolo_out", "Result", "unknown_FP32", 0.01, True)]


def test_node_layer():
    assert ovl.node_layer("l0_conv") == 0
    assert ovl.node_layer("l31_route_split") == 31
    assert ovl.node_layer("Reorder_123") is None
    assert ovl.node_layer("input") is None


def test_run_ms_sums_executed_nodes_per_layer():
    ms = ovl.run_ms(RUN)
    assert abs(ms[0] - 1.52) < 1e-9
    assert abs(ms[12] - 0.6) < 1e-9
    assert ms[("unattributed", "Reorder")] == 0.25
    assert ms[("unattributed", "Result")] == 0.01
    assert ("unattributed", "Parameter") not in ms


def test_kernels_keep_the_large_nodes_slowest_first():
    k = ovl.kernels(RUN, {"l0_conv": "aBcd8b"})
    assert k[0] == "Convolution brgconv_avx2_FP32 [aBcd8b]"  # the reorder is < 5 % of the layer
    assert k[12] == "Convolution jit_avx2_1x1_FP32; Eltwise jit_avx2_FP32"
    assert set(k) == {0, 12}
