"""The CUDA device on an NVIDIA GPU, against the CPU backend.

Every op against the reference runs in test_ops.py (BACKENDS has "cuda"); here: whole networks, real
weights, training, recorded forwards (CUDA graphs), the memory pool, the command line. Where the
module was built without CUDA or the machine has no NVIDIA GPU, everything here skips with
"no CUDA device: <why>".
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import gpu_devices
from darknet_py import Network
from test_gpu_backend import CFG_NAMES, REL_TOL, cli, pair, rel_err, train_losses
from test_train import small_cfg

pytestmark = pytest.mark.skipif(not gpu_devices.CUDA, reason=gpu_devices.CUDA_MISSING)
CUDA = gpu_devices.CUDA


@pytest.mark.parametrize("name", CFG_NAMES)
def test_reference_cfg_forward_equals_cpu(shared_cfg_dir, name, tmp_path):
    # every layer's output at the cfg's own input size (fp32, TF32 off)
    cpu, gpu = pair(tmp_path, (shared_cfg_dir / name).read_text(), CUDA, seed=7)
    x = np.random.default_rng(1).uniform(0, 1, (1, cpu.channels, cpu.height, cpu.width)).astype(np.float32)
    layers = list(range(len(cpu.layers())))
    worst = max((rel_err(g, c), i) for i, (g, c) in enumerate(zip(gpu.forward(x, layers), cpu.forward(x, layers))))
    assert worst[0] < REL_TOL, f"{name}: layer {worst[1]} differs by {worst[0]:.2e} (relative)"
    assert not any(gpu.fallback_ops()), f"{name}: ops fell back to the CPU: {gpu.fallback_ops()}"


def test_real_yolov3_tiny_detects_the_same_as_cpu(yolov3_tiny):
    from test_real_weights import _photos

    files = (yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"])
    cpu, gpu = Network(*files, device="cpu"), Network(*files, device=CUDA, precision="fp32")
    count = 0
    for name, img in _photos().items():
        want = cpu.detect(img, thresh=0.1)
        for _ in range(3):  # eager, then recorded, then replayed: the same every time
            got = gpu.detect(img, thresh=0.1)
            assert [d.class_id for d in got] == [d.class_id for d in want], name
            for g, w in zip(got, want):
                assert abs(g.confidence - w.confidence) < 1e-4, (name, g, w)
                assert max(abs(a - b) for a, b in zip(g.box, w.box)) < 0.5, (name, g, w)
        assert gpu.detect(img, thresh=0.1, postproc="compare") == got, name  # device decode = host decode
        count += len(want)
    assert count > 10


def test_100_training_iterations_follow_the_cpu(tmp_path):
    cfg = small_cfg(classes=2, size=96, batch=8, filters=(8, 16, 32), head=32, anchors="8,8, 20,20, 40,40")
    cpu, gpu = pair(tmp_path, cfg, CUDA)
    # (sums in another order make fp32 runs drift apart; a gentler rate keeps the early steps close)
    want = train_losses(cpu, 100, 8, 96, 2, seed=5, lr=0.001)
    got = train_losses(gpu, 100, 8, 96, 2, seed=5, lr=0.001)
    rel = np.abs(got - want) / np.abs(want)
    assert np.all(rel[:10] <= 1e-3), f"first 10 iterations\ncpu {want[:10]}\ncuda {got[:10]}"
    # later the two runs drift apart by rounding (sums in another order), but they learn alike
    assert np.mean(rel[10:]) < 0.05, f"cpu {want}\ncuda {got}"
    assert got[-10:].mean() < 0.8 * got[:10].mean()  # it learned
    assert not any(gpu.fallback_ops()), gpu.fallback_ops()


def test_recorded_forwards_replay_exactly_and_follow_changes(tmp_path):
    cfg = small_cfg(classes=2, size=64, batch=2, filters=(8, 16), head=16)
    cpu, gpu = pair(tmp_path, cfg, CUDA)
    rng = np.random.default_rng(3)
    heads = list(gpu.yolo_layers)
    x = rng.uniform(0, 1, (2, 3, 64, 64)).astype(np.float32)
    runs = [gpu.forward(x, heads) for _ in range(3)]
    assert gpu.last_forward_replayed  # the second forward recorded, the third replayed
    for a, b in zip(runs[0], runs[2]):
        assert np.array_equal(a, b)
    # a new input reaches the replayed pass (it reads the same buffers)
    x2 = rng.uniform(0, 1, x.shape).astype(np.float32)
    got = gpu.forward(x2, heads)
    assert gpu.last_forward_replayed
    for g, c in zip(got, cpu.forward(x2, heads)):
        assert rel_err(g, c) < REL_TOL
    # new weights: the recording left out the batchnorm folded from the old ones, so the next forward
    # runs normally (folding the new ones), the one after records again, and both see the new weights
    w = gpu.params(0)
    w["weights"] = w["weights"] * 0.5
    w["scales"] = w["scales"] * -2.0
    gpu.set_params(0, {"weights": w["weights"], "scales": w["scales"]})
    cpu.set_params(0, {"weights": w["weights"], "scales": w["scales"]})
    for replayed in (False, True):
        got = gpu.forward(x2, heads)
        assert gpu.last_forward_replayed == replayed
        for g, c in zip(got, cpu.forward(x2, heads)):
            assert rel_err(g, c) < REL_TOL
    # another batch size: runs normally first, and the old recording is not replayed on it
    x3 = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
    got = gpu.forward(x3, heads)
    assert not gpu.last_forward_replayed
    for g, c in zip(got, cpu.forward(x3, heads)):
        assert rel_err(g, c) < REL_TOL
    # training in between moves the batchnorm statistics: as after new weights, one forward runs
    # normally, then the recording made again replays, and both equal the CPU
    for _ in range(3):
        gpu.forward(x, heads)
    gpu.forward_train(x, [])
    cpu.forward_train(x, [])
    for replayed in (False, True, True):
        got = gpu.forward(x, heads)
        assert gpu.last_forward_replayed == replayed
        for g, c in zip(got, cpu.forward(x, heads)):
            assert rel_err(g, c) < REL_TOL
    gpu.record_forwards = False
    gpu.forward(x, heads)
    assert not gpu.last_forward_replayed


def test_uploads_from_pinned_memory_go_by_dma_and_keep_their_contract(tmp_path):
    # 4x3x448x448 floats (9.6 MB): above the 8 MiB where uploads stop being plain cudaMemcpyAsync
    cfg = small_cfg(classes=2, size=448, batch=4, filters=(8, 16), head=16)
    _, gpu = pair(tmp_path, cfg, CUDA)
    heads = list(gpu.yolo_layers)
    rng = np.random.default_rng(4)
    batches = [rng.uniform(0, 1, (4, 3, 448, 448)).astype(np.float32) for _ in range(3)]
    truths = [np.array([[0.5, 0.5, 0.2, 0.2, 1]], np.float32)] * 4

    def losses(inputs):  # forward_train from each, the input overwritten as soon as the call returns
        out = []
        for x in inputs:
            keep = x.copy()
            gpu.forward_train(x, [])
            x[:] = 0  # the upload has returned: the caller may reuse its memory
            out.append(sum(h["loss"] for h in gpu.yolo_loss(truths)))
            x[:] = keep
        return out

    want_loss = losses(batches)
    before = gpu.bytes_moved()["pinned_uploads"]
    pinned = [gpu.pin_memory(x) for x in batches]
    assert all(p is not x and np.array_equal(p, x) for p, x in zip(pinned, batches))
    assert losses(pinned) == want_loss  # the second and third went up ahead, on the copy stream
    # (after the training forwards, which move batchnorm's running statistics that forward() uses)
    want_fwd = gpu.forward(batches[0], heads)
    for g, w in zip(gpu.forward(pinned[0], heads), want_fwd):
        assert np.array_equal(g, w)
    assert gpu.bytes_moved()["pinned_uploads"] == before + 4
    gpu.forward(pinned[0][::-1], heads)  # a strided view: copied into a contiguous array, staged
    assert gpu.bytes_moved()["pinned_uploads"] == before + 4
    del pinned  # given back to the device (cudaFreeHost) with the arrays


def test_training_uploads_the_loader_processes_batches_from_page_locked_shared_memory(tmp_path, monkeypatch):
    """train() pins the loader's batch buffers (cudaHostRegister on shared memory): every batch goes up by
    DMA from the memory the worker processes wrote, and the run is the one whose batches are staged."""
    import io

    from darknet_py.data import synth
    from darknet_py.training.train import train
    from test_train import all_params

    data = synth.generate(tmp_path / "data", images=8, classes=2, size=(200, 160), seed=2, valid_fraction=0.0,
                          workers=1)
    # 8 x 3 x 448 x 448 float32: 19 MB a batch, above the 8 MiB from which uploads are staged
    cfg = tmp_path / "net.cfg"
    cfg.write_text(small_cfg(classes=2, size=448, batch=8, lr=0.001, burn_in=0, filters=(8, 16), head=16,
                             anchors="20,20, 60,60, 120,120"))
    runs = {}  # (the nets share the process's CUDA device, whose counters run on: "0" runs first)
    for pin in ("0", "1"):
        monkeypatch.setenv("DARKNET_PY_PIN_BATCHES", pin)
        log = io.StringIO()
        r = train(data, str(cfg), out_dir=str(tmp_path / pin), max_batches=6, seed=3, workers=2,
                  loader_kind="processes", device=CUDA, precision="fp32", chart=False, stream=log, progress=False,
                  multiscale=False)
        runs[pin] = (all_params(r.net), r.net.bytes_moved()["pinned_uploads"], r.loader, log.getvalue())
    params, pinned_uploads, loader, log = runs["1"]
    assert pinned_uploads == runs["0"][1] + 6 and loader == "processes x2, page-locked batches"
    assert "(loader: processes x2, page-locked batches)" in log.splitlines()[-1]
    assert runs["0"][2] == "processes x2"
    # the same batches; two CUDA runs of them differ in the last digits here (2e-4 at most after 6 steps)
    np.testing.assert_allclose(params, runs["0"][0], rtol=2e-3, atol=1e-5)
    # below 8 MiB too, an upload from pinned memory waits for its copy before the caller may reuse it
    small = r.net.pin_memory(np.ones((1, 3, 448, 448), np.float32))
    r.net.forward(small, [])
    assert r.net.bytes_moved()["pinned_uploads"] == pinned_uploads + 1


def test_memory_pool_reuses_blocks_across_iterations(tmp_path):
    cfg = small_cfg(classes=2, size=64, batch=4, filters=(8, 16), head=16)
    _, gpu = pair(tmp_path, cfg, CUDA)
    train_losses(gpu, 3, 4, 64, 2, seed=1)
    reserved = gpu.memory_stats()["reserved"]
    train_losses(gpu, 10, 4, 64, 2, seed=2)
    stats = gpu.memory_stats()
    assert stats["reserved"] == reserved, stats  # steady state: no new device allocations
    assert 0 < stats["in_use"] <= stats["reserved"] <= stats["peak_reserved"]


def test_info_describes_the_cuda_device():
    r = cli("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    text = json.dumps(info)
    assert CUDA in text and "compute capability" in text and "cuBLAS" in text, text
    assert info["device auto"].startswith("cuda"), info["device auto"]


def test_detect_on_cuda_from_the_command_line(tmp_path):
    r = cli("detect", "--device", "cuda", "--out", str(tmp_path / "out"), "--json", str(tmp_path / "d.json"))
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "d.json").read_text()), "the demo image holds detections"


def test_cudnn_runs_the_fastest_candidate_timed_in_a_graph(tmp_path):
    """cudnnFind's one host-timed launch per algorithm mostly measures launch overhead on short
    convolutions; each usable candidate is timed again in a CUDA graph and the fastest of those runs
    (DARKNET_PY_CUDNN_TRACE prints every choice)."""
    import os
    import re
    import subprocess
    import sys

    cfg = tmp_path / "net.cfg"
    cfg.write_text(small_cfg(classes=2, size=128, batch=16, filters=(16, 32, 64), head=64))
    script = ("import sys, numpy as np; from darknet_py import _core; from darknet_py.training.init_weights "
              "import darknet_init; net = _core.Net(sys.argv[1], 'cuda'); darknet_init(net, 1); "
              "net.precision = 'fp16'; net.forward(np.random.default_rng(0).uniform(0, 1, (16, 3, 128, 128))"
              ".astype(np.float32), list(net.yolo_layers)); net.synchronize()")
    r = subprocess.run([sys.executable, "-c", script, str(cfg)], capture_output=True, text=True, timeout=300,
                       env={**{k: v for k, v in os.environ.items() if k != "DARKNET_PY_CUDNN"},
                            "DARKNET_PY_CUDNN_TRACE": "1"})
    assert r.returncode == 0, r.stderr
    choices = [line for line in r.stderr.splitlines() if line.startswith("cuDNN forward")]
    assert choices, r.stderr
    compared = 0
    for line in choices:
        offers = line.split(":", 1)[1].split("|")
        timed = [float(re.search(r"([\d.]+) ms \(graph\)", o).group(1)) for o in offers if "(graph)" in o]
        assert "(chosen)" in offers[0], line  # the first offer is the fastest usable one
        if len(timed) >= 2:
            compared += 1
            assert "(graph)" in offers[0] and timed == sorted(timed), line
            assert 0 < timed[0] < 5, line  # milliseconds of one 16-image convolution, not of launches
    assert compared, "no convolution had two candidates to time:\n" + "\n".join(choices)
