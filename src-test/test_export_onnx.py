"""ONNX export (darknet_py.export_onnx): ONNX Runtime runs the exported graph and must give what
Network.forward gives, within 1e-4 of each output's scale (helpers_darknet.rel_err), on every reference
cfg of ../shared/cfg (random weights and batchnorm statistics, so the folding is exercised), on small
cfgs for the layer options those lack, and on real weights; the postprocessed model's detections must
equal Network.detect's. onnx's checker must accept every graph.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed (pip install '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install '.[test]')")
import darknet_py  # noqa: E402
from darknet_py.cfgfiles import cfg_with_size  # noqa: E402

from helpers_darknet import rel_err  # noqa: E402

TOL = 1e-4
SMALL = 64  # the export tests' input size: every reference cfg builds at 64x64 (128 where noted)
SIZE_FOR = {}  # cfg name -> (w, h) where 64x64 is too small


def _session(model_path) -> "ort.InferenceSession":
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    return ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])


_POOL = np.random.default_rng(12345).random(1_000_003, dtype=np.float32)  # a prime length: slices differ


def _randomize(net: darknet_py.Network, seed: int) -> None:
    """Random weights as Darknet initialises them (uniform, He-scaled by the fan-in), with random
    biases, batchnorm statistics and shortcut weights, so that folding and weighting are not the
    identity. In place (on the CPU params() are views of the engine's memory). The values are slices
    of one random pool at random offsets: drawing hundreds of millions of numbers would cost more than
    the rest of the test."""
    rng = np.random.default_rng(seed)

    def uniform(a, lo, hi):
        flat = a.reshape(-1)
        start, done = int(rng.integers(len(_POOL))), 0
        while done < flat.size:
            part = _POOL[start:start + flat.size - done]
            flat[done:done + part.size] = part
            done, start = done + part.size, 0
        flat *= np.float32(hi - lo)
        flat += np.float32(lo)

    for i, info in enumerate(net.layers):
        p = net.params(i)
        if "weights" in p and info["type"] in ("conv", "connected"):
            w = p["weights"]
            uniform(w, -1, 1)
            w *= np.float32(np.sqrt(2.0 / (w.size // info["output"][0])))
        elif "weights" in p:  # weighted shortcut
            uniform(p["weights"], -1, 1.5)
        if "biases" in p:
            uniform(p["biases"], -0.2, 0.2)
        if "rolling_mean" in p:
            uniform(p["scales"], 0.5, 1.5)
            uniform(p["rolling_mean"], -0.2, 0.2)
            uniform(p["rolling_variance"], 0.5, 2.0)


def _small_network(cfg: Path, size) -> darknet_py.Network:
    """The cfg at another input size (a copy with [net] width/height replaced), on the CPU."""
    path = cfg_with_size(str(cfg), *size)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unused training options: not this test's business
            return darknet_py.Network(path, device="cpu")
    finally:
        Path(path).unlink()


def _compare(net: darknet_py.Network, model_path: Path, batches=(1, 2), seed: int = 0) -> float:
    """Runs ONNX Runtime and Network.forward on the same random blobs; returns the largest rel_err."""
    sess = _session(model_path)
    names = [o.name for o in sess.get_outputs()]
    w, h = net.input_size
    rng = np.random.default_rng(seed)
    worst = 0.0
    for n in batches:
        blob = rng.uniform(0, 1, (n, net.channels, h, w)).astype(np.float32)
        ours = net.forward(blob)
        theirs = sess.run(names, {"input": blob})
        assert len(ours) == len(theirs)
        for name, a, b in zip(names, theirs, ours):
            assert a.shape == b.shape, (name, a.shape, b.shape)
            err = rel_err(a, b)
            assert err <= TOL, f"{name} at batch {n}: rel_err {err:.3g} > {TOL}"
            worst = max(worst, err)
    return worst


# ---- every reference cfg ------------------------------------------------------------------------
def _reference_cfgs():
    d = Path(__file__).resolve().parents[1].parent / "shared" / "cfg"
    return sorted(p.name for p in d.glob("*.cfg")) if d.is_dir() else ["(../shared/cfg absent)"]


@pytest.mark.parametrize("name", _reference_cfgs())
def test_reference_cfg_exports_and_matches(name, shared_cfg_dir, tmp_path):
    cfg = shared_cfg_dir / name
    if not cfg.is_file():
        pytest.skip(f"{cfg} not found")
    size = SIZE_FOR.get(name, (SMALL, SMALL))
    net = _small_network(cfg, size)
    _randomize(net, seed=len(name))
    model = tmp_path / "model.onnx"
    summary = net.export_onnx(model, dynamic_batch=True)  # runs onnx's checker (full_check) on the file
    assert summary.input == ("input", ["batch", net.channels, size[1], size[0]])
    _compare(net, model)
