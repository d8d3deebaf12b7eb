"""Half training batches: training in fp16 / bf16, the loader writes each batch in the network's
half type (data/batch_storage.py: float16, or uint16 holding bf16 bits) and the network uploads it as it is.

- The loader's half batch is the engine's host conversion (_core.half_bits: round to nearest even, NumPy's
  float16 and ml_dtypes' bfloat16 bit for bit in test_half_precision.py, as the devices convert) of the
  float32 batch of the same seed, through every path that writes pixels: the colour pass (jitter, flip),
  blur and noise (to_chw), mosaic's windows, mixup's blend, letterbox, grey images; in this process and
  through worker processes.
- forward_train and forward from the half batch give the bits of the float32 batch's (which the device
  converts itself), on pocl in NCHW and NHWC, with half the bytes uploaded; one training step from each
  gives the same weights.
- A half batch for a network in another precision is refused, naming both.
- train() with half batches gives the losses it gives with DARKNET_PY_HALF_BATCHES=0.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpu_devices
from darknet_py import DarknetError, _core
from darknet_py.data import BatchLoader, darknet_truth, synth
from darknet_py.data.darknet_files import read_image_list
from darknet_py.training.init_weights import darknet_init
from test_train import small_cfg

HALF = {"fp16": np.float16, "bf16": np.uint16}
SIZE = 64


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("half_batches")
    data = synth.generate(str(root / "ds"), images=8, classes=2, size=(80, 64), seed=6, valid_fraction=0.0,
                          workers=1)
    cfg = root / "tiny.cfg"
    cfg.write_text(small_cfg(classes=2, size=SIZE, batch=4, lr=0.002, burn_in=0, max_batches=1000, filters=(8, 16),
                             head=16, anchors="8,8, 14,14, 22,22"))
    return {"data": data, "cfg": str(cfg), "paths": read_image_list(str(root / "ds" / "train.txt"))}


def half_of(images: np.ndarray, storage: str) -> np.ndarray:
    return _core.half_bits(images, storage).view(HALF[storage])


def loader_batches(paths, options, storage, n=2, workers=0, processes=False):
    opts = dict(width=SIZE, height=SIZE, jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5, flip=1, **options)
    with BatchLoader(paths, 4, 2, opts, seed=11, workers=workers, processes=processes, storage=storage) as loader:
        out = [loader.next_batch() for _ in range(n)]
        return [(images.copy(), truths) for images, truths in out], loader.sampler


# each set reaches another writer of the batch's pixels (the first: the C++ colour pass alone)
OPTION_SETS = {"jitter": {}, "blur and noise": {"blur": 1, "gaussian_noise": 20}, "mosaic": {"mosaic": 1},
               "mixup": {"mixup": 1}, "letterbox": {"letter_box": 1}, "grey": {"channels": 1}}


@pytest.mark.parametrize("storage", ["fp16", "bf16"])
def test_half_batches_are_the_conversion_of_the_float32_batches(shapes, storage):
    for name, options in OPTION_SETS.items():
        want, sampler = loader_batches(shapes["paths"], options, "fp32")
        got, _ = loader_batches(shapes["paths"], options, storage)
        for (a, ta), (b, tb) in zip(want, got):
            assert a.dtype == np.float32 and b.dtype == HALF[storage] and b.shape == a.shape, name
            assert np.array_equal(b.view(np.uint16), half_of(a, storage).view(np.uint16)), name
            assert all(np.array_equal(x, y) for x, y in zip(ta, tb)), name
        kinds = {sampler.group_mixing(k, j) for k in range(2) for j in range(4)}
        if name in ("mosaic", "mixup"):  # the seed draws both kinds of group: the mixed path ran
            assert kinds == {name, ""}, (name, kinds)
    with pytest.raises(ValueError, match=r"batch storage 'fp8': use one of fp32, fp16, bf16"):
        BatchLoader(shapes["paths"], 4, 2, storage="fp8")


def test_worker_processes_write_the_same_half_batches(shapes):
    options = {"mosaic": 1}
    want, _ = loader_batches(shapes["paths"], options, "bf16")
    got, _ = loader_batches(shapes["paths"], options, "bf16", workers=2, processes=True)
    for (a, _), (b, _) in zip(want, got):
        assert b.dtype == np.uint16 and np.array_equal(a, b)


def test_pixel_pass_rounds_every_level_as_the_engine(shapes):
    """The pass's vectorised rounding of level / 255 against half_bits (half_convert.cpp) for all 256 levels
    (test_loader_pixels.py checks that every copy of the CPU kernels writes the same half bits)."""
    levels = np.arange(256, dtype=np.uint8).reshape(16, 16)
    want = np.zeros((1, 16, 16), np.float32)
    _core.pixels_into_batch(levels, want)
    assert np.array_equal(want[0], levels / np.float32(255))
    for storage, dtype in HALF.items():
        got = np.zeros((1, 16, 16), dtype)
        _core.pixels_into_batch(levels, got)
        assert np.array_equal(got.view(np.uint16), _core.half_bits(want, storage)), storage


def test_pixel_pass_writes_half_into_a_window(shapes):
    """A mosaic quadrant's window of a half batch row: the strides in 2-byte units, nothing outside written."""
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (20, 30, 3), np.uint8)
    tables = rng.integers(0, 256, (1, 256, 3), np.uint8)
    want = np.zeros((3, 32, 40), np.float32)
    _core.pixels_into_batch(img, want[:, 5:25, 7:37], tables, True, True)
    for storage, dtype in HALF.items():
        got = np.full((3, 32, 40), 7, dtype)
        _core.pixels_into_batch(img, got[:, 5:25, 7:37], tables, True, True)
        expect = half_of(want, storage)
        expect[:, :5], expect[:, 25:], expect[:, :, :7], expect[:, :, 37:] = 7, 7, 7, 7
        assert np.array_equal(got.view(np.uint16), expect.view(np.uint16)), storage
    with pytest.raises(ValueError, match=r"pixels_into_batch: out must be a writable float32 \(or half: float16, "
                                         r"uint16 holding bf16\) array of shape \(3, 20, 30\)"):
        _core.pixels_into_batch(img, np.zeros((3, 20, 30), np.int16))


# ---- the network takes the half batch ---------------------------------------------------------------------
def pocl_net(cfg: str, precision: str, monkeypatch, layout: str = "nchw"):
    monkeypatch.setenv("DARKNET_PY_LAYOUT", layout)
    net = _core.Net(cfg, gpu_devices.device("pocl"))
    darknet_init(net, 3)
    net.precision = precision
    assert net.layout == layout
    return net


def step(net, x, truths, layers):
    """forward_train, loss, backward and update from batch x: (every layer's output, the parameters after,
    the bytes uploaded by the forward)."""
    up = net.bytes_moved()["up"]
    outs = net.forward_train(x, layers)
    uploaded = net.bytes_moved()["up"] - up
    net.yolo_loss(truths)
    net.backward()
    net.update(0.002, len(x))
    params = [v for i in layers for _, v in sorted(net.params(i).items())]
    return outs, params, uploaded


@pytest.mark.parametrize("precision,layout", [("fp16", "nchw"), ("bf16", "nchw"), ("bf16", "nhwc")])
def test_half_batch_trains_as_the_float32_batch(shapes, monkeypatch, precision, layout):
    batches, _ = loader_batches(shapes["paths"], {}, "fp32", n=1)
    images, truths = batches[0][0], [darknet_truth(t) for t in batches[0][1]]
    half = half_of(images, precision)
    layers = list(range(len(pocl_net(shapes["cfg"], precision, monkeypatch, layout).layers())))
    results = []
    for x in (images, half):
        net = pocl_net(shapes["cfg"], precision, monkeypatch, layout)
        results.append(step(net, x, truths, layers) + (net.forward(x, layers),))
    (outs32, params32, up32, fwd32), (outs16, params16, up16, fwd16) = results
    assert up16 * 2 == up32 == images.nbytes  # the half batch went up as it is
    for a, b in zip(outs32 + params32 + fwd32, outs16 + params16 + fwd16):
        assert a.dtype == b.dtype == np.float32 and np.array_equal(a, b)


def test_half_batch_for_another_precision_is_refused(shapes, monkeypatch):
    x = np.zeros((4, 3, SIZE, SIZE), np.float32)
    cpu = _core.Net(shapes["cfg"], "cpu")
    with pytest.raises(DarknetError, match=r"^forward_train: x must be float32: the network runs fp32 \(a half batch "
                                           r"is taken by a network in its precision\), got float16 \(fp16 values\)$"):
        cpu.forward_train(x.astype(np.float16), [])
    with pytest.raises(DarknetError, match=r"^forward: x must be float32: .* got uint16 \(bf16 values\)$"):
        cpu.forward(np.zeros(x.shape, np.uint16), [])
    net = pocl_net(shapes["cfg"], "bf16", monkeypatch)
    with pytest.raises(DarknetError, match=r"^forward_train: x must be float32 or uint16 \(bf16 bits\): the network "
                                           r"runs bf16, got float16 \(fp16 values\)$"):
        net.forward_train(x.astype(np.float16), [])
    net.precision = "fp16"
    with pytest.raises(DarknetError, match=r"float32 or float16: the network runs fp16, got uint16 \(bf16 values\)"):
        net.forward_train(half_of(x, "bf16"), [])


# ---- train() -------------------------------------------------------------------------------------------------
def test_train_with_half_batches_gives_the_same_losses(shapes, monkeypatch, tmp_path):
    from darknet_py import train

    device = gpu_devices.device("pocl")
    runs = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("DARKNET_PY_HALF_BATCHES", mode)
        losses = []
        r = train(shapes["data"], shapes["cfg"], out_dir=str(tmp_path / mode), device=device, precision="bf16",
                  seed=3, workers=1, max_batches=3, chart=False, quiet=True, loader_kind="threads",
                  callback=lambda s: losses.append(s["loss"]))
        runs[mode] = (losses, r.loader)
    assert runs["1"][1] == "threads x1, bf16 batches" and runs["0"][1] == "threads x1"
    assert len(runs["1"][0]) == 3 and runs["1"][0] == runs["0"][0]


def test_network_forward_takes_the_half_blob(shapes):
    import darknet_py

    x = np.random.default_rng(4).random((1, 3, SIZE, SIZE), dtype=np.float32)
    net = darknet_py.Network(shapes["cfg"], device=gpu_devices.device("pocl"), precision="fp16")
    half = net.pin_memory(half_of(x, "fp16"))  # stays float16 (pocl has no pinned memory: the array itself)
    assert half.dtype == np.float16
    for want, got in zip(net.forward(x), net.forward(half)):
        assert np.array_equal(want, got)
