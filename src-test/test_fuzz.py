"""Bad-input robustness: mutated .cfg and .weights files (truncated, lines deleted or duplicated,
numbers replaced by huge/negative/zero/float/garbage values, sections removed/renamed/moved,
random bytes; weights with corrupt headers, random or non-finite bodies, wrong lengths) must either
load (and then run forward and detection, or raise) or raise DarknetError with a message. None
may crash the interpreter, hang, or ask for absurd memory.

The mutation loop runs in a subprocess (src-test/fuzz_driver.py), so a segfault or abort fails
the test with its seed and the input that caused it instead of killing pytest. CI runs a few
hundred cases with fixed seeds; for a long local run set e.g. DARKNET_FUZZ_COUNT=5000 (and
DARKNET_FUZZ_SEED to explore other cases).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # fuzz_driver (for resize_cfg)
DRIVER = HERE / "fuzz_driver.py"
REPO_CFG = HERE.parent / "cfg"
SMALL_CFGS = ["yolov3-tiny.cfg", "yolov4-tiny.cfg", "yolov7-tiny.cfg"]

SEED = int(os.environ.get("DARKNET_FUZZ_SEED", "20240601"))
SCALE = float(os.environ.get("DARKNET_FUZZ_COUNT", "0")) / 400 or 1.0  # multiplies every count below
TIMEOUT = 180 * SCALE  # a hang is a failure too


def count(n: int) -> int:
    return max(1, int(n * SCALE))


@pytest.fixture(scope="module")
def small_cfgs(request) -> list:
    """The small real cfgs: shipped in cfg/, else from ../shared/cfg."""
    found = [REPO_CFG / n for n in SMALL_CFGS if (REPO_CFG / n).is_file()]
    if len(found) < len(SMALL_CFGS):
        shared = request.getfixturevalue("shared_cfg_dir")
        found = [shared / n for n in SMALL_CFGS if (shared / n).is_file()]
    if not found:
        pytest.skip("no base cfgs: neither cfg/ nor ../shared/cfg has " + ", ".join(SMALL_CFGS))
    return found


@pytest.fixture
def scratch(tmp_path):
    """Mutated files are written to RAM (tmpfs) where there is one: weights cases are 35 MB each."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        d = Path(tempfile.mkdtemp(prefix="darknet-fuzz-", dir=shm))
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path / "cases"


def run_driver(mode: str, bases: list, scratch: Path, tmp_path: Path, n: int, seed: int, extra=()) -> dict:
    cmd = [sys.executable, str(DRIVER), mode, "--seed", str(seed), "--count", str(n), "--out", str(scratch)]
    for b in bases:
        cmd += ["--base", str(b)]
    cmd += list(extra)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")  # a crash prints the Python stack too
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT, env=env)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        stdout = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = "timeout"
    lines = stdout.splitlines()
    summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    if rc == 0 and summary and not summary["failures"]:
        return summary

    # Keep what failed next to the test's tmp_path and say how to replay it.
    kept = []
    for f in sorted(scratch.glob(f"{mode}-seed*")):
        dst = tmp_path / f.name
        if f.resolve() != dst.resolve():
            shutil.copy(f, dst)
        kept.append(str(dst))
    cases = [l for l in lines if l.startswith("CASE ")]
    last = cases[-1].split()[1] if cases else "?"
    if rc == "timeout":
        how = f"timed out after {TIMEOUT:.0f} s (hang?) in case {last}"
    elif isinstance(rc, int) and rc < 0:
        how = f"crashed with signal {signal.Signals(-rc).name} in case {last}"
    elif summary and summary["failures"]:
        how = "cases raised something other than DarknetError with a message:\n" + "\n".join(
            json.dumps(f) for f in summary["failures"][:10])
        last = summary["failures"][0]["case"]
    else:
        how = f"exited with status {rc} in case {last}"
    i = cmd.index("--count")
    replay = cmd[:i] + ["--case", str(last)] + cmd[i + 2:]
    pytest.fail(f"fuzz {mode} (seed {seed}) {how}\ninputs kept: {kept}\nreplay: {shlex.join(replay)}\n"
                f"stderr (tail):\n{stderr[-3000:]}", pytrace=False)


def assert_exercised(summary: dict, n: int, ok_key: str) -> None:
    # The mutations must hit both paths: some inputs still load and run, most are refused.
    stats = summary["stats"]
    assert stats.get(ok_key, 0) >= n // 10, stats
    assert stats.get("forward ok", 0) >= n // 20, stats
    assert stats.get("DarknetError", 0) >= n // 10, stats


def test_cfg_mutations(small_cfgs, scratch, tmp_path):
    n = count(400)
    summary = run_driver("cfg", small_cfgs, scratch, tmp_path, n, SEED)
    assert_exercised(summary, n, "built")


def test_weights_mutations_real_file(yolov3_tiny, scratch, tmp_path):
    # the real yolov3-tiny.weights (Darknet's writer) against its cfg at 64x64
    n = count(60)
    summary = run_driver("weights", [yolov3_tiny["cfg"]], scratch, tmp_path, n, SEED,
                         ["--weights", str(yolov3_tiny["weights"])])
    assert_exercised(summary, n, "loaded")


def test_weights_mutations_synthesized(small_cfgs, scratch, tmp_path):
    # yolov4-tiny (route groups, different layer mix) with weights from our writer; runs without ../shared
    base = [c for c in small_cfgs if c.name == "yolov4-tiny.cfg"] or small_cfgs[:1]
    n = count(50)
    summary = run_driver("weights", base, scratch, tmp_path, n, SEED + 1)
    assert_exercised(summary, n, "loaded")


def test_driver_reports_a_crash(tmp_path, small_cfgs):
    # The harness itself: a case that kills the process must be reported with its seed and input.
    crash = tmp_path / "crash.py"
    crash.write_text(
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import fuzz_driver\n"
        "fuzz_driver.run_cfg_case = lambda *a: os.kill(os.getpid(), signal.SIGSEGV)\n"
        "sys.exit(fuzz_driver.main())\n")
    global DRIVER
    saved, DRIVER = DRIVER, crash
    try:
        with pytest.raises(pytest.fail.Exception) as e:
            run_driver("cfg", small_cfgs[:1], tmp_path / "cases", tmp_path, 3, 99)
    finally:
        DRIVER = saved
    msg = str(e.value)
    assert "SIGSEGV" in msg and "seed 99" in msg and "case 0" in msg and "cfg-seed99-case0.cfg" in msg, msg


def test_detect_blob_rejects_degenerate_image_sizes(small_cfgs, tmp_path):
    # letterbox correction divides by the original size: 0 used to kill the process (SIGFPE)
    import numpy as np

    from darknet_py import DarknetError, Network
    from fuzz_driver import resize_cfg

    cfg = tmp_path / "small.cfg"
    cfg.write_text(resize_cfg(small_cfgs[0].read_text(), 64))
    net = Network(cfg)
    blob = np.zeros((1, net.channels, 64, 64), np.float32)
    for size in [(0, 0), (0, 5), (5, 0), (-3, 10), (10, -1)]:
        for letterbox in (False, True):
            with pytest.raises(DarknetError, match="image size must be positive"):
                net.detect_blob(blob, [size], thresh=0.01, letterbox=letterbox)
    for size in [(2 ** 31 - 1, 1), (1, 2 ** 31 - 1)]:  # no overflow, no crash
        assert isinstance(net.detect_blob(blob, [size], thresh=0.01, letterbox=True), list)
