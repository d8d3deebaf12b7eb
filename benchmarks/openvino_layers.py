"""OpenVINO's per-node counters mapped to our layers, for layer_profile.py.

The model is compiled as compare.py races it (peer_engines.openvino_model) with PERF_COUNT on; after
each inference `InferRequest.get_profiling_info()` gives every node of the compiled graph with its
type, the kernel the CPU plugin chose (exec_type: 'brgconv_avx2_FP32', 'jit_avx2_1x1_FP32', 'jit_gemm',
...), its status and its real time. The plugin fuses nodes (a convolution with its batch norm's
Multiply/Add and its activation): the fused node keeps the name of the node it fuses into, one of ours
(`l<i>_...`, the exporter's names), so the name gives the layer. The runtime model
(`compiled.get_runtime_model()`) adds what the counters lack: the memory layout each node writes
(rt_info 'outputLayouts': 'abcd' is NCHW, 'aBcd8b' NCHW8c blocked, 'acdb' NHWC) and the original nodes
each one holds ('originalLayersNames'). Nodes the plugin adds itself (reorders between layouts, the
input and output nodes) carry no layer and are summed as 'unattributed', by node type.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

NODE_LAYER = re.compile(r"^l(\d+)_")


class Node(NamedTuple):
    """One node of OpenVINO's profiling info, reduced to what the table needs."""
    name: str
    node_type: str
    exec_type: str
    ms: float
    executed: bool


def node_layer(name: str) -> Optional[int]:
    """The layer index our exporter encoded in a node name (l<i>_...), or None for a node it did not make."""
    m = NODE_LAYER.match(name)
    return int(m.group(1)) if m else None


def nodes(infos) -> List[Node]:
    """get_profiling_info()'s ProfilingInfo records as Nodes (real time in ms)."""
    import openvino as ov

    executed = ov.ProfilingInfo.Status.EXECUTED
    return [Node(i.node_name, i.node_type, i.exec_type, i.real_time.total_seconds() * 1e3, i.status == executed)
            for i in infos]


def run_ms(run: Iterable[Node]) -> Dict[object, float]:
    """ms per layer index of one inference; nodes with no layer under ('unattributed', node type)."""
    out: Dict[object, float] = defaultdict(float)
    for n in run:
        if not n.executed:
            continue
        layer = node_layer(n.name)
        out[layer if layer is not None else ("unattributed", n.node_type)] += n.ms
    return out


def kernels(run: Iterable[Node], layouts: Dict[str, str], share: float = 0.05) -> Dict[int, str]:
    """Per layer, the kernels of its executed nodes that took >= `share` of the layer's time, slowest
    first: 'Convolution brgconv_avx2_FP32 [aBcd8b]' (node type, exec type, output layout if known)."""
    per: Dict[int, Dict[Tuple[str, str, str], float]] = defaultdict(lambda: defaultdict(float))
    for n in run:
        layer = node_layer(n.name)
        if n.executed and layer is not None:
            per[layer][(n.node_type, n.exec_type, layouts.get(n.name, ""))] += n.ms
    out: Dict[int, str] = {}
    for layer, ks in per.items():
        total = sum(ks.values())
        keep = [k for k, ms in sorted(ks.items(), key=lambda kv: -kv[1]) if total <= 0 or ms >= share * total]
        out[layer] = "; ".join(f"{t} {e}" + (f" [{lay}]" if lay else "") for t, e, lay in keep)
    return out


def runtime_layouts(compiled) -> Dict[str, str]:
    """{node name: output layout} from the compiled model's runtime graph (empty if it does not say)."""
    out: Dict[str, str] = {}
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if "outputLayouts" in info:
            out[op.get_friendly_name()] = str(info["outputLayouts"].astype(str))
    return out


def fused_names(compiled) -> Dict[str, List[str]]:
    """{runtime node name: the original nodes it holds} (rt_info 'originalLayersNames')."""
    out: Dict[str, List[str]] = {}
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if "originalLayersNames" in info:
            names = str(info["originalLayersNames"].astype(str))
            out[op.get_friendly_name()] = [s for s in names.split(",") if s]
    return out
