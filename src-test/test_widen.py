"""training/widen.py: the demo model's weights in yolov4-tiny (4 times its filters) compute the demo's
outputs; networks that differ in more than their filter counts are refused."""
import cv2
import numpy as np
import pytest

from darknet_py import _core
from darknet_py.model_files.cfg_edit import CfgEditor, adapt_classes, set_anchors, set_net_options
from darknet_py.model_files.cfgfiles import resolve_cfg
from darknet_py.model_files.demo import demo_files
from darknet_py.training import widen as widen_module
from darknet_py.training.quickstart import demo_anchors
from darknet_py.training.widen import WidenError, widen, widened_params


@pytest.fixture(scope="module")
def demo():
    f = demo_files()
    net = _core.Net(f["cfg"], "cpu")
    net.load_weights(f["weights"], -1)
    image = _core.preprocess(cv2.imread(f["image"]), net.width, net.height, False)[None]
    return net, image


def wide_cfg(tmp_path, name="yolov4-tiny.cfg"):
    ed = CfgEditor.from_file(resolve_cfg(name))
    set_net_options(ed, {"width": 256, "height": 256})
    adapt_classes(ed, 4)
    set_anchors(ed, *demo_anchors())
    return ed.write(str(tmp_path / "wide.cfg"))


def heads(net, image):
    return [np.array(o) for o in net.forward(image, list(net.yolo_layers))]


def test_widened_yolov4_tiny_computes_the_demo(tmp_path, demo, monkeypatch):
    narrow, image = demo
    monkeypatch.setattr(widen_module, "NOISE", 0.0)
    wide = _core.Net(wide_cfg(tmp_path), "cpu")
    assert widen(wide, narrow, image) == 21
    assert wide.params(0)["weights"].shape == (32, 3, 3, 3) and narrow.params(0)["weights"].shape == (8, 3, 3, 3)
    for got, want in zip(heads(wide, image), heads(narrow, image)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    # another image than the one widen checked on: the same function, not a fit to one input
    flipped = np.ascontiguousarray(image[..., ::-1])
    for got, want in zip(heads(wide, flipped), heads(narrow, flipped)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_noise_makes_the_copies_differ_but_keeps_the_detections(tmp_path, demo):
    narrow, image = demo
    wide = _core.Net(wide_cfg(tmp_path), "cpu")
    widen(wide, narrow, image, seed=5)
    w = wide.params(2)["weights"]  # 64 filters repeating 16: copies 0..3 of filter 0 now differ
    assert not np.array_equal(w[0], w[1])
    for got, want in zip(heads(wide, image), heads(narrow, image)):
        assert np.abs(got - want).max() < 0.2 * np.abs(want).max()


def test_other_layers_are_refused(tmp_path, demo):
    narrow, image = demo
    other = _core.Net(wide_cfg(tmp_path, "yolov3-tiny.cfg"), "cpu")
    with pytest.raises(WidenError, match="layers differ"):
        widen(other, narrow, image)


def test_widened_params_rules():
    narrow = {"weights": np.arange(2 * 3 * 1 * 1, dtype=np.float32).reshape(2, 3, 1, 1),
              "biases": np.array([1, 2], np.float32).reshape(2, 1, 1)}
    wide = {"weights": np.zeros((4, 6, 1, 1), np.float32), "biases": np.zeros((4, 1, 1), np.float32)}
    got = widened_params(wide, narrow, "layer 7")
    assert got["weights"][3, 5, 0, 0] == narrow["weights"][1, 2, 0, 0] / 2  # repeat of in-channel 2, halved
    assert got["biases"].ravel().tolist() == [1, 1, 2, 2]
    with pytest.raises(WidenError, match="layer 7: 5 channels is no multiple of 2"):
        widened_params({"weights": np.zeros((5, 6, 1, 1), np.float32), "biases": np.zeros((5, 1, 1), np.float32)},
                       narrow, "layer 7")
