"""Data-parallel training on the CPU collective (the engine's TCP ring on loopback), against one
process: what CI can check of `darknet_py train --device cuda:0,1` without GPUs.

- the ring all-reduce against NumPy's sum (odd sizes, fewer elements than ranks), bit-identical on
  every rank; a rank that dies or goes silent raises CollectiveError naming it, within the timeout;
- the rendezvous stores (file, TCP) and the batch plans;
- training: 2 ranks x half the batch give the weights one process gives (same cfg, same seed);
  rank 0 alone writes; resume from `_last.weights` with another rank count; fp16 ranks on pocl skip
  the same overflowed steps on their devices;
- failure: a rank killed (SIGKILL) or stopped (SIGSTOP) ends every rank with one line naming it;
  Ctrl-C stops all; no process outlives the launcher; the saved weights stay loadable.
"""
import glob
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import darknet_py
from darknet_py import _core
from darknet_py.exit_codes import RANK_FAILED
from darknet_py.distributed import RankInfo, plan_ranks, split_devices
from darknet_py.distributed.store import FileStore, RendezvousTimeout, TcpStore
from darknet_py.data.synth import generate
from test_train import small_cfg

# the ranks import the darknet_py this process imported (a worktree's or an installed one)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(darknet_py.__file__))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [_PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")] if p),
           DARKNET_PY_DEVICE="cpu")


# ---- the collective -------------------------------------------------------------------------
def ring(n, timeout_s=10.0):
    """n TCP-ring collectives in this process, joined by loopback sockets."""
    pairs = [socket.socketpair() for _ in range(n)]  # pairs[r]: rank r -> rank r + 1
    return [_core.tcp_collective(r, n, pairs[r][0].detach(), pairs[(r - 1) % n][1].detach(), timeout_s)
            for r in range(n)]


def on_threads(fns):
    out, errors = [None] * len(fns), [None] * len(fns)

    def run(i):
        try:
            out[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 (handed back to the test)
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out, errors


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_ring_all_reduce_is_the_sum_and_the_same_bits_on_every_rank(ranks):
    comms = ring(ranks)
    rng = np.random.default_rng(ranks)
    for n in (1, ranks - 1, 7, 100003):
        xs = [rng.standard_normal(n).astype(np.float32) for _ in range(ranks)]
        out, errors = on_threads([lambda c=c, x=x: c.all_reduce(x) for c, x in zip(comms, xs)])
        assert errors == [None] * ranks
        np.testing.assert_allclose(out[0], np.sum(np.array(xs, np.float64), axis=0), rtol=1e-5, atol=1e-5)
        for o in out[1:]:
            assert np.array_equal(o, out[0])  # every rank takes the same optimizer step


def test_ring_names_the_rank_that_died_and_the_one_that_hangs():
    comms = ring(3, timeout_s=1.0)
    x = np.ones(1000, np.float32)
    del comms[2]  # rank 2's sockets close, as when its process dies
    t0 = time.monotonic()
    _, errors = on_threads([lambda c=c: c.all_reduce(x) for c in comms])
    assert all(isinstance(e, _core.CollectiveError) for e in errors), errors
    assert "rank 2" in str(errors[0]) + str(errors[1]) and "died or stopped" in str(errors[0]) + str(errors[1])
    comms = ring(2, timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(_core.CollectiveError, match=r"rank 0: no data for 0\.5.* from rank 1"):
        comms[0].all_reduce(x)  # rank 1 never calls: silent
    assert time.monotonic() - t0 < 2


@pytest.mark.parametrize("bucket_mb", [1e-9, 25.0])
def test_bucketed_reduction_gives_the_full_batch_step(job, bucket_mb):
    """Two ranks (threads, each its own Net) on half a batch each, gradients reduced in buckets during
    the backward (1e-9 MiB: one per parameter tensor; 25: one bucket), then update: the parameters of
    both equal those of one Net that ran both halves (gradients accumulated) and updated once."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (8, 3, 64, 64)).astype(np.float32)
    truths = [np.array([[0.5, 0.5, 0.2, 0.3, i % 2]], np.float32) for i in range(8)]
    nets = [_core.Net(job["cfg"], "cpu") for _ in range(3)]
    for n in nets[1:]:
        for i in range(len(n.layers())):
            n.set_params(i, nets[0].params(i))

    def step(net, halves, comm=None):
        for k, h in enumerate(halves):
            net.forward_train(x[4 * h:4 * h + 4], [])
            net.yolo_loss(truths[4 * h:4 * h + 4])
            net.backward(all_reduce=comm is not None and k == len(halves) - 1)
        net.update(0.01, 8, 1)
        return _core.reduce_stats(net) if comm is not None else None

    step(nets[0], [0, 1])
    comms = ring(2)
    for n, c in zip(nets[1:], comms):
        _core.set_collective(n, c, bucket_mb)
    stats, errors = on_threads([lambda: step(nets[1], [0], comms[0]), lambda: step(nets[2], [1], comms[1])])
    assert errors == [None, None]
    trainable = sum(1 for i in range(len(nets[0].layers())) for k in nets[0].params(i) if not k.startswith("rolling"))
    assert stats[0]["buckets"] == (trainable if bucket_mb < 1 else 1)
    # one bucket per tensor: all but layer 0's start before layer 0's backward runs
    assert stats[0]["launched_early"] == (trainable - len(nets[0].gradients(0)) if bucket_mb < 1 else 0)
    for i in range(len(nets[0].layers())):
        for k, want in nets[0].params(i).items():
            if k.startswith("rolling"):
                continue  # batchnorm statistics stay per rank
            for n in nets[1:]:
                np.testing.assert_allclose(n.params(i)[k], want, rtol=1e-5, atol=1e-6, err_msg=f"layer {i} {k}")


def test_fp16_ranks_skip_the_same_steps_on_their_devices(tmp_path):
    """Two fp16 ranks on pocl (threads, half the batch each, gradients reduced during the backward),
    updates queued (Net.queue_update) from a loss scale their summed gradients overflow at: each rank's
    device checks the summed gradients, so every rank skips the same steps and learns the same flags
    one step late, and the weights stay the same on both (bit for bit: the same sums, the same steps)."""
    import gpu_devices

    device = gpu_devices.device("pocl")
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(small_cfg(classes=2, size=32, batch=4, lr=0.002, burn_in=0, max_batches=10, filters=(8, 16),
                             head=16, anchors="4,4, 7,7, 11,11"))
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (4, 3, 32, 32)).astype(np.float32)
    truths = [np.array([[0.5, 0.5, 0.2, 0.3, i % 2]], np.float32) for i in range(4)]
    nets = [_core.Net(str(cfg), device) for _ in range(2)]
    for n in nets:
        for i in range(len(n.layers())):
            n.set_params(i, nets[0].params(i))
        n.precision = "fp16"
        n.loss_scale = 2.0 ** 17  # on pocl these gradients overflow at 2^17, not at 2^16
    comms = ring(2)
    for n, c in zip(nets, comms):
        _core.set_collective(n, c, 25.0)

    def train(net, half):
        checks, before = [], None
        for t in range(1, 5):
            net.forward_train(x[2 * half:2 * half + 2], [])
            net.queue_yolo_loss(truths[2 * half:2 * half + 2])
            net.backward(all_reduce=True)
            update = net.queue_update(0.002, 4, t)
            if before is not None:
                checks.append(before.read())
            before = update
        return checks + [before.read()]

    checks, errors = on_threads([lambda: train(nets[0], 0), lambda: train(nets[1], 1)])
    assert errors == [None, None]
    assert checks[0] == checks[1], checks
    # the second step was queued before the first one's overflow was learnt: at the old scale, skipped too
    assert [(c["applied"], c["loss_scale"]) for c in checks[0]] == \
        [(False, 2.0 ** 17), (False, 2.0 ** 17), (True, 2.0 ** 16), (True, 2.0 ** 16)], checks[0]
    for i in range(len(nets[0].layers())):
        for k, want in nets[0].params(i).items():
            if not k.startswith("rolling"):
                assert np.array_equal(nets[1].params(i)[k], want), (i, k)


# ---- rendezvous and plans -------------------------------------------------------------------
def test_stores_hand_values_between_ranks_and_time_out_clearly(tmp_path):
    port = _free_port()
    server = TcpStore("127.0.0.1", port, serve=True, timeout=5)
    client = TcpStore("127.0.0.1", port, serve=False, timeout=5)
    for a, b in ((server, client), (FileStore(str(tmp_path / "r")), FileStore(str(tmp_path / "r")))):
        got = []
        t = threading.Thread(target=lambda: got.append(b.get("nccl_id", 5)))
        t.start()
        time.sleep(0.05)  # b waits for a value not there yet
        a.set("nccl_id", bytes(range(128)))
        t.join(5)
        assert got == [bytes(range(128))]
        with pytest.raises(RendezvousTimeout, match="no 'ring/7'"):
            b.get("ring/7", 0.2)
    client.close()
    server.close()
    with pytest.raises(RendezvousTimeout, match=f"cannot reach the store at 127.0.0.1:{port}"):
        TcpStore("127.0.0.1", port, serve=False, timeout=0.3)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plans_and_device_lists():
    assert split_devices("cuda:0,1,3") == ["cuda:0", "cuda:1", "cuda:3"]
    assert split_devices("cpu,cpu") == ["cpu", "cpu"]
    p = plan_ranks(64, 16, 4)  # the cfg's passes divide: each rank keeps the 4-image passes
    assert (p.passes, p.mini, p.update_batch, p.step_images) == (4, 4, 64, 64)
    p = plan_ranks(64, 2, 4)  # they do not: each rank runs 2 passes of 8
    assert (p.passes, p.mini, p.update_batch) == (2, 8, 64)
    p = plan_ranks(64, 2, 4, "per-gpu")  # Darknet's: each rank the whole batch
    assert (p.passes, p.mini, p.update_batch, p.step_images) == (2, 32, 256, 256)
    with pytest.raises(ValueError, match="batch=6 does not divide among 4 devices"):
        plan_ranks(6, 1, 4)
    assert RankInfo.from_env({}) is None
    assert RankInfo.from_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}) == RankInfo(3, 4, 1)
    with pytest.raises(ValueError, match="RANK=4 and WORLD_SIZE=4"):
        RankInfo.from_env({"RANK": "4", "WORLD_SIZE": "4"})


def test_train_command_refuses_bad_device_lists_and_batches(job, capsys):
    from darknet_py.commands.cli import main

    base = ["train", job["data"], job["cfg"], "--out", str(job["root"] / "refused")]
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error
        main(base + ["--device", "cpu,,cpu"])
    assert exit_.value.code == 2 and "--device 'cpu,,cpu': an empty entry in the list" in capsys.readouterr().err
    assert main(base + ["--device", "cpu", "--gpus", "0,1"]) == 1
    assert "--gpus and --device both name the devices" in capsys.readouterr().err
    assert main(base + ["--device", "cpu,cpu,cpu"]) == 1  # refused before any rank starts
    assert f"{job['cfg']}:2: [net] batch=8 does not divide among 3 devices" in capsys.readouterr().err


# ---- training -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    data = generate(str(root / "ds"), images=24, classes=2, size=(64, 64), seed=5, valid_fraction=0.25, workers=1)
    cfg = root / "tiny.cfg"
    # batch 8 in 2 passes: 2 ranks each run one pass of 4, the passes one process runs
    cfg.write_text(small_cfg(classes=2, size=64, batch=8, lr=0.002, burn_in=0, max_batches=1000, filters=(8, 16),
                             head=16, anchors="8,8, 14,14, 22,22").replace("subdivisions=1", "subdivisions=2"))
    return {"data": data, "cfg": str(cfg), "root": root}


def cli(job, out, *args, **popen):
    cmd = [sys.executable, "-m", "darknet_py", "train", job["data"], job["cfg"], "--out", str(out), "--seed", "3",
           "--workers", "0", "--threads", "1", *args]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def trained_params(path, cfg):
    """The trained parameters of a .weights file (batchnorm's rolling statistics stay per rank)."""
    net = _core.Net(cfg, "cpu")
    net.load_weights(path, -1)
    return np.concatenate([v.ravel() for i in range(len(net.layers())) for k, v in net.params(i).items()
                           if not k.startswith("rolling")])


@pytest.fixture(scope="module")
def one_process(job):
    """4 iterations of the cfg (batch 8 in 2 passes of 4) in one process: its trained parameters."""
    p = cli(job, job["root"] / "one", "--max-batches", "4")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return trained_params(str(job["root"] / "one" / "tiny_final.weights"), job["cfg"])


def test_two_ranks_train_as_one_process_then_resume_with_one(job, one_process):
    """`--device cpu,cpu` (2 processes, half the batch each) against `--device cpu` from the same seed:
    the same trained parameters after 4 iterations; only rank 0 printed and wrote; then the 2-rank
    `_last.weights` resumes in one process."""
    two = job["root"] / "two"
    p2 = cli(job, two, "--max-batches", "4", "--device", "cpu,cpu")
    out2, err2 = p2.communicate(timeout=120)
    assert p2.returncode == 0, err2
    assert "data parallel: 2 ranks (tcp-ring), batch mode split: each trains 1 x 4 images per step" in out2
    assert out2.count("\n 4: ") == 1  # rank 0 alone prints its iteration lines (Darknet's, a space first)
    # one image cache for the host's ranks: rank 0's line counts both ranks' 2 x 4 iterations x 4 draws (its
    # own cache would count 16), and the shared memory is gone once they end
    assert "% of 32 image draws read from it" in out2, out2
    assert not glob.glob("/dev/shm/dnpy_cache_*")
    b = trained_params(str(two / "tiny_final.weights"), job["cfg"])
    rel = np.abs(one_process - b).max() / np.abs(one_process).max()
    print(f"2 ranks vs 1 process after 4 iterations: max relative parameter difference {rel:.2e}")
    assert rel < 1e-4, f"2 ranks vs 1 process: max relative difference {rel:.2e}"
    start = trained_params(str(two / "tiny_final.weights"), job["cfg"])
    r = cli(job, two, "--max-batches", "5", "--weights", str(two / "tiny_last.weights"))
    out, err = r.communicate(timeout=120)
    assert r.returncode == 0, err
    assert "resuming at iteration 4 (seen = 32 images)" in out and "\n 5: " in out
    assert not np.array_equal(trained_params(str(two / "tiny_final.weights"), job["cfg"]), start)


def test_ranks_with_loader_processes_share_one_image_cache_and_leave_no_shared_memory(job):
    """Rank 1 and its loader processes use the image cache local rank 0 made; all end cleanly and the shared
    memory goes with rank 0 (test_image_cache checks that attached processes leave it to its maker)."""
    p = cli(job, job["root"] / "procs", "--max-batches", "3", "--device", "cpu,cpu", "--workers", "1", "--loader",
            "processes")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "image draws read from it" in out and "leaked" not in err, err
    assert not glob.glob("/dev/shm/dnpy_cache_*")


def test_ranks_started_as_torchrun_starts_them(job, one_process):
    """Two processes given RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (as torchrun or
    srun would, across hosts): rank 0 serves the TCP store, the ring finds its addresses through it,
    and they train as one process does."""
    out, port = job["root"] / "env", _free_port()
    procs = []
    for rank in range(2):
        env = dict(ENV, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        cmd = [sys.executable, "-m", "darknet_py", "train", job["data"], job["cfg"], "--out", str(out), "--seed", "3",
               "--workers", "0", "--threads", "1", "--max-batches", "4", "--device", "cpu"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert "data parallel: 2 ranks (tcp-ring)" in results[0][0] and results[1][0] == ""
    b = trained_params(str(out / "tiny_final.weights"), job["cfg"])
    assert np.abs(one_process - b).max() / np.abs(one_process).max() < 1e-4


def test_a_nan_loss_stops_every_rank_at_the_same_step(job):
    """The loss, read one step late (training/queued_step.py), is summed over the ranks: when it turns
    infinite every rank stops at the same iteration with the same line, none waits for a peer until
    --dist-timeout, and no weights are written."""
    cfg = job["root"] / "hot.cfg"
    cfg.write_text(open(job["cfg"]).read().replace("learning_rate=0.002", "learning_rate=1e12"))
    out, port = job["root"] / "hot", _free_port()
    procs = []
    started = time.monotonic()
    for rank in range(2):
        env = dict(ENV, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        cmd = [sys.executable, "-m", "darknet_py", "train", job["data"], str(cfg), "--out", str(out), "--seed", "3",
               "--workers", "0", "--threads", "1", "--max-batches", "50", "--device", "cpu", "--dist-timeout", "60"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [1, 1], errs
    assert time.monotonic() - started < 60, "a rank waited for its peer's timeout"
    stops = [[line for line in e.splitlines() if "training stopped at iteration" in line] for e in errs]
    assert len(stops[0]) == 1 and stops[0] == stops[1], errs  # the same iteration and loss on both
    assert "(training diverged)" in stops[0][0]
    assert not list(out.glob("*.weights"))


def test_per_gpu_mode_is_darknets_batch_on_every_rank(job, one_process):
    """`--batch-mode per-gpu` (Darknet's -gpus): 2 ranks of a batch-4 cfg make steps of 8 images,
    the steps one process makes with batch 8 in 2 passes of 4: the same parameters."""
    cfg = job["root"] / "tiny-b4.cfg"
    cfg.write_text(open(job["cfg"]).read().replace("batch=8", "batch=4").replace("subdivisions=2", "subdivisions=1"))
    out = job["root"] / "per-gpu"
    p = cli(dict(job, cfg=str(cfg)), out, "--max-batches", "4", "--device", "cpu,cpu", "--batch-mode", "per-gpu")
    stdout, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "batch mode per-gpu: each trains 1 x 4 images per step, a step sees 8 images" in stdout
    # images/s counts every rank's images: iteration 1's rate is its 8 images over its seconds
    first = re.search(r"^ 1: .*?, ([0-9.]+) seconds, .*?, ([0-9]+) images/s", stdout, re.M)
    assert first and abs(float(first[2]) * float(first[1]) / 8 - 1) < 0.25, first and first[0]  # (4 would be 0.5)
    b = trained_params(str(out / "tiny-b4_final.weights"), str(cfg))
    assert np.abs(one_process - b).max() / np.abs(one_process).max() < 1e-4


def _children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _rank_pid(launcher_pid, rank, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for child in _children(launcher_pid):
            try:
                with open(f"/proc/{child}/environ", "rb") as f:
                    if f"RANK={rank}".encode() in f.read().split(b"\0"):
                        return child
            except OSError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank} under launcher {launcher_pid}")


def _wait_line(stream, text, timeout=60):
    end, seen = time.monotonic() + timeout, []
    while time.monotonic() < end:
        line = stream.readline()
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} in {seen}")


def _default_sigint():
    """In the child before exec: SIGINT's default action, so that Python turns it into KeyboardInterrupt
    even where this suite runs with SIGINT ignored (a child inherits an ignored signal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("fault", ["kill", "stop", "ctrl-c", "launcher-killed"])
def test_a_rank_that_dies_or_hangs_or_ctrl_c_stops_every_rank(job, fault):
    """SIGKILL of rank 1: one line names it and the signal; SIGSTOP of rank 1 (a hang): rank 0's
    timeout (2 s) names rank 1; Ctrl-C: all stop after the step, rank 0 saves, exit 130; SIGKILL of the
    launcher: its ranks exit. No rank outlives the launcher; the saved `_last.weights` loads."""
    out = job["root"] / f"fault-{fault}"
    p = cli(job, out, "--device", "cpu,cpu", "--dist-timeout", "2", "--max-batches", "100000",
            preexec_fn=_default_sigint)
    pids = [_rank_pid(p.pid, 0), _rank_pid(p.pid, 1)]
    _wait_line(p.stdout, "3: ")  # training runs
    t0 = time.monotonic()
    if fault == "ctrl-c":
        p.send_signal(signal.SIGINT)
    elif fault == "launcher-killed":  # its ranks notice within a second and exit
        p.kill()
        p.communicate(timeout=10)
        end = time.monotonic() + 5
        while any(_alive(pid) for pid in pids) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in pids), "orphaned ranks"
        return
    else:
        os.kill(pids[1], signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    _, err = p.communicate(timeout=60)
    seconds = time.monotonic() - t0
    assert not any(_alive(pid) for pid in pids), "a rank outlived the launcher"
    lines = [ln for ln in err.splitlines() if ln.startswith("darknet_py train:")]
    if fault == "kill":
        assert p.returncode == RANK_FAILED and seconds < 15, (p.returncode, seconds, err)
        # rank 0 may notice the lost peer and exit before the launcher's next look: nobody left to stop then
        killed = f"darknet_py train: rank 1 (cpu, pid {pids[1]}) was killed by SIGKILL; stopping "
        assert lines in ([killed + "the other 1 ranks"], [killed + "training"]), err
    elif fault == "stop":
        assert p.returncode == RANK_FAILED and seconds < 20, (p.returncode, seconds, err)
        assert len(lines) == 1 and "rank 0" in lines[0] and "from rank 1" in lines[0] and "no data for 2" in lines[0], err
    else:
        assert p.returncode == 130 and lines == ["darknet_py train: interrupted: stopped all 2 ranks"], err
    last = out / "tiny_last.weights"
    if last.exists():  # saved every 100 iterations, and by rank 0 on Ctrl-C
        trained_params(str(last), job["cfg"])
    if fault == "ctrl-c":
        assert last.exists() and "interrupted at iteration" in err


def test_ranks_agree_on_timed_choices_while_training_in_lockstep(tmp_path):
    """Data-parallel forward_train and backward ask the device to make its timed choices (cuDNN's
    algorithms on CUDA) alike on every rank, through a sum over the ranks (Device::set_choice_agreement);
    outside them (rank 0's --map, inference) each device chooses alone. Two pocl ranks on threads, each
    on a device that notes the agreement being set and cleared and tries the sum once per setting."""
    import gpu_devices

    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(small_cfg(classes=2, size=32, batch=4, lr=0.002, burn_in=0, max_batches=10, filters=(8, 16),
                             head=16, anchors="4,4, 7,7, 11,11"))
    x = np.random.default_rng(1).uniform(0, 1, (2, 3, 32, 32)).astype(np.float32)
    truths = [np.array([[0.5, 0.5, 0.2, 0.3, i % 2]], np.float32) for i in range(2)]
    devices = [_core.kernel_counting_device(gpu_devices.device("pocl")) for _ in range(2)]
    nets = [_core.Net(str(cfg), gpu_devices.device("pocl")) for _ in range(2)]
    for n, d, c in zip(nets, devices, ring(2)):
        _core.run_network_on(n, d.device)
        _core.set_collective(n, c, 25.0)

    def step(net):
        net.forward_train(x, [])
        net.yolo_loss(truths)
        net.backward(all_reduce=True)
        net.update(0.002, 4)
        net.forward(x[:1], [])  # inference: no agreement

    _, errors = on_threads([lambda: step(nets[0]), lambda: step(nets[1])])
    assert errors == [None, None]
    for d in devices:
        calls = d.calls()
        assert calls.get("agreement set") == calls.get("agreement cleared") == 2, calls  # forward_train, backward
        assert calls.get("agreement sum 2") == 2, calls  # each setting reached both ranks
