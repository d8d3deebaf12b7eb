"""The loader's fused colour pass (src-lib/cpu/loader_pixels.cpp, augment.hsv_into_chw) against the
OpenCV path it replaces (augment.distort_hsv then to_chw): within one level of 255, mean difference ~0,
the same bits without jitter, the same bits in every copy of the CPU kernels (DARKNET_PY_ISA), and the
same batch twice for a seed, plain samples and mosaics alike."""
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from darknet_py import DarknetError, _core
from darknet_py.data import BatchLoader, synth
from darknet_py.data import augment as A

JITTERS = [(0.1, 1.5, 0.7), (-0.1, 0.6, 1.5), (0.5, 1.5, 1.5), (-0.5, 0.5, 0.5)]


def opencv_path(img, dhue, dsat, dexp, bgr=True, out=None):
    return A.to_chw(A.distort_hsv(img, dhue, dsat, dexp, bgr=bgr), out)


def levels(chw):
    return np.rint(chw * 255).astype(np.int32)


def every_colour_image():
    """Every second level of each channel (2^21 BGR colours, both ends included through 255 - odd) as a
    512 x 4096 image (a width that is a multiple of every SIMD block, so OpenCV's scalar tail never runs)."""
    c = np.arange(1 << 21, dtype=np.uint32)
    planes = [(c >> s & 127) * 2 + (s // 7 % 2) for s in (0, 7, 14)]  # even levels in B and R, odd in G
    return np.stack(planes, 1).astype(np.uint8).reshape(512, 4096, 3)


@pytest.mark.parametrize("jitter", [(0.0, 1.0, 1.0001)] + JITTERS[:2])
def test_every_colour_is_within_one_level_of_opencv(jitter):
    img = every_colour_image()
    diff = levels(A.hsv_into_chw(img, *jitter, bgr=True)) - levels(opencv_path(img, *jitter))
    assert np.abs(diff).max() <= 1
    assert np.count_nonzero(diff) < 1e-3 * diff.size  # the same formula: rare float ties apart, the same levels


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Synth JPEGs (decoded BGR) at an odd width, so OpenCV's scalar tail is exercised too."""
    data = synth.generate(tmp_path_factory.mktemp("px"), images=3, classes=2, size=(413, 301), seed=5, valid_fraction=0)
    return [cv2.imread(str(p)) for p in sorted(Path(os.path.dirname(data)).glob("**/*.jpg"))]


# OpenCV's 8-bit HSV -> RGB converts a row in vector blocks (32 pixels with AVX2, 16 with SSE4.1), which
# truncate to a level as this pass does, then the last width % block pixels in scalar code, which
# rounds: there OpenCV is at most one level above (a 413-wide row: its last 29 pixels)
OPENCV_BLOCK = 32


def split_by_opencv_tail(diff):
    """diff (C, H, W) -> (the columns OpenCV converts in vector blocks, those of its scalar tail)."""
    w = diff.shape[2]
    return diff[:, :, :w - w % OPENCV_BLOCK], diff[:, :, w - w % OPENCV_BLOCK:]


@pytest.mark.parametrize("jitter", JITTERS)
def test_photos_are_within_one_level_and_the_same_distribution(photos, jitter):
    for img in photos:
        diff = levels(A.hsv_into_chw(img, *jitter, bgr=True)) - levels(opencv_path(img, *jitter))
        assert np.abs(diff).max() <= 1
        blocks, tail = split_by_opencv_tail(diff)
        assert np.count_nonzero(blocks) < 1e-3 * blocks.size and abs(blocks.mean()) < 1e-3  # rare float ties
        assert np.count_nonzero(tail == 1) < 1e-3 * tail.size  # where OpenCV rounds, this is at most one below


def test_without_jitter_it_is_the_copy_bit_for_bit(photos):
    img = photos[0]
    assert np.array_equal(A.hsv_into_chw(img, 0, 1, 1, bgr=True), A.to_chw(cv2.cvtColor(img, cv2.COLOR_BGR2RGB)))
    grey = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    assert np.array_equal(A.hsv_into_chw(grey, 0.1, 1.5, 0.7), A.to_chw(A.distort_hsv(grey, 0.1, 1.5, 0.7))[:1])


def test_views_in_and_out(photos):
    """A crop of the image into a window of a batch row (a mosaic quadrant), the rest of the row untouched."""
    img = photos[1]
    row = np.full((3, 200, 300), -1, np.float32)
    A.hsv_into_chw(img[50:150, 7:207], *JITTERS[0], out=row[:, 100:200, 33:233], bgr=True)
    whole = A.hsv_into_chw(img, *JITTERS[0], bgr=True)  # pixel by pixel: a crop's pixels are the whole's
    assert np.array_equal(row[:, 100:200, 33:233], whole[:, 50:150, 7:207])
    row[:, 100:200, 33:233] = -1
    assert (row == -1).all()


def test_bad_arguments_name_what_is_wrong(photos):
    img = photos[0]
    with pytest.raises(DarknetError, match=r"out must be .* of shape \(3, 301, 413\).*, got float32 array of shape \(3, 10, 10\)"):
        _core.pixels_into_batch(img, np.zeros((3, 10, 10), np.float32))
    with pytest.raises(DarknetError, match="image must be a uint8"):
        _core.pixels_into_batch(img.astype(np.float32), np.zeros((3,) + img.shape[:2], np.float32))
    with pytest.raises(DarknetError, match="image must be .*side by side, got uint8 .* strides"):  # a flipped view
        _core.pixels_into_batch(img[:, ::-1], np.zeros((3,) + img.shape[:2], np.float32))
    with pytest.raises(DarknetError, match="tables must be None or 256 x 3 uint8"):
        _core.pixels_into_batch(img, np.zeros((3,) + img.shape[:2], np.float32), np.zeros(5, np.uint8))


def test_the_flip_on_the_way_is_cv2_flip_first(photos):
    img = photos[2]
    grey = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    for src, jitter in ((img, JITTERS[1]), (img, (0, 1, 1)), (img[20:120, 33:250], JITTERS[2]), (grey, JITTERS[0])):
        assert np.array_equal(A.hsv_into_chw(src, *jitter, bgr=True, flip=True),
                              A.hsv_into_chw(cv2.flip(src, 1), *jitter, bgr=True))


def test_jitter_tables_computed_in_vectors_give_the_table_lookups_bits():
    """The pass applies a jitter table as clamp((x * mul + add) >> 16) where that form reproduces all 256
    entries, else entry by entry. The same table with entries no pixel here reaches changed to break that
    form (hue 250, saturation and value 255: the colours stay in 1..200) takes the lookup: the same bits."""
    rng = np.random.default_rng(3)
    img = rng.integers(1, 201, (64, 999, 3), dtype=np.uint8)
    for dhue in np.linspace(-0.5, 0.5, 7):
        for dsat, dexp in rng.uniform(0.4, 2.5, (6, 2)):
            table = A._hsv_lut(dhue, dsat, dexp)
            looked_up = table.copy()
            looked_up[0, 250, 0], looked_up[0, 255, 1:] = 0, 0  # no longer clamp((x * mul + add) >> 16)
            a, b = (np.zeros((3, 64, 999), np.float32) for _ in range(2))
            _core.pixels_into_batch(img, a, table, True)
            _core.pixels_into_batch(img, b, looked_up, True)
            assert np.array_equal(a, b), (dhue, dsat, dexp)


def test_jitter_tables_built_from_the_factors_are_hsv_luts():
    """pixels_into_batch builds the tables of a (dhue, dsat, dexp) tuple in C++ (loader_jitter.cpp), as
    augment._hsv_lut does in NumPy: the same bits, on factors whose products land on half levels too
    (x * 1.5, x + 179 * 0.5 / 179: rint rounds those halves to even). A grey image of all 256 levels shows
    the value table entry by entry; a colour image of random pixels reaches the hue and saturation tables."""
    rng = np.random.default_rng(4)
    grey = np.arange(256, dtype=np.uint8).reshape(1, 256)
    colour = rng.integers(0, 256, (96, 512, 3), dtype=np.uint8)
    ties = [(0.5 / 179, 1.5, 1.5), (-0.5 / 179, 0.5, 2.5), (1.5 / 179, 2.5, 0.5), (0.0, 1.0, 1.0)]
    for factors in ties + [tuple(f) for f in rng.uniform((-0.5, 0.3, 0.3), (0.5, 2.5, 2.5), (40, 3))]:
        for img in (grey, colour):
            a, b = (np.zeros((1 if img.ndim == 2 else 3,) + img.shape[:2], np.float32) for _ in range(2))
            _core.pixels_into_batch(img, a, A._hsv_lut(*factors), True)
            _core.pixels_into_batch(img, b, factors, True)
            assert np.array_equal(a, b), factors
    for bad, got in (((0.1, 1.5), "2 entries"), ((0.1, None, 1.0), "a NoneType in it")):
        with pytest.raises(DarknetError, match=f"pixels_into_batch: tables must be a tuple of 3 floats .*, got {got}"):
            _core.pixels_into_batch(colour, np.zeros((3, 96, 512), np.float32), bad)


# Factors whose jitter tables all take the vectorised affine form (no product on a half level), so the
# AVX2 copy's hand-written HSV round trip (loader_hsv_avx2.h) runs; those with 1.5 or 0.5 take the lookups
AFFINE_JITTERS = [(0.1234, 1.4142136, 0.7071068), (-0.4321, 0.5773503, 1.7320508)]

# Each copy of the CPU kernels is chosen once per process: one subprocess per copy prints a digest of
# the pass on the every-colour image (jittered both ways, at a width of whole blocks and at odd widths,
# flipped, into float and half rows) and on a view of it, a grey plane and a plain copy
_EVERY_COPY = """
import hashlib, sys
import numpy as np
sys.path.insert(0, {here!r})
from test_loader_pixels import AFFINE_JITTERS, every_colour_image
from darknet_py import _core
from darknet_py.data import augment as A
img = every_colour_image()
h = hashlib.sha256()
for x in (A.hsv_into_chw(img, 0.1, 1.5, 0.7, bgr=True), A.hsv_into_chw(img[3:, 5:4000], -0.5, 0.5, 0.5, flip=True),
          A.hsv_into_chw(np.ascontiguousarray(img[:, :, 1]), 0.1, 1.5, 0.7), A.hsv_into_chw(img, 0, 1, 1),
          *(A.hsv_into_chw(img, 0.1, 1.5, 0.7, np.empty((3,) + img.shape[:2], t), True) for t in (np.float16, np.uint16)),
          *(A.hsv_into_chw(img[:, :w], *j, np.empty((3, img.shape[0], w), t), True, w % 2 == 1)
            for j, w, t in zip(AFFINE_JITTERS * 2, (4096, 4093, 4091, 4077), (np.float32, np.uint16, np.float16, np.float32)))):
    h.update(x.tobytes())
print(_core.cpu_isa()["active"], h.hexdigest())
"""


def test_every_copy_of_the_cpu_kernels_gives_the_same_bits():
    copies = _core.cpu_isa()["runnable"]
    if len(copies) < 2:
        pytest.skip(f"one copy of the CPU kernels runs here ({copies}): nothing to compare")
    code = _EVERY_COPY.format(here=os.path.dirname(os.path.abspath(__file__)))
    digests = {}
    for isa in copies:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, DARKNET_PY_ISA=isa))
        assert r.returncode == 0, r.stderr
        active, digest = r.stdout.split()
        assert active == isa
        digests[isa] = digest
    # -ffp-contract=off (cmake/cpu_isa.cmake): no copy fuses OpenCV's multiply-adds
    assert len(set(digests.values())) == 1, digests


def test_a_seed_gives_the_same_batch_twice_near_the_opencv_path(tmp_path, monkeypatch):
    data = synth.generate(tmp_path, images=6, classes=2, size=(96, 80), seed=2, valid_fraction=0)
    opts = dict(A.DEFAULT_OPTIONS, width=64, height=64, jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5, mosaic=1)
    paths = [str(p) for p in sorted(Path(os.path.dirname(data)).glob("**/*.jpg"))]
    with BatchLoader(paths, 8, classes=2, options=opts, seed=7, workers=0) as loader:
        m = loader.sampler
        kinds = {m.group_mixing(0, j) for j in range(8)}
        assert kinds == {"", "mosaic"}, kinds  # both paths of the sampler
        first = [m.sample(0, j, 64, 64) for j in range(8)]
        again = [m.sample(0, j, 64, 64, out=np.full((3, 64, 64), np.nan, np.float32)) for j in range(8)]
        monkeypatch.setattr(A, "hsv_into_chw", lambda img, h, s, e, out=None, bgr=False, flip=False:
                            opencv_path(cv2.flip(img, 1) if flip else img, h, s, e, bgr, out))
        old = [m.sample(0, j, 64, 64) for j in range(8)]
    for (a, ta), (b, tb), (c, tc) in zip(first, again, old):
        assert np.array_equal(a, b) and np.array_equal(ta, tb) and np.array_equal(ta, tc)
        # a mosaic's quadrants have any width, so OpenCV's rounding tail is in many places: one level at most
        d = levels(a) - levels(c)
        assert np.abs(d).max() <= 1 and np.count_nonzero(d == 1) < 1e-3 * d.size
    # and the sampler did take the fused pass: OpenCV's rounding tails show
    assert any(not np.array_equal(a, c) for (a, _), (c, _) in zip(first, old))
