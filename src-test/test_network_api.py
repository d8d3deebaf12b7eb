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
