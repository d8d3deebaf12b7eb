"""An Ultralytics dataset YAML wherever a .data file is taken: the same images and labels in
Ultralytics' layout (images/train, labels/train) give the same batches for a seed, the same mAP,
and train; YAML errors name the file and line."""
import os
import shutil

import numpy as np
import pytest

from darknet_py.data import BatchLoader, read_data_file, read_names_file
from darknet_py.model_files.demo import demo_files
from darknet_py.evaluation.evaluate import compute_map
from darknet_py.data.synth import generate


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One synthetic dataset as Darknet files and as an Ultralytics folder tree with a YAML."""
    root = tmp_path_factory.mktemp("yaml")
    data = generate(str(root / "darknet"), images=12, classes=4, size=(256, 256), seed=4, valid_fraction=0.25,
                    workers=1)
    spec = read_data_file(data)
    ultra = root / "ultra"
    for split, listed in (("train", spec.train), ("val", spec.valid)):
        (ultra / "images" / split).mkdir(parents=True)
        (ultra / "labels" / split).mkdir(parents=True)
        for image in open(listed).read().split():
            stem = os.path.splitext(os.path.basename(image))[0]
            shutil.copy(image, ultra / "images" / split / (stem + ".jpg"))
            shutil.copy(os.path.splitext(image)[0] + ".txt", ultra / "labels" / split / (stem + ".txt"))
    yaml_path = root / "shapes.yaml"
    yaml_path.write_text("# Ultralytics layout\npath: ultra\ntrain: images/train\nval: images/val\n"
                         "names:\n  0: circle\n  1: square\n  2: triangle\n  3: star\n")
    return {"data": data, "yaml": str(yaml_path), "root": root}


def test_yaml_reads_as_the_data_file(both):
    spec = read_data_file(both["yaml"])
    assert spec.classes == 4 and read_names_file(spec.names) == ["circle", "square", "triangle", "star"]
    assert spec.train == str(both["root"] / "ultra" / "images" / "train")


def test_same_batches_for_a_seed(both):
    def batches(path):
        with BatchLoader.from_files(path, None, batch_size=3, seed=9, workers=0) as loader:
            return [loader.next_batch() for _ in range(4)]

    a, b = batches(both["data"]), batches(both["yaml"])
    for (images_a, truths_a), (images_b, truths_b) in zip(a, b):
        assert np.array_equal(images_a, images_b)
        assert all(np.array_equal(x, y) for x, y in zip(truths_a, truths_b))
    assert any(len(t) for _, truths in a for t in truths)  # there were boxes to compare


def test_same_map_with_a_list_file_and_names_as_a_list(both, tmp_path):
    val = both["root"] / "ultra" / "images" / "val"
    listing = tmp_path / "val.txt"
    listing.write_text("".join(f"{val / f}\n" for f in sorted(os.listdir(val))))
    y = tmp_path / "list.yaml"
    y.write_text(f"path: {both['root'] / 'ultra'}\ntrain: images/train\nval: {listing}\n"
                 "names: [circle, square, triangle, star]\n")
    demo = demo_files()
    results = [compute_map(p, demo["cfg"], demo["weights"], progress=False) for p in (both["data"], str(y))]
    assert results[0].to_dict() == results[1].to_dict() and results[0].truths > 0
    assert [c.name for c in results[1].classes] == ["circle", "square", "triangle", "star"]


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("path: .\ntrain: [a\n")
    with pytest.raises(ValueError, match=r"bad\.yaml:\d+: not valid YAML"):
        read_data_file(str(bad))
    no_names = tmp_path / "nonames.yaml"
    no_names.write_text("path: .\ntrain: images\n")
    with pytest.raises(ValueError, match=r"nonames\.yaml: no `names:`"):
        read_data_file(str(no_names))
    gap = tmp_path / "gap.yaml"
    gap.write_text("train: images\nnames: {0: a, 2: b}\n")
    with pytest.raises(ValueError, match="without gaps"):
        read_data_file(str(gap))
