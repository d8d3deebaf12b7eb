"""Layers and options that OpenCV DNN cannot check, tested against our naive `reference` backend
and against independent NumPy ports of Darknet's C loops (numpy_darknet.py).

Why not OpenCV for these: its Darknet importer ignores conv `dilation`, `stride_x/stride_y` (conv
and maxpool), `maxpool_depth`/`out_channels`, [shortcut] `weights_type`/`weights_normalization`
(and does not read shortcut weights), [upsample] `scale` and negative strides, [softmax]
`groups`/`temperature`; it lacks relu6, hard_mish, elu, selu, gelu and the normalize_channels
activations, [local_avgpool] and [reorg3d]; and its batchnorm uses eps 1e-6 where Darknet uses
1e-5. [reorg] (YOLOv2's) it does implement with Darknet's semantics, so that one is also
compared with OpenCV here.

Each case is a tiny cfg written here. Every layer's output is compared cpu vs reference backend
(relative error max|a-b|/max|b| <= 1e-5), and the layer under test against NumPy.
Also: two reference cfgs end to end on cpu vs reference at a small input —
yolov4-sam-mish-csp-reorg-bfm ([reorg3d]: OpenCV cannot load it) and resnet101 (its downsampling
shortcuts add a larger map by flat index, as Darknet's release build does; OpenCV refuses that).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Dict

import numpy as np
import pytest

import darknet_py
import numpy_darknet as nd
from helpers_darknet import randomize_params, rel_err, rewrite_cfg

TOL = 1e-5  # cpu vs reference and vs float64 NumPy: float32 round-off only


@dataclass
class Case:
    layers: str                               # cfg text after [net]
    shape: tuple                              # input (c, h, w)
    expect: Callable[[Dict[int, np.ndarray], np.ndarray, "darknet_py.Network"], Dict[int, np.ndarray]]
    params: Callable = None                   # optional: set parameters instead of randomize_params


def _cfg(case: Case) -> str:
    c, h, w = case.shape
    return f"[net]\nbatch=1\nwidth={w}\nheight={h}\nchannels={c}\n\n{case.layers}"


def _conv(net, i, x, **geom):
    """NumPy forward of conv layer i with its own parameters, before activation."""
    p = net.params(i)
    y = nd.conv2d(x, p["weights"], **geom)
    if "rolling_variance" in p:
        return nd.batchnorm(y, p["rolling_mean"], p["rolling_variance"], p["scales"], p["biases"])
    return y + p["biases"].reshape(1, -1, 1, 1)


def _conv_case(act, geom_text, geom, shape=(4, 9, 11), filters=6, bn=0):
    text = f"[convolutional]\nbatch_normalize={bn}\nfilters={filters}\n{geom_text}\nactivation={act}\n"
    return Case(text, shape, lambda o, x, net: {0: nd.activate(_conv(net, 0, x, **geom), act)})


def _tiny_variance(net):
    """Batchnorm with variances ~1e-5..1e-4, where eps=1e-5 (Darknet) vs 1e-6 (OpenCV) matters."""
    randomize_params(net, 3)
    p = net.params(0)
    p["rolling_variance"][...] = np.random.default_rng(4).uniform(1e-5, 1e-4, p["rolling_variance"].shape)
    p["scales"][...] = np.sqrt(p["rolling_variance"])


def _shortcut_case(wt, norm, extra=""):
    text = ("[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n\n"
            "[convolutional]\nfilters=6\nsize=1\nactivation=linear\n\n"
            "[convolutional]\nfilters=4\nsize=1\nactivation=linear\n\n"
            f"[shortcut]\nfrom=-3,-2\nweights_type={wt}\nweights_normalization={norm}\nactivation=leaky\n{extra}")

    def expect(o, x, net):
        w = net.params(3).get("weights")
        numpy_norm = "relu" if norm == "avg_relu" else norm  # Darknet treats avg_relu as relu
        y = nd.shortcut(o[2], [o[0], o[1]], None if w is None else w.ravel(), wt, numpy_norm)
        return {3: nd.activate(y, "leaky")}
    return Case(text, (3, 5, 7), expect)


CASES = {
    # --- convolution geometry OpenCV ignores --------------------------------------------------
    "conv_dilation2": _conv_case("linear", "size=3\npad=1\ndilation=2", dict(padding=1, dilation=2)),
    "conv_dilation3_stride2": _conv_case("leaky", "size=3\npad=1\nstride=2\ndilation=3",
                                         dict(padding=1, dilation=3, stride_y=2, stride_x=2)),
    "conv_dilation2_nopad_groups2": _conv_case("linear", "size=3\ndilation=2\ngroups=2",
                                               dict(padding=0, dilation=2, groups=2), shape=(4, 12, 13)),
    "conv_stride_x2_y1": _conv_case("linear", "size=3\npad=1\nstride_x=2\nstride_y=1",
                                    dict(padding=1, stride_x=2, stride_y=1)),
    "conv_stride_y3_x1_padding2": _conv_case("linear", "size=5\npadding=2\nstride_y=3\nstride_x=1",
                                             dict(padding=2, stride_x=1, stride_y=3)),
    # --- batchnorm epsilon: Darknet 1e-5 ---------------------------------------------------------
    "batchnorm_eps": Case("[convolutional]\nbatch_normalize=1\nfilters=5\nsize=1\nactivation=linear\n", (3, 4, 5),
                          lambda o, x, net: {0: _conv(net, 0, x)}, params=_tiny_variance),
    # --- activations OpenCV lacks (and some it has, as a control) ------------------------------
    **{f"act_{a}": _conv_case(a, "size=1", {}, shape=(3, 6, 7))
       for a in ("relu6", "hard_mish", "elu", "selu", "gelu", "relu", "tanh", "logistic", "swish", "mish",
                 "normalize_channels", "normalize_channels_softmax")},
    # --- pooling ---------------------------------------------------------------------------------
    "maxpool_stride_x2_y1": Case("[maxpool]\nsize=3\nstride_x=2\nstride_y=1\n", (3, 8, 9),
                                 lambda o, x, net: {0: nd.maxpool(x, 3, 1, 2, 2)}),
    "maxpool_size2_stride1": Case("[maxpool]\nsize=2\nstride=1\n", (3, 5, 6),
                                  lambda o, x, net: {0: nd.maxpool(x, 2, 1, 1, 1)}),
    "maxpool_odd_padding": Case("[maxpool]\nsize=3\nstride=2\npadding=3\n", (2, 7, 8),
                                lambda o, x, net: {0: nd.maxpool(x, 3, 2, 2, 3)}),
    "maxpool_depth": Case("[maxpool]\nmaxpool_depth=1\nout_channels=3\n", (7, 4, 5),
                          lambda o, x, net: {0: nd.maxpool_depth(x, 3)}),
    "local_avgpool": Case("[local_avgpool]\nsize=3\nstride=2\n", (3, 7, 9),
                          lambda o, x, net: {0: nd.local_avgpool(x, 3, 2, 2, 2)}),
    "local_avg_alias": Case("[local_avg]\nsize=3\nstride=1\n", (2, 5, 6),
                            lambda o, x, net: {0: nd.local_avgpool(x, 3, 1, 1, 2)}),
    "local_avgpool_stride_xy": Case("[local_avgpool]\nsize=2\nstride_x=1\nstride_y=2\n", (2, 6, 5),
                                    lambda o, x, net: {0: nd.local_avgpool(x, 2, 2, 1, 1)}),
    # --- reorg -----------------------------------------------------------------------------------
    "reorg3d": Case("[reorg3d]\nstride=2\n", (3, 6, 8), lambda o, x, net: {0: nd.reorg3d(x, 2)}),
    "reorg_old": Case("[reorg]\nstride=2\n", (8, 6, 4), lambda o, x, net: {0: nd.reorg_old(x, 2)}),
    # --- shortcut options OpenCV ignores ---------------------------------------------------------
    "shortcut_multi_from_channel_mismatch": _shortcut_case("none", "none"),
    "shortcut_per_feature_relu": _shortcut_case("per_feature", "relu"),
    "shortcut_per_channel_softmax": _shortcut_case("per_channel", "softmax"),
    "shortcut_per_channel": _shortcut_case("per_channel", "none"),
    "shortcut_per_channel_avg_relu": _shortcut_case("per_channel", "avg_relu"),
    # --- upsample / softmax / connected / sam / scale_wh ---------------------------------------
    "upsample_scale": Case("[upsample]\nstride=3\nscale=0.5\n", (2, 3, 4),
                           lambda o, x, net: {0: nd.upsample(x, 3, 0.5)}),
    "downsample_sum": Case("[upsample]\nstride=-2\nscale=0.25\n", (2, 6, 8),
                           lambda o, x, net: {0: nd.upsample(x, -2, 0.25)}),
    "softmax_groups_temperature": Case("[softmax]\ngroups=3\ntemperature=2.5\n", (3, 2, 4),
                                       lambda o, x, net: {0: nd.softmax(x, 3, 2.5)}),
    "connected_bn": Case("[connected]\noutput=7\nbatch_normalize=1\nactivation=leaky\n", (2, 3, 4),
                         lambda o, x, net: {0: nd.connected(x, net.params(0)["weights"], net.params(0)["biases"],
                                                            (net.params(0)["scales"], net.params(0)["rolling_mean"],
                                                             net.params(0)["rolling_variance"]),
                                                            "leaky").reshape(1, 7, 1, 1)}),
    "sam": Case("[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n\n"
                "[convolutional]\nfilters=4\nsize=1\nactivation=logistic\n\n[sam]\nfrom=-2\n", (3, 4, 5),
                lambda o, x, net: {2: o[1] * o[0]}),
    "scale_channels_wh": Case("[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n\n"
                              "[convolutional]\nfilters=1\nsize=1\nactivation=logistic\n\n"
                              "[scale_channels]\nfrom=-2\nscale_wh=1\n", (3, 5, 6),
                              lambda o, x, net: {2: o[0] * o[1]}),
}


def _run(net, x, backend):
    net.backend = backend
    return dict(enumerate(net._net.forward(x, list(range(len(net.layers))))))


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_case(name, tmp_path):
    case = CASES[name]
    path = tmp_path / f"{name}.cfg"
    path.write_text(_cfg(case))
    net = darknet_py.Network(path)
    (case.params or (lambda n: randomize_params(n, 1)))(net)
    x = np.random.default_rng(2).normal(0, 1.5, (1, *case.shape)).astype(np.float32)

    cpu = _run(net, x, "cpu")
    ref = _run(net, x, "reference")
    for i in cpu:
        assert cpu[i].shape == ref[i].shape
        assert rel_err(cpu[i], ref[i]) <= TOL, f"{name}: layer {i} ({net.layers[i]['type']}) cpu vs reference"

    for i, want in case.expect(cpu, x.astype(np.float64), net).items():
        got = cpu[i]
        assert got.shape == want.shape, f"{name}: layer {i} shape {got.shape}, NumPy port gives {want.shape}"
        err = rel_err(got, want)
        assert err <= TOL, f"{name}: layer {i} differs from the NumPy port of Darknet by {err:.2e}"


def test_batchnorm_eps_is_darknets():
    """The eps case above is meaningful only if eps=1e-6 would have failed it."""
    y = np.random.default_rng(0).normal(0, 1, (1, 5, 4, 5))
    var = np.random.default_rng(4).uniform(1e-5, 1e-4, 5)
    a = nd.batchnorm(y, np.zeros(5), var, np.sqrt(var), np.zeros(5), eps=1e-5)
    b = nd.batchnorm(y, np.zeros(5), var, np.sqrt(var), np.zeros(5), eps=1e-6)
    assert rel_err(b, a) > 100 * TOL


def test_reorg_old_matches_opencv(tmp_path):
    """OpenCV's [reorg] implements YOLOv2's reorg (Darknet's REORG_OLD) exactly."""
    cv2 = pytest.importorskip("cv2")
    cfg = tmp_path / "reorg.cfg"
    cfg.write_text("[net]\nbatch=1\nwidth=6\nheight=4\nchannels=8\n\n[reorg]\nstride=2\n")
    net = darknet_py.Network(cfg)
    x = np.random.default_rng(5).normal(0, 1, (1, 8, 4, 6)).astype(np.float32)
    cv_net = cv2.dnn.readNetFromDarknet(str(cfg))
    cv_net.setInput(x)
    theirs = cv_net.forward()
    ours = net.forward(x)[0]
    assert ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


# ---------------------------------------------------------------------------------------------
# whole reference cfgs OpenCV cannot run, cpu vs reference backend
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,size", [("yolov4-sam-mish-csp-reorg-bfm", 64), ("resnet101", 64)])
def test_reference_cfg_cpu_vs_reference(name, size, shared_cfg_dir, tmp_path):
    cfg = tmp_path / f"{name}.cfg"
    cfg.write_text(rewrite_cfg((shared_cfg_dir / f"{name}.cfg").read_text(),
                               net=dict(width=size, height=size, batch=1, subdivisions=1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = darknet_py.Network(cfg)
    randomize_params(net, 11)
    x = np.random.default_rng(12).uniform(0, 1, (1, 3, size, size)).astype(np.float32)
    outs = net.yolo_layers or [len(net.layers) - 1]
    cpu = net._net.forward(x, outs)
    net.backend = "reference"
    ref = net._net.forward(x, outs)
    for i, a, b in zip(outs, cpu, ref):
        assert np.all(np.isfinite(a)) and np.std(b) > 0
        err = rel_err(a, b)
        assert err <= 1e-4, f"{name}: layer {i} cpu vs reference relative error {err:.2e}"
