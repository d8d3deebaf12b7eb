"""The picture of docs/video_tracking.md: one frame of the synth clip as `detect --track
--count-line` draws it (boxes with track ids, trails, the count line and its totals so far).

    python tools/tracking_picture.py docs/tracking_frame.png [--frame 100]

It writes the clip of docs/video_tracking.md (`synth --video clip.mp4 --frames 150 --size 480x360
--objects 8 --seed 0`), decodes its first FRAME frames
into a folder of PNGs and runs `darknet_py detect FOLDER --track --count-line 240,0,240,360` on it
(a folder of frames is tracked in order, and its annotated copies are written without a video
codec's loss), then copies the last annotated frame to OUT.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import cv2

from darknet_py.commands.cli import main as cli
from darknet_py.data.synth_video import write_video

LINE = "240,0,240,360"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("--frame", type=int, default=100, help="the frame shown (from 1)")
    ap.add_argument("--frames", type=int, default=150, help="the clip's length")
    args = ap.parse_args(argv)
    if not 1 <= args.frame <= args.frames:
        raise SystemExit(f"--frame must be within the clip's {args.frames} frames")
    with tempfile.TemporaryDirectory() as d:
        clip = os.path.join(d, "clip.mp4")
        write_video(clip, args.frames, (480, 360), 8, seed=0)
        frames = os.path.join(d, "frames")
        os.makedirs(frames)
        cap = cv2.VideoCapture(clip)
        for i in range(1, args.frame + 1):
            ok, f = cap.read()
            if not ok:
                raise SystemExit(f"{clip}: frame {i} could not be decoded")
            cv2.imwrite(os.path.join(frames, f"{i:04d}.png"), f)
        cap.release()
        out = os.path.join(d, "out")
        rc = cli(["detect", frames, "--track", "--count-line", LINE, "--out", out])
        if rc:
            return rc
        shutil.copyfile(os.path.join(out, f"{args.frame:04d}.png"), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
