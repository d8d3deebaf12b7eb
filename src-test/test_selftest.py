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


# ---- each vendor fast path judged in a child process of its own ----

SRC_TEST = os.path.dirname(os.path.abspath(__file__))


def test_an_abort_a_hang_or_a_crash_in_mps_fails_that_path_alone_and_the_report_is_complete(tmp_path):
    # MPS and MPSGraph reject shapes with C assertions (abort()): the fake Metal device plants that, a
    # hang and a crash in three paths; the selftest still ends with exit status 3 and a complete report
    env = dict(os.environ, DARKNET_PY_CACHE_DIR=str(tmp_path), PYTHONPATH=SRC_TEST + os.pathsep +
               os.environ.get("PYTHONPATH", ""),
               DARKNET_PY_FAKE_METAL_FAULTS="abort:conv2d,hang:gemm,crash:batchnorm_train")
    env.pop("DARKNET_PY_SELFTEST", None)
    out = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "darknet_py", "selftest", "--device", "metal", "--quick",
                        "--opener", "fake_metal_opener:open_fake_metal", "--path-timeout", "20", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 3, r.stdout + r.stderr
    report = json.loads(out.read_text())
    assert report["complete"] and not report["passed"]
    assert {o["op"] for o in report["ops"]} == every_op()  # our own kernels' cases, all there
    judged = report["judged_paths"]
    assert set(judged) == set(selftest.FAST_PATHS["metal"]) == set(report["fast_paths"])
    assert judged["mps_conv2d"]["failure"].startswith("killed by SIGABRT; stderr: ")
    assert "failed assertion `[MPSNDArray initWithDevice:descriptor:]" in judged["mps_conv2d"]["failure"]
    assert judged["mps_gemm"]["failure"] == "timed out after 20 s (killed)"
    assert judged["mps_batchnorm"]["failure"].startswith("killed by SIGSEGV")
    for name in ("mps_conv2d_backward", "mps_pool", "mps_pool_backward", "mps_batchnorm_backward"):  # judged
        assert judged[name]["ops"] and not judged[name]["failure"].startswith(("killed", "timed out")), name
    assert not any(report["fast_paths"].values())  # the fake computes no kernel of ours: nothing passes
    assert "fast path mps_conv2d: FAILED (disabled): killed by SIGABRT" in r.stdout
    assert os.environ.get("DARKNET_PY_FAKE_METAL_FAULTS") is None


def test_our_kernels_report_is_written_before_any_fast_path_is_tried(tmp_path, monkeypatch):
    monkeypatch.setattr(selftest, "FAST_PATHS", {"cpu": {"fake_gemm": ["gemm"], "fake_pool": ["pool"]}})
    written = []

    def judge(device, name, ops, *rest):
        assert len(written) == 1 + ["fake_gemm", "fake_pool"].index(name)
        first = written[0]
        assert first["fast_paths"] == {"fake_gemm": False, "fake_pool": False} and not first["complete"]
        assert first["judged_paths"]["fake_gemm"]["failure"] == "not judged yet" and first["ops"]
        return {"passed": name == "fake_pool", "ops": [], "failure": "" if name == "fake_pool" else "killed by SIGABRT"}

    monkeypatch.setattr(selftest, "judge_path", judge)
    report = selftest.run_selftest("cpu", quick=True, progress=False,
                                   on_report=lambda r: written.append(json.loads(json.dumps(r))))
    # then the training run with the paths that passed, in a child too (its report written before, them off)
    assert len(written) == 5 and written[-1] == json.loads(json.dumps(report))
    assert written[3]["fast_paths"] == {"fake_gemm": False, "fake_pool": False} and not written[3]["complete"]
    assert report["complete"] and report["fast_paths"] == {"fake_gemm": False, "fake_pool": True}
    assert report["training_with_fast_paths"]["passed"] and report["training_with_fast_paths"]["fast_paths"] == \
        ["fake_pool"]
    assert not report["passed"]  # a path that failed fails the selftest (exit status 3)


def test_a_training_run_that_dies_with_the_passed_paths_turns_them_all_off(monkeypatch):
    monkeypatch.setattr(selftest, "FAST_PATHS", {"cpu": {"fake_gemm": ["gemm"], "fake_pool": ["pool"]}})
    monkeypatch.setattr(selftest, "judge_path", lambda *a: {"passed": True, "ops": [], "failure": ""})
    monkeypatch.setattr(selftest, "judge_training", lambda device, paths, *a: {
        "passed": False, "failure": "killed by SIGABRT; stderr: failed assertion", "iterations": 2})
    report = selftest.run_selftest("cpu", quick=True, progress=False)
    assert report["fast_paths"] == {"fake_gemm": False, "fake_pool": False} and not report["passed"]
    assert "training with fake_gemm, fake_pool: FAIL (killed by SIGABRT; stderr: failed assertion): those paths " \
           "are disabled" in selftest.format_table(report)


def test_the_selftest_leaves_the_environment_as_it_found_it(monkeypatch):
    monkeypatch.setattr(selftest, "FAST_PATHS", {"cpu": {"fake_gemm": ["gemm"]}})
    monkeypatch.delenv("DARKNET_PY_SELFTEST", raising=False)
    monkeypatch.setenv("DARKNET_PY_MPS", "mps_gemm")
    before = dict(os.environ)
    selftest.run_selftest("cpu", quick=True, progress=False)
    assert dict(os.environ) == before


def test_a_device_object_made_outside_judging_mode_is_refused(monkeypatch):
    monkeypatch.delenv("DARKNET_PY_SELFTEST", raising=False)
    dev = _core.fake_metal_device()
    monkeypatch.setenv("DARKNET_PY_SELFTEST", "1")
    with pytest.raises(selftest.SelftestError, match=r"made outside judging mode \(DARKNET_PY_SELFTEST unset\), but "
                       r"the selftest is judging DARKNET_PY_SELFTEST=1"):
        selftest.run_ops(dev.device, quick=True, progress=False)
    judging = _core.fake_metal_device()
    monkeypatch.setenv("DARKNET_PY_SELFTEST", "mps_pool")
    with pytest.raises(selftest.SelftestError, match="made DARKNET_PY_SELFTEST=1, but"):
        selftest.run_ops(judging.device, quick=True, progress=False)


# ---- each fast path also judged at the largest shapes of the shipped cfgs ----

def test_the_largest_shapes_of_the_shipped_cfgs_at_batch_1_and_their_training_batch():
    from darknet_py.diagnostics import cfg_cases

    big = cfg_cases.largest_shapes()
    assert set(big) == {f"{k}-{b}" for k in ("conv", "conv_weights", "pool", "pool_window", "batchnorm")
                        for b in ("batch1", "train")}
    # yolov4 at 608x608: its stride-2 convolution of 32 channels, its 512 -> 1024 3x3 weights (batch 64 / 8)
    assert big["conv-batch1"]["cfg"] == "yolov4.cfg" and big["conv-batch1"]["layer"]["x"] == (32, 608, 608)
    assert big["conv_weights-train"]["cfg"] == "yolov4.cfg" and big["conv_weights-train"]["n"] == 8
    assert big["conv_weights-train"]["layer"]["y"] == (1024, 19, 19)
    assert big["batchnorm-batch1"]["layer"]["y"] == (32, 608, 608)
    assert big["pool_window-batch1"]["layer"]["k"] == 13  # yolov4's SPP
    assert all(v["n"] > 1 for k, v in big.items() if k.endswith("-train") and v["cfg"] != "yolov3-tiny.cfg")


def test_cfg_cases_are_built_from_a_cfgs_own_shapes(tmp_path):
    from darknet_py.diagnostics import cfg_cases

    (tmp_path / "tiny.cfg").write_text("[net]\nbatch=4\nsubdivisions=2\nwidth=8\nheight=8\nchannels=3\n"
                                       "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
                                       "activation=leaky\n[maxpool]\nsize=2\nstride=2\n"
                                       "[route]\nlayers=-1,-2\n[upsample]\nstride=2\n")
    net, layers = cfg_cases.layer_shapes((tmp_path / "tiny.cfg").read_text())
    assert [l["y"] for l in layers] == [(4, 8, 8), (4, 4, 4), (8, 4, 4), (8, 8, 8)]  # route: channels summed
    assert cfg_cases.training_batch(net) == 2
    cases = cfg_cases.cfg_cases(str(tmp_path))
    ops = {c.op for c in cases}
    assert ops == {"conv2d", "conv2d_backward_data", "conv2d_backward_weights", "gemm", "pool", "pool_backward",
                   "batchnorm_train", "batchnorm_backward"}
    assert any(c.op == "conv2d" and c.args[0].shape == (2, 3, 8, 8) for c in cases)  # the training batch
    assert {c.op for c in cfg_cases.cfg_cases(str(tmp_path), ops={"pool"})} == {"pool"}
    ref, dev = _core.Ops("reference"), _core.Ops("cpu")
    from darknet_py.diagnostics.op_cases import check_case
    assert all(check_case(ref, dev, c).ok for c in cases)


def test_a_fast_path_is_judged_at_the_cfgs_shapes_too_but_not_in_quick_mode(monkeypatch):
    from darknet_py.diagnostics import cfg_cases, op_cases

    marker = [c for c in op_cases.CASES if c.op == "pool"][:1]
    asked = []
    monkeypatch.setattr(cfg_cases, "cfg_cases", lambda ops: asked.append(ops) or marker)
    pairs = selftest.select_cases(False, cfg_ops=["pool"])
    assert asked == [{"pool"}] and pairs[-1] == (marker[0], "forward")
    selftest.select_cases(True, cfg_ops=["pool"])
    selftest.select_cases(False)
    assert len(asked) == 1
