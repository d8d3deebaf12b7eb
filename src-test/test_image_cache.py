"""The loader's cache of decoded images (data/image_cache.py, src-lib/loader_image_cache.cpp): the batches
are the same bits with it as without, in the calling thread, in threads and in processes; the workers of
every kind share one cache (its hits are counted across processes); a full cache decodes the rest; racing
writers store an image once; bad input to the C++ side is refused with its name; the shared memory is
freed when the loader closes."""
import os
import pickle
import sys
import threading
from multiprocessing import shared_memory

import numpy as np
import pytest

from darknet_py import _core
from darknet_py.data import BatchLoader, synth
from darknet_py.data import image_cache
from darknet_py.data.image_cache import ImageCache

OPTS = dict(width=64, height=48, jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5, flip=1, mosaic=1, blur=1,
            gaussian_noise=20, max_boxes=90)
IMAGES = 12


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return synth.generate(tmp_path_factory.mktemp("cache"), images=IMAGES, classes=3, size=(96, 80), seed=4,
                          valid_fraction=0.0, workers=1)


def batches(loader, n):
    out = []
    for _ in range(n):
        images, truths = loader.next_batch()
        out.append((images.copy(), [t.copy() for t in truths]))  # processes: valid for two more batches
    return out


def assert_same(a, b):
    for (ia, ta), (ib, tb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        assert len(ta) == len(tb) and all(np.array_equal(x, y) for x, y in zip(ta, tb))


@pytest.mark.parametrize("kw", [dict(workers=0), dict(workers=2), dict(workers=2, processes=True)],
                         ids=["this-thread", "threads", "processes"])
def test_cached_batches_are_the_decoded_bits(shapes, kw):
    with BatchLoader.from_files(shapes, None, 6, options=OPTS, seed=3, cache=0, **kw) as loader:
        assert loader.cache is None
        plain = batches(loader, 6)
    with BatchLoader.from_files(shapes, None, 6, options=OPTS, seed=3, cache=1 << 24, **kw) as loader:
        assert (loader.cache.name is not None) == loader.processes  # threads: this process's own memory
        cached = batches(loader, 6)
        stats = loader.cache.stats()
    assert_same(plain, cached)
    # 36 samples, mosaics among them, from 12 images: every image stored once, most draws read back
    assert 0 < stats["stored"] <= IMAGES
    assert stats["used"] >= stats["stored"] * 96 * 80 * 3
    assert stats["hits"] > stats["misses"] >= stats["stored"]


def test_a_full_cache_decodes_the_rest(shapes):
    with BatchLoader.from_files(shapes, None, 6, options=OPTS, seed=5, cache=0) as loader:
        plain = batches(loader, 4)
    with BatchLoader.from_files(shapes, None, 6, options=OPTS, seed=5, cache=96 * 80 * 3 + 100) as loader:
        cached = batches(loader, 4)
        stats = loader.cache.stats()
    assert_same(plain, cached)
    assert stats["stored"] == 1 and stats["hits"] >= 1


def test_the_loader_frees_its_cache(shapes):
    loader = BatchLoader.from_files(shapes, None, 2, options=OPTS, seed=1, workers=1, processes=True)
    assert loader.cache is not None  # "auto" on a machine with memory to spare
    name = loader.cache.name
    loader.next_batch()
    loader.close()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "private"])
def test_an_image_is_stored_once_and_read_back_read_only(shared):
    cache = ImageCache(3, 1 << 16, shared)
    colour = np.random.default_rng(0).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    grey = colour[..., 0].copy()
    assert cache.get(0) is None
    assert cache.put(0, colour) and not cache.put(0, grey)  # the first writer wins
    assert cache.put(2, grey)
    got = cache.get(0)
    np.testing.assert_array_equal(got, colour)
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0, 0, 0] = 1
    np.testing.assert_array_equal(cache.get(2), grey)
    assert cache.get(2).shape == (7, 9)
    assert cache.stats() == dict(images=3, capacity=1 << 16, used=256, stored=2, hits=3, misses=1)
    if shared:  # what a worker process gets: the same memory, by name
        other = pickle.loads(pickle.dumps(cache))
        np.testing.assert_array_equal(other.get(0), colour)
        other.close()
    else:
        with pytest.raises(TypeError, match="cannot go to another process"):
            pickle.dumps(cache)
    del got
    cache.close()


def test_racing_writers_store_each_image_once():
    images = 64
    cache = ImageCache(images, 1 << 20, shared=False)
    pixels = [np.full((16, 16, 3), i, np.uint8) for i in range(images)]
    stored = []

    def writer():
        stored.append(sum(cache.put(i, pixels[i]) for i in range(images)))  # the C++ store runs without the GIL

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(stored) == images and cache.stats()["stored"] == images
    assert all(np.array_equal(cache.get(i), pixels[i]) for i in range(images))
    cache.close()


def test_bad_input_is_refused_by_name():
    cache = ImageCache(2, 1024)
    with pytest.raises(ValueError, match="index must be in 0..1"):
        cache.get(2)
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        cache.put(0, np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        cache.put(0, np.zeros((4, 8, 3), np.uint8)[:, ::2])
    with pytest.raises(ValueError, match="shared memory of an image cache"):
        _core.image_cache_find(bytearray(4096), 0)
    with pytest.raises(ValueError, match="cache must be a number of bytes"):
        BatchLoader([__file__], 1, 1, cache="lots")
    cache.close()


def test_auto_takes_a_share_of_the_memory_and_none_on_windows(monkeypatch):
    monkeypatch.setattr(image_cache, "available_memory", lambda: 8 << 30)
    assert image_cache.auto_capacity(shared=False) == 2 << 30
    assert image_cache.auto_capacity(ranks_on_host=4, shared=False) == (2 << 30) // 4
    assert 0 < image_cache.auto_capacity() <= 2 << 30  # also within half of /dev/shm's free space
    monkeypatch.setattr(sys, "platform", "win32")
    assert image_cache.auto_capacity() == 0


def test_train_takes_the_cache_size_in_gigabytes(capsys):
    from darknet_py.commands.argtypes import gigabytes_or_auto
    from darknet_py.commands.cli import main

    assert gigabytes_or_auto("auto") == "auto" and gigabytes_or_auto("1.5") == 3 << 29 and gigabytes_or_auto("0") == 0
    for bad, says in (("lots", "not a number of GB or 'auto'"), ("-1", "must be 0 or more GB")):
        with pytest.raises(SystemExit) as e:
            main(["train", "yolov4-tiny.cfg", "--cache-images", bad])
        assert e.value.code == 2 and says in capsys.readouterr().err


def test_another_process_attaches_by_name_and_leaves_it_to_its_maker(tmp_path):
    """What a data-parallel rank does with its host's cache (train._host_image_cache): attach by name, read,
    exit; the segment stays for its maker (Python before 3.13 would unlink it at the attacher's exit)."""
    import subprocess

    cache = ImageCache(2, 1 << 12, name=f"dnpy_cache_test_{os.getpid()}")
    cache.put(1, np.full((4, 5, 3), 7, np.uint8))
    # the attaching process also hands the cache to a spawned worker, as a rank's loader does
    code = ("import multiprocessing as mp, sys\n"
            "from darknet_py.data.image_cache import ImageCache\n"
            "def worker(c): print(int(c.get(1).sum()), flush=True)\n"
            "if __name__ == '__main__':\n"
            "    c = ImageCache.attach(sys.argv[1]); print(int(c.get(1).sum()), c.get(0), flush=True)\n"
            "    p = mp.get_context('spawn').Process(target=worker, args=(c,)); p.start(); p.join()\n"
            "    c.close()\n")
    script = tmp_path / "attach.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script), cache.name], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(7 * 60), "None", str(7 * 60)], out
    assert "leaked" not in out.stderr, out.stderr
    shared_memory.SharedMemory(name=cache.name).close()  # still there
    with pytest.raises(ValueError, match="indexes 2 images, not these 3"):
        BatchLoader([__file__] * 3, 1, 1, cache=cache)
    cache.close()
    with pytest.raises(FileNotFoundError):
        ImageCache.attach(cache.name)


def test_no_shared_memory_means_no_cache_and_a_warning(shapes, monkeypatch):
    """Where the cache's memory cannot be had, the loader says so and decodes at each draw: the same batches."""
    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with BatchLoader.from_files(shapes, None, 6, options=OPTS, seed=3, cache=0) as loader:
        plain = batches(loader, 2)
    monkeypatch.setattr(image_cache, "SharedBuffer", refuse)
    with pytest.warns(UserWarning, match=r"image cache \(1 MB of memory\) could not be made .*No space left"):
        loader = BatchLoader.from_files(shapes, None, 6, options=OPTS, seed=3, cache=1 << 20, workers=1,
                                        processes=True)
    with loader:
        assert loader.cache is None
        assert_same(plain, batches(loader, 2))
