"""The loader's box arithmetic in C++ (src-lib/loader_boxes.cpp, augment.correct_truth) against the NumPy
code it replaced, kept below as the reference: the same bytes for every box set drawn (inside, overhanging
and wholly outside the image, at x = y = 0, narrower than a network pixel, at exact halves and edges), for
crops from augment.sample_crop with jitter, resize and letterbox, flipped or not, and max_boxes cutting
before the filter. The same seed shuffles both, so the permutation is checked too."""
import numpy as np
import pytest

from darknet_py import DarknetError, _core
from darknet_py.data import augment as A


def numpy_correct_truth(boxes, p, ow, oh, net_w, net_h, max_boxes, rng):
    """augment.correct_truth as it was in NumPy (the reference; float32 operations in Darknet's order)."""
    b = np.asarray(boxes, np.float32).reshape(-1, 5)
    if len(b) > 1:
        b = b[rng.permutation(len(b))]
    centre, half = b[:, 1:3], b[:, 3:5] / 2
    low, high = centre - half, centre + half
    invalid = ((centre[:, 0] == 0) & (centre[:, 1] == 0)) | (high < 0).any(axis=1) | (low > 1).any(axis=1)
    scale = np.array([ow / p.swidth, oh / p.sheight], np.float32)
    shift = np.array([(p.pleft / ow) / (p.swidth / ow), (p.ptop / oh) / (p.sheight / oh)], np.float32)
    low, high = low * scale - shift, high * scale - shift
    if p.flip:
        low[:, 0], high[:, 0] = 1 - high[:, 0], 1 - low[:, 0]
    low, high = np.minimum(np.maximum(low, 0), 1), np.minimum(np.maximum(high, 0), 1)
    out = np.empty((len(b), 5), np.float32)
    out[:, 0] = b[:, 0]
    out[:, 1:3] = (low + high) / 2
    out[:, 3:5] = np.minimum(np.maximum(high - low, 0), 1)
    out, invalid = out[:max_boxes], invalid[:max_boxes]
    keep = (~invalid & (out[:, 3] >= 1.0 / net_w) & (out[:, 4] >= 1.0 / net_h)
            & (out[:, 1] > 0) & (out[:, 1] <= 1) & (out[:, 2] > 0) & (out[:, 2] <= 1))
    return out[keep]


EDGES = np.float32([0, 1, 0.5, 0.25, 1 / 416, 2 / 416, 1 / 13, 1e-7, 0.999999])


def random_boxes(rng, kind: int) -> np.ndarray:
    n = int(rng.integers(0, 12))
    b = np.empty((n, 5), np.float32)
    b[:, 0] = rng.integers(0, 80, n)
    b[:, 1:] = (rng.random((n, 4)), rng.uniform(-0.5, 1.5, (n, 4)), rng.choice(EDGES, (n, 4)),
                rng.random((n, 4)) * 0.02)[kind]
    return b


def test_the_cpp_boxes_are_the_numpy_boxes_bit_for_bit():
    rng = np.random.default_rng(24)
    kept = 0
    for t in range(1500):
        boxes = random_boxes(rng, t % 4)
        ow, oh = int(rng.integers(20, 900)), int(rng.integers(20, 900))
        opts = dict(A.DEFAULT_OPTIONS, jitter=float(rng.choice([0, 0.3, 0.6])), resize=float(rng.choice([1, 1.5, 0.7])),
                    letter_box=int(rng.integers(2)))
        net_w, net_h = int(rng.choice([416, 320, 608, 13])), int(rng.choice([416, 288, 7]))
        crop = A.sample_crop(rng, ow, oh, net_w, net_h, opts)
        max_boxes = int(rng.choice([200, 3, 1, 0, -2]))
        seed = int(rng.integers(1 << 30))
        ours = A.correct_truth(boxes, crop, ow, oh, net_w, net_h, max_boxes, np.random.default_rng(seed))
        ref = numpy_correct_truth(boxes, crop, ow, oh, net_w, net_h, max_boxes, np.random.default_rng(seed))
        assert ours.dtype == np.float32 and ours.shape == ref.shape and ours.tobytes() == ref.tobytes(), (t, crop)
        kept += len(ours)
    assert kept > 1000  # about one box kept per set: the comparison is not of empty arrays


def test_bad_arguments_name_what_is_wrong():
    box = np.float32([[0, 0.5, 0.5, 0.2, 0.2]])
    with pytest.raises(DarknetError, match=r"boxes must be a C-contiguous float32 array of shape \(n, 5\), got float64"):
        _core.correct_boxes(box.astype(np.float64), 0, 0, 10, 10, False, 10, 10, 416, 416, 200)
    with pytest.raises(DarknetError, match=r"boxes must be .*, got float32 array of shape \(1, 4\)"):
        _core.correct_boxes(box[:, :4].copy(), 0, 0, 10, 10, False, 10, 10, 416, 416, 200)
    with pytest.raises(DarknetError, match="sizes must be .* at least 1, got 0, 10, 10, 10, 416, 416"):
        _core.correct_boxes(box, 0, 0, 0, 10, False, 10, 10, 416, 416, 200)
