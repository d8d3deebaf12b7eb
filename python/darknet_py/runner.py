"""Runs detection over a Source: annotated images/videos in the output folder, results as dicts."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, TextIO

from .draw import draw_detections, draw_fps
from .network import Detection, Network
from .progress import Progress
from .sources import Source, is_video, output_path, read_image, write_image
from .video import FrameReader, FrameWriter


@dataclass
class DetectOptions:
    thresh: float = 0.25
    nms: float = 0.45
    letterbox: bool = False
    out_dir: str = "detections"


def darknet_lines(detections: List[Detection]) -> List[str]:
    """Detections as Darknet's `detector test -ext_output` prints them."""
    return [f"{d.class_name}: {d.confidence * 100:.0f}%\t(left_x: {d.x:4.0f}   top_y: {d.y:4.0f}   "
            f"width: {d.w:4.0f}   height: {d.h:4.0f})" for d in detections]


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


class Runner:
    """Detects objects in every file of a Source. `results` collects one dict per image or video
    frame (for --json); `failures` the files that could not be read, which are skipped."""

    def __init__(self, net: Network, source: Source, options: DetectOptions,
                 stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> None:
        self.net, self.source, self.opt = net, source, options
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.classes = max(net.classes, len(net.names))
        self.results: List[Dict[str, Any]] = []
        self.failures: List[str] = []
        self.outputs: List[str] = []

    def run(self) -> None:
        images = [f for f in self.source.files if not is_video(f)]
        if images:
            self.run_images(images)
        for video in self.source.videos:
            self.run_video(video)

    def _output_for(self, src: str) -> str:
        out = output_path(src, self.source, self.opt.out_dir)
        if _same_file(out, src):
            raise ValueError(f"output would overwrite the input: {src} (choose another --out folder)")
        return out

    def _detect(self, image) -> List[Detection]:
        return self.net.detect(image, self.opt.thresh, self.opt.nms, self.opt.letterbox)

    # ---- images ------------------------------------------------------------------------------
    def run_images(self, files: List[str]) -> None:
        single = self.source.kind == "image"
        bar = None if single else Progress(len(files), "images", label=f"on {self.net.device}", stream=self.stderr)
        try:
            for path in files:
                out = self._output_for(path)
                try:
                    image = read_image(path)
                except (OSError, ValueError) as e:
                    if bar is None:  # the only file: nothing else to do
                        raise
                    # one bad file in a folder should not cost the others; the exit code still says so
                    self.failures.append(path)
                    bar.message(f"skipped: {e}")
                    continue
                t0 = time.perf_counter()
                dets = self._detect(image)
                ms = (time.perf_counter() - t0) * 1000
                write_image(out, draw_detections(image, dets, self.classes))
                self.outputs.append(out)
                self.results.append({"image": path, "output": out, "width": image.shape[1],
                                     "height": image.shape[0], "detections": [d.to_dict() for d in dets]})
                if single:
                    print(f"{path}: Predicted in {ms:.1f} milli-seconds.", file=self.stdout)
                    for line in darknet_lines(dets):
                        print(line, file=self.stdout)
                    print(f"annotated image: {out}", file=self.stderr)
                elif bar is not None:
                    bar.update()
        finally:
            if bar is not None:
                bar.close()
                print(f"annotated images in {self.opt.out_dir}", file=self.stderr)

    # ---- videos ------------------------------------------------------------------------------
    def run_video(self, path: str) -> None:
        out = self._output_for(path)
        letterbox = self.opt.letterbox
        # preprocessing (Darknet's resize) runs in the decoding thread, beside the forward pass
        with FrameReader(path, prepare=lambda f: self.net.preprocess(f, letterbox)) as reader, \
                FrameWriter(out, reader.fps) as writer:
            self.outputs.append(out)  # also when interrupted: the writer finalizes what it got
            bar = Progress(reader.frame_count, "frames", label=f"{os.path.basename(path)} on {self.net.device}",
                           stream=self.stderr)
            fps: Optional[float] = None
            last = time.perf_counter()
            try:
                for index, frame, blob in reader:
                    size = (frame.shape[1], frame.shape[0])
                    dets = self.net.detect_blob(blob[None], [size], self.opt.thresh, self.opt.nms, letterbox)[0]
                    self.results.append({"video": path, "frame": index, "detections": [d.to_dict() for d in dets]})
                    draw_detections(frame, dets, self.classes, inplace=True)  # the frame is ours
                    now = time.perf_counter()
                    # frames per second of the whole loop, smoothed so the overlay does not flicker
                    inst = 1.0 / max(now - last, 1e-6)
                    fps = inst if fps is None else 0.9 * fps + 0.1 * inst
                    last = now
                    draw_fps(frame, fps)
                    writer.write(frame)
                    bar.update()
            finally:
                bar.close()
        print(f"annotated video: {out}", file=self.stderr)


def write_json(path: str, document: Dict[str, Any]) -> None:
    """Writes the JSON document atomically (a partial file never replaces a good one), with one
    line per entry of "results" so that a video's thousands of frames stay greppable."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    head = {k: v for k, v in document.items() if k != "results"}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    results = ",\n".join("  " + json.dumps(r) for r in document.get("results", []))
    lines.append(f' "results": [\n{results}\n ]' if results else ' "results": []')
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    os.replace(tmp, path)
