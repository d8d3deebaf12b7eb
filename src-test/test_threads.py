"""Threads: one Network used by many threads at once, and its clones, give what some sequential order of
the same calls gives, and never crash or hang. Before each call took its network's lock, two threads
on one network died with SIGSEGV or "double free or corruption" within a few calls (forward beside
resize_input or to(), two forwards, forward beside detect)."""
import os
import threading

import cv2
import numpy as np
import pytest

import darknet_py
from darknet_py import DarknetError

DEMO = os.path.join(os.path.dirname(darknet_py.__file__), "models", "demo")
ROUNDS = int(os.environ.get("DARKNET_PY_THREAD_ROUNDS", "25"))  # per thread
SIZES = ((256, 256), (320, 320))  # the resizing thread switches the shared network between these


def demo_network() -> darknet_py.Network:
    return darknet_py.Network(os.path.join(DEMO, "shapes-demo.cfg"), os.path.join(DEMO, "shapes-demo.weights"),
                              os.path.join(DEMO, "shapes.names"), device="cpu")


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    """Every call's result, computed by one thread, one call at a time."""
    net = demo_network()
    image = cv2.imread(os.path.join(DEMO, "sample.jpg"))
    images = [image, cv2.flip(image, 1)]
    want = {"image": image, "images": images, "blob": net.preprocess(image)}
    want["forward"] = net.forward(want["blob"])
    for size in SIZES:
        net.resize_input(*size)
        want["detect", size] = net.detect(image)
        want["detect_batch", size] = net.detect_batch(images)
    net.resize_input(*SIZES[0])
    path = tmp_path_factory.mktemp("weights") / "demo.weights"
    net.save_weights(path)
    want["weights"] = path.read_bytes()
    want["layer0"] = {k: v.copy() for k, v in net.params(0).items()}
    net.set_params(0, {k: v * 0.5 for k, v in want["layer0"].items()})
    want["detect_halved"] = net.detect(image)
    assert want["detect_halved"] != want["detect", SIZES[0]]  # else that check could not fail
    assert want["detect", SIZES[0]] != want["detect", SIZES[1]]
    return want


def run_threads(workers, timeout=240):
    """Runs each worker on its own thread, ROUNDS times; returns the failures (a hang is one too)."""
    failures = []
    start = threading.Barrier(len(workers))

    def loop(work):
        start.wait()
        try:
            for i in range(ROUNDS):
                work(i)
        except Exception as e:  # noqa: BLE001 (any failure is reported with its worker)
            failures.append(f"{work.__name__}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    failures += [f"{w.__name__}: still running after {timeout} s (deadlock?)" for w, t in zip(workers, threads)
                 if t.is_alive()]
    return failures


def test_one_network_and_clones_from_many_threads(expected, tmp_path):
    net = demo_network()
    twin, tweaked = net.clone(), net.clone()  # share net's weights
    want = expected
    assert net._net.shares_params() and twin._net.shares_params()

    def forward(i):
        # the blob is 256x256: while the network is at 320x320 the call is refused, as it would be
        # called alone at that moment
        try:
            got = net.forward(want["blob"])
        except DarknetError as e:
            assert "320" in str(e), e
            return
        assert all(np.array_equal(a, b) for a, b in zip(got, want["forward"]))

    def detect(i):
        got = net.detect(want["image"])
        assert got in (want["detect", SIZES[0]], want["detect", SIZES[1]]), got

    def detect_batch(i):
        got = net.detect_batch(im for im in want["images"])
        assert got in (want["detect_batch", SIZES[0]], want["detect_batch", SIZES[1]]), got

    def resize_input(i):
        net.resize_input(*SIZES[1])
        net.resize_input(*SIZES[0])

    def to_device(i):
        net.to("cpu")  # a new backend: the activations are rebuilt under any other call

    def set_params_and_save(i):
        net.set_params(0, want["layer0"])  # the same values: no result may change
        path = tmp_path / f"w{i % 2}.weights"
        net.save_weights(path)
        assert path.read_bytes() == want["weights"]

    def clone_detect(i):
        assert twin.detect(want["image"]) == want["detect", SIZES[0]]

    def clone_changes_its_weights(i):
        # its own copy on the first write: net and twin keep theirs
        tweaked.set_params(0, {k: v * 0.5 for k, v in want["layer0"].items()})
        assert tweaked.detect(want["image"]) == want["detect_halved"]
        tweaked.set_params(0, want["layer0"])
        assert tweaked.detect(want["image"]) == want["detect", SIZES[0]]

    failures = run_threads([forward, detect, detect_batch, resize_input, to_device, set_params_and_save,
                            clone_detect, clone_changes_its_weights])
    assert not failures, "\n".join(failures)
    assert net.input_size == SIZES[0] and twin.detect(want["image"]) == want["detect", SIZES[0]]
    assert not net._net.shares_params()  # set_params gave it its own copy


def test_raw_engine_network_from_many_threads(expected):
    """The low-level _core.Net the Network wraps is safe on its own: each of its calls is atomic."""
    core = demo_network()._net
    blob = expected["blob"][None]
    heads = core.yolo_layers

    def forward(i):
        got = core.forward(blob, heads)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected["forward"]))

    def detect(i):
        rows = core.detect(blob, [(416, 416)], 0.25, 0.45, False)
        assert len(rows[0]) == len(expected["detect", SIZES[0]])

    def switch_backend(i):
        core.set_backend("cpu")

    def read_properties(i):
        assert (core.width, core.height, core.backend) == (256, 256, "cpu") and len(core.layers()) > 0

    assert not run_threads([forward, forward, detect, switch_backend, read_properties])
