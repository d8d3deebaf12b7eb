"""Our vectorised ByteTrack (tracking/bytetrack.py) against the library it ports, `trackers`'
ByteTrackTracker: the same ids frame by frame and the same Kalman boxes, on the demo model's
detections of synth clips and on loads built to reach every branch (both association stages, lost
and re-found tracks, tracks that expire, unconfirmed tracks that miss a frame)."""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from darknet_py.data.synth_video import write_video
from darknet_py.media.stream import iter_frames
from darknet_py.model_files.demo import demo_network
from darknet_py.network import Detection
from darknet_py.tracking.bytetrack import ByteTrack, iou_matrix
from darknet_py.tracking.tracker import Tracker

trackers = pytest.importorskip("trackers", reason="the track extra (pip install trackers) is not installed")

PARAMS = [{}, {"minimum_consecutive_frames": 1, "lost_track_buffer": 5},
          {"high_conf_det_threshold": 0.9, "track_activation_threshold": 0.5, "minimum_iou_threshold": 0.3}]


def run_both(frames, frame_rate=25.0, **params):
    """Per frame: (our ids, the library's ids, our boxes, the library's boxes) of the live tracks."""
    ours, lib = Tracker("bytetrack", frame_rate, **params), Tracker("bytetrack", frame_rate, library=True, **params)
    for dets in frames:
        a, b = ours.update(dets), lib.update(dets)
        mine = ours._tracker
        theirs = lib._tracker.tracks
        yield ([d.track_id for d in a], [d.track_id for d in b], mine.box,
               np.array([t.get_state_bbox() for t in theirs]).reshape(-1, 4), mine.ids, [t.tracker_id for t in theirs])


@pytest.fixture(scope="module")
def clip_detections(tmp_path_factory):
    """The demo model's detections on two synth clips (seed 0: 8 objects, one hidden by another;
    seed 1: 12 objects at 320x240, crowded), at a low threshold so that both stages have work."""
    net = demo_network("cpu")
    out = []
    for seed, size, objects in ((0, (480, 360), 8), (1, (320, 240), 12)):
        video = str(tmp_path_factory.mktemp("bt") / "clip.mp4")
        write_video(video, 90, size, objects, seed=seed)
        out.append([net.detect(f, thresh=0.1) for f in iter_frames(video)])
    return out


def test_same_ids_and_boxes_as_the_library_on_synth_clips(clip_detections):
    confirmed = 0
    for frames in clip_detections:
        assert any(d.confidence < 0.6 for dets in frames for d in dets)  # the second stage has candidates
        for params in PARAMS:
            for a, b, box, lib_box, ids, lib_ids in run_both(frames, **params):
                assert a == b
                assert list(ids) == lib_ids
                np.testing.assert_allclose(box, lib_box, rtol=0, atol=1e-9)
                confirmed += sum(t is not None for t in a)
    assert confirmed > 500


def synthetic_load(seed=0, frames=120, objects=30):
    """Boxes moving on straight lines with jitter; some vanish for a few frames (lost, then found
    again or expired), some flicker on one frame (unconfirmed tracks that miss), confidences on both
    sides of the stage split, new objects arriving."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 1500, (objects, 2))
    vel = rng.uniform(-6, 6, (objects, 2))
    size = rng.uniform(20, 60, (objects, 2))
    start = rng.integers(0, frames // 2, objects)
    gap = rng.integers(0, frames, objects), rng.integers(1, 12, objects)
    out = []
    for f in range(frames):
        dets = []
        for k in range(objects):
            if f < start[k] or gap[0][k] <= f < gap[0][k] + gap[1][k]:
                continue
            x, y = pos[k] + vel[k] * f + rng.normal(0, 1.0, 2)
            dets.append(Detection(0, "circle", float(rng.uniform(0.2, 1.0)), float(x), float(y), *map(float, size[k])))
        for _ in range(int(rng.integers(0, 3))):  # clutter: one-frame detections
            x, y = rng.uniform(0, 1500, 2)
            dets.append(Detection(1, "square", float(rng.uniform(0.6, 1.0)), float(x), float(y), 30.0, 30.0))
        rng.shuffle(dets)
        out.append(dets)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_ids_and_boxes_as_the_library_on_hard_loads(seed):
    load = synthetic_load(seed)
    for params in PARAMS:
        seen, dropped = set(), 0
        previous = 0
        for a, b, box, lib_box, ids, lib_ids in run_both(load, 30.0, **params):
            assert a == b
            assert list(ids) == lib_ids
            np.testing.assert_allclose(box, lib_box, rtol=0, atol=1e-9)
            seen.update(t for t in a if t is not None)
            dropped += max(0, previous - len(ids))
            previous = len(ids)
        assert len(seen) > 20 and dropped > 0


def test_empty_frames_and_no_detections():
    t = ByteTrack()
    assert t.update(np.zeros((0, 4)), np.zeros(0)).shape == (0,)
    box = np.array([[10, 10, 50, 50]], np.float32)
    t.update(box, [0.9])
    assert t.update(box, [0.9]).tolist() == [0]
    for _ in range(40):  # lost longer than the buffer: gone
        assert t.update(np.zeros((0, 4)), np.zeros(0)).shape == (0,)
    assert len(t.ids) == 0
    assert t.update(box, [0.9]).tolist() == [-1]  # a new track, not yet confirmed


def test_defaults_are_the_library_s():
    lib = inspect.signature(trackers.ByteTrackTracker.__init__).parameters
    ours = inspect.signature(ByteTrack.__init__).parameters
    for name, p in ours.items():
        if name != "self":
            assert lib[name].default == p.default, name


def test_iou_matrix_is_supervision_s():
    import supervision as sv

    rng = np.random.default_rng(0)
    a = rng.uniform(0, 100, (7, 2))
    a = np.c_[a, a + rng.uniform(0, 40, (7, 2))]
    b = np.r_[a[:3] + 1.5, [[0, 0, 0, 0]]].astype(np.float32)  # an empty box: IoU 0 where the union is 0
    got, want = iou_matrix(a, b.astype(np.float64)), sv.box_iou_batch(a, b)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert (got[:3, :3].diagonal() > 0.5).all()


def test_replaced_detections_keep_every_field():
    t = Tracker("bytetrack", minimum_consecutive_frames=1)
    d = Detection(2, "triangle", 0.8, 1.0, 2.0, 30.0, 40.0)
    t.update([d])
    [out] = t.update([d])
    assert out == dataclasses.replace(d, track_id=1)
    assert hash(out) == hash(dataclasses.replace(d, track_id=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.x = 3.0
