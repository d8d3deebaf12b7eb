"""The Metal device's C++ (src-metal: MetalDevice, metal_plan, metal_fast_paths) on Linux, over
FakeMetalApi: a fake of the Objective-C++ file that records each call and runs an MPS GEMM on the host
exactly as its descriptor says, so wrong row bytes, offsets or transposes give wrong numbers. Nothing
here runs Metal; what these tests prove is the decisions the .mm receives."""
import json

import numpy as np
import pytest

from darknet_py import _core

rng = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def selftest_cache(tmp_path, monkeypatch):
    """An empty results folder and none of the switches, whatever the developer's own environment holds."""
    monkeypatch.setenv("DARKNET_PY_CACHE_DIR", str(tmp_path))
    for name in ("DARKNET_PY_SELFTEST", "DARKNET_PY_MPS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def identity(gpu="FakeMetal"):
    """What a report records of the machine that ran it (a device trusts only a report of its own)."""
    return {"system": _core.system_version(), "device_name": gpu, "darknet_py": _core.engine_version()}


def write_selftest(text, **differs):
    """The selftest results file of "metal" where the shared reader (src-lib/selftest_results) looks,
    this machine's identity first (with the keys of `differs` changed)."""
    head = json.dumps(dict(identity(), **differs))[1:-1]
    with open(_core.selftest_results_path("metal"), "w") as f:
        f.write(text.replace("{", "{" + head + ", ", 1) if text.startswith("{") else text)


def fake(**kw):
    return _core.fake_metal_device(**kw)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def dispatches(dev, kernel=None):
    return [l for l in dev.log() if l.startswith("dispatch ") and (kernel is None or l.split()[1] == kernel)]


ALL_ON = '{"fast_paths": {"mps_gemm": true, "mps_conv2d": true, "mps_conv2d_backward": true, "mps_pool": true,' \
         ' "mps_pool_backward": true, "mps_batchnorm": true, "mps_batchnorm_backward": true}, "seconds": 3.5}'


# ---- group sizes, arguments, compiling ----

def test_group_size_is_clamped_to_the_pipeline_limit_in_whole_simd_groups():
    assert _core.metal_group_limit(448, 32) == 448
    assert _core.metal_group_limit(200, 32) == 192
    assert _core.metal_group_limit(20, 32) == 20
    dev = fake(limits={"fill_f32": (200, 32)})
    assert dev.max_group_size("fill_f32") == 192
    ops = _core.Ops(dev.device)
    dev.clear_log()
    ops.fill([1, 1, 1, 1000], 1.0)
    assert dispatches(dev, "fill_f32")[0].startswith("dispatch fill_f32 groups=6 group=192 ")  # ceil(1000/192)


def test_a_launch_above_the_pipeline_limit_is_refused():
    dev = fake(limits={"gemm_f32": (448, 32)})
    dev.launch("gemm_f32", 1, 448, 3, 16)
    with pytest.raises(_core.DarknetError, match="at most 448"):
        dev.launch("gemm_f32", 1, 512, 3, 16)


def test_arguments_bind_in_order_with_the_struct_last_by_bytes():
    dev = fake()
    dev.launch("k", 2, 64, 3, 24)
    line = dispatches(dev, "k")[0]
    assert line.split()[4:] == ["0:buf1+0", "1:buf2+0", "2:buf3+0", "3:bytes24"], line
    with pytest.raises(_core.DarknetError, match="4096-byte setBytes"):
        dev.launch("k", 1, 64, 1, 5000)


def test_a_failed_compile_reports_metals_message():
    msg = "program_source:12:5: error: use of undeclared identifier 'KGID'"
    with pytest.raises(_core.DarknetError, match="did not compile as MSL: " + msg):
        fake(compile_error=msg)


def test_uploads_go_in_place_when_idle_and_through_a_staged_blit_when_busy():
    idle = fake()
    _core.Ops(idle.device).add_bias(rand(1, 2, 2, 2), rand(2))
    assert not any(l.startswith("upload_staged") for l in idle.log())
    busy = fake(busy=True)
    _core.Ops(busy.device).add_bias(rand(1, 2, 2, 2), rand(2))
    assert sum(l.startswith("upload_staged") for l in busy.log()) == 2


def test_command_buffers_are_committed_every_few_commands_and_waited_on_for_downloads():
    dev = fake()
    ops = _core.Ops(dev.device)
    dev.clear_log()
    ops.fill([1, 1, 1, 10], 2.0)  # fill, download
    log = dev.log()
    assert log.index("wait") > log.index(dispatches(dev, "fill_f32")[0])
    dev.clear_log()
    ops.conv2d(rand(4, 4, 5, 5), rand(6, 2, 3, 3), 1, 1, 1, 1, 2, 5, 5)  # im2col + GEMM per image and group
    log = dev.log()
    assert len(dispatches(dev)) >= 16
    assert "commit" in log and log.index("commit") < log.index("wait")


# ---- which MPS paths are used ----

def test_no_selftest_file_means_no_mps_path_and_one_line_saying_so():
    on, note = _core.metal_mps_paths(None)
    assert not any(on.values())
    assert "darknet_py selftest --device metal" in note and _core.selftest_results_path("metal") in note
    dev = fake()
    assert any("selftest --device metal" in n for n in dev.notes())


def test_the_selftest_file_enables_exactly_what_passed():
    write_selftest('{"version": [1, {"x": "}"}], "fast_paths": {"mps_gemm": false, "mps_conv2d": true}}')
    on, note = _core.metal_mps_paths(None)
    assert on["mps_conv2d"] and not on["mps_gemm"] and not on["mps_pool"]
    assert "mps_gemm (failed)" in note and "mps_pool (not checked)" in note
    write_selftest('{"fast_paths": {"mps_gemm": tru')
    on, note = _core.metal_mps_paths(None)
    assert not any(on.values()) and 'no readable "fast_paths"' in note


@pytest.mark.parametrize("key, other", [("system", "macOS 14.4 (23E214)"), ("device_name", "Apple M2"),
                                        ("darknet_py", "0.0.9")])
def test_a_report_of_another_system_gpu_or_version_is_not_trusted(key, other):
    write_selftest(ALL_ON, **{key: other})
    on, note = _core.metal_mps_paths(None)
    assert not any(on.values())
    what = {"system": "system", "device_name": "GPU", "darknet_py": "darknet_py"}[key]
    assert f"are for another {what} {other} (this one: {identity()[key]})" in note
    assert "run `darknet_py selftest --device metal` again" in note and "\n" not in note
    dev = fake()
    assert sum("MPS fast paths off" in n for n in dev.notes()) == 1  # one line on stderr
    write_selftest(ALL_ON)
    assert all(_core.metal_mps_paths(None)[0].values())
    assert not any(_core.metal_mps_paths(None, gpu="Apple M2")[0].values())


def test_darknet_py_mps_overrides_and_rejects_unknown_names():
    assert all(_core.metal_mps_paths("all")[0].values())
    write_selftest(ALL_ON)
    assert not any(_core.metal_mps_paths("off")[0].values())
    on, _ = _core.metal_mps_paths("mps_pool,mps_gemm")
    assert [k for k, v in on.items() if v] == ["mps_gemm", "mps_pool"]
    with pytest.raises(_core.DarknetError, match="unknown fast path 'mps_conv'"):
        _core.metal_mps_paths("mps_conv")


def test_while_the_selftest_runs_every_path_is_on_whatever_else_says_otherwise(monkeypatch):
    write_selftest('{"fast_paths": {"mps_gemm": false}}')
    monkeypatch.setenv("DARKNET_PY_SELFTEST", "1")
    for env in (None, "off", "mps_pool"):
        on, note = _core.metal_mps_paths(env)
        assert all(on.values()) and note == "", env


def test_the_selftest_registers_every_mps_path_of_the_device():
    # the names the selftest writes for metal are the names the device reads, and each is judged by ops
    # that exist in the parity cases
    from darknet_py.diagnostics import selftest
    from darknet_py.diagnostics.op_cases import CASES, TRAIN_CASES

    names = set(_core.metal_mps_paths("all")[0])
    assert set(selftest.FAST_PATHS["metal"]) == names
    case_ops = {c.op for c in CASES + TRAIN_CASES}
    assert all(ops and set(ops) <= case_ops for ops in selftest.FAST_PATHS["metal"].values())


def test_a_path_that_failed_the_selftest_is_not_used():
    # written and read as the real thing: selftest.write_report, then the device through the shared reader
    from darknet_py.diagnostics import selftest

    selftest.write_report(dict(identity(), device="metal", fast_paths={"mps_gemm": False, "mps_conv2d": True}),
                          _core.selftest_results_path("metal"))
    dev = fake()
    ops = _core.Ops(dev.device)
    dev.clear_log()
    ops.gemm(False, False, 1.0, rand(4, 5), rand(5, 6), 0.0, np.zeros((4, 6), np.float32))
    assert dispatches(dev, "gemm_f32") and not any(l.startswith("mps_gemm") for l in dev.log())
    dev.clear_log()
    ops.conv2d(rand(1, 2, 5, 5), rand(3, 2, 3, 3), 1, 1, 1, 1, 1, 5, 5)
    assert any(l.startswith("graph conv2d ") for l in dev.log()) and not dispatches(dev, "im2col_f32")


# ---- MPS failures at run time (fail_next plants them as metal_objc.mm reports them) ----
# A 1x1 convolution with two groups runs on MPSGraph, or else as GEMMs on MPS, which the fake computes
# on the host (MPSGraph and our kernels it only records): a right result is one that fell back.

def conv1x1(ops):
    return ops.conv2d(CONV_X, CONV_W, 1, 1, 0, 1, 2, 4, 4)


CONV_X, CONV_W = rand(2, 4, 4, 4), rand(6, 2, 1, 1)
CONV_WANT = conv1x1(_core.Ops("reference"))
GAVE_UP = "metal: MPS convolution failed (%s): our kernels run it from now on"


def test_an_mps_call_that_raises_is_an_error_for_the_op_which_falls_back_once_and_for_all():
    dev = fake(mps_env="all")
    ops = _core.Ops(dev.device)
    dev.fail_next("conv2d", "raise")
    for _ in range(2):
        np.testing.assert_allclose(conv1x1(ops), CONV_WANT, rtol=1e-5, atol=1e-5)
    assert sum(l.startswith("graph conv2d ") for l in dev.log()) == 1  # not tried again
    assert [n for n in dev.notes() if "failed" in n] == [
        GAVE_UP % "MPS conv2d raised NSInvalidArgumentException: planted by the test"]
    assert dev.mps_failures() == {"mps_conv2d": 1}
    assert ops.fallback_counts() == {"mps_conv2d failed": 1}  # what `info --coverage` reports per layer


def test_a_paths_first_call_is_waited_on_alone_so_a_failed_command_buffer_falls_back_at_once():
    dev = fake(mps_env="all")
    ops = _core.Ops(dev.device)
    dev.clear_log()
    dev.fail_next("conv2d", "command_buffer")
    np.testing.assert_allclose(conv1x1(ops), CONV_WANT, rtol=1e-5, atol=1e-5)
    log = dev.log()
    graph = log.index(next(l for l in log if l.startswith("graph conv2d ")))
    assert log[graph - 1] == "wait" and log[graph + 1] == "wait"  # nothing else in its command buffer
    assert [n for n in dev.notes() if "failed" in n] == [GAVE_UP % (
        "its command buffer failed: Execution of the command buffer was aborted due to an error during "
        "execution (planted by the test)")]
    assert dev.mps_failures() == {"mps_conv2d": 1}


def test_a_command_buffer_that_fails_later_fails_the_wait_naming_the_work_lost_then_our_kernels_run_it():
    dev = fake(mps_env="all")
    ops = _core.Ops(dev.device)
    conv1x1(ops)  # proves the MPSGraph path (whose result the fake does not compute)
    dev.fail_next("conv2d", "command_buffer")
    with pytest.raises(_core.DarknetError, match=r"metal \(FakeMetal\): a command buffer failed: Execution of the "
                       r"command buffer was aborted .*; it held MPS work whose results are lost \(convolution x1\): "
                       r"those paths are switched off"):
        conv1x1(ops)
    assert dev.mps_failures() == {"mps_conv2d": 1}
    np.testing.assert_allclose(conv1x1(ops), CONV_WANT, rtol=1e-5, atol=1e-5)  # run again: it falls back


def test_a_gemm_that_accumulates_into_c_is_not_proven_alone_and_a_failure_fails_the_wait():
    # C is an input too (beta != 0): once its command buffer failed it is not intact, so no fallback can
    # run in its place
    dev = fake(mps_env="mps_gemm")
    dev.fail_next("gemm", "command_buffer")
    A, B, C = rand(2, 3), rand(3, 2), rand(2, 2)
    with pytest.raises(_core.DarknetError, match=r"results are lost \(GEMM x1\)"):
        dev.gemm(False, False, 2, 2, 3, 1.0, A, 0, 3, B, 0, 2, 1.0, C, 0, 2)
    assert [l.split()[0] for l in dev.log()] == ["compile", "mps_gemm", "wait"]  # the download's wait only
    assert dev.mps_failures() == {"mps_gemm": 1}
    used, _ = dev.gemm(False, False, 2, 2, 3, 1.0, A, 0, 3, B, 0, 2, 1.0, C, 0, 2)
    assert not used


def test_while_the_selftest_judges_the_paths_a_failure_fails_the_op_in_its_report(monkeypatch):
    # a fallback there would be judged in the path's place: the failure goes into the report, per op
    from darknet_py.diagnostics import selftest
    from darknet_py.diagnostics.op_cases import CASES

    monkeypatch.setenv("DARKNET_PY_SELFTEST", "1")
    cases = [c for c in CASES if c.op == "conv2d"][:1] + [c for c in CASES if c.op == "pool"][:1]
    monkeypatch.setattr(selftest, "select_cases", lambda quick, *rest, **kw: [(c, "forward") for c in cases])
    dev = fake()
    dev.fail_next("conv2d", "raise")
    dev.fail_next("pool", "command_buffer")
    report = {r.op: r for r in selftest.run_ops(dev.device, quick=True, progress=False)}
    assert report["conv2d"].failure == "%s: raised %s" % (cases[0].id, GAVE_UP % (
        "MPS conv2d raised NSInvalidArgumentException: planted by the test"))
    assert report["pool"].failure.startswith("%s: raised metal: MPS pooling failed (its command buffer failed: "
                                             % cases[1].id)
    assert dev.mps_failures() == {"mps_conv2d": 1, "mps_pool": 1}
    verdicts = selftest.fast_path_results("metal", list(report.values()))
    assert not verdicts["mps_conv2d"] and not verdicts["mps_pool"]


def test_a_training_run_that_raised_fails_in_the_selftest_report_instead_of_ending_it(monkeypatch):
    from darknet_py.diagnostics import selftest

    class FailingNet:  # the device's network, whose command buffer failed on the GPU
        def __init__(self, path, device):
            if device != "cpu":
                raise _core.DarknetError("metal (M1): a command buffer failed: GPU timeout")
            self.net = real(path, device)

        def __getattr__(self, name):
            return getattr(self.net, name)

    real = _core.Net
    monkeypatch.setattr(_core, "Net", FailingNet)
    t = selftest.run_training("metal", iterations=1)
    assert not t["passed"] and t["failure"] == "raised metal (M1): a command buffer failed: GPU timeout"
    report = {"ops": [], "training": t, "fast_paths": {}, "device": "metal", "device_name": "M1", "passed": False}
    assert "FAIL training: raised metal (M1): a command buffer failed: GPU timeout" in selftest.format_table(report)


# ---- MPS GEMM descriptors ----

@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_with_offsets_and_transposes_maps_to_the_right_mps_descriptor(ta, tb):
    M, N, K, lda, ldb, ldc, ao, bo, co = 3, 4, 5, 9, 7, 6, 5, 2, 3
    a_rows, b_rows = (K if ta else M), (N if tb else K)
    A, B, C = rand(ao + a_rows * lda), rand(bo + b_rows * ldb), rand(co + M * ldc)
    dev = fake(mps_env="mps_gemm")
    used, out = dev.gemm(ta, tb, M, N, K, 0.5, A, ao, lda, B, bo, ldb, 2.0, C, co, ldc)
    assert used
    a = A[ao:ao + a_rows * lda].reshape(a_rows, lda)[:, :(M if ta else K)]
    b = B[bo:bo + b_rows * ldb].reshape(b_rows, ldb)[:, :(K if tb else N)]
    want = C.copy()
    c = want[co:co + M * ldc].reshape(M, ldc)
    c[:, :N] = 0.5 * (a.T if ta else a) @ (b.T if tb else b) + 2.0 * c[:, :N]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    line = [l for l in dev.log() if l.startswith("mps_gemm")][0]
    assert "transposeLeft=%d transposeRight=%d resultRows=3 resultColumns=4 interiorColumns=5" % (ta, tb) in line
    assert "left=buf1+20 %s rowBytes=36" % ("5x3" if ta else "3x5") in line
    assert "right=buf2+8 %s rowBytes=28" % ("4x5" if tb else "5x4") in line
    assert "result=buf3+12 3x4 rowBytes=24" in line


def test_gemm_declines_a_matrix_whose_last_row_bytes_pass_the_buffer_end():
    dev = fake(mps_env="mps_gemm")
    A, B = rand(2 * 8), rand(3 * 2)  # A: 2 x 3 with lda 8, and only 3 floats after the last row's start
    used, _ = dev.gemm(False, False, 2, 2, 3, 1.0, A[:11], 0, 8, B, 0, 2, 0.0, np.zeros(4, np.float32), 0, 2)
    assert not used
    assert any("rowBytes 32 needs 64 bytes, its buffer has 44" in n for n in dev.notes())


def test_1x1_convolutions_forward_and_backward_run_on_mps_gemm_per_image():
    # the direct 1x1 path: one GEMM per image and group at their offsets, plain, A^T, B^T (beta = 1).
    # Two groups, because GpuBackend runs the images of an ungrouped convolution as one GEMM between
    # swap_axes kernels, which the fake does not execute.
    dev = fake(mps_env="mps_gemm")
    ops = _core.Ops(dev.device)
    x, w, dy = rand(2, 4, 4, 4), rand(6, 2, 1, 1), rand(2, 6, 4, 4)
    W = w.reshape(2, 3, 2)  # [group][cout_g][cin_g]

    y = ops.conv2d(x, w, 1, 1, 0, 1, 2, 4, 4)
    want = np.concatenate([np.einsum("oc,nchw->nohw", W[g], x[:, 2 * g:2 * g + 2]) for g in range(2)], axis=1)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    dx0 = rand(2, 4, 4, 4)
    dx = ops.conv2d_backward_data(dy, w, dx0, 1, 1, 0, 1, 2)
    want = np.concatenate([np.einsum("oc,nohw->nchw", W[g], dy[:, 3 * g:3 * g + 3]) for g in range(2)], axis=1)
    np.testing.assert_allclose(dx, dx0 + want, rtol=1e-5, atol=1e-5)
    dw0 = rand(6, 2, 1, 1)
    dw = ops.conv2d_backward_weights(x, dy, dw0, 1, 1, 0, 1, 2)
    want = np.concatenate([np.einsum("nohw,nchw->oc", dy[:, 3 * g:3 * g + 3], x[:, 2 * g:2 * g + 2])
                           for g in range(2)], axis=0)
    np.testing.assert_allclose(dw, dw0 + want[:, :, None, None], rtol=1e-4, atol=1e-4)
    assert sum(l.startswith("mps_gemm") for l in dev.log()) == 12 and not dispatches(dev, "gemm_f32")


# ---- MPSGraph descriptors ----

def test_convolution_descriptor_and_accumulating_backward():
    dev = fake(mps_env="all")
    ops = _core.Ops(dev.device)
    dev.clear_log()
    ops.conv2d(rand(2, 4, 9, 9), rand(6, 2, 3, 3), 2, 2, 1, 1, 2, 5, 5)
    line = [l for l in dev.log() if l.startswith("graph conv2d ")][0]
    assert "x=2x4x9x9 w=6x2x3x3 y=2x6x5x5 stride=2,2 dilation=1,1 groups=2 pad=1,1,1,1" in line
    dev.clear_log()
    ops.conv2d_backward_data(rand(2, 6, 5, 5), rand(6, 2, 3, 3), rand(2, 4, 9, 9), 2, 2, 1, 1, 2)
    log = dev.log()
    graph = [l for l in log if l.startswith("graph conv2d_backward_data")][0]
    dy_buf, w_buf, dx_buf, out_buf = graph.split()[-4:]
    assert out_buf not in (dy_buf, w_buf, dx_buf)  # the sum goes to scratch, never onto an input
    assert "copy %s+0 -> %s+0 %d bytes" % (out_buf, dx_buf, 2 * 4 * 9 * 9 * 4) in log


def test_pool_descriptor_puts_darknets_padding_left_then_right():
    dev = fake(mps_env="all")
    ops = _core.Ops(dev.device)
    dev.clear_log()
    ops.pool("max", rand(1, 3, 13, 13), 2, 1, 1, 1, [1, 3, 13, 13])  # yolov3-tiny's stride-1 maxpool
    line = [l for l in dev.log() if l.startswith("graph pool ")][0]
    assert "max x=1x3x13x13 y=1x3x13x13 kernel=2x2 stride=1,1 pad=0,1,0,1 zero_pad=0" in line
    dev.clear_log()
    ops.pool("local_avg", rand(1, 3, 8, 8), 3, 2, 2, 3, [1, 3, 5, 5])
    assert "avg x=1x3x8x8 y=1x3x5x5 kernel=3x3 stride=2,2 pad=1,2,1,2 zero_pad=0" in \
        [l for l in dev.log() if l.startswith("graph pool ")][0]


def test_pool_with_windows_wholly_in_the_padding_stays_on_our_kernels():
    dev = fake(mps_env="all")
    _core.Ops(dev.device).pool("max", rand(1, 1, 4, 4), 2, 2, 2, 4, [1, 1, 4, 4])
    assert dispatches(dev, "maxpool_f32") and not any(l.startswith("graph pool") for l in dev.log())
    assert any("lie wholly outside" in n for n in dev.notes())


def test_batchnorm_plans_use_the_unbiased_variance():
    dev = fake(mps_env="all")
    _core.Ops(dev.device).batchnorm_train(rand(2, 3, 2, 2), rand(3), rand(3), 1e-5)
    line = [l for l in dev.log() if l.startswith("graph batchnorm_train")][0]
    assert "shape=2x3x2x2 count=8.000000 unbiased=1.142857" in line
    dev.clear_log()
    _core.Ops(dev.device).batchnorm_train(rand(1, 3, 1, 1), rand(3), rand(3), 1e-5)  # one value per channel
    assert dispatches(dev, "batchnorm_partial_stats_f32")


def test_a_judging_list_turns_on_only_the_paths_it_names(monkeypatch):
    # how the selftest judges each path in a child process of its own
    monkeypatch.setenv("DARKNET_PY_SELFTEST", "mps_conv2d,mps_pool")
    on, note = _core.metal_mps_paths("all")
    assert {k for k, v in on.items() if v} == {"mps_conv2d", "mps_pool"} and note == ""
    assert fake().device.judged_fast_paths == "mps_conv2d,mps_pool"
    monkeypatch.setenv("DARKNET_PY_SELFTEST", "mps_conv")
    with pytest.raises(_core.DarknetError, match="DARKNET_PY_SELFTEST: unknown fast path 'mps_conv'"):
        _core.metal_mps_paths(None)
    monkeypatch.delenv("DARKNET_PY_SELFTEST")
    assert fake().device.judged_fast_paths == ""


# ---- MPSNDArray's limits: shapes past them abort() inside MPS, so our kernels run them ----

def test_tensors_past_mpsndarrays_element_and_byte_limits_are_declined():
    assert _core.metal_plan_conv([1, 256, 2048, 1024], [1, 256, 2048, 1024], 1) == (True, "")  # 2^29 floats
    ok, why = _core.metal_plan_conv([1, 512, 2048, 1024], [1, 8, 2048, 1024], 1)  # x: 2^30 floats, 2^32 bytes
    assert not ok and why == "tensor x has 4294967296 bytes, 2^32 or more (MPSNDArray's limit)"
    ok, why = _core.metal_plan_conv([1, 8, 2048, 1024], [1, 1024, 2048, 1024], 3, pad=1)  # y: 2^31 elements
    assert not ok and "tensor y has 2^31 elements or more" in why
    ok, why = _core.metal_plan_conv([1, 65536, 8, 8], [1, 65536, 8, 8], 3, pad=1)  # w: 2^32 elements
    assert not ok and "tensor w has 2^31 elements or more" in why
    assert not _core.metal_plan_pool([4, 256, 1024, 1024], [4, 256, 512, 512], 2, 2, 0)[0]  # x: 2^32 bytes
    assert _core.metal_plan_pool([2, 256, 1024, 1024], [2, 256, 512, 512], 2, 2, 0) == (True, "")
    assert "2^32 or more" in _core.metal_plan_norm([64, 64, 512, 512])[1]
    assert _core.metal_plan_norm([32, 64, 512, 512]) == (True, "")
    ok, why = _core.metal_plan_gemm(65536, 8, 16384, 16384, 8, 8)  # A: 2^30 floats
    assert not ok and why == "matrix A spans 4294967296 bytes, 2^32 or more (MPS's limit)"
    assert _core.metal_plan_gemm(32768, 8, 16384, 16384, 8, 8) == (True, "")


def test_a_case_an_mps_path_declines_is_counted_among_the_fallbacks():
    dev = fake(mps_env="all")
    ops = _core.Ops(dev.device)
    for _ in range(2):
        ops.pool("max", rand(1, 1, 4, 4), 2, 2, 2, 4, [1, 1, 4, 4])  # windows wholly in the padding
    assert ops.fallback_counts() == {"mps_pool declined": 2}
    assert sum("lie wholly outside" in n for n in dev.notes()) == 1  # said once


# ---- blits and command buffer segments ----

def test_blits_take_offsets_and_sizes_in_multiples_of_4_and_nothing_is_encoded_for_0_bytes():
    # the fake refuses what Metal on macOS refuses (copyFromBuffer: multiples of 4, something to copy)
    src = bytes(range(16))
    dev = fake(busy=True)  # an upload then goes through a staged blit when it can
    dev.clear_log()
    assert dev.copy_bytes(src, 4, 8, 0, 8) == src[4:12]
    assert dev.copy_bytes(src, 4, 8, 0, 0) == bytes(8)
    assert dev.copy_bytes(src, 1, 8, 2, 5) == bytes(2) + src[1:6] + bytes(1)  # on the host, after a wait
    assert dev.copy_bytes(src, 0, 8, 0, 0, upload=b"\x07\x08", upload_offset=6) == bytes(6) + b"\x07\x08"
    copies = [l for l in dev.log() if l.startswith(("copy", "upload_staged"))]
    assert [l.split()[-2] for l in copies if l.startswith("copy")] == ["8"]  # the aligned copy alone
    assert all(not l.endswith(" 0 bytes") for l in copies)
    assert not any(l.startswith("upload_staged") and l.endswith(" 2 bytes") for l in copies)


def test_a_failed_earlier_segment_of_an_mpsgraph_command_buffer_fails_the_wait():
    # MPSGraph may commit part of the command buffer (commitAndContinue): a failure there is reported too
    dev = fake(mps_env="all")
    ops = _core.Ops(dev.device)
    conv1x1(ops)  # proves the path
    dev.fail_next("conv2d", "segment")
    with pytest.raises(_core.DarknetError, match=r"a command buffer failed: MPSGraph reported: an earlier segment "
                       r"failed: .*results are lost \(convolution x1\)"):
        conv1x1(ops)
    assert dev.mps_failures() == {"mps_conv2d": 1}


def test_the_objective_c_waits_on_every_segment_and_records_mpsgraph_errors():
    # what the fake cannot show: metal_objc.mm runs each graph with an execution descriptor whose
    # completion handler records the NSError, and waits on each root command buffer MPSGraph committed
    import os
    text = open(os.path.join(os.path.dirname(__file__), "..", "src-metal", "metal_objc.mm")).read()
    assert "executionDescriptor:nil" not in text and "desc.completionHandler = ^" in text
    assert "if ([cb rootCommandBuffer] != before) committed_.push_back(before);" in text
    assert "committed_.push_back([cb rootCommandBuffer]);" in text
