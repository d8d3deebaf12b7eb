"""Forward latency at batch 1 for the benchmarked models, and throughput at batch 8."""
from __future__ import annotations

import pytest

import bench_common as bc
from conftest import report


@pytest.mark.parametrize("model", bc.MODELS, ids=lambda m: f"{m.name}-{m.size}")
def test_forward_latency_batch1(benchmark, random_models, threads, model):
    net, _, _ = random_models(model)
    blob = bc.input_blob(net, batch=1)
    net.forward(blob)  # allocates the layer buffers: not part of a steady-state forward
    rounds = model.rounds or 10
    benchmark.extra_info.update(threads=threads, gflop=net._net.total_bflops())
    benchmark.pedantic(net.forward, args=(blob,), rounds=rounds, iterations=1, warmup_rounds=0 if model.rounds else 1)
    med = benchmark.stats.stats.median
    benchmark.extra_info["gflops_per_s"] = net._net.total_bflops() / med
    report(f"{model.name} {model.size} batch 1: median {med * 1e3:.1f} ms, "
           f"{net._net.total_bflops() / med:.0f} GFLOP/s, {threads} threads")


@pytest.mark.parametrize("model", [m for m in bc.MODELS if m.name in ("yolov4-tiny", "yolov3-tiny")],
                         ids=lambda m: f"{m.name}-{m.size}")
def test_forward_throughput_batch8(benchmark, random_models, threads, model):
    net, _, _ = random_models(model)
    blob = bc.input_blob(net, batch=8)
    net.forward(blob)
    benchmark.extra_info.update(threads=threads, batch=8)
    benchmark.pedantic(net.forward, args=(blob,), rounds=3, iterations=1)
    ips = 8 / benchmark.stats.stats.median
    benchmark.extra_info["images_per_s"] = ips
    report(f"{model.name} {model.size} batch 8: {ips:.1f} images/s, {threads} threads")
