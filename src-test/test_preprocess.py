"""Our image preprocessing reproduces Darknet's (image.c): load as planar RGB in [0, 1], then
resize_image (separable bilinear, "align corners" scales (in-1)/(out-1), horizontal pass then
vertical pass, last column/row copied) or letterbox_image (aspect-preserving resize, 0.5 grey
borders, centred with integer offsets). Checked by hand on a tiny image and against a NumPy port
of Darknet's C code written here."""
from __future__ import annotations

import os

import numpy as np
import pytest

import darknet_py
from darknet_py import _core

# A 3 x 2 (w x h) single-channel image.
IM = np.array([[[1.0, 2.0, 4.0],
                [3.0, 5.0, 9.0]]], np.float32)


def test_resize_by_hand_5x3():
    # w_scale = (3-1)/(5-1) = 0.5, h_scale = (2-1)/(3-1) = 0.5.
    # Horizontal pass, column c reads sx = c*0.5 (the last column copies im[w-1]):
    #   row 0: c0 1 | c1 (1+2)/2 = 1.5 | c2 2 | c3 (2+4)/2 = 3 | c4 4
    #   row 1: c0 3 | c1 (3+5)/2 = 4   | c2 5 | c3 (5+9)/2 = 7 | c4 9
    # Vertical pass, row r reads sy = r*0.5:
    #   r0 = part row 0; r1 = (row0 + row1)/2; r2 (last) = (1-0)*part row 1
    want = np.array([[[1.0, 1.5, 2.0, 3.0, 4.0],
                      [2.0, 2.75, 3.5, 5.0, 6.5],
                      [3.0, 4.0, 5.0, 7.0, 9.0]]], np.float32)
    np.testing.assert_array_equal(_core.resize_darknet(IM, 5, 3), want)


def test_resize_by_hand_2x1():
    # w_scale = (3-1)/(2-1) = 2: column 0 reads sx = 0 -> im[0]; column 1 is the last -> im[2].
    # Height 1: Darknet computes h_scale = 1/0 (inf, then 0*inf = NaN: undefined); we take
    # h_scale = 0, i.e. row 0 -- the only sensible reading, and what Darknet gets when (int)NaN
    # happens to be 0. Row 0 is also the last row, so no second term is added.
    want = np.array([[[1.0, 4.0]]], np.float32)
    np.testing.assert_array_equal(_core.resize_darknet(IM, 2, 1), want)


def test_resize_same_size_is_a_copy():
    np.testing.assert_array_equal(_core.resize_darknet(IM, 3, 2), IM)


# ---------------------------------------------------------------------------------------------
# NumPy port of Darknet's resize_image / letterbox_image, in float32 like the C code
# ---------------------------------------------------------------------------------------------

def darknet_resize(im: np.ndarray, w: int, h: int) -> np.ndarray:
    c, ih, iw = im.shape
    if (iw, ih) == (w, h):
        return im.copy()
    f32 = np.float32
    w_scale = f32(iw - 1) / f32(w - 1) if w > 1 else f32(0)
    h_scale = f32(ih - 1) / f32(h - 1) if h > 1 else f32(0)
    part = np.empty((c, ih, w), f32)
    for col in range(w):
        if col == w - 1 or iw == 1:
            part[:, :, col] = im[:, :, iw - 1]
        else:
            sx = f32(col) * w_scale
            ix = int(sx)
            dx = f32(sx - f32(ix))
            part[:, :, col] = (f32(1) - dx) * im[:, :, ix] + dx * im[:, :, ix + 1]
    out = np.empty((c, h, w), f32)
    for r in range(h):
        sy = f32(r) * h_scale
        iy = int(sy)
        dy = f32(sy - f32(iy))
        out[:, r] = (f32(1) - dy) * part[:, iy]
        if r == h - 1 or ih == 1:
            continue
        out[:, r] += dy * part[:, iy + 1]
    return out


def darknet_load(bgr: np.ndarray) -> np.ndarray:
    """load_image_cv: BGR -> RGB, planar, /255."""
    return (bgr[:, :, ::-1].transpose(2, 0, 1).astype(np.float32) / np.float32(255.0))


def darknet_letterbox(im: np.ndarray, w: int, h: int) -> np.ndarray:
    c, ih, iw = im.shape
    if np.float32(w) / iw < np.float32(h) / ih:
        new_w, new_h = w, (ih * w) // iw
    else:
        new_h, new_w = h, (iw * h) // ih
    boxed = np.full((c, h, w), 0.5, np.float32)
    dx, dy = (w - new_w) // 2, (h - new_h) // 2
    boxed[:, dy:dy + new_h, dx:dx + new_w] = darknet_resize(im, new_w, new_h)
    return boxed


@pytest.mark.parametrize("src_wh,dst_wh", [((37, 23), (64, 48)), ((200, 150), (96, 64)), ((50, 70), (33, 17)),
                                           ((16, 16), (16, 16)), ((1, 9), (5, 4))])
def test_preprocess_matches_numpy_port(src_wh, dst_wh):
    rng = np.random.default_rng(sum(src_wh) * 7 + dst_wh[0])
    bgr = rng.integers(0, 256, (src_wh[1], src_wh[0], 3), dtype=np.uint8)
    got = _core.preprocess(bgr, dst_wh[0], dst_wh[1], False)
    want = darknet_resize(darknet_load(bgr), *dst_wh)
    assert got.shape == (3, dst_wh[1], dst_wh[0]) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("src_wh,dst_wh", [((40, 25), (32, 32)), ((30, 50), (32, 24)), ((101, 57), (64, 64))])
def test_letterbox_matches_numpy_port(src_wh, dst_wh):
    rng = np.random.default_rng(src_wh[0])
    bgr = rng.integers(0, 256, (src_wh[1], src_wh[0], 3), dtype=np.uint8)
    got = _core.preprocess(bgr, dst_wh[0], dst_wh[1], True)
    want = darknet_letterbox(darknet_load(bgr), *dst_wh)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_letterbox_borders_by_hand():
    # 40 x 25 into 32 x 32: 32/40 = 0.8 < 32/25, so new_w = 32, new_h = 25*32 // 40 = 20,
    # placed at dy = (32 - 20) // 2 = 6: rows 0..5 and 26..31 are 0.5 grey, the rest image.
    bgr = np.zeros((25, 40, 3), np.uint8)  # black image: every non-border pixel is 0
    got = _core.preprocess(bgr, 32, 32, True)
    assert np.all(got[:, :6] == 0.5) and np.all(got[:, 26:] == 0.5)
    assert np.all(got[:, 6:26] == 0.0)
    # 30 x 50 into 32 x 24: 32/30 > 24/50, so new_h = 24, new_w = 30*24 // 50 = 14, dx = 9.
    got = _core.preprocess(np.full((50, 30, 3), 255, np.uint8), 32, 24, True)
    assert np.all(got[:, :, :9] == 0.5) and np.all(got[:, :, 23:] == 0.5)
    assert np.all(got[:, :, 9:23] == 1.0)


def test_network_preprocess_is_darknets(tmp_path):
    """The public API uses the same preprocessing at the network's size (w=48, h=32 here)."""
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nwidth=48\nheight=32\nchannels=3\n\n[maxpool]\nsize=2\nstride=2\n")
    net = darknet_py.Network(cfg)
    bgr = np.random.default_rng(1).integers(0, 256, (45, 70, 3), dtype=np.uint8)
    np.testing.assert_allclose(net.preprocess(bgr), darknet_resize(darknet_load(bgr), 48, 32), rtol=0, atol=1e-6)
    np.testing.assert_allclose(net.preprocess(bgr, letterbox=True), darknet_letterbox(darknet_load(bgr), 48, 32),
                               rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Memory: Darknet's resize keeps its whole horizontal pass (new_w x old_h x 3 floats); ours keeps the
# two rows the vertical pass reads, so extreme aspect ratios cost their input plus their output.

@pytest.mark.parametrize("src_wh,dst_wh", [((1, 300), (97, 5)), ((300, 2), (3, 77)), ((7, 1), (1, 9))])
def test_extreme_aspect_ratios_match_numpy_port(src_wh, dst_wh):
    rng = np.random.default_rng(src_wh[0] * 1000 + src_wh[1])
    bgr = rng.integers(0, 256, (src_wh[1], src_wh[0], 3), dtype=np.uint8)
    want = darknet_resize(darknet_load(bgr), *dst_wh)
    np.testing.assert_array_equal(_core.preprocess(bgr, *dst_wh, False), want)


# The peak is VmHWM, the high-water mark of this process's own memory map: getrusage's ru_maxrss
# survives exec on Linux, so a child of a large pytest process would report the parent's size.
PEAK_RSS_SCRIPT = """
import numpy as np
from darknet_py import _core
def peak_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
before = peak_kb()
out = _core.preprocess(np.full((20000, 1, 3), 200, np.uint8), 8192, 64, False)  # 20000 tall, 1 wide
assert out.shape == (3, 64, 8192) and abs(float(out.mean()) - 200 / 255) < 1e-5
print(before, peak_kb())
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc (Linux)")
def test_preprocess_memory_is_input_plus_output():
    """A 20000x1 image to 8192x64 (6 MiB out): Darknet's intermediate would be 8192 x 20000 x 3 floats
    (1.8 GiB; the peak was 1.90 GiB). Measured in a fresh process: its peak resident memory."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", PEAK_RSS_SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before_kb, peak_kb = map(int, r.stdout.split())
    assert peak_kb < 512 * 1024, f"peak RSS {peak_kb / 1024:.0f} MiB"
    assert peak_kb - before_kb < 64 * 1024, f"preprocessing added {(peak_kb - before_kb) / 1024:.0f} MiB"


def test_output_over_the_tensor_limit_is_refused():
    with pytest.raises(darknet_py.DarknetError, match="65536x65536.*limit"):
        _core.preprocess(np.zeros((2, 2, 3), np.uint8), 65536, 65536, False)
