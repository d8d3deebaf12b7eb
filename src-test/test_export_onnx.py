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
from darknet_py.init_weights import darknet_init  # noqa: E402

from helpers_darknet import rel_err  # noqa: E402

TOL = 1e-4
SMALL = 64  # the export tests' input size: every reference cfg builds at 64x64 (128 where noted)
SIZE_FOR = {}  # cfg name -> (w, h) where 64x64 is too small


def _session(model_path) -> "ort.InferenceSession":
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.log_severity_level = 3
    return ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])


def _randomize(net: darknet_py.Network, seed: int) -> None:
    """Darknet's random initialisation plus random batchnorm statistics and shortcut weights, so that
    folding and weighting are not the identity."""
    darknet_init(net, seed)
    rng = np.random.default_rng(seed + 1)
    for i, info in enumerate(net.layers):
        p = net.params(i)
        if not p:
            continue
        if "rolling_mean" in p:
            c = p["scales"].size
            p["scales"][...] = rng.uniform(0.5, 1.5, p["scales"].shape)
            p["biases"][...] = rng.uniform(-0.2, 0.2, p["biases"].shape)
            p["rolling_mean"][...] = rng.uniform(-0.2, 0.2, c).reshape(p["rolling_mean"].shape)
            p["rolling_variance"][...] = rng.uniform(0.5, 2.0, c).reshape(p["rolling_variance"].shape)
        elif info["type"] == "shortcut":
            p["weights"][...] = rng.uniform(-1, 1.5, p["weights"].shape)
        elif "biases" in p:
            p["biases"][...] = rng.uniform(-0.2, 0.2, p["biases"].shape)
        net.set_params(i, p)


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
    summary = net.export_onnx(model, dynamic_batch=True)
    onnx.checker.check_model(str(model), full_check=True)
    assert summary.input == ("input", ["batch", net.channels, size[1], size[0]])
    _compare(net, model)
