"""benchmarks/compare.py's engine adapters (benchmarks/peer_engines.py) on a tiny yolov4-tiny-like cfg:
each peer engine loads the model as compare.py gives it (OpenCV: the Darknet files; ONNX Runtime and
OpenVINO: our ONNX export), runs the same blob on 2 threads, and its outputs must equal ours by the
check compare.py applies before timing; that check must also catch a perturbed output. An engine whose
package is not installed is skipped with the reason (openvino is not in the test extra: it skips in CI).
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import darknet_py

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_common as bc  # noqa: E402
import peer_engines as pe  # noqa: E402

# conv+bn+leaky, maxpool, a grouped route (CSP), upsample and two [yolo] heads: the layer kinds of the
# benchmarked tiny models, at 64x64 so that every engine loads and runs it in milliseconds
TINY = """[net]
width=64
height=64
channels=3

[convolutional]
batch_normalize=1
filters=16
size=3
stride=2
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=32
size=3
stride=1
pad=1
activation=leaky

[route]
layers=-1
groups=2
group_id=1

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[route]
layers=-1,-3

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=32
size=3
stride=1
pad=1
activation=leaky

[convolutional]
size=1
stride=1
pad=1
filters=21
activation=linear

[yolo]
mask=3,4,5
anchors=10,14, 23,27, 37,58, 81,82, 135,169, 344,319
classes=2
num=6
scale_x_y=1.05

[route]
layers=-3

[upsample]
stride=2

[route]
layers=-1,-7

[convolutional]
size=1
stride=1
pad=1
filters=21
activation=linear

[yolo]
mask=0,1,2
anchors=10,14, 23,27, 37,58, 81,82, 135,169, 344,319
classes=2
num=6
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("peer")
    cfg = d / "tiny.cfg"
    cfg.write_text(TINY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = darknet_py.Network(str(cfg), device="cpu")
    bc.fill_random(net, seed=3)  # what compare.py gives every engine
    weights = d / "tiny.weights"
    net.save_weights(str(weights))
    return net, str(cfg), str(weights), d


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("engine", ["opencv", "onnxruntime", "openvino"])
def test_peer_outputs_equal_ours(model, engine, batch):
    why = pe.missing(engine)
    if why:
        pytest.skip(f"{engine}: {why}")
    net, cfg, weights, d = model
    work = d / f"{engine}-{batch}"
    work.mkdir()
    files = pe.prepare(net, cfg, weights, batch, str(work), need_onnx=engine != "opencv")
    blob = bc.input_blob(net, batch, seed=5)
    bc.set_threads(2)
    ours = [o.copy() for o in net.forward(blob)]
    assert len(ours) == 2 and all(o.shape[0] == batch for o in ours)
    assert all(o.std() > 1e-3 for o in ours), "degenerate outputs: the comparison would be trivial"
    theirs = pe.load(engine, files, threads=2)(blob)

    bad = pe.mismatch(engine, files, ours, theirs)
    worst = bad.pop("worst")
    assert not bad, f"{engine} differs from ours: {bad}"
    assert 0 <= worst <= pe.TOL

    # the check must be able to fail: one output value of ours off by 1 % of the tensor's scale
    wrong = [o.copy() for o in ours]
    wrong[1].reshape(-1)[wrong[1].size // 2 + 7] += 0.01 * np.abs(wrong[1]).max() + 0.01
    bad = pe.mismatch(engine, files, wrong, theirs)
    bad.pop("worst")
    assert bad, f"{engine}: a perturbed output passed the check"


def test_missing_engine_has_a_reason():
    assert pe.missing("ours") is None
    assert "unknown engine" in pe.missing("tensorrt")


def test_layer_profile_maps_onnx_runtime_nodes_to_our_layers(model, capsys):
    """benchmarks/layer_profile.py on the tiny cfg: one table row per layer with its FLOPs and bytes, our
    time for each, ONNX Runtime's (and OpenVINO's, where it is installed) for every layer that has a node
    (conv, maxpool, route, upsample, yolo) with the kernel it ran, totals that add up."""
    why = pe.missing("onnxruntime")
    if why:
        pytest.skip(f"onnxruntime: {why}")
    import layer_profile as lp

    assert lp.node_layer("l12_conv_node") == 12 and lp.node_layer("l3_route_from1_node_2") == 3
    assert lp.node_layer("reorder_token_7") is None and lp.node_layer("xl1_conv") is None
    net, cfg, weights, d = model
    assert lp.main(["--cfg", cfg, "--threads", "2", "--runs", "2", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = [c.strip() for c in next(x for x in lines if x.startswith("| layer |")).strip().strip("|").split("|")]
    col = {h: k for k, h in enumerate(header)}
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(header) and cells[0].isdigit():
            rows[int(cells[0])] = cells
    assert sorted(rows) == list(range(len(net.layers))), out
    with_ov = pe.missing("openvino") is None
    for i, cells in rows.items():
        what = cells[col["type and shape"]]
        assert what.split()[0] == net.layers[i]["type"]
        assert float(cells[col["ours ms"]]) >= 0 and float(cells[col["MB"]]) > 0
        if net.layers[i]["type"] == "conv":
            assert float(cells[col["MFLOP"]]) > 0
        if net.layers[i]["type"] in ("conv", "max", "yolo", "upsample"):
            assert float(cells[col["ONNX Runtime ms"]]) > 0, f"layer {i} ({what}) got no ONNX Runtime time: {out}"
            assert cells[col["ONNX Runtime op (provider)"]] != "-"
            if with_ov:
                assert float(cells[col["OpenVINO ms"]]) > 0, f"layer {i} ({what}) got no OpenVINO time: {out}"
                assert cells[col["OpenVINO kernel [layout]"]] != "-"
    total = [c.strip() for c in next(x for x in lines if x.startswith("| total |")).strip().strip("|").split("|")]
    ours_sum = sum(float(r[col["ours ms"]]) for r in rows.values())
    # medians of sums vs sums of medians
    assert abs(float(total[col["ours ms"]]) - ours_sum) <= 0.05 * ours_sum + 0.01 * len(rows)


def test_layer_profile_says_when_onnx_runtime_is_missing(monkeypatch, capsys):
    import layer_profile as lp

    monkeypatch.setattr(pe, "missing", lambda engine: "the onnxruntime package is not installed (test)")
    assert lp.main(["--cfg", "unused.cfg"]) == 2
    assert "not installed" in capsys.readouterr().err


def _table_cells(table: str, header: str) -> list:
    lines = [line.strip().strip("|").split("|") for line in table.splitlines()]
    col = [c.strip() for c in lines[0]].index(header)
    return [cells[col].strip() for cells in lines[2:]]


def test_compare_table_gives_the_per_round_spread_of_the_ratio():
    """compare.py's 'per round' column: ours / the best peer within each round (blocks seconds apart),
    lowest-highest, against the peer that is best overall; '-' with one round or no peer timed."""
    import compare

    row = {"model": "m", "size": 64, "batch": 1, "runs": 6, "gflop": 1.0,
           "ms": {"ours": 11.0, "onnxruntime": 10.0, "openvino": 12.0},
           "round_ms": {"ours": [10.0, 12.0, 11.0], "onnxruntime": [10.0, 10.0, 10.0], "openvino": [5.0, 20.0, 12.0]}}
    one_round = dict(row, round_ms={e: v[:1] for e, v in row["round_ms"].items()})
    no_peer = dict(row, ms={"ours": 11.0}, round_ms={"ours": [11.0]})
    tab = compare.table([row, one_round, no_peer], ["ours", "onnxruntime", "openvino"], peak=100.0, scaling=False)
    assert _table_cells(tab, "ours / best peer") == ["1.10 (ONNX Runtime)", "1.10 (ONNX Runtime)", "-"]
    assert _table_cells(tab, "per round") == ["1.00-1.20", "-", "-"]  # against ONNX Runtime, not OpenVINO (0.60-2.00)
    assert compare.round_ratios(row, "openvino") == [2.0, 0.6, 11.0 / 12.0]


def test_compare_bench_model_times_every_round():
    """bench_model on yolov4-tiny at 64x64 (milliseconds a forward): each engine's block median is kept per
    round, and the table row says how far apart the rounds were."""
    why = pe.missing("onnxruntime")
    if why:
        pytest.skip(f"onnxruntime: {why}")
    import compare

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = compare.bench_model(bc.Model("yolov4-tiny", 64), 1, ["ours", "onnxruntime"], threads=2, rounds=3,
                                runs=2, scaling=False)
    assert sorted(r["round_ms"]) == ["onnxruntime", "ours"]
    assert all(len(v) == 3 and min(v) > 0 for v in r["round_ms"].values())
    r.update(model="yolov4-tiny", size=64, batch=1)
    lo, hi = (float(v) for v in _table_cells(compare.table([r], ["ours", "onnxruntime"], 100.0, False), "per round")[0].split("-"))
    assert 0 < lo <= hi


def test_compare_writes_results_only_with_write(tmp_path, monkeypatch, capsys):
    """A plain compare.py run prints its table and leaves RESULTS.md alone; --write records it."""
    import types

    import compare

    row = {"runs": 6, "gflop": 1.0, "ms": {"ours": 11.0}, "round_ms": {"ours": [11.0]}}
    monkeypatch.setattr(compare, "bench_model", lambda m, b, *rest: dict(row))
    monkeypatch.setattr(bc, "fma_peak", lambda threads: types.SimpleNamespace(gflops=100.0, method="stub"))
    out = tmp_path / "RESULTS.md"
    args = ["--threads", "1", "--models", "yolov4-tiny", "--engines", "ours", "--out", str(out)]
    assert compare.main(args) == 0
    assert not out.exists() and "wrote" not in capsys.readouterr().out
    assert compare.main(args + ["--write"]) == 0
    text = out.read_text()
    assert compare.BEGIN in text and "python benchmarks/compare.py --write" in text
