"""`darknet_py selftest`: the parity harness on a device (quick mode here), its exit status, its JSON
report and the fast-path contract between that report (written by Python) and the devices (C++)."""
import json
import os
import subprocess
import sys

import pytest

import gpu_devices
from darknet_py import _core
from darknet_py.diagnostics import selftest


def run_cli(tmp_path, *args):
    env = dict(os.environ, DARKNET_PY_CACHE_DIR=str(tmp_path))
    return subprocess.run([sys.executable, "-m", "darknet_py", "selftest", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def every_op():
    return {m for m in dir(_core.Ops) if not m.startswith("_")} - {"limit_group_size", "fallback_counts", "storage", "layout"}


@pytest.mark.parametrize("label", ["cpu", "pocl"])
def test_quick_selftest_passes_and_writes_the_report(tmp_path, label):
    device = "cpu" if label == "cpu" else gpu_devices.device("pocl")
    r = run_cli(tmp_path, "--device", device, "--quick")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Warning" not in r.stderr, r.stderr  # NumPy's RuntimeWarnings of the comparisons, say
    path = tmp_path / f"selftest-{device.replace(':', '-')}.json"
    assert f"report: {path}" in r.stdout
    assert "all passed" in r.stdout and "training: 2 iterations" in r.stdout
    report = json.loads(path.read_text())
    assert report["device"] == device and report["passed"] and report["quick"]
    assert report["fast_paths"] == {}  # no vendor fast paths on the CPU or OpenCL
    assert {o["op"] for o in report["ops"]} == every_op()  # every op, also in quick mode
    assert {o["direction"] for o in report["ops"]} == {"forward", "backward", "training"}
    assert all(o["passed"] and o["cases"] >= 1 and o["worst_ratio"] <= 1 for o in report["ops"])
    t = report["training"]
    assert t["passed"] and t["compared_with"] == ("reference" if device == "cpu" else "cpu")
    assert len(t["losses"]) == 2 and t["losses"][0] > 0


def test_comparing_non_finite_values_warns_of_nothing():
    import warnings

    import numpy as np

    from darknet_py.diagnostics.op_cases import compare

    want = np.array([1.0, np.inf, -np.inf, np.nan, 2.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning fails the test
        assert compare(want.copy(), want, 1e-6, 1e-6).ok
        got = want.copy()
        got[4] = 3.0
        c = compare(got, want, 1e-6, 1e-6)
        assert not c.ok and c.max_error == 1.0 and "1 of 5 elements differ" in c.message


def test_a_mismatch_fails_with_exit_status_3(tmp_path):
    out = tmp_path / "report.json"
    r = run_cli(tmp_path, "--device", "cpu", "--quick", "--perturb", "gemm", "--json", str(out))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "FAIL gemm (forward)" in r.stdout and "MISMATCHES" in r.stdout
    report = json.loads(out.read_text())
    failed = [(o["op"], o["direction"]) for o in report["ops"] if not o["passed"]]
    assert failed == [("gemm", "forward")] and not report["passed"]
    assert not (tmp_path / "selftest-cpu.json").exists()  # --json chose the file


def test_fast_paths_reach_the_engine(tmp_path, monkeypatch):
    # a pretend vendor library on the CPU: a GEMM path (gemm broken by --perturb) and a conv path
    monkeypatch.setenv("DARKNET_PY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(selftest, "FAST_PATHS", {"cpu": {"fake_gemm": ["gemm"], "fake_conv": ["conv2d",
                                                                                             "conv2d_backward_data"]}})
    report = selftest.run_selftest("cpu", quick=True, perturb="gemm", progress=False)
    assert report["fast_paths"] == {"fake_gemm": False, "fake_conv": True}
    selftest.write_report(report, _core.selftest_results_path("cpu"))
    assert _core.selftest_fast_paths("cpu") == ({"fake_gemm": False, "fake_conv": True}, "")


def test_results_path_and_unreadable_files(tmp_path, monkeypatch):
    monkeypatch.delenv("DARKNET_PY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _core.selftest_results_path("opencl:1") == str(tmp_path / "xdg" / "darknet_py" / "selftest-opencl-1.json")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home_cache = "Library/Caches" if sys.platform == "darwin" else ".cache"
    assert _core.selftest_results_path("metal") == str(tmp_path / "home" / home_cache / "darknet_py" /
                                                       "selftest-metal.json")
    monkeypatch.setenv("DARKNET_PY_CACHE_DIR", str(tmp_path))
    paths, why = _core.selftest_fast_paths("metal")
    assert paths == {} and "run `darknet_py selftest --device metal`" in why
    bad = tmp_path / "selftest-metal.json"
    for text in ['{"fast_paths": {"mps_gemm": 1}}', '{"fast_paths": {"mps_gemm": true', '{"ops": []}', "",
                 '{"fast_paths": {"mps gemm\\"": true}}']:
        bad.write_text(text)
        paths, why = _core.selftest_fast_paths("metal")
        assert paths == {} and 'no readable "fast_paths"' in why, text
    bad.write_text('{"passed": true, "fast_paths": {}}')
    assert _core.selftest_fast_paths("metal") == ({}, "")


def test_metal_fast_path_verdicts_follow_the_ops_each_path_serves():
    # a failed convolution case cannot tell MPSGraph's convolution from the MPS GEMM it may fall back to:
    # both are judged failed; every other path keeps its own op's verdict
    ops = [selftest.OpResult(op, "forward", cases=1) for op in
           ("gemm", "conv2d", "conv2d_backward_data", "conv2d_backward_weights", "pool", "pool_backward",
            "batchnorm_train", "batchnorm_backward", "batchnorm_activate_train", "batchnorm_activate_backward")]
    assert all(selftest.fast_path_results("metal", ops).values())
    ops[1].failed = ops[5].failed = 1  # conv2d, pool_backward
    failed = {k for k, v in selftest.fast_path_results("metal", ops).items() if not v}
    assert failed == {"mps_gemm", "mps_conv2d", "mps_pool_backward"}
