"""Training survives SIGKILL: `darknet_py train` is killed at >= 20 random moments, inside an
iteration, inside a weights save (before the temporary file is written, before its sync, before the
rename), inside the mAP pass and inside chart writing. After every kill each file in the backup
folder loads (weights with darknet_py.Network, chart.png and plots/*.png with cv2.imread), at most the one hidden
temporary file of the interrupted save is left (the next run deletes it), and the next run, started
with --weights <cfg>_last.weights, resumes at the iteration that file's `seen` gives.

The trainer announces its phases on stderr and pauses briefly inside the targeted one
(darknet_py/training/phase_hook.py), so a kill after a random delay lands inside that phase. A tiny cfg and a
tiny `darknet_py synth` set keep iterations at milliseconds; the whole test uses about 15 s of CPU on 2
cores. DARKNET_PY_KILL_SEED picks another kill schedule (the seed in use is in the failure message).
"""
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time

import cv2
import pytest

import darknet_py
from darknet_py.training.phase_hook import ENV, PREFIX
from darknet_py.data.synth import generate
from test_train import small_cfg

BATCH = 4
# phase -> (kills, DARKNET_PY_TEST_PHASES pauses, the announcement that counts, its occurrences to kill
# at (random in 1..n), the largest random delay after it in seconds). A save pauses 0.02 s at each
# of its three points, so a delay up to 0.07 s lands before the write, in it, before the sync or
# before the rename; the chart is drawn, then saved like the weights.
PLAN = {
    "iteration": (6, "iteration=0", "begin", 40, 0.03),
    "save": (6, "save=0.02", "write", 5, 0.07),
    "map": (5, "map=0.02", "begin", 3, 0.1),
    "chart": (5, "chart=0.02,save=0.01", "draw", 2, 0.06),
}
RUN_TIMEOUT = 60  # seconds for one run to reach its kill point


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    data = generate(str(root / "ds"), images=24, classes=2, size=(64, 64), seed=7, valid_fraction=0.25, workers=1)
    cfg = root / "tiny.cfg"
    cfg.write_text(small_cfg(classes=2, size=64, batch=BATCH, lr=0.002, burn_in=0, max_batches=100000,
                             filters=(8, 16), head=16, anchors="8,8, 14,14, 22,22"))
    return {"data": data, "cfg": str(cfg), "backup": root / "backup", "root": root}


def _reader(stream, lines: "queue.Queue"):
    for line in iter(stream.readline, ""):
        lines.put(line)
    lines.put(None)


def _start(job, pauses, weights, max_batches=100000):
    cmd = [sys.executable, "-m", "darknet_py", "train", job["data"], job["cfg"], "--out", str(job["backup"]),
           "--max-batches", str(max_batches), "--map", "--map-every", "20", "--save-every", "30", "--seed", "1",
           "--workers", "0", "--threads", "1", "--device", "cpu"]
    if weights:
        cmd += ["--weights", weights]
    env = dict(os.environ, **{ENV: pauses})
    log = open(job["root"] / "stdout.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True, env=env)
    log.close()
    lines: "queue.Queue" = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stderr, lines), daemon=True).start()
    return proc, lines


def _seen(job, path):
    return darknet_py.Network(job["cfg"]).load_weights(path)["seen"]


def _check_backup(job, where):
    """Every file loads; returns the hidden temporaries left and the iteration of _last.weights."""
    temporaries, last_iteration = [], None
    net = darknet_py.Network(job["cfg"])
    for name in sorted(os.listdir(job["backup"])):
        path = str(job["backup"] / name)
        if name.startswith(".") and name.endswith(".tmp"):
            temporaries.append(name)
        elif name.endswith(".weights"):
            seen = net.load_weights(path)["seen"]  # raises on a short or damaged file
            assert seen % BATCH == 0, f"{where}: {name} holds seen = {seen}, not a whole iteration"
            if name == "tiny_last.weights":
                last_iteration = seen // BATCH
        elif name == "chart.png":
            assert cv2.imread(path) is not None, f"{where}: chart.png does not load"
        elif name == "plots":  # the best weights' evaluation plots: each loads, or is a hidden temporary
            for plot in sorted(os.listdir(path)):
                if plot.startswith(".") and plot.endswith(".tmp"):
                    temporaries.append(f"plots/{plot}")
                else:
                    assert cv2.imread(os.path.join(path, plot)) is not None, f"{where}: plots/{plot} does not load"
        elif name == "results.csv":  # whole rows (a cut last one aside), iterations in order
            rows = open(path).read().split("\n")[1:-1]
            iterations = [int(r.split(",")[0]) for r in rows]
            assert iterations == sorted(set(iterations)), f"{where}: results.csv's iterations {iterations}"
        elif name == "tensorboard":  # (tensorboardX installed)
            assert all(f.startswith("events.out.tfevents.") for f in os.listdir(path)), f"{where}: {os.listdir(path)}"
        else:
            pytest.fail(f"{where}: unexpected file in the backup folder: {name}")
    return temporaries, last_iteration


def test_sigkill_at_random_moments_leaves_loadable_files_and_resumes(job):
    seed = int(os.environ.get("DARKNET_PY_KILL_SEED", "2024"))
    rng = random.Random(seed)
    targets = [kind for kind, (n, *_) in PLAN.items() for _ in range(n - 1)]
    rng.shuffle(targets)
    # first inside the second _last.weights save (iteration 200): every later run has one to resume from
    targets = ["save"] + targets + ["iteration", "map", "chart"]
    assert len(targets) >= 20
    last = str(job["backup"] / "tiny_last.weights")
    expected_start = 0
    resumed_checks = 0
    landed = {kind: 0 for kind in PLAN}
    for k, kind in enumerate(targets):
        where = f"kill {k + 1}/{len(targets)} in phase {kind!r} (DARKNET_PY_KILL_SEED={seed})"
        _, pauses, counted, occurrences, max_delay = PLAN[kind]
        first_last = k == 0
        occurrence = 2 if first_last else rng.randint(1, occurrences)
        proc, lines = _start(job, pauses, last if os.path.exists(last) else None)
        seen_kind, first_iteration, tail = 0, None, []
        deadline = time.monotonic() + RUN_TIMEOUT
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    pytest.fail(f"{where}: the phase was not reached in {RUN_TIMEOUT} s; stderr: {''.join(tail)}")
                if line is None:
                    pytest.fail(f"{where}: training exited ({proc.wait()}) before the phase; stderr: {''.join(tail)}")
                tail = (tail + [line])[-20:]
                if not line.startswith(PREFIX):
                    continue
                got, detail = (line[len(PREFIX):].strip().split(" ", 1) + [""])[:2]
                if got == "iteration" and first_iteration is None and detail.startswith("begin "):
                    first_iteration = int(detail.split()[1])
                if got == kind and detail.startswith(counted) and (kind != "save" or ".weights" in detail) \
                        and (not first_last or "_last." in detail):
                    seen_kind += 1
                    if seen_kind == occurrence:
                        time.sleep(rng.uniform(0, max_delay))
                        break
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        landed[kind] += 1
        assert proc.returncode == -signal.SIGKILL, f"{where}: training ended by itself ({proc.returncode})"
        if first_iteration is not None:  # the run got to train: it resumed where _last.weights said
            assert first_iteration == expected_start + 1, \
                f"{where}: resumed at iteration {first_iteration - 1}, but _last.weights holds {expected_start}"
            resumed_checks += expected_start > 0
        temporaries, last_iteration = _check_backup(job, where)
        assert len(temporaries) <= 1, f"{where}: temporaries of earlier runs were not removed: {temporaries}"
        expected_start = last_iteration or 0

    assert all(landed.values()) and resumed_checks >= 10, (landed, resumed_checks)

    # a last run to the end: the stale temporary goes, every file loads, the final weights are whole
    end = expected_start + 2
    proc, lines = _start(job, "1", last, max_batches=end)
    assert proc.wait(timeout=RUN_TIMEOUT) == 0, "".join(iter(lines.get, None))
    temporaries, last_iteration = _check_backup(job, "after the final run")
    assert temporaries == [] and last_iteration == end
    assert _seen(job, str(job["backup"] / "tiny_final.weights")) == end * BATCH
