"""Darknet's per-layer training options (parser.c: stopbackward, onlyforward, dont_update,
burnin_update, train_only_bn, learning_rate), shortcut weight decay, focal_loss, and the
unused-option warnings. Each test fails if the option is ignored."""
from __future__ import annotations

import numpy as np

from darknet_py import _core

LR, DECAY, BATCH = 0.1, 0.0005, 2

NET = f"""[net]
batch={BATCH}
width=8
height=8
channels=3
momentum=0.9
decay={DECAY}
learning_rate={LR}
burn_in={{burn_in}}
"""

CONV = """
[convolutional]
batch_normalize={bn}
filters=4
size=3
pad=1
activation=leaky
{extra}
"""


def make_net(tmp_path, extras=("", "", ""), burn_in=0, name="n.cfg"):
    text = NET.format(burn_in=burn_in) + "".join(
        CONV.format(bn=1 if i < 2 else 0, extra=e) for i, e in enumerate(extras))
    path = tmp_path / name
    path.write_text(text)
    net = _core.Net(str(path), "cpu")
    rng = np.random.default_rng(1)
    for i in range(3):  # the same random start for every net built here
        net.set_params(i, {k: (rng.uniform(0.5, 1.5, v.shape) if k in ("scales", "rolling_variance") else
                               rng.normal(0, 0.3, v.shape)).astype(np.float32)
                           for k, v in net.params(i).items()})
    return net


def snapshot(net):
    return [{k: v.copy() for k, v in net.params(i).items()} for i in range(3)]


def step(net, iteration, seed=0):
    """One training iteration (1-based `iteration`) driven by a random dL/d(output) of the last layer;
    `seen` is what the train loop keeps (the iterations completed before this one)."""
    net.seen = (iteration - 1) * BATCH
    rng = np.random.default_rng(seed + iteration)
    net.forward_train(rng.uniform(0, 1, (BATCH, 3, 8, 8)).astype(np.float32), [])
    net.set_delta(2, rng.normal(0, 1, (BATCH, 4, 8, 8)).astype(np.float32))
    net.backward()
    grads = [{k: v.copy() for k, v in net.gradients(i).items()} for i in range(3)]
    net.update(LR, BATCH, iteration)
    return grads


def changed(a, b):
    return {k: not np.array_equal(a[k], b[k]) for k in a if k not in ("rolling_mean", "rolling_variance")}


def test_stopbackward_1_freezes_the_layers_before_it(tmp_path):
    net = make_net(tmp_path, ("", "stopbackward=1", ""))
    before = snapshot(net)
    grads = step(net, 1)
    after = snapshot(net)
    assert not any(changed(before[0], after[0]).values())  # frozen: not even weight decay (Darknet's train=0)
    assert all(not g.any() for g in grads[1].values())  # the stopbackward layer itself gets no gradient ...
    # ... but is updated: with a zero gradient the step is the weight decay alone, w * (1 - lr * decay)
    np.testing.assert_allclose(after[1]["weights"], before[1]["weights"] * (1 - LR * DECAY), rtol=1e-6)
    assert all(changed(before[2], after[2]).values())


def test_stopbackward_n_stops_backward_only_during_the_first_n_iterations(tmp_path):
    net = make_net(tmp_path, ("", "stopbackward=3", ""))
    for it in (1, 2, 3):
        grads = step(net, it)
        assert all(not g.any() for g in grads[0].values()) and all(not g.any() for g in grads[1].values()), it
        assert grads[2]["weights"].any()
    grads = step(net, 4)  # seen = 3 iterations: past N, gradients reach the first layers
    assert grads[0]["weights"].any() and grads[1]["weights"].any()


def test_onlyforward_skips_that_layer_and_cuts_the_gradient_below_it(tmp_path):
    net = make_net(tmp_path, ("", "onlyforward=1", ""))
    grads = step(net, 1)
    assert all(not g.any() for g in grads[0].values()) and all(not g.any() for g in grads[1].values())
    assert grads[2]["weights"].any()


def test_dont_update_holds_the_layer_until_that_iteration(tmp_path):
    net = make_net(tmp_path, ("", "", "dont_update=2"))
    start = snapshot(net)
    for it in (1, 2):
        step(net, it)
        assert not any(changed(start[2], snapshot(net)[2]).values()), it
        assert any(changed(start[0], snapshot(net)[0]).values())  # the other layers train
    step(net, 3)
    assert all(changed(start[2], snapshot(net)[2]).values())


def test_burnin_update_holds_the_layer_during_burn_in(tmp_path):
    net = make_net(tmp_path, ("burnin_update=1", "", ""), burn_in=3)
    start = snapshot(net)
    for it in (1, 2):  # Darknet: skipped while burnin_update * burn_in > iteration
        step(net, it)
        assert not any(changed(start[0], snapshot(net)[0]).values()), it
    step(net, 3)
    assert all(changed(start[0], snapshot(net)[0]).values())


def test_train_only_bn_updates_only_batchnorm_parameters_here_and_before(tmp_path):
    net = make_net(tmp_path, ("", "train_only_bn=1", ""))
    before = snapshot(net)
    step(net, 1)
    after = snapshot(net)
    for i in (0, 1):  # Darknet's set_train_only_bn extends it to every earlier layer
        c = changed(before[i], after[i])
        assert not c["weights"] and c["scales"] and c["biases"], (i, c)
    assert all(changed(before[2], after[2]).values())


def test_layer_learning_rate_scales_its_update(tmp_path):
    plain = make_net(tmp_path, name="plain.cfg")
    scaled = make_net(tmp_path, ("", "", "learning_rate=0.25"), name="scaled.cfg")
    w0 = snapshot(plain)
    step(plain, 1)
    step(scaled, 1)
    for key in ("weights", "biases"):
        d_plain = plain.params(2)[key] - w0[2][key]
        d_scaled = scaled.params(2)[key] - w0[2][key]
        np.testing.assert_allclose(d_scaled, 0.25 * d_plain, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(scaled.params(0)["weights"], plain.params(0)["weights"], rtol=1e-6)


def test_shortcut_weights_take_weight_decay(tmp_path):
    # Darknet's update_shortcut_layer: weight_updates += -decay * batch * w before the step
    text = NET.format(burn_in=0) + CONV.format(bn=0, extra="") + "\n[shortcut]\nfrom=-1\nweights_type=per_feature\n"
    path = tmp_path / "sc.cfg"
    path.write_text(text)
    net = _core.Net(str(path), "cpu")
    net.set_params(1, {"weights": np.array([0.8, 1.3], np.float32).reshape(net.params(1)["weights"].shape)})
    w0 = net.params(1)["weights"].copy()
    net.forward_train(np.ones((BATCH, 3, 8, 8), np.float32), [])
    net.backward()  # zero deltas: zero gradient
    net.update(LR, BATCH, 1)
    np.testing.assert_allclose(net.params(1)["weights"], w0 * (1 - LR * DECAY), rtol=1e-6)


# ---- focal loss -------------------------------------------------------------------------------
HEAD = """[net]
batch=1
width=4
height=4
channels={channels}

[yolo]
mask=0
anchors=1,1
num=1
classes=3
{extra}
"""


def head_loss(tmp_path, extra, device="cpu"):
    path = tmp_path / f"head{len(extra)}.cfg"
    path.write_text(HEAD.format(channels=8, extra=extra))
    net = _core.Net(str(path), device)
    x = np.random.default_rng(3).uniform(-2, 2, (1, 8, 4, 4)).astype(np.float32)
    out = net.forward_train(x, [0])[0]
    truth = [np.array([[0.40, 0.60, 0.25, 0.25, 2]], np.float32)]  # cell (1, 2), class 2
    net.yolo_loss(truth)
    return out, net.delta(0)


def test_focal_loss_scales_the_class_deltas_by_darknets_factor(tmp_path):
    out, plain = head_loss(tmp_path, "")
    _, focal = head_loss(tmp_path, "focal_loss=1")
    j, i = 2, 1  # the assigned cell
    probs = out[0, 5:8, j, i]
    pt = np.float32(probs[2]) + np.float32(1e-15)
    factor = 0.5 * (-(1 - pt) * (2 * pt * np.log(pt) + pt - 1))  # delta_yolo_class, alpha 0.5, gamma 2
    want = -(np.array([0, 0, 1], np.float32) - probs) * factor  # the engine keeps the gradient (-delta)
    np.testing.assert_allclose(focal[0, 5:8, j, i], want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(focal[0, 5:8, j, i], plain[0, 5:8, j, i] * factor, rtol=1e-5, atol=1e-7)
    mask = np.ones_like(plain, bool)
    mask[0, 5:8, j, i] = False  # everything else (boxes, objectness, other cells) is unchanged
    np.testing.assert_array_equal(focal[mask], plain[mask])
    assert 0 < factor < 0.5


# ---- unused-option warnings ---------------------------------------------------------------------
def warnings_for(tmp_path, conv_extra="", net_extra="", name="w.cfg"):
    path = tmp_path / name
    path.write_text(NET.format(burn_in=0) + net_extra + CONV.format(bn=1, extra=conv_extra))
    return [str(w) for w in _core.Net(str(path), "cpu").warnings]


def one(ws, key):
    hits = [w for w in ws if f"'{key}'" in w]
    assert len(hits) == 1, ws
    return hits[0]


def test_a_typo_gets_did_you_mean(tmp_path):
    w = one(warnings_for(tmp_path, "fliters=8\nactivaton=mish"), "fliters")
    assert "did you mean 'filters'" in w and "not used" in w and "Darknet does not know it" in w
    assert "did you mean 'activation'" in one(warnings_for(tmp_path, "activaton=mish", name="b.cfg"), "activaton")


def test_an_option_darknet_uses_but_we_do_not_says_not_supported(tmp_path):
    w = one(warnings_for(tmp_path, "xnor=1"), "xnor")
    assert "Darknet uses it but darknet_py does not support it" in w and "ignores" not in w


def test_an_unknown_option_says_darknet_ignores_it(tmp_path):
    w = one(warnings_for(tmp_path, "zzzq=1"), "zzzq")
    assert "Darknet does not know it either and ignores it" in w and "did you mean" not in w


def test_an_option_of_another_section_says_where_it_belongs(tmp_path):
    w = one(warnings_for(tmp_path, "mosaic=1"), "mosaic")
    assert "only in [net]" in w


def test_honoured_training_options_do_not_warn(tmp_path):
    ws = warnings_for(tmp_path, "stopbackward=1\nlearning_rate=0.5\ntrain_only_bn=1\ndont_update=5\nburnin_update=1"
                      "\nonlyforward=0", "blur=3\ngaussian_noise=20\nmixup=1\n")
    assert ws == []

