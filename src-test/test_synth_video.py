"""`darknet_py synth --video`: moving shapes with MOTChallenge ground truth (data/synth_video.py)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from darknet_py.commands.cli import main
from darknet_py.data.synth_video import GT_COLUMNS, read_gt, render_frames


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("synthvideo") / "clip.mp4"
    assert main(["synth", "--video", str(path), "--frames", "60", "--size", "320x240", "--objects", "6",
                 "--seed", "3"]) == 0
    return path


def test_writes_video_gt_and_names(clip):
    cap = cv2.VideoCapture(str(clip))
    frames = 0
    while cap.read()[0]:
        frames += 1
    assert frames == 60
    assert (cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT)) == (320, 240)
    names = clip.with_suffix(".names").read_text().split()
    assert names == ["circle", "square", "triangle", "star"]
    gt = read_gt(str(clip.with_suffix(".gt.txt")))
    assert gt.shape[1] == len(GT_COLUMNS) == 9
    assert gt[:, 0].min() == 1 and gt[:, 0].max() <= 60  # frames count from 1
    assert set(gt[:, 6]) == {1} and set(gt[:, 7]) <= {0, 1, 2, 3}
    assert (gt[:, 2] >= 0).all() and (gt[:, 2] + gt[:, 4] <= 320).all() and (gt[:, 3] + gt[:, 5] <= 240).all()
    assert ((gt[:, 8] > 0) & (gt[:, 8] <= 1)).all()
    # an id is on at most one line per frame
    assert len({(f, i) for f, i in gt[:, :2]}) == len(gt)


def test_scene_has_crossing_occlusion_entries_and_exits(clip):
    gt = read_gt(str(clip.with_suffix(".gt.txt")))
    by_id = {int(i): gt[gt[:, 1] == i] for i in np.unique(gt[:, 1])}
    assert len(by_id) == 6
    # objects 1 and 2 swap sides: their paths cross
    both = sorted(set(by_id[1][:, 0]) & set(by_id[2][:, 0]))
    cx = {i: {r[0]: r[2] + r[4] / 2 for r in by_id[i]} for i in (1, 2)}
    assert cx[1][both[0]] < cx[2][both[0]] and cx[1][both[-1]] > cx[2][both[-1]]
    # object 2 passes behind object 1
    assert by_id[2][:, 8].min() < 0.5 and by_id[1][:, 8].min() > 0.9
    # some objects enter after the first frame, some leave before the last
    assert any(rows[:, 0].min() > 1 for rows in by_id.values())
    assert any(rows[:, 0].max() < 60 for rows in by_id.values())


def test_same_seed_same_video():
    a = [(f.tobytes(), rows) for f, rows in render_frames(5, (128, 96), 4, seed=1)]
    b = [(f.tobytes(), rows) for f, rows in render_frames(5, (128, 96), 4, seed=1)]
    assert a == b


def test_video_and_dataset_options_do_not_mix(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["synth", str(tmp_path), "--video", str(tmp_path / "x.mp4")])
    with pytest.raises(SystemExit):
        main(["synth", str(tmp_path)])
