"""`darknet_py train ... --device cuda:0,1,2,3` on one host: one process per device, each this same
command with RANK / WORLD_SIZE / LOCAL_RANK and a rendezvous folder in its environment; the launcher
watches them. The first rank that fails ends them all: one line names it and its cause. Ctrl-C asks
every rank (SIGUSR1) to stop after the step they are in, together: rank 0 then saves `_last.weights`
(a second Ctrl-C kills them; the files saved before stay whole, as every save is atomic). A rank
whose launcher vanished stops by itself (watch_launcher): no orphans.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional

from ..exit_codes import INTERRUPTED, RANK_FAILED

STOP_SIGNAL = signal.SIGUSR1  # the launcher's Ctrl-C, handed to the ranks: stop after this step
PEER_LOST_EXIT = RANK_FAILED  # a rank that stopped because another died or hung (the cause is elsewhere)
GRACE_SECONDS = 10.0  # after SIGTERM (or Ctrl-C), before SIGKILL
BLAME_WAIT = 2.0  # a rank that lost its peer waits this long for the real cause to show


def _describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with code {rc}"


def _keep_tail(pipe, keep: List[str]) -> None:
    """The last chunks a rank wrote on its stderr."""
    for chunk in iter(lambda: os.read(pipe.fileno(), 65536), b""):
        keep.append(chunk.decode(errors="replace"))
        del keep[:-50]


def _last_line(chunks: List[str]) -> str:
    lines = [ln.strip() for ln in "".join(chunks).replace("\r", "\n").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def launch(devices: List[str], argv: List[str]) -> int:
    """Runs `python -m darknet_py *argv` once per device; returns the exit code for the command."""
    n = len(devices)
    folder = tempfile.mkdtemp(prefix="darknet_py-rendezvous-")
    procs: List[subprocess.Popen] = []
    tails: List[List[str]] = [[] for _ in devices]
    try:
        for rank in range(n):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(n),
                       DARKNET_PY_RENDEZVOUS_DIR=folder, DARKNET_PY_LAUNCHER_PID=str(os.getpid()))
            # The ranks share the cores: a CPU rank's work, a GPU rank's staging of each batch (4 bf16 ranks on
            # 64 cores, pageable batches: 8143 images/s with 64 threads each, 9808 with 8)
            if "DARKNET_PY_THREADS" not in env:
                env["DARKNET_PY_THREADS"] = str(max(1, (os.cpu_count() or 1) // n))
            # their own session: a terminal's Ctrl-C reaches the launcher alone, which hands it on once
            # rank 0 writes to our stdout and stderr (its progress bar included); the others' stderr is kept
            # to quote the last line of the one that fails
            quiet = subprocess.DEVNULL if rank else None
            p = subprocess.Popen([sys.executable, "-m", "darknet_py", *argv], env=env, start_new_session=True,
                                 stdout=quiet, stderr=subprocess.PIPE if rank else None)
            procs.append(p)
            if rank:
                threading.Thread(target=_keep_tail, args=(p.stderr, tails[rank]), daemon=True).start()
        return _watch(procs, devices, tails, folder)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(STOP_SIGNAL)
        try:
            for p in procs:  # they stop after this step (and rank 0's save): no time limit but a second Ctrl-C
                p.wait()
        except KeyboardInterrupt:
            pass
        print(f"darknet_py train: interrupted: stopped all {n} ranks", file=sys.stderr)
        return INTERRUPTED
    finally:
        _reap(procs, signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


def _reap(procs: List[subprocess.Popen], sig: Optional[int] = None) -> None:
    if sig is not None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
                p.send_signal(signal.SIGCONT)  # a stopped (hung) rank gets it now
    end = time.monotonic() + GRACE_SECONDS
    for p in procs:
        try:
            p.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _watch(procs: List[subprocess.Popen], devices: List[str], tails: List[List[str]], folder: str) -> int:
    peer_lost_at: Optional[float] = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return 0
        real = [r for r, c in enumerate(codes) if c not in (None, 0, PEER_LOST_EXIT)]
        lost = [r for r, c in enumerate(codes) if c == PEER_LOST_EXIT]
        if lost and peer_lost_at is None:
            peer_lost_at = time.monotonic()
        if real or (lost and time.monotonic() - peer_lost_at > BLAME_WAIT):  # type: ignore[operator]
            if real:
                r = real[0]
                cause = f"rank {r} ({devices[r]}, pid {procs[r].pid}) {_describe(codes[r])}"  # type: ignore[arg-type]
                said = _last_line(tails[r])  # rank 0's is on the terminal already
                if said:
                    cause += f": {said}"
            else:  # the collective's message names the rank that died or hangs
                r = lost[0]
                cause = _read_failure(folder, r) or f"rank {r} {_last_line(tails[r])}"
            alive = sum(1 for c in codes if c is None)
            print(f"darknet_py train: {cause}; stopping {'the other ' + str(alive) + ' ranks' if alive else 'training'}",
                  file=sys.stderr)
            _reap(procs, signal.SIGTERM)
            return codes[r] if real and codes[r] > 0 else RANK_FAILED  # type: ignore[operator,return-value]
        time.sleep(0.05)


def _read_failure(folder: str, rank: int) -> str:
    try:
        with open(os.path.join(folder, f"failure_{rank}"), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def report_peer_lost(message: str) -> int:
    """In a launched rank: notes why it stopped (another rank died or hung) for the launcher, which
    says it once; returns the exit code to use. Outside the launcher: prints it."""
    folder, rank = os.environ.get("DARKNET_PY_RENDEZVOUS_DIR"), os.environ.get("RANK")
    if folder and os.environ.get("DARKNET_PY_LAUNCHER_PID") and rank is not None:
        try:
            with open(os.path.join(folder, f"failure_{rank}"), "w", encoding="utf-8") as f:
                f.write(message)
            return PEER_LOST_EXIT
        except OSError:
            pass
    print(f"darknet_py train: {message}", file=sys.stderr)
    return PEER_LOST_EXIT


def watch_launcher() -> Optional[threading.Event]:
    """In a launched rank: exits as soon as the launcher is gone (killed with SIGKILL, say); returns
    the event the launcher's Ctrl-C sets (None outside the launcher)."""
    pid = os.environ.get("DARKNET_PY_LAUNCHER_PID")
    if not pid:
        return None
    stop = threading.Event()
    signal.signal(STOP_SIGNAL, lambda *_: stop.set())

    def watch() -> None:
        while os.getppid() == int(pid):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="darknet_py-launcher-watch", daemon=True).start()
    return stop
