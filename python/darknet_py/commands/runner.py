"""Runs detection over a Source: annotated images/videos in the output folder, results as dicts;
optionally a window (--show), label files (--save-labels) and crops (--save-crops)."""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, TextIO, Union

from ..outputs.draw import Trails, draw_counters, draw_detections, draw_fps
from ..exit_codes import OutputError
from ..outputs.files import write_text
from ..outputs.labels_crops import mot_lines, save_crops, save_labels
from ..media.live import LiveReader, live_name
from ..network import Detection, Network
from .progress import Progress
from ..media.sources import Source, is_video, output_path, read_image, write_image
from ..media.video import FrameReader, FrameWriter, writable_video_path
from ..media.window import Window


@dataclass
class DetectOptions:
    thresh: float = 0.25
    nms: float = 0.45
    letterbox: bool = False
    out_dir: str = "detections"
    max_frames: Optional[int] = None   # per video or live source
    drop: bool = True                  # a live source: detect the newest frame, drop stale ones
    reconnect: int = 5                 # a live source: reopen attempts after it stops
    show: bool = False                 # annotated frames in a window
    save_labels: bool = False          # Darknet's -save_labels beside each image
    save_crops: Optional[str] = None   # folder for each detection's crop, by class
    print_each: bool = False           # every image's detections printed as Darknet prints them
    video_out: Optional[str] = None    # the annotated video's path (Darknet's -out_filename), else under out_dir
    track: Optional[str] = None        # a tracker's name (tracking/tracker.py TRACKERS): detections get track ids
    track_params: Dict[str, Any] = field(default_factory=dict)  # the tracker library's parameters
    count_lines: List[str] = field(default_factory=list)  # "x1,y1,x2,y2" each (tracking/counting.py)
    count_zones: List[str] = field(default_factory=list)  # "x1,y1,x2,y2,x3,y3,..." each
    trail: int = 30                    # a track's last centres drawn as its trail
    tiles: Any = None                  # "auto" or (rows, cols): tiled inference (tiling.py)
    tile_overlap: float = 0.2          # fraction of a tile shared with its neighbours


class Tracking:
    """The tracking state of one video, stream or run of images: tracker, counters, trails."""

    def __init__(self, opt: DetectOptions, fps: float) -> None:
        from ..tracking.counting import make_counters
        from ..tracking.tracker import Tracker

        self.tracker = Tracker(opt.track, fps, **opt.track_params)
        self.counters = make_counters(opt.count_lines, opt.count_zones)
        self.trails = Trails(opt.trail)
        # the .tracks.txt lines, kept only where they are written: a long stream's memory stays flat
        self.keep_mot = opt.save_labels
        self.mot: List[str] = []

    def update(self, frame_number: int, dets: List[Detection]) -> List[Detection]:
        from ..tracking.counting import detection_items

        dets = self.tracker.update(dets)
        items = detection_items(dets)
        for c in self.counters:
            c.update(items)
        self.trails.update(dets)
        if self.keep_mot:
            self.mot.extend(mot_lines(frame_number, dets))
        return dets

    def draw(self, image) -> None:
        self.trails.draw(image)
        draw_counters(image, self.counters)

    def frame_counts(self) -> List[Dict[str, Any]]:
        return [{"type": c.kind, "counts": {k: dict(v) for k, v in sorted(c.counts.items())}, "total": dict(c.total)}
                for c in self.counters]

def darknet_lines(detections: List[Detection]) -> List[str]:
    """Detections as Darknet's `detector test -ext_output` prints them."""
    return [f"{d.class_name}: {d.confidence * 100:.0f}%\t(left_x: {d.x:4.0f}   top_y: {d.y:4.0f}   "
            f"width: {d.w:4.0f}   height: {d.h:4.0f})" for d in detections]


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


class Runner:
    """Detects objects in every file of a Source. `results` collects one dict per image or video
    frame (for --json) when `keep_results`; without it memory stays flat however long the video
    (a frame's dict costs about 0.5 kB). `failures`: the files that could not be read, skipped."""

    def __init__(self, net: Network, source: Source, options: DetectOptions,
                 stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None, keep_results: bool = True) -> None:
        self.net, self.source, self.opt = net, source, options
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.classes = max(net.classes, len(net.names))
        self.results: List[Dict[str, Any]] = []
        self.keep_results = keep_results
        self.failures: List[str] = []  # "path: what is wrong" for each input skipped in whole or part
        self.outputs: List[str] = []
        self.window: Optional[Window] = None
        self._bar: Optional[Progress] = None  # the progress bar of the video or stream being run
        self.stopped = False  # the user closed the window or pressed q / Esc: the run ends there
        self.counts: List[Dict[str, Any]] = []  # each video's (or run of images') counters at its end
        if options.track or options.count_lines or options.count_zones:
            options.track = options.track or "bytetrack"
            from ..tracking.counting import make_counters
            from ..tracking.tracker import tracker_class

            tracker_class(options.track)  # fail now, in one line, where the library is missing
            make_counters(options.count_lines, options.count_zones)  # and on a malformed line or zone

    def _tracking(self, fps: float) -> Optional[Tracking]:
        return Tracking(self.opt, fps) if self.opt.track else None

    def _end_tracking(self, name: str, tracking: Optional[Tracking]) -> None:
        if tracking is not None and tracking.counters:
            self.counts.append({"source": name, "counters": [c.to_dict() for c in tracking.counters]})

    def _skip(self, message: str, bar: Optional[Progress] = None) -> None:
        """Reports a skipped input (or part of one) now, in one line, and keeps it for the summary."""
        self.failures.append(message)
        if bar is not None:
            bar.message(f"skipped: {message}")
        else:
            print(f"skipped: {message}", file=self.stderr)

    def run(self) -> None:
        if self.opt.show:
            self.window = Window(f"darknet_py: {self.source.spec}", lambda text: print(text, file=self.stderr))
        try:
            self._run_source()
        finally:
            if self.window is not None:
                self.window.close()

    def _run_source(self) -> None:
        for path in self.source.ignored:  # a glob also matched other files: say so, go on
            self._skip(f"{path}: not an image or video (by its extension)")
        for line in self.source.missing:  # a list named files that are not there
            self._skip(line)
        if self.source.live is not None:
            self.run_live(self.source.live)
            return
        images = [f for f in self.source.files if not is_video(f)]
        if images:
            self.run_images(images)
        for video in self.source.videos:
            if self.stopped:
                return
            if len(self.source.files) == 1:  # the only input: its error is the command's
                self.run_video(video)
                continue
            try:
                self.run_video(video)
            except (OSError, ValueError) as e:
                if isinstance(e, OutputError):
                    raise  # an output problem will not go away with the next file
                self._skip(" ".join(str(e).split()))

    def _output_for(self, src: str) -> str:
        out = output_path(src, self.source, self.opt.out_dir)
        if _same_file(out, src):
            raise ValueError(f"output would overwrite the input: {src} (choose another --out folder)")
        return out

    def _detect(self, image) -> List[Detection]:
        if self.opt.tiles:
            return self.net.detect_tiled(image, self.opt.tiles, self.opt.tile_overlap, self.opt.thresh, self.opt.nms,
                                         self.opt.letterbox)
        return self.net.detect(image, self.opt.thresh, self.opt.nms, self.opt.letterbox)

    # ---- images ------------------------------------------------------------------------------
    def run_images(self, files: List[str]) -> None:
        single = self.source.kind == "image"
        bar = None if single else Progress(len(files), "images", label=f"on {self.net.device}", stream=self.stderr)
        tracking = self._tracking(30.0)  # a folder of frames is tracked in its (sorted) order
        frame_number = 0
        try:
            for path in files:
                out = self._output_for(path)
                try:
                    image = read_image(path)
                except (OSError, ValueError) as e:
                    if bar is None:  # the only file: nothing else to do
                        raise
                    # one bad file in a folder should not cost the others; the exit code still says so
                    self._skip(str(e), bar)
                    continue
                t0 = time.perf_counter()
                dets = self._detect(image)
                ms = (time.perf_counter() - t0) * 1000
                frame_number += 1
                if tracking is not None:
                    dets = tracking.update(frame_number, dets)
                if self.opt.save_labels:
                    save_labels(path, dets, image.shape[1], image.shape[0], tracked=tracking is not None)
                if self.opt.save_crops:
                    save_crops(self.opt.save_crops, os.path.splitext(os.path.basename(path))[0], image, dets,
                               by_track=tracking is not None)
                annotated = draw_detections(image, dets, self.classes)
                if tracking is not None:
                    tracking.draw(annotated)
                write_image(out, annotated)
                self.outputs.append(out)
                if self.keep_results:
                    self.results.append({"image": path, "output": out, "width": image.shape[1],
                                         "height": image.shape[0], "detections": [d.to_dict() for d in dets]})
                    if tracking is not None and tracking.counters:
                        self.results[-1]["counts"] = tracking.frame_counts()
                if single or self.opt.print_each:
                    print(f"{path}: Predicted in {ms:.1f} milli-seconds.", file=self.stdout)
                    for line in darknet_lines(dets):
                        print(line, file=self.stdout)
                if single:
                    print(f"annotated image: {out}", file=self.stderr)
                elif bar is not None:
                    bar.update()
                # a still image stays up until a key: any key shows the next, q or Esc stops
                if self.window is not None and not self.window.show(annotated, wait_for_key=True):
                    self.stopped = True
                    break
        finally:
            self._end_tracking(self.source.spec, tracking)
            if bar is not None:
                bar.close()
                print(f"annotated images in {self.opt.out_dir}", file=self.stderr)

    # ---- videos and live sources ---------------------------------------------------------------
    def run_video(self, path: str) -> None:
        out = writable_video_path(self.opt.video_out or self._output_for(path))
        # preprocessing (Darknet's resize) runs in the decoding thread, beside the forward pass
        with FrameReader(path, prepare=lambda f: self.net.preprocess(f, self.opt.letterbox)) as reader:
            total = reader.frame_count
            if self.opt.max_frames is not None:
                total = min(total or self.opt.max_frames, self.opt.max_frames)
            self._run_frames(reader, path, out, total)
        if reader.bad_frames:
            self._skip(f"{path}: {reader.bad_frames_text()}")

    def run_live(self, spec: Union[int, str]) -> None:
        """A camera or stream until it ends, Ctrl-C, q in the window, or --max-frames."""
        out = (writable_video_path(self.opt.video_out) if self.opt.video_out
               else os.path.join(self.opt.out_dir, live_name(spec) + ".mp4"))
        with LiveReader(spec, drop=self.opt.drop, reconnect=self.opt.reconnect, on_message=self._message) as reader:
            self._run_frames(reader, reader.name, out, self.opt.max_frames)
        if reader.end_reason:
            print(reader.end_reason, file=self.stderr)
        if reader.dropped:
            print(f"{reader.name}: {reader.dropped} stale frame(s) dropped (detection was slower than the source; "
                  "--no-drop detects every frame)", file=self.stderr)

    def _message(self, text: str) -> None:
        """A line of its own (a live source's reconnection notices), kept clear of the progress bar."""
        if self._bar is not None:
            self._bar.message(text)
        else:
            print(text, file=self.stderr)

    def _run_frames(self, reader: Union[FrameReader, LiveReader], name: str, out: str, total: Optional[int]) -> None:
        """Detects every frame the reader hands out, writes the annotated video to `out`."""
        stem = os.path.splitext(os.path.basename(out))[0]
        tracking = self._tracking(reader.fps)
        try:
            self._frames_into(reader, name, out, total, stem, tracking)
        finally:
            self._end_tracking(name, tracking)
            if tracking is not None and self.opt.save_labels and tracking.mot:
                tracks = os.path.splitext(out)[0] + ".tracks.txt"
                write_text(tracks, "".join(tracking.mot))
                print(f"tracks: {tracks}", file=self.stderr)

    def _frames_into(self, reader: Union[FrameReader, LiveReader], name: str, out: str, total: Optional[int],
                     stem: str, tracking: Optional[Tracking]) -> None:
        letterbox = self.opt.letterbox
        with FrameWriter(out, reader.fps) as writer:
            bar = self._bar = Progress(total, "frames", label=f"{os.path.basename(name)} on {self.net.device}",
                                       stream=self.stderr)
            fps: Optional[float] = None
            last = time.perf_counter()
            try:
                for index, frame, blob in reader:
                    if blob is None:  # a live reader hands out raw frames: only those detected are prepared
                        blob = self.net.preprocess(frame, letterbox)
                    size = (frame.shape[1], frame.shape[0])
                    if self.opt.tiles:
                        dets = self._detect(frame)
                    else:
                        dets = self.net.detect_blob(blob[None], [size], self.opt.thresh, self.opt.nms, letterbox)[0]
                    if tracking is not None:  # MOTChallenge frame numbers count from 1
                        dets = tracking.update(index + 1, dets)
                    if self.keep_results:
                        self.results.append({"video": name, "frame": index,
                                             "detections": [d.to_dict() for d in dets]})
                        if tracking is not None and tracking.counters:
                            self.results[-1]["counts"] = tracking.frame_counts()
                    if self.opt.save_crops:  # (--save-labels is for images: a frame has no file to sit beside)
                        save_crops(self.opt.save_crops, f"{stem}_{index:06d}", frame, dets,
                                   by_track=tracking is not None)
                    draw_detections(frame, dets, self.classes, inplace=True)  # the frame is ours
                    if tracking is not None:
                        tracking.draw(frame)
                    now = time.perf_counter()
                    # frames per second of the whole loop, smoothed so the overlay does not flicker
                    inst = 1.0 / max(now - last, 1e-6)
                    fps = inst if fps is None else 0.9 * fps + 0.1 * inst
                    last = now
                    draw_fps(frame, fps)
                    writer.write(frame)
                    if isinstance(reader, LiveReader):
                        bar.note = f"{reader.dropped} dropped"
                    bar.update()
                    if self.window is not None and not self.window.show(frame):
                        self.stopped = True
                        break
                    if self.opt.max_frames is not None and bar.count >= self.opt.max_frames:
                        break
            except KeyboardInterrupt:
                if writer.frames:  # the writer finalizes what it got under the output's name
                    self.outputs.append(out)
                raise
            finally:
                bar.close()
                self._bar = None
        if not writer.frames:
            raise ValueError(f"{name}: no frame could be decoded")
        self.outputs.append(out)
        print(f"annotated video: {out}", file=self.stderr)
