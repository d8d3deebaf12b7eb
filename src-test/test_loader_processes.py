"""The loader's worker processes (data/process_loader.py) against its threads and the calling thread:
the same batches for a seed (bit for bit, through multi-scale resizes and a resumed start), bad files
reported once in the parent, errors and dead workers raised instead of hangs, shared memory released;
and train()'s throughput report. Samples are also re-derived from the documented seed rules with
augment.augment_one and cv2.imread directly, so the sampler itself is checked against the rules the
loader had before processes existed, not only against itself."""
import os
import signal
import time
from multiprocessing import shared_memory

import cv2
import numpy as np
import pytest

from darknet_py.data import synth
from darknet_py.data import BatchLoader, augment as A
from darknet_py.data.darknet_files import label_path_for
from darknet_py.data.labels import read_labels
from darknet_py.data.process_loader import rows_per_job
from darknet_py.training.train_rate import ThroughputMeter, default_train_workers, use_processes

# every augmentation a detector trains with, at a small size so the test stays fast
OPTS = dict(width=64, height=48, jitter=0.3, hue=0.1, saturation=1.5, exposure=1.5, flip=1, mosaic=1, blur=1,
            gaussian_noise=20, max_boxes=90)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return synth.generate(tmp_path_factory.mktemp("procs"), images=12, classes=3, size=(96, 80), seed=4,
                          valid_fraction=0.0, workers=1)


def batches(loader, n, resize_at=2):
    out = []
    for k in range(n):
        if k == resize_at:
            loader.set_size(96, 64)  # a multi-scale resize: the batches prepared at the old size are dropped
        images, truths = loader.next_batch()
        out.append((images.copy(), [t.copy() for t in truths]))  # processes: valid for two more batches
    return out


def assert_same(a, b):
    assert len(a) == len(b)
    for (ia, ta), (ib, tb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        assert len(ta) == len(tb) and all(np.array_equal(x, y) for x, y in zip(ta, tb))


def test_processes_threads_and_this_thread_give_the_same_batches(shapes):
    runs = {}
    for name, kw in [("here", dict(workers=0)), ("threads", dict(workers=2)),
                     ("processes", dict(workers=2, processes=True))]:
        with BatchLoader.from_files(shapes, None, 5, options=OPTS, seed=11, iteration_images=10, **kw) as loader:
            assert loader.processes == (name == "processes")
            runs[name] = batches(loader, 5)
    assert_same(runs["here"], runs["threads"])
    assert_same(runs["here"], runs["processes"])
    assert runs["here"][3][0].shape == (5, 3, 64, 96)
    mixed = [k for k in range(5) for j in range(5) if loader.sampler.group_mixing(k, j)]
    assert mixed and len(mixed) < 25  # mosaic on some loading groups only: both paths were compared
    # a resumed run in processes draws the batches of the uninterrupted one
    with BatchLoader.from_files(shapes, None, 5, options=OPTS, seed=11, iteration_images=10, workers=1,
                                processes=True, start=3) as loader:
        loader.set_size(96, 64)
        assert_same(batches(loader, 2, resize_at=-1), runs["here"][3:5])


def test_samples_follow_the_seed_rules_written_down(shapes):
    """sample j of batch k = augment_one(image drawn by default_rng([seed, k, j]), same generator)."""
    opts = dict(A.DEFAULT_OPTIONS, **dict(OPTS, mosaic=0))
    with BatchLoader.from_files(shapes, None, 3, options=opts, seed=2, workers=1, processes=True) as loader:
        paths = loader.paths
        got = batches(loader, 2, resize_at=-1)
    for k in range(2):
        for j in range(3):
            rng = np.random.default_rng([2, k, j])
            path = paths[int(rng.integers(len(paths)))]
            img = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
            image, truth = A.augment_one(img, read_labels(label_path_for(path), 3), 64, 48, opts, rng)
            np.testing.assert_array_equal(got[k][0][j], image)
            np.testing.assert_array_equal(got[k][1][j], truth)


def test_workers_run_at_a_lower_priority_than_the_training_process(shapes, monkeypatch):
    """Workers take DARKNET_PY_LOADER_NICE (default 10) niceness above the parent's, so the training loop
    gets the cores it waits for; 0 keeps the parent's; a bad value is an error before any worker starts."""
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    for env, want in [(None, min(19, mine + 10)), ("0", mine)]:
        if env is None:
            monkeypatch.delenv("DARKNET_PY_LOADER_NICE", raising=False)
        else:
            monkeypatch.setenv("DARKNET_PY_LOADER_NICE", env)
        with BatchLoader.from_files(shapes, None, 2, options=OPTS, seed=1, workers=2, processes=True) as loader:
            loader.next_batch()
            deadline = time.monotonic() + 20  # a worker may still be starting (spawned: about a second)
            while True:
                got = [os.getpriority(os.PRIO_PROCESS, p.pid) for p in loader._engine.procs]
                if got == [want, want] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert got == [want, want]
    monkeypatch.setenv("DARKNET_PY_LOADER_NICE", "low")
    with pytest.raises(ValueError, match="DARKNET_PY_LOADER_NICE='low' is not a whole number"):
        BatchLoader.from_files(shapes, None, 2, options=OPTS, seed=1, workers=2, processes=True)


def test_to_chw_is_x_over_255_in_float32_into_a_batch_row():
    """to_chw splits the planes (vectorised divides): the bits of Darknet's x / 255 all the same."""
    rng = np.random.default_rng(0)
    for img in (rng.integers(0, 256, (7, 5, 3), np.uint8), rng.integers(0, 256, (7, 5), np.uint8)):
        want = (img if img.ndim == 3 else img[:, :, None]).transpose(2, 0, 1).astype(np.float32) / np.float32(255)
        np.testing.assert_array_equal(A.to_chw(img), want)
        batch = np.full((2,) + want.shape, -1, np.float32)
        assert np.shares_memory(A.to_chw(img, batch[1]), batch)
        np.testing.assert_array_equal(batch[1], want)
        assert (batch[0] == -1).all()


def test_bad_files_are_reported_once_by_the_parent(shapes, tmp_path):
    good = [ln for ln in open(os.path.join(os.path.dirname(shapes), "train.txt")).read().split()][:3]
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    paths = good + [str(tmp_path / "missing.jpg"), str(broken)] * 3
    seen = []
    with BatchLoader(paths, 4, 3, dict(OPTS, mosaic=0), seed=1, workers=2, processes=True,
                     on_problem=lambda kind, path, msg: seen.append((kind, path))) as loader:
        for _ in range(4):
            images, truths = loader.next_batch()
            assert np.isfinite(images).all() and len(truths) == 4
    assert sorted(seen) == [("missing-image", str(tmp_path / "missing.jpg")), ("unreadable-image", str(broken))]


def test_errors_and_dead_workers_are_raised_not_hung(shapes, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"")
    with BatchLoader([str(bad)], 2, 1, dict(OPTS, mosaic=0), workers=1, processes=True,
                     on_problem=lambda *a: None) as loader:
        with pytest.raises(RuntimeError, match="no usable training image"):
            loader.next_batch()
    with BatchLoader.from_files(shapes, None, 4, options=OPTS, seed=1, workers=1, processes=True) as loader:
        loader.next_batch()
        engine = loader._engine
        names = [b.shm.name for b in engine.ring if b is not None]
        os.kill(engine.procs[0].pid, signal.SIGKILL)
        engine.procs[0].join(5)
        with pytest.raises(RuntimeError, match="loader worker process has stopped"):
            for _ in range(4):  # the batches already prepared may still come
                loader.next_batch()
    assert loader.closed and not any(p.is_alive() for p in engine.procs)
    for name in names:  # the shared memory is gone with the loader
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name=name)


def test_throughput_meter_and_loader_choice():
    m = ThroughputMeter()
    m.add(64, 2.0, 1.5)  # the first iteration (workers starting) is left out once others exist
    assert m.images_per_second == 32 and m.wait_share == 0.75
    m.add(64, 0.5, 0.1)
    m.add(64, 0.5, 0.0)
    assert m.images_per_second == pytest.approx(128) and m.wait_share == pytest.approx(0.1)
    assert m.line() == "128 images/s, 10% waiting for data"
    assert "the loader limits training: raise --workers" in m.summary("threads x2")
    m.add(64, 10.0, 0.0)
    assert "the training step limits training" in m.summary("processes x4")
    # on a GPU the loop's wait for each step's loss says whether the device or the host's work limits
    g = ThroughputMeter(queued_device=True)
    for _ in range(3):
        g.add(64, 0.025, 0.0, 0.008)
    assert g.device_wait_share == pytest.approx(0.32)
    assert g.line() == "2560 images/s, 0% waiting for data, 32% for the device"
    assert "the training step limits training" in g.summary("processes x14")
    h = ThroughputMeter(queued_device=True)
    for _ in range(3):
        h.add(64, 0.030, 0.0, 0.0001)
    assert "the host's own work per step limits training" in h.summary("processes x14")
    assert "for the device" not in m.line()  # the CPU: no device wait to see
    cores = os.cpu_count() or 1
    assert default_train_workers("cpu") == min(4, cores) and default_train_workers("cuda") == max(1, min(8, cores - 1))
    assert use_processes("auto", "cuda:0", 4) and not use_processes("auto", "cpu", 4)
    assert not use_processes("auto", "cuda", 1) and use_processes("processes", "cpu", 1)
    with pytest.raises(ValueError, match="loader kind must be auto, threads or processes"):
        use_processes("fork", "cpu", 2)


HEAP_PROBE = """
import resource, sys
import cv2, numpy as np
from darknet_py.data.heap import keep_freed_memory
def faults():  # a sample's pattern: a few full-size images made and dropped, in the main thread
    img = np.full((416, 416, 3), 7, np.uint8)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        a = cv2.resize(img, (500, 500)); b = cv2.cvtColor(a, cv2.COLOR_BGR2HSV); c = np.ones((3, 416, 416), np.float32)
        del a, b, c
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 20
before = faults()
kept = keep_freed_memory()
faults()
print(before, kept, faults())
"""


def test_worker_heap_keeps_freed_images_for_the_next_one():
    """A worker's main thread with glibc's default heap faults each image's pages in again (the heap is
    trimmed after every sample); with heap.keep_freed_memory (called by every worker) it reuses them."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", HEAP_PROBE], capture_output=True, text=True, check=True).stdout.split()
    before, kept, after = float(out[0]), out[1] == "True", float(out[2])
    if not kept:
        pytest.skip("not glibc: its allocator keeps its own policy")
    assert before >= 20 and after <= 1, (before, after)


def test_rows_per_job():
    """A job is a few rows (one message each way), every worker gets one in each batch."""
    assert rows_per_job(64, 1) == 8 and rows_per_job(64, 14) == 4 and rows_per_job(5, 2) == 2
    assert rows_per_job(3, 8) == 1


def test_train_through_processes_is_the_run_through_threads(shapes, tmp_path):
    import io

    from darknet_py.training.train import train
    from test_train import all_params, small_cfg

    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(small_cfg(classes=3, size=64, batch=4, lr=0.002, burn_in=0, max_batches=1000, filters=(8, 16),
                             head=16, anchors="8,8, 14,14, 22,22"))
    params, logs = {}, {}
    for run, kind, cache in (("threads", "threads", "auto"), ("processes", "processes", "auto"),
                             ("no cache", "processes", 0)):
        log = io.StringIO()
        r = train(shapes, str(cfg), out_dir=str(tmp_path / run), max_batches=3, seed=5, workers=2, loader_kind=kind,
                  device="cpu", chart=False, stream=log, progress=False, cache_images=cache)
        params[run], logs[run] = all_params(r.net), log.getvalue()
        assert r.loader == f"{kind} x2" and r.images_per_second > 0 and 0 <= r.data_wait_share <= 1
        assert (r.image_cache is None) == (cache == 0)
    np.testing.assert_array_equal(params["threads"], params["processes"])
    np.testing.assert_array_equal(params["processes"], params["no cache"])
    # the image cache: its size at the start, its use at the end (12 images, 12 draws a run), none when off
    assert "image cache: up to " in logs["processes"] and "image cache: " not in logs["no cache"]
    assert "image draws read from it instead of decoded" in logs["processes"].splitlines()[-2]
    lines = [ln for ln in logs["processes"].splitlines() if " avg loss, " in ln]
    assert len(lines) == 3 and all(ln.split("hours left, ")[1].endswith("% waiting for data") for ln in lines)
    assert "images/s" in lines[0] and "loader processes x2" in logs["processes"]
    assert "throughput: " in logs["processes"].splitlines()[-1]


def test_the_throughput_counts_the_time_between_steps(shapes, tmp_path):
    """images/s is wall time from report to report: work between the steps (here a callback that sleeps
    0.2 s; in a run, saves and the chart) lowers it, as a user waits for it."""
    from darknet_py.training.train import train
    from test_train import small_cfg

    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(small_cfg(classes=3, size=64, batch=4, lr=0.002, burn_in=0, max_batches=1000, filters=(8, 16),
                             head=16, anchors="8,8, 14,14, 22,22"))
    r = train(shapes, str(cfg), out_dir=str(tmp_path / "out"), max_batches=4, seed=5, workers=0, device="cpu",
              chart=False, quiet=True, callback=lambda stats: time.sleep(0.2))
    assert 0 < r.images_per_second <= 4 / 0.2  # 4 images an iteration, each after a 0.2 s callback


def test_too_little_shared_memory_is_an_error_not_a_crash(shapes, monkeypatch):
    """A full /dev/shm (Docker's default is 64 MB) would kill a worker with SIGBUS mid-write."""
    from collections import namedtuple

    from darknet_py.data import shared_buffer

    if not os.path.isdir(shared_buffer.SHM_FOLDER):
        pytest.skip(f"no {shared_buffer.SHM_FOLDER} here: nothing is checked")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shared_buffer.shutil, "disk_usage", lambda path: usage(2 ** 20, 2 ** 20 - 1000, 1000))
    with pytest.raises(OSError, match=r"need 0 MB of shared memory .* has 0 MB free: enlarge it \(docker run "
                                      r"--shm-size=2g\) or load in threads \(--loader threads\)"):
        BatchLoader.from_files(shapes, None, 2, options=OPTS, workers=1, processes=True)


def test_a_larger_size_without_shared_memory_is_an_error_and_the_loader_still_closes(shapes, monkeypatch):
    """The ring's buffers grow with a larger size (random=1); where /dev/shm has no room for that, the error
    says so, and closing afterwards frees every buffer."""
    from collections import namedtuple

    from darknet_py.data import shared_buffer

    if not os.path.isdir(shared_buffer.SHM_FOLDER):
        pytest.skip(f"no {shared_buffer.SHM_FOLDER} here: nothing is checked")
    loader = BatchLoader.from_files(shapes, None, 2, options=OPTS, workers=1, processes=True)
    loader.next_batch()
    names = [b.shm.name for b in loader._engine.ring if b is not None]
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shared_buffer.shutil, "disk_usage", lambda path: usage(2 ** 20, 2 ** 20 - 1000, 1000))
    with pytest.raises(OSError, match=r"need 0 MB of shared memory .* has 0 MB free"):
        loader.set_size(128, 96)  # the batches of the new size are scheduled at once
    loader.close()
    assert loader.closed
    for name in names:
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name=name)


def _running(pid):
    """Whether `pid` runs (a zombie waiting for a reaper, as in a container without init, does not)."""
    if os.path.isdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_workers_do_not_outlive_a_killed_parent(shapes):
    import subprocess
    import sys
    import time

    script = ("import time\nfrom darknet_py.data import BatchLoader\nif __name__ == '__main__':\n"
              f"    L = BatchLoader.from_files({shapes!r}, None, 2, options=dict(width=32, height=32), workers=2, "
              "processes=True)\n    L.next_batch()\n    print(*[p.pid for p in L._engine.procs], flush=True)\n"
              "    time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2
    finally:
        parent.kill()  # SIGKILL: no finalizer runs
        parent.wait()
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in pids if _running(p)]
    assert not alive, f"loader workers {alive} outlived their parent"
