"""Stateful fuzz driver for the Python API (run by test_api_fuzz.py in a subprocess, so that a segfault
or abort is reported as a failing test instead of killing pytest).

    python src-test/api_fuzz_driver.py --seed 1 --count 300 [--device cpu] [--out DIR]
    python src-test/api_fuzz_driver.py --seed 1 --case 17            # replay one sequence, printing each call

Each sequence builds a small network (a two-head yolo net or a classifier, cfgs below) and makes 4 to 12
random calls on it, valid or not: forward, forward_train, set_delta, delta, yolo_loss, backward, update,
resize_input, load_weights with partial counts (and truncated files), save_weights, params/set_params,
gradients, set_backend, detect on odd images (0-size, 1x1, grey, RGBA, one-channel, non-contiguous,
float64), detect_blob, and the test-only Ops bindings with consistent or random shapes. Every call must
return or raise DarknetError with a message (TypeError only where the Python layer checks types); calls
that need forward_train's state must say so when it is gone, and must work while it is there. Anything
else is a FAIL line; a crash kills the process and the last CALL line says where. Every sequence derives
from (seed, case index) alone. The last line is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from darknet_py import DarknetError, Network, _core

YOLO_CFG = """[net]
width=32
height=32
channels=3
learning_rate=0.001
momentum=0.9
decay=0.0005

[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=leaky

[convolutional]
filters=8
size=1
stride=1
pad=1
activation=linear

[shortcut]
from=-2
activation=linear

[convolutional]
filters=21
size=1
stride=1
pad=1
activation=linear

[yolo]
mask=3,4,5
anchors=4,6, 8,10, 12,14, 16,20, 24,28, 30,30
classes=2
num=6

[route]
layers=-3

[upsample]
stride=2

[route]
layers=-1,1

[convolutional]
filters=21
size=1
stride=1
pad=1
activation=linear

[yolo]
mask=0,1,2
anchors=4,6, 8,10, 12,14, 16,20, 24,28, 30,30
classes=2
num=6
"""

# A grey classifier whose [connected] layer depends on the input size (resize_input must refuse).
CLASSIFIER_CFG = """[net]
width=16
height=16
channels=1
adam=1

[convolutional]
filters=4
size=3
stride=2
pad=1
activation=relu

[dropout]
probability=0.3

[connected]
output=3
activation=linear

[softmax]
"""

HUGE = [2 ** 31 - 1, 2 ** 30, -(2 ** 31), 65536]


UNKNOWN = "unknown"  # training state after a call that may or may not have reached the forward pass


class Misuse(AssertionError):
    """The API accepted or refused something against its contract (not a crash, still a failure)."""


def small_int(rng, lo=-2, hi=5):
    r = rng.random()
    return rng.choice(HUGE) if r < 0.04 else rng.randint(lo, hi)


def odd_array(rng, shape, dtype=np.float32):
    """An array of `shape` with odd values, dtypes and layouts (the bindings must convert or refuse)."""
    a = rng_np(rng).normal(0, 1, shape)
    r = rng.random()
    if r < 0.1:
        a = a.astype(np.float64)
    elif r < 0.15:
        a = (a * 3).astype(np.int32)
    elif r < 0.2 and a.ndim >= 1 and a.size:
        a = np.repeat(a, 2, axis=-1)[..., ::2]  # non-contiguous view with the same shape
    elif r < 0.25 and a.size:
        a.flat[rng.randrange(a.size)] = rng.choice([np.nan, np.inf, -np.inf, 1e38])
    else:
        a = a.astype(dtype)
    return a


def rng_np(rng):
    return np.random.default_rng(rng.getrandbits(32))


class Sequence:
    """One network and a model of its training state (what forward_train left, None: nothing valid)."""

    def __init__(self, rng, out: Path, device: str, log):
        self.rng, self.out, self.log = rng, out, log
        self.kind = "yolo" if rng.random() < 0.8 else "classifier"
        cfg = out / f"{self.kind}.cfg"
        self.net = Network(cfg, device=device)
        self.raw = self.net._net
        self.device = device
        self.train_batch = None  # batch of the last forward_train while its state is intact
        self.weights = out / "seq.weights"

    # ---- helpers ---------------------------------------------------------------------------------
    def n_layers(self):
        return len(self.raw.layers())

    def layer_index(self):
        n = self.n_layers()
        return self.rng.choice([self.rng.randrange(n), -1, -n, n, -n - 1, small_int(self.rng, -30, 30)])

    def blob(self):
        rng = self.rng
        c, (w, h) = self.raw.channels, (self.raw.width, self.raw.height)
        n = rng.choice([1, 1, 2, 3, 0])
        r = rng.random()
        if r < 0.75:
            shape = (n, c, h, w)
        elif r < 0.85:
            shape = (n, c + rng.choice([-1, 1, 2]), h, w)
        elif r < 0.92:
            shape = (n, c, h + rng.choice([-1, 1, 32]), w)
        else:
            shape = rng.choice([(c, h, w), (n, c, h * w), (1, n, c, h, w)])
        shape = tuple(max(0, d) for d in shape)
        return odd_array(rng, shape)

    def layers_arg(self):
        return [self.layer_index() for _ in range(self.rng.randint(0, 2))]

    # ---- actions: each makes one call and checks what it can about the outcome -----------------------
    def valid_input(self, x, which):
        n = self.n_layers()
        return (x.ndim == 4 and x.shape[0] >= 1 and x.shape[1:] == (self.raw.channels, self.raw.height, self.raw.width)
                and all(-n <= i < n for i in which))

    def a_forward(self):
        # every check runs before the pass: a refused call leaves forward_train's state as it was
        x, which = self.blob(), self.layers_arg()
        self.log(f"forward {x.shape} {x.dtype} {which}")
        try:
            outs = self.raw.forward(x, which)
        except DarknetError as e:
            if self.valid_input(x, which):
                raise Misuse(f"forward refused a valid input: {e}")
            raise
        self.train_batch = None
        assert len(outs) == len(which)

    def a_forward_train(self):
        x, which = self.blob(), self.layers_arg()
        self.log(f"forward_train {x.shape} {x.dtype} {which}")
        try:
            self.raw.forward_train(x, which)
        except DarknetError as e:
            if self.valid_input(x, which):
                raise Misuse(f"forward_train refused a valid input: {e}")
            raise
        self.train_batch = x.shape[0]

    def needs_state(self, what, call):
        """Runs call(); it must work while forward_train's state is intact, and say so when it is not."""
        had = self.train_batch
        if had == UNKNOWN:
            return call()
        try:
            call()
        except DarknetError as e:
            if had is None and "forward_train" not in str(e):
                raise Misuse(f"{what} without a training state must say to call forward_train first: {e}")
            raise
        if had is None:
            raise Misuse(f"{what} succeeded without a forward_train state")

    def a_backward(self):
        self.log("backward")
        self.needs_state("backward", self.raw.backward)

    def a_set_delta(self):
        i = self.layer_index()
        n = self.n_layers()
        ok_i = -n <= i < n
        shape = None
        if isinstance(self.train_batch, int) and ok_i:
            out = self.raw.layers()[i]["output"]
            shape = (self.train_batch, *out)
        r = self.rng.random()
        if shape and r < 0.6:
            d = odd_array(self.rng, shape)
        elif shape and r < 0.8:
            d = odd_array(self.rng, (int(np.prod(shape)),))
        else:
            d = odd_array(self.rng, (self.rng.randint(0, 3), self.rng.randint(0, 40)))
        self.log(f"set_delta {i} {d.shape}")
        self.needs_state("set_delta", lambda: self.raw.set_delta(i, d))

    def a_delta(self):
        i = self.layer_index()
        self.log(f"delta {i}")
        self.needs_state("delta", lambda: self.raw.delta(i))

    def truths(self):
        rng = self.rng
        known = isinstance(self.train_batch, int)
        b = self.train_batch if known and rng.random() < 0.8 else rng.randint(0, 4)
        out = []
        for _ in range(b):
            k = rng.randint(0, 3)
            r = rng.random()
            if r < 0.75:
                t = np.array([[rng.random(), rng.random(), rng.uniform(0.01, 1), rng.uniform(0.01, 1), rng.randrange(2)]
                              for _ in range(k)], np.float32).reshape(k, 5)
            elif r < 0.85:
                t = odd_array(rng, (k, rng.choice([4, 5, 6])))
            else:
                t = np.array([[0.5, 0.5, 0.2, 0.2, rng.choice([-1, 2, 2.5, 1e9, np.nan])]], np.float32)
            out.append(t)
        return out

    def a_yolo_loss(self):
        truths = self.truths()
        self.log(f"yolo_loss {[t.shape for t in truths]}")
        self.needs_state("yolo_loss", lambda: self.raw.yolo_loss(truths))

    def a_update(self):
        rng = self.rng
        lr = rng.choice([0.001, 0.0, -1.0, float("nan"), 1e30])
        batch, t = rng.choice([1, 2, 64, 0, -3]), rng.choice([0, 1, 5, -1])
        self.log(f"update {lr} {batch} {t}")
        self.raw.update(lr, batch, t)

    def a_resize_input(self):
        rng = self.rng
        w = rng.choice([32, 48, 64, 33, 40, 16, 0, -32, 100000, rng.randint(1, 80)])
        h = rng.choice([w, 32, 48, 31])
        self.log(f"resize_input {w} {h}")
        before = (self.raw.width, self.raw.height)
        self.raw.resize_input(w, h)
        if (w, h) != before:
            self.train_batch = None
            if self.kind == "classifier":
                raise Misuse("a classifier with [connected] was resized")

    def a_save_weights(self):
        path = self.weights if self.rng.random() < 0.9 else self.out / "no-such-dir" / "x.weights"
        self.log(f"save_weights {path}")
        self.raw.save_weights(str(path))

    def a_load_weights(self):
        rng = self.rng
        if not self.weights.exists():
            self.raw.save_weights(str(self.weights))
        path = self.weights
        if rng.random() < 0.3:  # a truncated copy
            data = self.weights.read_bytes()
            path = self.out / "cut.weights"
            path.write_bytes(data[:rng.randrange(len(data) + 1)])
        count = rng.choice([-1, 0, 1, 2, self.n_layers(), self.n_layers() + 3, -5, rng.randrange(self.n_layers())])
        self.log(f"load_weights {path.name} {count}")
        self.raw.load_weights(str(path), count)

    def a_params(self):
        i = self.layer_index()
        self.log(f"params {i}")
        ps = self.raw.params(i)
        for v in ps.values():  # CPU views are writable; write something finite and keep going
            if v.flags.writeable and v.size:
                v.flat[0] = 0.5

    def a_set_params(self):
        rng = self.rng
        i = self.layer_index()
        values = {}
        try:
            current = self.raw.params(i)
        except DarknetError:
            current = {"weights": np.zeros(3, np.float32)}
        for name, v in current.items():
            r = rng.random()
            if r < 0.6:
                values[name] = odd_array(rng, v.shape)
            elif r < 0.75:
                values[name] = odd_array(rng, (v.size + rng.choice([-1, 1]),))
            elif r < 0.85:
                values[name + "x"] = np.zeros(1, np.float32)
        self.log(f"set_params {i} {[(k, np.shape(v)) for k, v in values.items()]}")
        self.raw.set_params(i, values)

    def a_gradients(self):
        i = self.layer_index()
        self.log(f"gradients {i}")
        self.raw.gradients(i)

    def a_set_backend(self):
        name = self.rng.choice(["cpu", "reference", self.device, "nonsense"])
        self.log(f"set_backend {name}")
        self.raw.set_backend(name)
        self.train_batch = None

    def image(self):
        rng = self.rng
        h, w = rng.choice([(0, 0), (1, 1), (0, 5), (7, 3), (24, 40), (33, 17)])
        kind = rng.choice(["bgr", "grey", "grey1", "rgba", "two", "noncontig", "float64", "list", "4d"])
        g = rng_np(rng)
        img = g.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if kind == "grey":
            img = img[:, :, 0].copy()
        elif kind == "grey1":
            img = img[:, :, :1].copy()
        elif kind == "rgba":
            img = g.integers(0, 256, (h, w, 4), dtype=np.uint8)
        elif kind == "two":
            img = img[:, :, :2].copy()
        elif kind == "noncontig":
            img = np.repeat(img, 2, axis=1)[:, ::2]
        elif kind == "float64":
            img = img.astype(np.float64)
        elif kind == "list":
            img = img.tolist()
        elif kind == "4d":
            img = img[None]
        return kind, img

    def a_detect(self):
        rng = self.rng
        kind, img = self.image()
        thresh = rng.choice([0.25, 0.0, 0.9, 1.5, -1.0])
        letterbox = rng.random() < 0.5
        postproc = rng.choice(["device", "cpu", "compare", "gpu"])
        self.log(f"detect {kind} {np.shape(img)} {thresh} {letterbox} {postproc}")
        try:
            dets = self.net.detect(img, thresh=thresh, letterbox=letterbox, postproc=postproc)
        except TypeError:
            if kind in ("float64", "list"):  # the Python layer checks the type (documented: TypeError)
                return
            raise
        except DarknetError:
            self.train_batch = UNKNOWN
            raise
        self.train_batch = None
        assert isinstance(dets, list)

    def a_detect_blob(self):
        rng = self.rng
        x = self.blob()
        n = x.shape[0] if x.ndim else 0
        sizes = [(rng.choice([640, 1, 0, -5, 2 ** 31 - 1]), rng.choice([480, 1, 0])) for _ in range(n + rng.choice([0, 0, 1, -1]))]
        self.log(f"detect_blob {x.shape} {sizes}")
        try:
            self.net.detect_blob(x, sizes, thresh=0.01, letterbox=rng.random() < 0.5)
        except DarknetError:
            self.train_batch = UNKNOWN  # refused before or after its forward pass
            raise
        self.train_batch = None

    def a_ops(self):
        run_op(self.rng, self.device if self.rng.random() < 0.5 else self.rng.choice(["cpu", "reference"]), self.log)

    def a_misc(self):
        rng = self.rng
        r = rng.randrange(5)
        if r == 0:
            i = self.layer_index()
            self.log(f"yolo_info {i}")
            self.raw.yolo_info(i)
        elif r == 1:
            i = self.layer_index()
            self.log(f"yolo_train_options {i}")
            self.raw.yolo_train_options(i)
        elif r == 2:
            w, h = rng.choice([(32, 32), (0, 5), (-1, 3), (1, 1), (70000, 2)])
            kind, img = self.image()
            self.log(f"preprocess {kind} {np.shape(img)} {w}x{h}")
            try:
                _core.preprocess(img, w, h, rng.random() < 0.5)
            except TypeError:
                if kind != "list":
                    raise
        elif r == 3:
            x = odd_array(rng, (rng.randint(0, 3), rng.randint(0, 5), rng.randint(0, 5)))
            w, h = rng.choice([(3, 3), (0, 2), (1, 1), (-4, 5)])
            self.log(f"resize_darknet {x.shape} {w}x{h}")
            _core.resize_darknet(x, w, h)
        else:
            self.log("layer_table / bflops / layer_ms / fallback_ops")
            self.raw.layer_table(), self.raw.total_bflops(), self.raw.layer_ms(), self.raw.fallback_ops()


ACTIONS = [("forward", 3), ("forward_train", 5), ("set_delta", 2), ("delta", 1), ("yolo_loss", 3), ("backward", 3),
           ("update", 2), ("resize_input", 1), ("save_weights", 1), ("load_weights", 1), ("params", 1),
           ("set_params", 1), ("gradients", 1), ("set_backend", 1), ("detect", 2), ("detect_blob", 1), ("ops", 3),
           ("misc", 1)]


# ---- the test-only Ops bindings: each op's arguments as kinds, drawn consistent (one shape for every
# tensor, parameters 1, offsets 0: most calls run) or at random (most must be refused) --------------------
OPS = {
    "conv2d": "T W i i z i i H Wd",
    "conv2d_affine_act": "T W i i z i i H Wd Vn V act",
    "add_bias": "T V", "batchnorm_inference": "T V V V V f", "activate": "T act",
    "pool": "kind T i i i z S", "copy_channels": "T z T z cnt", "add_channels": "T z T z cnt",
    "shortcut": "T L E wt wt", "shortcut_backward": "T L E wt wt T",
    "upsample": "T i f", "downsample_sum": "T i f", "reorg": "T w h c i b S", "reorg_backward": "T w h c i b S",
    "scale_channels": "P T b0", "scale_channels_backward": "P T b0 T", "mul": "T T", "mul_backward": "T T T",
    "softmax": "T i f", "softmax_backward": "T T i f",
    "conv2d_backward_weights": "T T W i i z i i", "conv2d_backward_data": "T W T i i z i i",
    "bias_backward": "T V", "batchnorm_train": "T V V f", "batchnorm_backward": "T T V V f",
    "activate_backward": "T T act", "batchnorm_activate_train": "T V V f act",
    "batchnorm_activate_backward": "T T T V V V f act", "pool_backward": "kind T T i i i z",
    "upsample_backward": "T i f S", "downsample_sum_backward": "T i f S",
    "sgd_update": "T T T f f f i", "adam_update": "T T T T f f f f f i i",
    "fill": "S f", "batchnorm_fold": "V V V V f", "rolling_update": "T T f", "dropout_mask": "S f u",
    "yolo_activate": "T ya yc b f", "gemm": "gemm",
}


def run_op(rng, backend, log):
    name = rng.choice(sorted(OPS))
    consistent = rng.random() < 0.5
    g = rng_np(rng)
    n, c, h, w = (rng.randint(1, 3) for _ in range(4))
    if name == "yolo_activate" and consistent:
        c = rng.choice([6, 7, 12])

    def dims():
        return (n, c, h, w) if consistent else tuple(rng.randint(0, 4) for _ in range(rng.choice([4, 4, 4, 3, 2])))

    def arr(shape):
        return odd_array(rng, shape) if not consistent else g.uniform(0.1, 1, shape).astype(np.float32)

    def draw(kind):
        if kind == "T":
            return arr(dims())
        if kind in ("V", "Vn"):
            if kind == "Vn" and rng.random() < 0.3:
                return None
            return arr((c,) if consistent else (rng.randint(0, 4),))
        if kind == "W":
            return arr((c, c, 1, 1) if consistent else tuple(rng.randint(0, 3) for _ in range(4)))
        if kind == "P":
            return arr((n, c, 1, 1) if consistent else dims())
        if kind == "E":
            return np.zeros(0, np.float32) if consistent else arr((rng.randint(0, 6),))
        if kind == "L":
            return [arr(dims()) for _ in range(rng.randint(0, 2))]
        if kind == "S":
            return list((n, c, h, w)) if consistent else [small_int(rng, -1, 4) for _ in range(rng.choice([4, 4, 3]))]
        if kind == "i":
            return 1 if consistent else small_int(rng)
        if kind == "z":
            return 0 if consistent else small_int(rng)
        if kind == "u":  # an unsigned seed
            return rng.getrandbits(40)
        if kind == "cnt":
            return c if consistent else small_int(rng)
        if kind == "H":
            return h if consistent else small_int(rng)
        if kind == "Wd":
            return w if consistent else small_int(rng)
        if kind in ("w", "h", "c"):
            return {"w": w, "h": h, "c": c}[kind] if consistent else small_int(rng)
        if kind == "wt":
            return 0 if consistent else small_int(rng, -1, 3)
        if kind == "ya":
            return 1 if consistent else small_int(rng)
        if kind == "yc":
            return c - 5 if consistent else small_int(rng)
        if kind == "f":
            return rng.choice([0.5, 1.0, 0.9, 1e-5]) if consistent else rng.choice([0.0, -1.0, 1e30, float("nan")])
        if kind in ("b", "b0"):
            return False if kind == "b0" and consistent else rng.random() < 0.5
        if kind == "act":
            return rng.choice(["leaky", "linear", "mish", "logistic"] + ([] if consistent else ["nonsense"]))
        if kind == "kind":
            return rng.choice(["max", "local_avg", "global_avg"] + ([] if consistent else ["max_depth", "other"]))
        raise ValueError(kind)

    if name == "gemm":
        m, k, nn = (rng.randint(1, 4) for _ in range(3))
        ta, tb = rng.random() < 0.5, rng.random() < 0.5
        if consistent:
            A, B, C = arr((k, m) if ta else (m, k)), arr((nn, k) if tb else (k, nn)), arr((m, nn))
        else:
            A, B, C = (arr(tuple(rng.randint(0, 4) for _ in range(rng.choice([2, 2, 1, 3])))) for _ in range(3))
        args = [ta, tb, 1.0, A, B, 0.5, C]
    else:
        args = [draw(k) for k in OPS[name].split()]
    if name == "pool" and consistent:  # size 1, stride 1, padding 0 keeps the shape
        args[2:6] = [1, 1, 1, 0]
    if name == "pool_backward" and consistent:
        args[3:7] = [1, 1, 1, 0]
    log(f"Ops({backend}).{name} consistent={consistent} " +
        " ".join(str(np.shape(a)) if isinstance(a, np.ndarray) else repr(a)[:40] for a in args))
    getattr(_core.Ops(backend), name)(*args)


def expected_error(e: BaseException) -> bool:
    return isinstance(e, DarknetError) and bool(str(e).strip())


def run_sequence(rng, out: Path, device: str, stats: Counter, log) -> None:
    seq = Sequence(rng, out, device, log)
    names = [a for a, w in ACTIONS for _ in range(w)]
    for _ in range(rng.randint(4, 12)):
        action = rng.choice(names)
        try:
            getattr(seq, "a_" + action)()
            stats[action + " ok"] += 1
        except DarknetError as e:
            if not str(e).strip():
                raise
            stats[action + " DarknetError"] += 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--case", type=int, help="replay only this sequence, printing every call")
    ap.add_argument("--device", default="cpu", help="the networks' device (cpu, reference, opencl:N)")
    ap.add_argument("--out", help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)

    warnings.simplefilter("ignore")
    _core.set_threads(1)  # sequences are small; one thread keeps shared CI cores free
    out = Path(args.out or tempfile.mkdtemp(prefix="darknet-api-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "yolo.cfg").write_text(YOLO_CFG)
    (out / "classifier.cfg").write_text(CLASSIFIER_CFG)

    stats, failures = Counter(), []
    cases = [args.case] if args.case is not None else range(args.count)
    for i in cases:
        rng = random.Random(f"api-{args.seed}-{i}")
        print(f"CASE {i}", flush=True)
        # every call is printed (flushed) before it runs when replaying, so a crash names its call
        log = (lambda s: print("CALL " + s, flush=True)) if args.case is not None else (lambda s: None)
        calls = []
        try:
            run_sequence(rng, out, args.device, stats, lambda s: (calls.append(s), log(s)))
            stats["sequences ok"] += 1
        except BaseException as e:  # noqa: B902 - classifying everything is the point
            if isinstance(e, KeyboardInterrupt):
                raise
            failures.append({"case": i, "type": type(e).__name__, "message": str(e)[:500], "calls": calls[-4:],
                             "where": traceback.format_exc().splitlines()[-3:]})
            print("FAIL " + json.dumps(failures[-1]), flush=True)
    print(json.dumps({"seed": args.seed, "device": args.device, "sequences": len(cases), "failures": failures,
                      "stats": dict(sorted(stats.items()))}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
