"""The CPU backend keeps each Winograd layer's transformed filters between forwards while the network's
parameter values keep their version (Network::own_params advances it before every write the engine
makes or is told of). Checked here, on a network whose 3x3 layers run Winograd (forced F(4,3) and F(2,3),
and the cost model's own choice):
- a second forward (the kept filters) gives the first's bits;
- after set_params, load_weights, a training step, and a write through a NumPy view of the values that
  was taken before the forward and is still alive (the engine is never told of it), the forward gives the
  bits of a fresh network holding the new values: nothing stale is used, and the path taken does not
  depend on what ran before (filters transformed in the call or kept give the same bits).
"""
import numpy as np
import pytest

from darknet_py import _core
from darknet_py.training.init_weights import darknet_init
from test_train import small_cfg

SIZE = 32


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    path = tmp_path_factory.mktemp("kept") / "net.cfg"
    path.write_text(small_cfg(classes=2, size=SIZE, batch=2, filters=(16, 32), head=32))
    return str(path)


def net_of(cfg, seed=3):
    net = _core.Net(cfg, "cpu")
    darknet_init(net, seed)
    return net


def batch(seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (2, 3, SIZE, SIZE)).astype(np.float32)


def heads(net, x):
    return net.forward(x, list(net.yolo_layers))[0]


def fresh_copy(cfg, net):
    """A new network holding net's values now (copies: it shares nothing with net)."""
    other = net_of(cfg, seed=9)
    for i in range(len(net.layers())):
        values = {k: np.array(v) for k, v in net.params(i).items()}
        if values:
            other.set_params(i, values)
    return other


PATHS = ["winograd-f4", "winograd-f2", None]  # None: the cost model's choice


@pytest.mark.parametrize("path", PATHS)
def test_kept_filters_give_the_same_bits(cfg, monkeypatch, path):
    if path:
        monkeypatch.setenv("DARKNET_PY_CONV_PATH", path)
    net, x = net_of(cfg), batch()
    first = heads(net, x)
    for _ in range(2):
        np.testing.assert_array_equal(heads(net, x), first)
    np.testing.assert_array_equal(heads(fresh_copy(cfg, net), x), first)


@pytest.mark.parametrize("path", PATHS)
def test_new_values_are_seen(cfg, monkeypatch, tmp_path, path):
    if path:
        monkeypatch.setenv("DARKNET_PY_CONV_PATH", path)
    net, x = net_of(cfg), batch()
    heads(net, x)

    def same(got, want, what):
        np.testing.assert_array_equal(got, want, err_msg=what)

    def check(what):
        got = heads(net, x)
        same(got, heads(fresh_copy(cfg, net), x), what)
        return got

    before = heads(net, x)
    w = np.array(net.params(0)["weights"]) * 0.5
    net.set_params(0, {"weights": w})
    after_set = check("set_params")
    assert not np.array_equal(after_set, before)

    other = net_of(cfg, seed=11)
    other.save_weights(str(tmp_path / "other.weights"))
    net.load_weights(str(tmp_path / "other.weights"))
    same(check("load_weights"), heads(other, x), "load_weights, against the network saved")

    truths = [np.array([[0.5, 0.5, 0.3, 0.3, 1]], np.float32)] * 2
    net.forward_train(x, [])
    net.yolo_loss(truths)
    net.backward()
    net.update(0.01, 2)
    check("a training step")

    view = net.params(2)["weights"]  # alive across the forwards below: the engine never hears of the write
    heads(net, x)
    view *= -1.0
    after_view = check("a write through a live view")
    del view
    same(heads(net, x), after_view, "kept again once no view lives")
