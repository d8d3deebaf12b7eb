"""Darknet's blur, gaussian_noise and mixup for detection (data.c load_data_detection and
image_opencv.cpp image_data_augmentation), mosaic/mixup chosen per loading group as Darknet's
detector does, and cutmix refused for detection as Darknet refuses it."""
import cv2
import numpy as np
import pytest

from darknet_py.data import synth
from darknet_py.data import BatchLoader
from darknet_py.data import augment as A
from darknet_py.data.loader import LOAD_THREADS, load_group

PLAIN = dict(A.DEFAULT_OPTIONS, jitter=0.0, flip=0, hue=0.0, saturation=1.0, exposure=1.0, mosaic=0)


def checkerboard(h=64, w=80, cell=4):
    y, x = np.mgrid[0:h, 0:w]
    g = (((y // cell) + (x // cell)) % 2 * 255).astype(np.uint8)
    return np.stack([g, 255 - g, g], axis=2)


BOX = np.array([[1, 0.5, 0.5, 0.5, 0.5]], np.float32)  # class, cx, cy, w, h: the middle quarter


def test_whole_image_blur_smooths_every_pixel_and_keeps_the_labels():
    img = checkerboard()
    out = A.blur_and_noise(img, BOX, A.PixelNoise(blur=5), np.random.default_rng(0))
    np.testing.assert_array_equal(out, cv2.GaussianBlur(img, (5, 5), 0))  # ksize blur // 2 * 2 + 1
    assert out.std() < 0.5 * img.std()
    # through augment_one: the same boxes with and without blur, different pixels
    opts = dict(PLAIN, blur=5)
    for seed in range(8):
        got_img, got = A.augment_one(img, BOX, 80, 64, opts, np.random.default_rng(seed))
        want_img, want = A.augment_one(img, BOX, 80, 64, PLAIN, np.random.default_rng(seed))
        np.testing.assert_array_equal(got, want)
    kinds = {A.sample_pixel_noise(np.random.default_rng(s), opts).blur for s in range(60)}
    assert kinds == {0, 1, 5}  # none, background, whole image, as Darknet's rand_int(0, 2)


def test_background_blur_keeps_the_boxes_sharp():
    img = checkerboard()
    out = A.blur_and_noise(img, BOX, A.PixelNoise(blur=1), np.random.default_rng(0))
    inside = (slice(16, 48), slice(20, 60))  # the box in pixels: left 20, top 16, 40 x 32
    np.testing.assert_array_equal(out[inside], img[inside])
    outside = cv2.GaussianBlur(img, (17, 17), 0)
    np.testing.assert_array_equal(out[:16], outside[:16])


def test_whole_image_blur_is_reduced_for_small_objects():
    img = checkerboard()
    tiny = np.array([[0, 0.5, 0.5, 0.2, 0.2]], np.float32)  # 16 x 12 pixels: side // 8 = 1
    out = A.blur_and_noise(img, tiny, A.PixelNoise(blur=9), np.random.default_rng(0))
    # Darknet sets blur = min_w_h / 8 = 1, which is its background blur
    np.testing.assert_array_equal(out, A.blur_and_noise(img, tiny, A.PixelNoise(blur=1), np.random.default_rng(0)))


def test_gaussian_noise_only_brightens_as_darknets_8_bit_noise():
    img = np.full((40, 50, 3), 100, np.uint8)
    out = A.blur_and_noise(img, BOX, A.PixelNoise(noise=20), np.random.default_rng(1))
    diff = out.astype(int) - img
    assert diff.min() == 0 and diff.max() > 30  # negative noise saturates to 0 in cv::randn's 8-bit Mat
    # half-normal: about half the pixels unchanged, the mean of the rest near sigma * sqrt(2 / pi) * 2
    assert 0.4 < (diff == 0).mean() < 0.6
    assert abs(diff[diff > 0].mean() - 20 * np.sqrt(2 / np.pi)) < 2
    on = [A.sample_pixel_noise(np.random.default_rng(s), dict(PLAIN, gaussian_noise=20)).noise for s in range(200)]
    assert 0.35 < np.mean(np.array(on) == 20) < 0.65  # on half of the images


def test_mixup_blends_two_samples_and_keeps_both_label_sets():
    a = np.random.default_rng(0).uniform(0, 1, (3, 8, 8)).astype(np.float32)
    b = np.random.default_rng(1).uniform(0, 1, (3, 8, 8)).astype(np.float32)
    ta = np.array([[0, 0.2, 0.2, 0.1, 0.1]], np.float32)
    tb = np.array([[1, 0.7, 0.7, 0.2, 0.2], [2, 0.5, 0.5, 0.3, 0.3]], np.float32)
    img, truth = A.mixup((a, ta), (b, tb), max_boxes=200)
    np.testing.assert_allclose(img, 0.5 * a + 0.5 * b, rtol=1e-6)
    np.testing.assert_array_equal(truth, np.concatenate([ta, tb]))
    assert len(A.mixup((a, ta), (b, tb), max_boxes=2)[1]) == 2  # blend_truth stops at max boxes


def test_load_groups_split_an_iteration_as_darknets_load_threads():
    sizes = np.bincount([load_group(i, 64) for i in range(64)], minlength=LOAD_THREADS)
    assert list(sizes) == [10, 11, 11, 10, 11, 11]  # [t * 64 / 6, (t + 1) * 64 / 6)
    assert [load_group(i, 3) for i in range(3)] == [1, 3, 5]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return synth.generate(tmp_path_factory.mktemp("mix"), images=8, classes=3, size=(64, 48), seed=3,
                          valid_fraction=0)


@pytest.mark.parametrize("kind", ["mosaic", "mixup"])
def test_mosaic_and_mixup_are_chosen_per_loading_group(shapes, kind):
    opts = dict(PLAIN, width=32, height=32, **{kind: 1})
    # batch 24 in subdivisions of 8: the groups of 4 images span mini-batches, one draw per group
    with BatchLoader.from_files(shapes, None, 8, options=opts, seed=5, workers=0, iteration_images=24) as loader:
        engine = loader.sampler
        choices = []
        for it in range(12):
            per_group = {}
            for sub in range(3):
                for j in range(8):
                    per_group.setdefault(load_group(sub * 8 + j, 24), set()).add(engine.group_mixing(it * 3 + sub, j))
            assert all(len(c) == 1 for c in per_group.values()), per_group  # one choice per group
            choices += [c.pop() for c in per_group.values()]
        assert set(choices) == {kind, ""} and 0.3 < choices.count(kind) / len(choices) < 0.7
        images, truths = loader.next_batch()
        assert images.shape == (8, 3, 32, 32)


def test_mixup_samples_are_a_blend_of_two_images(shapes):
    opts = dict(PLAIN, width=32, height=32, mixup=1)
    with BatchLoader.from_files(shapes, None, 6, options=opts, seed=1, workers=0) as loader:
        engine = loader.sampler
        mixed = [(k, j) for k in range(6) for j in range(6) if engine.group_mixing(k, j) == "mixup"]
        k, j = mixed[0]
        img, truth = engine.sample(k, j, 32, 32)
        # the same draws without mixing: the first image; the blend is half of it plus half of another
        rng = np.random.default_rng([engine.seed, k, j])
        first_img, first_truth = A.augment_one(*engine._draw(rng), 32, 32, opts, rng, bgr=True)  # _draw: BGR
        second_img, second_truth = A.augment_one(*engine._draw(rng), 32, 32, opts, rng, bgr=True)
        np.testing.assert_allclose(img, 0.5 * first_img + 0.5 * second_img, rtol=1e-6)
        np.testing.assert_array_equal(truth, np.concatenate([first_truth, second_truth]))
        assert not np.allclose(img, first_img)


def test_cutmix_is_refused_for_detection_as_darknet_does(shapes):
    with pytest.warns(UserWarning, match="cutmix=1 is not applied to detector training"):
        BatchLoader.from_files(shapes, None, 2, options=dict(PLAIN, cutmix=1), seed=1, workers=0).close()
