"""One training iteration of yolov4-tiny at 416x416, batch 16 in one pass (forward_train ->
yolo_loss -> backward -> update, what darknet_py.training.train runs per subdivision and per iteration):
images per second, and the fraction of the FMA peak, counting a training pass as 3x the forward
FLOPs (the backward pass computes two GEMMs per convolution: weight and input gradients)."""
from __future__ import annotations

import numpy as np
import pytest

import bench_common as bc
from conftest import report

BATCH = 16


def random_truths(rng, batch: int, per_image: int = 4, classes: int = 80):
    """Darknet truth rows x, y, w, h (relative, centre form), class."""
    out = []
    for _ in range(batch):
        xy = rng.uniform(0.2, 0.8, (per_image, 2))
        wh = rng.uniform(0.05, 0.4, (per_image, 2))
        cls = rng.integers(0, classes, (per_image, 1))
        out.append(np.hstack([xy, wh, cls]).astype(np.float32))
    return out


@pytest.fixture(scope="module")
def peak(threads):
    return bc.fma_peak(threads)


def test_train_iteration_yolov4_tiny_batch16(benchmark, random_models, threads, peak):
    net, _, _ = random_models(bc.find_model("yolov4-tiny"))
    raw = net._net
    if not hasattr(raw, "forward_train"):
        pytest.skip("this build has no training bindings (Net.forward_train)")
    rng = np.random.default_rng(0)
    blob = bc.input_blob(net, batch=BATCH)
    truths = random_truths(rng, BATCH)

    def iteration():
        raw.forward_train(blob, [])
        raw.yolo_loss(truths)
        raw.backward()
        raw.update(1e-6, BATCH)  # a tiny rate: the random network must stay finite across rounds

    iteration()  # allocates the training buffers
    benchmark.pedantic(iteration, rounds=3, iterations=1)
    sec = benchmark.stats.stats.median
    gflop = 3 * raw.total_bflops() * BATCH
    ips = BATCH / sec
    frac = gflop / sec / peak.gflops
    benchmark.extra_info.update(images_per_s=ips, gflops_per_s=gflop / sec, fraction_of_fma_peak=frac,
                                fma_peak_gflops=peak.gflops, threads=threads, batch=BATCH)
    report(f"yolov4-tiny 416 training, batch {BATCH}: {ips:.1f} images/s, {gflop / sec:.0f} GFLOP/s = "
           f"{100 * frac:.0f}% of the {peak.gflops:.0f} GFLOP/s FMA peak ({threads} threads)")
