"""`darknet_py benchmark` (commands/benchmark.py): a row per device and precision with batch-1 latency
percentiles from a host image to its detections, batch throughput, the training step with --train and
the ratios to the CPU, as a table and as JSON; a device that cannot run is named and skipped."""
import json

import pytest

import gpu_devices
from darknet_py.commands import cli
from darknet_py.model_files.demo import demo_files


def _run(capsys, *args):
    demo = demo_files()
    code = cli.main(["benchmark", demo["cfg"], demo["weights"], "--seconds", "0.05", "--batch", "2", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_rows_per_device_and_precision_with_ratios_to_the_cpu(capsys):
    pocl = gpu_devices.device("pocl")
    code, out, _ = _run(capsys, "--device", f"cpu,{pocl}", "--precision", "fp32,bf16", "--train", "--json")
    assert code == 0
    rows = json.loads(out)["results"]
    assert [(r["device"], r["precision"]) for r in rows] == [("cpu", "fp32"), (pocl, "fp32"), (pocl, "bf16")]
    for r in rows:
        assert 0 < r["latency_ms_p50"] <= r["latency_ms_p90"] <= r["latency_ms_p99"]
        assert r["images_per_second"] > 0 and r["train_images_per_second"] > 0 and r["batch"] == 2
        assert r["detections"] > 0  # the demo model finds the shapes in its sample image
    assert rows[0]["latency_vs_cpu"] == rows[0]["throughput_vs_cpu"] == rows[0]["train_vs_cpu"] == 1.0
    assert rows[1]["latency_vs_cpu"] == pytest.approx(rows[0]["latency_ms_p50"] / rows[1]["latency_ms_p50"])


def test_table_and_skips(capsys):
    code, out, err = _run(capsys, "--device", "cpu,cuda:7", "--precision", "fp32,fp16")
    assert code == 0
    assert "cpu does not run fp16 (it runs: fp32); skipped" in err
    assert "cuda:7: " in err and "skipped" in err  # no such device here (or no CUDA at all)
    lines = out.splitlines()
    assert lines[2].startswith("| device | precision | batch 1 ms p50 | p90 | p99 | batch 2 images/s |")
    assert lines[4].startswith("| cpu | fp32 |") and lines[4].endswith("| 1.00x / 1.00x |")
