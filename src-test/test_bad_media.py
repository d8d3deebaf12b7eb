"""Bad media and bad paths, with real files made by the test: a JPEG cut short, a zero-byte video, a
video whose middle bytes are overwritten, an unreadable folder, a glob that also matches other files,
names with spaces and non-ASCII characters, .data files whose lists are missing or empty, a names
file with too few names. Each gives one line naming the file and what is wrong, then either goes on
(exit code 4, the skips listed at the end) or stops (exit code 1); no output is left half-written.
The detector is the bundled demo model (small and fast; no shared files needed)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from darknet_py import exit_codes
from darknet_py.commands.cli import main
from darknet_py.model_files.demo import demo_files
from darknet_py.media.sources import jpeg_truncated, read_image
from darknet_py.media.video import FrameReader

DEMO = demo_files()
MODEL = ["--cfg", DEMO["cfg"], "--weights", DEMO["weights"], "--names", DEMO["names"], "--threads", "2"]


def run(argv, capsys):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.startswith(".") or ".tmp" in p.name]


def lines_naming(err: str, name: str) -> list:
    return [line for line in err.splitlines() if name in line]


@pytest.fixture()
def photo_dir(tmp_path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(DEMO["image"], d / "good.jpg")
    return d


def _truncated_jpeg(path: Path) -> Path:
    data = Path(DEMO["image"]).read_bytes()
    path.write_bytes(data[: len(data) * 6 // 10])  # a real JPEG, cut as an interrupted copy cuts it
    return path


# ---- images ----------------------------------------------------------------------------------------
def test_truncated_jpeg_is_recognised():
    data = np.fromfile(DEMO["image"], np.uint8)
    assert not jpeg_truncated(data)
    assert jpeg_truncated(data[: data.size * 6 // 10])
    assert not jpeg_truncated(np.concatenate([data, np.frombuffer(b"vendor trailer", np.uint8)]))
    assert not jpeg_truncated(np.frombuffer(b"\x89PNG\r\n", np.uint8))  # not a JPEG: the decoder judges


def test_truncated_jpeg_in_a_folder_is_skipped_and_listed(photo_dir, tmp_path, capsys):
    _truncated_jpeg(photo_dir / "cut.jpg")
    (photo_dir / "empty.png").write_bytes(b"")
    out = tmp_path / "out"
    rc, _, err = run(["detect", photo_dir, *MODEL, "--out", out, "--json", tmp_path / "d.json"], capsys)
    assert rc == exit_codes.SKIPPED, err
    assert "Traceback" not in err
    cut = lines_naming(err, "cut.jpg")
    assert len(cut) == 2 and all("truncated JPEG" in line for line in cut)  # when met, and in the list
    assert any("empty.png" in line and "empty file" in line for line in err.splitlines())
    assert "2 input(s) skipped" in err
    assert sorted(p.name for p in out.iterdir()) == ["good.jpg"] and no_temp_files(out)
    doc = json.loads((tmp_path / "d.json").read_text())
    assert [r["image"] for r in doc["results"]] == [str(photo_dir / "good.jpg")]


def test_a_single_truncated_jpeg_is_an_input_error(tmp_path, capsys):
    rc, _, err = run(["detect", _truncated_jpeg(tmp_path / "cut.jpg"), *MODEL, "--out", tmp_path / "o"], capsys)
    assert rc == exit_codes.INPUT_ERROR
    assert len(err.strip().splitlines()) == 1 and "cut.jpg: truncated JPEG" in err
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_glob_that_also_matches_other_files(photo_dir, tmp_path, capsys):
    (photo_dir / "notes.txt").write_text("not an image\n")
    rc, _, err = run(["detect", photo_dir / "*", *MODEL, "--out", tmp_path / "out"], capsys)
    assert rc == exit_codes.SKIPPED, err
    assert lines_naming(err, "notes.txt")[0].endswith("notes.txt: not an image or video (by its extension)")
    assert (tmp_path / "out" / "good.jpg").is_file()


def test_folder_passes_over_label_files_quietly(photo_dir, tmp_path, capsys):
    (photo_dir / "good.txt").write_text("0 .5 .5 .1 .1\n")  # Darknet's label beside its image
    rc, _, err = run(["detect", photo_dir, *MODEL, "--out", tmp_path / "out"], capsys)
    assert rc == exit_codes.OK and "good.txt" not in err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs POSIX permissions and a non-root user (root reads a chmod 000 folder)")
def test_unreadable_folder(photo_dir, tmp_path, capsys):
    photo_dir.chmod(0)
    try:
        rc, _, err = run(["detect", photo_dir, *MODEL, "--out", tmp_path / "out"], capsys)
    finally:
        photo_dir.chmod(0o755)
    assert rc == exit_codes.INPUT_ERROR
    assert len(err.strip().splitlines()) == 1 and str(photo_dir) in err and "cannot list" in err


def test_spaces_and_non_ascii_names(tmp_path, capsys):
    src = tmp_path / "fotos de café"
    src.mkdir()
    shutil.copy(DEMO["image"], src / "näme with späces ✓.jpg")
    out = tmp_path / "résultats 1"
    rc, _, err = run(["detect", src, *MODEL, "--out", out, "--json", out / "détections.json"], capsys)
    assert rc == exit_codes.OK, err
    written = out / "näme with späces ✓.jpg"
    assert read_image(str(written)).shape == read_image(DEMO["image"]).shape
    doc = json.loads((out / "détections.json").read_text(encoding="utf-8"))
    assert doc["results"][0]["output"] == str(written) and no_temp_files(out)


def test_output_that_cannot_be_written_is_an_output_error(photo_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the output folder should be\n")
    rc, _, err = run(["detect", photo_dir, *MODEL, "--out", blocker / "sub"], capsys)
    assert rc == exit_codes.OUTPUT_ERROR, err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "good.jpg: cannot write here" in errors[0] and "Traceback" not in err


def test_names_file_with_too_few_names(tmp_path, capsys):
    names = tmp_path / "two.names"
    names.write_text("circle\nsquare\n")
    model = [a if a != DEMO["names"] else names for a in MODEL]
    rc, _, err = run(["detect", DEMO["image"], *model, "--out", tmp_path / "o"], capsys)
    assert rc == exit_codes.OK, err
    assert "two.names: 2 names for 4 classes: classes 2..3 are shown by number" in err


# ---- videos ----------------------------------------------------------------------------------------
def _video(path: Path, n: int = 30) -> Path:
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (160, 120))
    assert w.isOpened()
    for i in range(n):
        f = np.full((120, 160, 3), 40 + 6 * i, np.uint8)
        cv2.circle(f, (20 + 4 * i, 60), 15, (0, 0, 255), -1)
        w.write(f)
    w.release()
    return path


def _corrupt_middle(path: Path) -> Path:
    """Overwrites the middle fifth of the file with random bytes (a fixed seed: the same damage each run)."""
    data = bytearray(path.read_bytes())
    a, b = len(data) * 2 // 5, len(data) * 3 // 5
    data[a:b] = np.random.default_rng(7).integers(0, 256, b - a, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return path


def test_zero_byte_video_alone_is_an_input_error(tmp_path, capsys):
    (tmp_path / "empty.mp4").write_bytes(b"")
    rc, _, err = run(["detect", tmp_path / "empty.mp4", *MODEL, "--out", tmp_path / "o"], capsys)
    assert rc == exit_codes.INPUT_ERROR
    assert len(err.strip().splitlines()) == 1 and "empty.mp4: empty video file (0 bytes)" in err


def test_zero_byte_video_in_a_folder_is_skipped(photo_dir, tmp_path, capsys):
    (photo_dir / "empty.mp4").write_bytes(b"")
    rc, _, err = run(["detect", photo_dir, *MODEL, "--out", tmp_path / "out"], capsys)
    assert rc == exit_codes.SKIPPED, err
    assert len(lines_naming(err, "empty.mp4")) == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good.jpg"]


def test_reader_goes_past_corrupt_middle_frames(tmp_path):
    clip = _corrupt_middle(_video(tmp_path / "c.mp4"))
    with FrameReader(str(clip)) as reader:
        decoded = [i for i, _, _ in reader]
    bad = reader.bad_frames
    assert bad, "the damaged stretch should fail to decode"
    assert sorted(decoded + bad) == list(range(30))
    assert max(decoded) > min(bad), "frames after the damage must still be read"
    assert "could not be decoded" in reader.bad_frames_text() and "of 30" in reader.bad_frames_text()


def test_detect_on_a_video_with_corrupt_middle_frames(tmp_path, capsys):
    clip = _corrupt_middle(_video(tmp_path / "c.mp4"))
    out = tmp_path / "out"
    rc, _, err = run(["detect", clip, *MODEL, "--out", out, "--json", tmp_path / "d.json"], capsys)
    assert rc == exit_codes.SKIPPED, err
    line = lines_naming(err, "could not be decoded")[0]
    assert "c.mp4" in line
    doc = json.loads((tmp_path / "d.json").read_text())
    cap = cv2.VideoCapture(str(out / "c.mp4"))
    frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    cap.release()
    assert 0 < frames == len(doc["results"]) < 30 and no_temp_files(out)


# ---- map: the .data file's lists, names --------------------------------------------------------------
def _dataset(root: Path, valid_lines: str = None, names: str = "circle\nsquare\ntriangle\nstar\n") -> Path:
    (root / "images").mkdir(parents=True)
    shutil.copy(DEMO["image"], root / "images" / "a b ü.jpg")
    (root / "images" / "a b ü.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (root / "valid.txt").write_text(valid_lines if valid_lines is not None else str(root / "images" / "a b ü.jpg") + "\n")
    (root / "s.names").write_text(names)
    data = root / "s.data"
    data.write_text(f"classes = 4\nvalid = {root / 'valid.txt'}\nnames = {root / 's.names'}\n")
    return data


def test_map_valid_list_missing(tmp_path, capsys):
    data = _dataset(tmp_path / "d")
    (tmp_path / "d" / "valid.txt").unlink()
    rc, _, err = run(["map", data, DEMO["cfg"], DEMO["weights"]], capsys)
    assert rc == exit_codes.INPUT_ERROR
    assert len(err.strip().splitlines()) == 1
    assert f"{data}:2: the valid list {tmp_path / 'd' / 'valid.txt'} does not exist" in err


def test_map_valid_list_empty(tmp_path, capsys):
    data = _dataset(tmp_path / "d", valid_lines="\n# nothing here\n")
    rc, _, err = run(["map", data, DEMO["cfg"], DEMO["weights"]], capsys)
    assert rc == exit_codes.INPUT_ERROR
    assert len(err.strip().splitlines()) == 1 and "valid.txt: the valid list named by" in err and "is empty" in err


def test_map_skips_a_truncated_image_and_warns_about_names(tmp_path, capsys):
    root = tmp_path / "dossier é"
    data = _dataset(root, names="circle\nsquare\n")
    _truncated_jpeg(root / "images" / "cut.jpg")
    with (root / "valid.txt").open("a") as f:
        f.write(str(root / "images" / "cut.jpg") + "\n")
    rc, out, err = run(["map", data, DEMO["cfg"], DEMO["weights"], "--json", root / "m.json"], capsys)
    assert rc == exit_codes.SKIPPED, err
    assert any("cut.jpg: truncated JPEG" in line for line in err.splitlines())
    assert "s.names: 2 names for 4 classes" in err
    doc = json.loads((root / "m.json").read_text())
    assert doc["images"] == 1 and doc["truths"] == 1 and len(doc["skipped"]) == 1
    assert "class_id = 3, name = 3," in out  # unnamed classes by number
    assert no_temp_files(root)


@pytest.mark.parametrize("argv", [["--help"], ["detect", "--help"], ["map", "--help"]])
def test_help_lists_the_exit_codes(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "exit codes:" in out and all(f"  {code} " in out for code in (0, 1, 2, 3, 4, 5, 130))


def test_training_list_missing_or_empty_names_the_data_file(tmp_path):
    from darknet_py.data import BatchLoader, DataFileError

    data = tmp_path / "t.data"
    data.write_text(f"classes = 1\ntrain = {tmp_path / 'train.txt'}\n")
    with pytest.raises(DataFileError, match=r"t\.data:2: the train list .*train\.txt does not exist"):
        BatchLoader.from_files(str(data), None, 1)
    (tmp_path / "train.txt").write_text("\n")
    with pytest.raises(DataFileError, match=r"train\.txt: the train list named by .*t\.data:2 is empty"):
        BatchLoader.from_files(str(data), None, 1)
