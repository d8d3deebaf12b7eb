"""The Python Network API around the engine: input conversions a user relies on."""
import cv2
import numpy as np
import pytest
import skimage.data

import darknet_py


def test_grey_image_is_repeated_to_three_channels(yolov3_tiny):
    """Darknet's load_image repeats a grey image to 3 channels for a colour network; so do we,
    for 2-D arrays and HxWx1 arrays alike."""
    net = darknet_py.Network(yolov3_tiny["cfg"], yolov3_tiny["weights"], yolov3_tiny["names"])
    grey = skimage.data.camera()
    want = net.detect(cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR), thresh=0.1)
    assert want, "the cameraman photo should give detections at 0.1"
    assert net.detect(grey, thresh=0.1) == want
    assert net.detect(grey[:, :, None], thresh=0.1) == want


def test_wrong_image_type_is_a_clear_error(yolov3_tiny):
    net = darknet_py.Network(yolov3_tiny["cfg"])
    with pytest.raises(TypeError, match="uint8"):
        net.detect(np.zeros((10, 10, 3), np.float32))
    with pytest.raises(TypeError, match="NumPy array"):
        net.detect([[1, 2, 3]])


ADAM_CFG = """[net]
width=8
height=8
channels=1
adam=1
B1=0.9
B2=0.999
eps=0.000001
decay=0.0005

[convolutional]
filters=2
size=3
stride=1
pad=1
activation=linear
"""


def test_adam_step_count_is_the_iteration_given(tmp_path):
    """Darknet's Adam corrects its moments with t = the training iteration, so a resumed run goes on
    from the iteration it resumed at; Net.update(lr, batch, t) must use that t, not its own count."""
    from darknet_py import _core
    cfg = tmp_path / "adam.cfg"
    cfg.write_text(ADAM_CFG)
    net = _core.Net(str(cfg))
    rng = np.random.default_rng(3)
    w = net.params(0)["weights"]
    w[...] = rng.standard_normal(w.shape)
    w0 = w.copy()
    g = rng.standard_normal(w.shape).astype(np.float32)
    net.gradients(0)["weights"][...] = g.reshape(net.gradients(0)["weights"].shape)
    lr, batch, t = 0.01, 4, 7
    net.update(lr, batch, t)
    # Darknet's adam_update with fresh moments: d = -g - decay*batch*w; m = (1-B1) d; v = (1-B2) d^2
    d = -g.astype(np.float64) - 0.0005 * batch * w0
    m, v = 0.1 * d, 0.001 * d * d
    want = w0 + lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-6)
    np.testing.assert_allclose(net.params(0)["weights"], want, rtol=2e-4, atol=1e-6)


def test_pin_memory_is_the_blob_itself_where_the_device_has_no_pinned_memory(tmp_path):
    """Network.pin_memory copies a batch into the device's page-locked memory (test_cuda.py checks that
    path); on the CPU it hands the blob back and the network runs as before."""
    cfg = tmp_path / "adam.cfg"
    cfg.write_text(ADAM_CFG)
    net = darknet_py.Network(cfg, device="cpu")
    x = np.random.default_rng(0).uniform(0, 1, (2, 1, 8, 8)).astype(np.float32)
    want = net.forward(x)
    assert net.pin_memory(x) is x
    assert np.array_equal(net.forward(net.pin_memory(x))[0], want[0])
