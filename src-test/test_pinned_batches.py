"""The loader's batch buffers page-locked for the training device (BatchLoader(pin_for=net), Net.pin_host_memory):
the worker processes write each batch into shared memory that the device reads by DMA, without the training
process copying it into staging buffers. Here a pocl device offers Device::host_register (keeping a list, as
_core.host_register_device) and checks the callers: every buffer registered once, unregistered before its memory
is unmapped, and every batch uploaded from registered memory. The buffers, and so their registration, last across
multi-scale resizes. test_cuda.py runs the same path on a real GPU (cudaHostRegister)."""
import pytest

import gpu_devices
from darknet_py import _core
from darknet_py.data import BatchLoader, synth
from darknet_py.data.process_loader import PREFETCH_SLACK
from test_loader_processes import OPTS, assert_same, batches
from test_train import small_cfg

SIZES = [(64, 48), (96, 64), (64, 48), (32, 32)]  # the second grows the buffers, the others fit in them


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return synth.generate(tmp_path_factory.mktemp("pinned"), images=8, classes=2, size=(96, 80), seed=2,
                          valid_fraction=0.0, workers=1)


def net_on(device, tmp_path):
    path = tmp_path / "net.cfg"
    path.write_text(small_cfg(classes=2, size=64, batch=4, filters=(8, 16), head=16))
    net = _core.Net(str(path), gpu_devices.device("pocl"))
    if device is not None:
        _core.run_network_on(net, device)
    return net


def train_through(loader, net, sizes, per_size=3):
    """Batches at each size in turn, each uploaded by a training forward; their copies."""
    out = []
    for w, h in sizes:
        loader.set_size(w, h)
        net.resize_input(w, h)
        for _ in range(per_size):
            images, truths = loader.next_batch()
            net.forward_train(images, [])
            out.append((images.copy(), [t.copy() for t in truths]))
    return out


def test_batch_buffers_are_registered_once_used_by_uploads_and_unregistered_while_mapped(shapes, tmp_path):
    checker = _core.host_register_device(gpu_devices.device("pocl"))
    net = net_on(checker.device, tmp_path)
    with BatchLoader.from_files(shapes, None, 4, options=OPTS, seed=3, workers=2, processes=True,
                                pin_for=net) as loader:
        assert loader.pinned is None  # no buffer yet
        got = train_through(loader, net, SIZES)
        assert loader.pinned is True
        ring = loader._engine.prefetch + PREFETCH_SLACK
    calls = checker.calls()
    assert checker.notes() == []
    # one ring at the first size, a second when the next size outgrew it; the smaller sizes reuse it
    assert calls["host_register"] == 2 * ring
    assert calls["host_unregister"] == calls["host_register"]
    assert calls["upload from registered memory"] == len(got)
    # the same batches as the threads' loader, across the resizes (dropped prefetches included)
    with BatchLoader.from_files(shapes, None, 4, options=OPTS, seed=3, workers=2, pin_for=net) as threads:
        assert_same(got, train_through(threads, net_on(None, tmp_path), SIZES))
        assert threads.pinned is None  # threads: fresh arrays each batch, never page-locked


def test_a_device_without_page_locking_leaves_the_batches_as_they_are(shapes, tmp_path):
    """The CPU and the OpenCL devices offer no host_register: pinned is False, the batches the same."""
    cfg = tmp_path / "net.cfg"
    cfg.write_text(small_cfg(classes=2, size=64, batch=4, filters=(8, 16), head=16))
    for device in ("cpu", gpu_devices.device("pocl")):
        with BatchLoader.from_files(shapes, None, 4, options=OPTS, seed=3, workers=1, processes=True,
                                    pin_for=_core.Net(str(cfg), device)) as loader:
            got = batches(loader, 3)
            assert loader.pinned is False
        with BatchLoader.from_files(shapes, None, 4, options=OPTS, seed=3, workers=1) as threads:
            assert_same(got, batches(threads, 3))
