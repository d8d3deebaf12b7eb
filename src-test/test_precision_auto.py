"""precision "auto" (devices.auto_precision): bf16 on GPUs with native bf16 (CUDA compute capability
8.0+), fp16 on other GPUs, fp32 on CPUs and CPU OpenCL runtimes, with the reason in the log. "auto" is the
default of Network, train and the commands; test_half_training.py compares its training with fp32's on CUDA."""
import importlib

import pytest

import gpu_devices
from darknet_py.commands import cli
from darknet_py.model_files.demo import demo_files
from darknet_py.network import Network

devices_module = importlib.import_module("darknet_py.devices")  # (darknet_py.devices is also a function)


def _with_rows(monkeypatch, rows):
    monkeypatch.setattr(devices_module, "devices", lambda: rows)


@pytest.mark.parametrize("details,want", [("compute capability 9.0, cuBLAS 13.0", "bf16"),
                                          ("compute capability 8.0", "bf16"), ("compute capability 7.5", "fp16")])
def test_cuda_by_compute_capability(monkeypatch, details, want):
    _with_rows(monkeypatch, [{"id": "cuda:0", "kind": "cuda", "found": True, "is_gpu": True, "details": details}])
    got, why = devices_module.auto_precision("cuda:0")
    assert got == want and details.split(",")[0].split()[-1] in why


def test_other_gpus_fp16_cpus_fp32(monkeypatch):
    _with_rows(monkeypatch, [{"id": "opencl:0", "kind": "opencl", "found": True, "is_gpu": True, "details": ""},
                             {"id": "opencl:1", "kind": "opencl", "found": True, "is_gpu": False, "details": ""},
                             {"id": "metal", "kind": "metal", "found": True, "is_gpu": True, "details": ""}])
    assert devices_module.auto_precision("opencl:0")[0] == "fp16"
    assert devices_module.auto_precision("metal")[0] == "fp16"
    assert devices_module.auto_precision("opencl:1") == ("fp32", "opencl:1 is not a GPU (a CPU OpenCL runtime or a simulator)")
    assert devices_module.auto_precision("cpu") == ("fp32", "cpu runs fp32 only")


def test_a_bare_kind_is_its_device_0(monkeypatch):
    _with_rows(monkeypatch, [{"id": "cuda:0", "kind": "cuda", "found": True, "is_gpu": True,
                              "details": "compute capability 9.0"},
                             {"id": "opencl:0", "kind": "opencl", "found": True, "is_gpu": True, "details": ""}])
    assert devices_module.auto_precision("cuda")[0] == "bf16"
    assert devices_module.auto_precision("opencl")[0] == "fp16"


def test_auto_is_the_default_and_names_a_half_choice_only(monkeypatch, capsys, tmp_path):
    import inspect

    import darknet_py

    assert inspect.signature(Network).parameters["precision"].default == "auto"
    assert inspect.signature(darknet_py.train).parameters["precision"].default == "auto"
    assert devices_module.auto_precision_line("fp32", "cpu runs fp32 only") is None  # a run as it always was
    assert devices_module.auto_precision_line("bf16", "why") == "precision auto: bf16 (why)"
    demo = demo_files()
    for device in ("cpu", gpu_devices.device("pocl")):
        net = Network(demo["cfg"], demo["weights"], device=device)
        assert net.precision == "fp32" and net.precision_reason is None
        for argv in ([], ["--precision", "auto"]):
            assert cli.main(["detect", demo["image"], "--cfg", demo["cfg"], "--weights", demo["weights"],
                             "--device", device, "--out", str(tmp_path)] + argv) == 0
            assert "precision auto" not in capsys.readouterr().err
