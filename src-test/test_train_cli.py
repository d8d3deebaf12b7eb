"""`darknet_py train` as people type it: CFG DATA and DATA CFG, and CFG alone (the quick start on
cached synthetic shapes)."""
import os

import pytest

from darknet_py.training import quickstart
from darknet_py.model_files.cfgfiles import resolve_cfg
from darknet_py.commands.cli import main
from darknet_py.data.synth import generate
from darknet_py.training.train_command import order_inputs


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    data = generate(str(root / "ds"), images=8, classes=2, size=(64, 64), seed=2, valid_fraction=0.25, workers=1)
    cfg = root / "small.cfg"
    text = open(resolve_cfg("yolov3-tiny.cfg")).read()
    cfg.write_text(text.replace("batch=64", "batch=2").replace("subdivisions=2", "subdivisions=1")
                   .replace("width=416", "width=64").replace("height=416", "height=64"))
    return {"data": data, "cfg": str(cfg), "root": root}


def test_either_order_by_content(dataset, tmp_path):
    data, cfg = dataset["data"], dataset["cfg"]
    assert order_inputs(cfg, data) == (data, cfg) == order_inputs(data, cfg)
    assert order_inputs("yolov4-tiny.cfg", None) == (None, "yolov4-tiny.cfg")  # a shipped cfg's name
    renamed = tmp_path / "model.data"  # the extension does not decide: the [net] section does
    renamed.write_text(open(cfg).read())
    assert order_inputs(data, str(renamed)) == (data, str(renamed))
    with pytest.raises(ValueError, match="both cfgs"):
        order_inputs(cfg, str(renamed))
    with pytest.raises(ValueError, match="both datasets"):
        order_inputs(data, data)
    with pytest.raises(ValueError, match=r"is a dataset, not a cfg .* darknet_py train yolov4-tiny.cfg"):
        order_inputs(data, None)
    with pytest.raises(FileNotFoundError, match="neither a file nor a shipped cfg.*yolov4-tiny.cfg"):
        order_inputs("nope.cfg", data)


def test_cfg_first_trains(dataset, tmp_path, capsys):
    out = tmp_path / "backup"
    # the cfg has 80 classes, the data 2: adapted on the way
    assert main(["train", dataset["cfg"], dataset["data"], "--max-batches", "1", "--out", str(out), "--workers", "0",
                 "--seed", "1"]) == 0
    assert os.path.isfile(out / "small-2classes_final.weights") and os.path.isfile(out / "small-2classes.cfg")
    assert main(["train", dataset["data"]]) == 1
    assert "is a dataset, not a cfg" in capsys.readouterr().err


def test_quick_start_without_data_from_random_weights(tmp_path, monkeypatch, capsys):
    """The no-data path for a cfg no shipped weights fit (yolov3-tiny: not the demo model's layers),
    shrunk (24 images of 64x64, batch 4) so that it takes seconds here; test_quickstart.py runs the
    real one. It says so, starts from random weights and still keeps to its own run folder."""
    monkeypatch.setenv("DARKNET_PY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(quickstart, "IMAGES", 24)
    monkeypatch.setattr(quickstart, "SIZE", 64)
    monkeypatch.setattr(quickstart, "BATCH", 4)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "yolov3-tiny.cfg", "--max-batches", "2", "--workers", "0", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("No dataset given: training yolov3-tiny.cfg for 2 iterations on synthetic shapes")
    assert "seed 3. On your own data: darknet_py train yolov3-tiny.cfg my.data" in lines[0]
    cached = tmp_path / "cache" / "quickstart-shapes-24-64-seed1"
    assert lines[1] == f"making the synthetic dataset once: 24 images of 64x64 in {cached}"
    run = tmp_path / "quickstart-yolov3-tiny"
    assert lines[2] == f"run folder: {run} (everything this run writes goes here)"
    assert any(ln.startswith("no shipped weights fit yolov3-tiny-quickstart.cfg") for ln in lines)
    assert ", seed 3, " in next(ln for ln in lines if ln.startswith("yolov3-tiny-quickstart-4classes: "))
    assert [ln.split(":")[0] for ln in lines if " avg loss, " in ln] == [" 1", " 2"]  # Darknet's line starts with a space
    assert out.count("mean_average_precision (mAP@0.50)") == 2  # after iteration 1 and 2
    assert os.path.isfile(run / "yolov3-tiny-quickstart-4classes_final.weights")
    assert os.path.isfile(run / "plots" / "confusion_matrix.png")
    assert not os.path.exists(run / "yolov3-tiny-quickstart_start.weights")
    qcfg = open(run / "yolov3-tiny-quickstart-4classes.cfg").read()
    assert "classes=4" in qcfg and "width=64" in qcfg and "max_batches=2" in qcfg
    assert "anchors=20,20" not in qcfg  # the demo's anchors only go with the demo's weights
    assert lines[-2] == "Detect with the new weights:"  # with the cfg the weights were trained with
    assert lines[-1].split()[3:8] == ["--cfg", str(run / "yolov3-tiny-quickstart-4classes.cfg"), "--weights",
                                      str(run / "yolov3-tiny-quickstart-4classes_best.weights"), "--names"]
    assert sorted(os.listdir(tmp_path)) == ["cache", run.name]
    # the second time the dataset comes from the cache, and the run gets a folder of its own
    assert main(["train", "yolov3-tiny.cfg", "--max-batches", "1", "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert f"synthetic dataset: {cached}/shapes.data (cached)" in out
    assert f"run folder: {run}-2 " in out and ", seed 1, " in out  # the quick start's own seed without --seed
    assert sorted(os.listdir(tmp_path)) == ["cache", run.name, run.name + "-2"]
