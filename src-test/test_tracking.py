"""Tracking (`detect --track`, Network.track/stream(track=True)) on a `synth --video` clip with the
demo model, scored with motmetrics against the clip's ground truth; counting across lines and zones."""
from __future__ import annotations

import json
import sys

import cv2
import pytest

from darknet_py.commands.cli import main
from darknet_py.data.synth_video import read_gt, write_video
from darknet_py.model_files.demo import demo_network
from darknet_py.network import Detection

trackers = pytest.importorskip("trackers", reason="the track extra (pip install trackers) is not installed")

FRAMES, SIZE, OBJECTS, SEED = 150, (480, 360), 8, 0
# away from the frame's edges (a zone there sees an object enter in the ground truth before the
# detector and tracker can: a track first seen inside a zone is not an entry)
LINES = ["120,0,120,360", "0,120,480,120"]
ZONES = ["100,100,380,100,380,260,100,260"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("track")
    video = d / "clip.mp4"
    write_video(str(video), FRAMES, SIZE, OBJECTS, seed=SEED)
    return video


@pytest.fixture(scope="module")
def tracked(clip):
    """One CLI run over the clip with tracking, JSON, tracks file and crops."""
    d = clip.parent
    out, js, crops = d / "out", d / "clip.json", d / "crops"
    counting = [a for line in LINES for a in ("--count-line", line)] + [a for z in ZONES for a in ("--count-zone", z)]
    rc = main(["detect", str(clip), "--track", "--json", str(js), "--save-labels", "--save-crops", str(crops),
               "--out", str(out)] + counting)
    assert rc == 0
    return {"out": out, "json": json.loads(js.read_text()), "crops": crops}


def test_json_video_and_crops_carry_track_ids(tracked):
    doc = tracked["json"]
    assert doc["model"]["tracker"] == "bytetrack"
    ids = {det["track_id"] for r in doc["results"] for det in r["detections"] if "track_id" in det}
    assert 5 <= len(ids) <= 12 and min(ids) == 1
    assert (tracked["out"] / "clip.mp4").is_file()
    # crops by track: crops/<class>/<track id>/clip_<frame>.jpg
    per_track = [p for p in tracked["crops"].glob("*/*") if p.is_dir()]
    assert per_track and all(p.name.isdigit() for p in per_track)
    assert any(len(list(p.glob("clip_*.jpg"))) > 20 for p in per_track)


def test_mot_scores_on_the_synth_clip(clip, tracked):
    from darknet_py.evaluation.mot import mot_scores

    gt = read_gt(str(clip.with_suffix(".gt.txt")))
    tracks = read_gt(str(tracked["out"] / "clip.tracks.txt"))
    s = mot_scores(gt, tracks)
    print(f"\nsynth clip {FRAMES} frames {SIZE[0]}x{SIZE[1]} {OBJECTS} objects: MOTA {s['mota']:.3f} "
          f"IDF1 {s['idf1']:.3f} ID switches {s['id_switches']} (FP {s['false_positives']}, "
          f"misses {s['misses']} of {s['objects']})")
    assert s["mota"] >= 0.90
    assert s["idf1"] >= 0.85


def test_mot_scores_of_the_truth_and_of_a_swap(clip):
    from darknet_py.evaluation.mot import mot_scores

    gt = read_gt(str(clip.with_suffix(".gt.txt")))
    s = mot_scores(gt, gt)
    assert s["mota"] == 1 and s["idf1"] == 1 and s["id_switches"] == 0
    swapped = gt.copy()
    late = (swapped[:, 0] > 100) & (swapped[:, 8] >= 0.5)
    swapped[late & (gt[:, 1] == 1), 1], swapped[late & (gt[:, 1] == 3), 1] = 3, 1  # objects 1 and 3 trade ids
    s = mot_scores(gt, swapped)
    assert s["id_switches"] == 2 and s["idf1"] < 1


def test_network_track_and_stream(clip):
    net = demo_network("cpu")
    a = [[(d.track_id, d.class_id) for d in dets] for _, dets in net.track(str(clip), max_frames=20)]
    b = [[(d.track_id, d.class_id) for d in dets] for _, dets in net.stream(str(clip), max_frames=20, track=True)]
    assert a == b
    assert any(tid is not None for frame in a for tid, _ in frame)
    c = [dets for _, dets in net.stream(str(clip), max_frames=3)]
    assert all(d.track_id is None for dets in c for d in dets)


def test_folder_of_frames_in_order(clip, tmp_path):
    cap = cv2.VideoCapture(str(clip))
    frames = tmp_path / "frames"
    frames.mkdir()
    for _ in range(60):  # to where four objects are in view
        cap.read()
    for i in range(12):
        ok, f = cap.read()
        assert ok
        cv2.imwrite(str(frames / f"{i:04d}.png"), f)
    assert main(["detect", str(frames), "--track", "--minimum-consecutive-frames", "1", "--save-labels",
                 "--out", str(tmp_path / "out")]) == 0
    rows = [line.split() for p in sorted(frames.glob("*.txt")) for line in p.read_text().splitlines()]
    assert rows and all(len(r) == 6 for r in rows)  # class x y w h track_id
    first = {r[5] for r in (line.split() for line in (frames / "0001.txt").read_text().splitlines())}
    last = {r[5] for r in (line.split() for line in (frames / "0011.txt").read_text().splitlines())}
    assert len(first & last) >= 3  # the same objects keep their ids from frame to frame


def test_tracker_parameters():
    from darknet_py.tracking.tracker import Tracker

    t = Tracker("bytetrack", 25.0, lost_track_buffer=5)
    assert t.params["lost_track_buffer"] == 5 and t.params["minimum_consecutive_frames"] == 2
    with pytest.raises(ValueError, match="takes no high_conf_det_threshold"):
        Tracker("sort", high_conf_det_threshold=0.5)
    dets = [Detection(0, "circle", 0.9, 10.0 * i, 10, 20, 20) for i in range(3)]
    for step in range(3):
        out = t.update([Detection(0, "circle", 0.9, d.x + step, d.y, d.w, d.h) for d in dets])
    assert sorted(d.track_id for d in out) == [1, 2, 3]
    assert "track_id" in out[0].to_dict() and "track_id" not in dets[0].to_dict()


@pytest.mark.parametrize("missing, args", [("trackers", ["--track", "sort"]), ("scipy", ["--track"]),
                                           ("scipy.optimize", ["--count-line", "1,2,3,4"])])
def test_missing_library_says_how_to_install(clip, monkeypatch, capsys, missing, args):
    # SORT and OC-SORT are the trackers library's; our ByteTrack needs scipy (both in the track extra)
    monkeypatch.setitem(sys.modules, missing, None)
    assert main(["detect", str(clip)] + args) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and 'pip install "darknet-engine[track]"' in err[0]


def test_tracks_text_kept_only_for_save_labels():
    from darknet_py.commands.runner import DetectOptions, Tracking

    for save in (False, True):
        tracking = Tracking(DetectOptions(track="bytetrack", save_labels=save), 25.0)
        for f in range(1, 5):
            tracking.update(f, [Detection(0, "circle", 0.9, 10.0 + f, 10, 20, 20)])
        assert bool(tracking.mot) == save  # a long stream without --save-labels keeps no lines


def test_tracking_picture_tool(tmp_path):
    import importlib.util
    from pathlib import Path

    tool = Path(__file__).resolve().parents[1] / "tools" / "tracking_picture.py"
    spec = importlib.util.spec_from_file_location("tracking_picture", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "frame.png"
    assert module.main([str(out), "--frame", "30", "--frames", "40"]) == 0
    img = cv2.imread(str(out))
    assert img.shape == (360, 480, 3)
    # the count line (yellow, 0,255,255) is drawn down the middle
    column = img[:, 238:243].reshape(-1, 3).astype(int)
    assert ((column[:, 0] < 80) & (column[:, 1] > 200) & (column[:, 2] > 200)).mean() > 0.5


# ---- counting ------------------------------------------------------------------------------
def test_counts_match_the_ground_truth(clip, tracked):
    from darknet_py.tracking.counting import count_rows, make_counters

    gt = read_gt(str(clip.with_suffix(".gt.txt")))
    names = clip.with_suffix(".names").read_text().split()
    truth = make_counters(LINES, ZONES)
    count_rows(gt, truth, names)
    [summary] = tracked["json"]["counts"]
    got = summary["counters"]
    assert [c["type"] for c in got] == ["line", "line", "zone"]
    for mine, true in zip(got, truth):
        assert mine["counts"] == {k: dict(v) for k, v in sorted(true.counts.items())}
        assert mine["total"] == true.total
    # both directions happen
    assert got[0]["total"]["left"] >= 1 and got[0]["total"]["right"] >= 1
    assert got[2]["total"]["entry"] >= 1 and got[2]["total"]["exit"] >= 1
    # per frame: the counts so far, ending at the final ones
    per_frame = [r["counts"] for r in tracked["json"]["results"]]
    assert len(per_frame) == FRAMES
    assert [c["total"] for c in per_frame[-1]] == [c["total"] for c in got]
    assert per_frame[0][0]["total"] == {"right": 0, "left": 0}


def test_line_counter_sides_ends_and_jitter():
    from darknet_py.tracking.counting import LineCounter, ZoneCounter, parse_points

    line = LineCounter(parse_points("0,100,200,100", 2))  # left to right: "right" is below
    path = [(1, "a", 50, 90), (1, "a", 50, 99.5), (1, "a", 50, 101), (1, "a", 50, 99), (1, "a", 50, 110)]
    events = [e for p in path for e in line.update([p])]
    assert events == [(1, "a", "right")]  # the jitter within 2 px of the line is not counted
    line.update([(1, "a", 50, 80)])
    assert line.counts == {"a": {"right": 1, "left": 1}}
    line.update([(2, "b", 300, 80)])
    line.update([(2, "b", 300, 120)])  # beyond the segment's end
    assert line.total == {"right": 1, "left": 1}
    zone = ZoneCounter(parse_points("0,0,10,0,10,10,0,10", 3))
    for p in [(5, "c", 20, 5), (5, "c", 5, 5), (5, "c", 20, 5), (6, "c", 5, 5)]:
        zone.update([p])
    assert zone.total == {"entry": 1, "exit": 1}  # track 6, first seen inside, is no entry
    with pytest.raises(ValueError):
        parse_points("1,2,3", 2)


def test_bad_count_line_is_one_line(clip, capsys):
    assert main(["detect", str(clip), "--count-line", "1,2,3"]) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "x1,y1,x2,y2" in err[0]


def test_stream_is_tracked(clip, tmp_path, capsys):
    from test_live_sources import MjpegServer

    cap = cv2.VideoCapture(str(clip))
    frames = [cap.read()[1] for _ in range(90)][60:]  # where four objects are in view
    server = MjpegServer([[cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes() for f in frames]])
    try:
        rc = main(["detect", server.url, "--track", "--no-drop", "--reconnect", "0", "--out", str(tmp_path / "out"),
                   "--json", str(tmp_path / "s.json")])
    finally:
        server.close()
    assert rc == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "s.json").read_text())["results"]
    assert len(results) == len(frames)
    ids = [{d["track_id"] for d in r["detections"] if "track_id" in d} for r in results]
    assert len(ids[5] & ids[-1]) >= 3  # the same objects, the same ids
