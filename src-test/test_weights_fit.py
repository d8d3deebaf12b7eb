"""A weights file that does not fit its cfg (floats missing or left over) is an error for detect, map
and export, naming the first layer that disagrees; --allow-partial loads it anyway; train still starts
from partial weights. The bundled demo model, with a cfg typo (`filtres=8`) that leaves its first
convolution at one filter: Darknet's loader reads such a file without complaint and detects nothing."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from darknet_py import Network
from darknet_py.commands.cli import main
from darknet_py.model_files.demo import demo_files
from darknet_py.model_files.weights_fit import check_fit, complete_layers

DEMO = demo_files()


@pytest.fixture
def typo_cfg(tmp_path):
    text = open(DEMO["cfg"], encoding="utf-8").read()
    assert "filters=8\n" in text
    path = tmp_path / "typo.cfg"
    path.write_text(text.replace("filters=8\n", "filtres=8\n", 1))
    return str(path)


@pytest.fixture
def data(tmp_path):
    """A .data file of one labelled image (the demo's sample), for map."""
    img = tmp_path / "ds" / "a.jpg"
    img.parent.mkdir()
    shutil.copy(DEMO["image"], img)
    img.with_suffix(".txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (tmp_path / "ds" / "valid.txt").write_text(f"{img}\n")
    names = tmp_path / "ds" / "n.names"
    names.write_text(open(DEMO["names"]).read())
    d = tmp_path / "ds" / "x.data"
    d.write_text(f"classes=4\ntrain={tmp_path / 'ds' / 'valid.txt'}\nvalid={tmp_path / 'ds' / 'valid.txt'}\n"
                 f"names={names}\nbackup={tmp_path / 'ds'}\n")
    return str(d)


def test_the_demo_weights_fit_their_cfg():
    net = Network(DEMO["cfg"], device="cpu")
    assert check_fit(net, DEMO["weights"]) is None
    assert complete_layers(net, DEMO["weights"]) == len(net.layers)


def test_a_cfg_typo_names_the_first_layer_that_disagrees(typo_cfg):
    with pytest.warns(UserWarning, match="did you mean 'filters'"):  # the cfg's own warning, then the error
        net = Network(typo_cfg, device="cpu")
    msg = check_fit(net, DEMO["weights"])
    assert msg is not None and "floats left over" in msg
    # the typo'd layer 0 reads its one filter's values out of the 8 filters' biases and scales: the
    # variances it takes from them, or the next layer's, are what cannot be; layer 0 or 1 is named
    assert re.search(r"the first layer that disagrees is layer [01] \(conv, cfg line \d+\)", msg), msg


@pytest.mark.parametrize("command", ["detect", "map", "export"])
def test_a_weights_file_for_another_cfg_is_an_error(command, typo_cfg, data, tmp_path, capsys):
    argv = {"detect": ["detect", DEMO["image"], "--cfg", typo_cfg, "--weights", DEMO["weights"],
                       "--out", str(tmp_path / "o")],
            "map": ["map", data, typo_cfg, DEMO["weights"]],
            "export": ["export", typo_cfg, DEMO["weights"], "-o", str(tmp_path / "m.onnx")]}[command]
    if command == "export":
        pytest.importorskip("onnx", reason="the onnx package is not installed (pip install '.[test]')")
    assert main(argv) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "does not fit" in lines[-1] and "floats left over" in lines[-1] and "first layer that disagrees" in lines[-1]
    assert "--allow-partial" in lines[-1]
    assert main(argv + ["--allow-partial"]) == 0
    assert "(loaded as --allow-partial asks)" in capsys.readouterr().err


def test_a_short_file_is_an_error_and_allow_partial_loads_what_it_holds(tmp_path, capsys):
    short = tmp_path / "short.weights"
    blob = open(DEMO["weights"], "rb").read()
    short.write_bytes(blob[:len(blob) // 2])
    argv = ["detect", DEMO["image"], "--cfg", DEMO["cfg"], "--weights", str(short), "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "floats missing" in err and re.search(r"layer \d+ \(", err), err
    assert main(argv + ["--allow-partial"]) == 0
    net = Network(DEMO["cfg"], device="cpu")
    k = complete_layers(net, str(short))
    assert 0 < k < len(net.layers)


def test_train_still_starts_from_partial_weights(tmp_path, data, capsys):
    """A .conv.N file (the first N layers' weights, as Darknet's `partial` writes) stays a valid start."""
    net = Network(DEMO["cfg"], DEMO["weights"], device="cpu")
    part = tmp_path / "demo.conv.4"
    from darknet_py.model_files.weights_fit import read_header

    head = open(DEMO["weights"], "rb").read(read_header(DEMO["weights"]).size)
    body = [np.asarray(a, np.float32).ravel() for i in range(4) for a in net.params(i).values()]
    part.write_bytes(head + np.concatenate(body).astype("<f4").tobytes())
    out = tmp_path / "backup"
    rc = main(["train", data, DEMO["cfg"], "--weights", str(part), "--clear", "--max-batches", "1", "--out", str(out),
               "--workers", "0", "--threads", "1", "--device", "cpu"])
    assert rc == 0, capsys.readouterr()
