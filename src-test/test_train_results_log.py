"""Training's log for programs (training/results_log.py): results.csv holds a row per iteration with
the figures of Darknet's log lines (loss, avg loss, rate, images) and of its per-head `Region` lines,
mAP@0.5 on the rows where it was measured; a resumed run appends; where tensorboardX is installed the
same scalars are TensorBoard events (read back here from the event file's own records)."""
import csv
import glob
import struct

import pytest

from darknet_py.data.synth import generate
from darknet_py.training.train import train

from test_train import small_cfg


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("results_log")
    data = generate(str(root / "ds"), images=24, classes=2, size=(64, 64), seed=7, valid_fraction=0.25, workers=1)
    cfg = root / "tiny.cfg"
    cfg.write_text(small_cfg(classes=2, size=64, batch=4, lr=0.002, burn_in=0, max_batches=6, filters=(8, 16),
                             head=16, anchors="8,8, 14,14, 22,22"))
    return {"data": data, "cfg": str(cfg), "root": root}


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_row_per_iteration_with_the_log_lines_figures(tiny, tmp_path):
    lines = []
    r = train(tiny["data"], tiny["cfg"], out_dir=str(tmp_path), quiet=True, chart=False, seed=1, workers=1,
              calc_map=True, map_every=3, callback=lambda s: lines.append(s))
    rows = _rows(tmp_path / "results.csv")
    assert [int(x["iteration"]) for x in rows] == list(range(1, 7))
    for row, s in zip(rows, lines):  # the callback sees what the log line prints
        assert float(row["loss"]) == pytest.approx(s["loss"], rel=1e-5)
        assert float(row["avg_loss"]) == pytest.approx(s["avg_loss"], rel=1e-5)
        assert float(row["learning_rate"]) == pytest.approx(s["rate"], rel=1e-5)
        assert int(row["images"]) == s["images"]
        head = s["heads"][0]
        assert float(row[f"h{head['layer']}_avg_iou"]) == pytest.approx(head["avg_iou"], rel=1e-5, abs=1e-9)
        assert int(row[f"h{head['layer']}_count"]) == head["count"]
    measured = {int(x["iteration"]): float(x["map50"]) for x in rows if x["map50"]}
    assert measured == {it: pytest.approx(m, abs=1e-6) for it, m in r.maps}
    assert set(measured) == {3, 6}


def test_a_resumed_run_appends(tiny, tmp_path):
    train(tiny["data"], tiny["cfg"], out_dir=str(tmp_path), quiet=True, chart=False, seed=1, workers=1, max_batches=3)
    last = glob.glob(str(tmp_path / "*_last.weights"))[0]
    train(tiny["data"], tiny["cfg"], out_dir=str(tmp_path), quiet=True, chart=False, seed=1, workers=1, weights=last)
    assert [int(x["iteration"]) for x in _rows(tmp_path / "results.csv")] == list(range(1, 7))


def _scalars(path):
    """(tag, step, value) of a TensorBoard event file: TFRecords (length, its CRC, the Event, its CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    out, data = [], open(path, "rb").read()
    i = 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        event = Event.FromString(data[i + 12:i + 12 + n])
        i += 12 + n + 4
        for v in event.summary.value:
            out.append((v.tag, event.step, v.simple_value))
    return out


def test_tensorboard_events_hold_the_same_scalars(tiny, tmp_path):
    pytest.importorskip("tensorboardX", reason="tensorboardX (the tensorboard extra) is not installed")
    train(tiny["data"], tiny["cfg"], out_dir=str(tmp_path), quiet=True, chart=False, seed=1, workers=1, max_batches=4)
    events = glob.glob(str(tmp_path / "tensorboard" / "events.out.tfevents.*"))
    assert len(events) == 1
    got = {(tag, step): value for tag, step, value in _scalars(events[0])}
    for row in _rows(tmp_path / "results.csv"):
        step = int(row["iteration"])
        assert got[("train/loss", step)] == pytest.approx(float(row["loss"]), rel=1e-5)
        assert got[("train/avg_loss", step)] == pytest.approx(float(row["avg_loss"]), rel=1e-5)
    assert any(tag.endswith("_avg_iou") for tag, _ in got)


def test_a_resume_drops_the_rows_it_will_run_again(tmp_path):
    from darknet_py.training.results_log import ResultsLog

    log = ResultsLog(str(tmp_path), [7], 0, tensorboard=False)
    for it in range(1, 6):
        log.add({"iteration": it, "images": 4 * it, "loss": 1.0, "avg_loss": 1.0, "learning_rate": 0.1, "seconds": 0.1,
                 "images_per_second": 40.0, "loss_scale": 1.0, "map50": None},
                [{"layer": 7, "loss": 1.0, "avg_iou": 0.5, "class": 0.5, "obj": 0.5, "no_obj": 0.1, "recall50": 1.0,
                  "recall75": 0.0, "count": 2}])
    log.close()
    with open(tmp_path / "results.csv", "a") as f:
        f.write("6,24,1.0")  # a row cut by a kill
    ResultsLog(str(tmp_path), [7], 3, tensorboard=False).close()  # resumed from iteration 3's weights
    assert [int(x["iteration"]) for x in _rows(tmp_path / "results.csv")] == [1, 2, 3]
