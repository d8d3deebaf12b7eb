"""The `darknet_py` command: detect, info, cfglayers, map, synth, train, cfg, calc_anchors, selftest, export,
weights.

Exit codes: see exit_codes.py (listed by `--help`). Errors are one line on stderr, no traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any, Dict, Optional, Sequence

from .argtypes import add_allow_partial_option, non_negative_int, positive_int, unit_interval
from .. import exit_codes
from ..exit_codes import PROG, report_skips
from ..devices import add_device_option, add_precision_option

DEFAULT_OUT = "detections"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' line breaks (defaults are spelled out in each option's help)."""


DETECT_EXAMPLES = f"""\
SOURCE is an image, a folder of images, a quoted glob ("photos/**/*.jpg"), a video
(.mp4 .mov .avi .mkv .m4v .webm .mpg .mpeg .ts .wmv .gif), a list file (list.txt: one image or
video path a line, as Darknet's `< list.txt`), `-` (that list on stdin), a camera index (0) or a
stream URL (rtsp://, rtmp://, http(s):// MJPEG, whatever OpenCV's FFmpeg opens).
Images are written annotated to --out with their own names; a video becomes an annotated video
of the same frame count, fps and size, with an FPS overlay (a .webm .mpg .mpeg .ts .wmv .gif becomes
<name>.<ext>.mp4, a container every OpenCV build writes); a camera or stream becomes
--out/camera0.mp4 or --out/<last part of the URL>.mp4. For a single image the detections are also
printed as Darknet prints them.

A camera or stream runs until it ends, Ctrl-C, q/Esc in the --show window, or --max-frames. It
detects the newest frame and drops the stale ones (counted on the progress line; --no-drop detects
every frame), and reopens a stream that stops, waiting 0.5 s, 1 s, 2 s, ... (at most 8 s) before
each of --reconnect attempts.

--cfg takes a path or the name of a cfg shipped with darknet_py (see `{PROG} info`); an
80-class network gets the shipped coco.names unless --names is given.

Without --cfg and --weights it uses the bundled demo model (circles, squares, triangles, stars),
and without SOURCE that model's sample image.

examples:
  {PROG} detect
  {PROG} detect dog.jpg --cfg yolov4-tiny.cfg --weights yolov4-tiny.weights
  {PROG} detect photos/ --cfg yolov4-tiny --weights yolov4-tiny.weights --out annotated/
  {PROG} detect "shots/*.png" --cfg my.cfg --weights my.weights --names my.names --thresh 0.5
  {PROG} detect clip.mp4 --cfg yolov4-tiny --weights yolov4-tiny.weights --json clip.json
  {PROG} detect 0 --cfg yolov4-tiny --weights yolov4-tiny.weights --show
  {PROG} detect rtsp://192.168.1.20:554/stream1 --cfg yolov4-tiny --weights yolov4-tiny.weights --max-frames 1000
  {PROG} detect new_images.txt --cfg my.cfg --weights my.weights --names my.names --save-labels
  find shots -name "*.jpg" | {PROG} detect - --cfg my.cfg --weights my.weights --save-crops crops/
  {PROG} synth --video clip.mp4 && {PROG} detect clip.mp4 --track --count-line 240,0,240,360 --json clip.json
  {PROG} detect aerial.jpg --cfg my.cfg --weights my.weights --tiles auto

An image or video that cannot be read in a folder or glob (or a damaged stretch of a video) is
named on stderr and skipped; the others are done, the skips are listed at the end, and the exit
code is {exit_codes.SKIPPED}. Outputs appear only complete (written under a temporary name, then renamed).

{exit_codes.HELP}
"""

CFGLAYERS_EXAMPLES = f"""\
examples:
  {PROG} cfglayers yolov4-tiny.cfg
  {PROG} cfglayers yolov4 --width 608 --height 608
"""

INFO_EXAMPLES = f"""\
examples:
  {PROG} info
  {PROG} info --json
  {PROG} info --coverage yolov4-tiny.cfg --device opencl
  {PROG} info --metal-source > kernels.metal
"""


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_Formatter,
        description="A Darknet-compatible YOLO engine: detect objects in images and videos.",
        epilog=f"examples:\n  {PROG} detect dog.jpg --cfg yolov4-tiny.cfg --weights yolov4-tiny.weights\n"
               f"  {PROG} info\n  {PROG} cfglayers yolov3-tiny.cfg\n\n"
               f"Run `{PROG} COMMAND --help` for a command's options.\n\n{exit_codes.HELP}")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("detect", help="detect objects in images, folders, globs or videos",
                       description="Detect objects and write annotated copies.", epilog=DETECT_EXAMPLES,
                       formatter_class=_Formatter)
    p.add_argument("source", metavar="SOURCE", nargs="?",
                   help="image, folder, glob, video, list.txt, - (a list on stdin), camera index or stream URL "
                        "(default with the demo model: its sample image)")
    p.add_argument("--cfg", help="network .cfg: a path or a shipped cfg's name (default: the bundled demo model)")
    p.add_argument("--weights", help="Darknet .weights file, or an official model's name (yolov4-tiny: the file "
                                     f"`{PROG} weights get` downloaded; default: the bundled demo model's)")
    add_allow_partial_option(p)
    p.add_argument("--names", help="class names, one per line (default: shipped coco.names for 80 classes)")
    p.add_argument("--thresh", type=unit_interval, default=0.25, help="confidence threshold (default: %(default)s)")
    p.add_argument("--nms", type=unit_interval, default=0.45, help="NMS IoU threshold, 0 turns NMS off (default: %(default)s)")
    p.add_argument("--letterbox", action="store_true", help="keep the aspect ratio when resizing (Darknet's -letter_box)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help="folder for the annotated images/videos (default: ./%(default)s/)")
    p.add_argument("--json", metavar="FILE", help="also write every detection to this JSON file")
    p.add_argument("--threads", type=positive_int, metavar="N", help="CPU threads (default: all cores)")
    p.add_argument("--show", action="store_true",
                   help="show the annotated frames in a window as they come (q or Esc quits; an image waits for a key)")
    p.add_argument("--save-labels", action="store_true",
                   help="write Darknet/YOLO labels (class x y w h, relative) beside each image, as Darknet's -save_labels")
    p.add_argument("--save-crops", metavar="DIR", help="write each detection's crop to DIR/<class name>/")
    p.add_argument("--max-frames", type=positive_int, metavar="N", help="stop each video or stream after N frames")
    p.add_argument("--no-drop", action="store_true",
                   help="a camera or stream: detect every frame, in order, even when slower than the source")
    p.add_argument("--reconnect", type=non_negative_int, default=5, metavar="N",
                   help="a stream that stops is reopened up to N times, with back-off (default: %(default)s; 0: never)")
    p.add_argument("--verbose", action="store_true", help="also print FFmpeg's own messages (errors in the video data)")
    p.add_argument("--print-detections", action="store_true",
                   help="print every image's detections as Darknet's `detector test -ext_output` does (a single image's always are)")
    p.add_argument("--darknet-json", metavar="FILE", help="also write the detections in Darknet's `-out result.json` format")
    p.add_argument("--out-video", metavar="FILE", help="write a video or stream's annotated copy to FILE (Darknet's -out_filename)")
    p.add_argument("--tiles", metavar="auto|RxC",
                   help="tiled inference for small objects in large images: overlapping tiles (auto: at the network's "
                        "input size; RxC: R rows, C columns) and the whole image, one batch, merged across borders")
    p.add_argument("--tile-overlap", type=float, default=0.2, metavar="F",
                   help="fraction of a tile shared with its neighbours, 0..1 (default: %(default)s)")
    add_tracking_options(p)
    add_device_option(p)
    add_precision_option(p)
    p.set_defaults(func=cmd_detect, parser=p)

    p = sub.add_parser("info", help="version, build options, CPU and backends",
                       description="Show the version, how the engine was built, the CPU and the backends.",
                       epilog=INFO_EXAMPLES, formatter_class=_Formatter)
    p.add_argument("--coverage", metavar="CFG",
                   help="run CFG once (forward and a training step, small input) on --device and show, per layer,\n"
                        "which ops ran on the device and which fell back to the CPU")
    p.add_argument("--metal-source", action="store_true",
                   help="print the Metal Shading Language text of the GPU kernels, as a Mac compiles it")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_device_option(p)
    p.set_defaults(func=cmd_info, parser=p)

    p = sub.add_parser("cfglayers", help="print a cfg's layers with shapes and BFLOPs",
                       description="Print each layer of a cfg with its input and output shapes and BFLOPs,\n"
                                   "and the total, as Darknet does when it loads a network.",
                       epilog=CFGLAYERS_EXAMPLES, formatter_class=_Formatter)
    p.add_argument("cfg", metavar="CFG", help="a .cfg path or a shipped cfg's name")
    p.add_argument("--width", type=positive_int, help="network input width (default: the cfg's)")
    p.add_argument("--height", type=positive_int, help="network input height (default: the cfg's)")
    p.set_defaults(func=cmd_cfglayers, parser=p)

    from ..evaluation.evaluate import add_parser as add_map_parser

    add_map_parser(sub, _Formatter)

    from ..data.synth import add_parser as add_synth_parser

    from ..data.synth_video import cmd_synth

    add_synth_parser(sub, _Formatter).set_defaults(func=cmd_synth)  # a dataset, or --video

    from ..training.train_command import add_parser as add_train_parser

    add_train_parser(sub, _Formatter)

    from .cfg import add_parser as add_cfg_parser

    add_cfg_parser(sub, _Formatter)

    from ..model_files.anchors import add_parser as add_anchors_parser

    add_anchors_parser(sub, _Formatter)

    from ..diagnostics.selftest import add_parser as add_selftest_parser

    add_selftest_parser(sub, _Formatter)

    from .export import add_parser as add_export_parser

    add_export_parser(sub, _Formatter)

    from .partial import add_parser as add_partial_parser

    add_partial_parser(sub, _Formatter)

    from .benchmark import add_parser as add_benchmark_parser

    add_benchmark_parser(sub, _Formatter)

    from ..evaluation.valid_files import add_parser as add_valid_parser

    add_valid_parser(sub, _Formatter)

    from .weights import add_parser as add_weights_parser

    add_weights_parser(sub, _Formatter)
    return parser


def add_tracking_options(p: argparse.ArgumentParser) -> None:
    """detect's --track, the tracker's parameters (the library's names and defaults) and the counters."""
    from ..tracking.tracker import DEFAULT_TRACKER, INSTALL_HINT, TRACKERS

    g = p.add_argument_group("tracking and counting (videos, cameras, streams, a folder of frames in order; "
                             f"needs {INSTALL_HINT}; see docs/video_tracking.md)")
    g.add_argument("--track", nargs="?", const=DEFAULT_TRACKER, choices=list(TRACKERS), metavar="TRACKER",
                   help=f"give each detection a track id across frames: {', '.join(TRACKERS)} "
                        f"(default when given alone: {DEFAULT_TRACKER})")
    # the library's defaults differ per tracker (ByteTrack's are named): unset ones are left to it
    g.add_argument("--lost-track-buffer", type=non_negative_int, metavar="N",
                   help="frames (at 30 fps) a lost track is kept for re-association (default: 30)")
    g.add_argument("--track-activation-threshold", type=unit_interval, metavar="F",
                   help="confidence a detection needs to start a track (default: bytetrack 0.7, sort 0.25)")
    g.add_argument("--minimum-iou-threshold", type=unit_interval, metavar="F",
                   help="IoU a detection needs with a track's prediction to join it (default: bytetrack 0.1, "
                        "sort and ocsort 0.3)")
    g.add_argument("--high-conf-det-threshold", type=unit_interval, metavar="F",
                   help="bytetrack, ocsort: confidence splitting the first and second association (default: 0.6)")
    g.add_argument("--minimum-consecutive-frames", type=positive_int, metavar="N",
                   help="frames a new track must be matched before it gets an id (default: bytetrack 2, "
                        "sort and ocsort 3)")
    g.add_argument("--count-line", action="append", default=[], metavar="x1,y1,x2,y2",
                   help="count tracks whose centre crosses this line, per class and side crossed to "
                        "(left/right looking from the first point to the second); repeatable; implies --track")
    g.add_argument("--count-zone", action="append", default=[], metavar="x1,y1,x2,y2,x3,y3,...",
                   help="count tracks entering and leaving this polygon, per class; repeatable; implies --track")
    g.add_argument("--trail", type=positive_int, default=30, metavar="N",
                   help="frames of each track's centres drawn as its trail (default: %(default)s)")


TRACK_PARAMS = ("lost_track_buffer", "track_activation_threshold", "minimum_iou_threshold",
                "high_conf_det_threshold", "minimum_consecutive_frames")


# ---- commands -------------------------------------------------------------------------------
def _load_network(cfg: str, weights: Optional[str], names: Optional[str], device: Optional[str],
                  precision: str = "auto", allow_partial: bool = False):
    """Builds the network, printing the engine's warnings (unused cfg options, ...) as one line each."""
    from ..model_files.cfgfiles import names_mismatch, resolve_names
    from ..network import Network, read_names

    if weights is not None:  # a weights file that does not fit the cfg is an error unless allow_partial
        from ..model_files.weights_fit import load_checked

        net = load_checked(cfg, weights, device, precision, allow_partial,
                           on_warning=lambda text: print(f"warning: {text}", file=sys.stderr))
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            net = Network(cfg, None, None, device, precision=precision)
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
    if net.precision_reason:
        print(net.precision_reason, file=sys.stderr)
    names_path = resolve_names(names, net.classes)
    if names_path is not None:
        net.names = read_names(names_path)
        warning = names_mismatch(names_path, len(net.names), net.classes)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    return net, names_path


def cmd_detect(args: argparse.Namespace) -> int:
    from .. import _core
    from ..model_files.cfgfiles import resolve_cfg
    from ..outputs.files import write_json
    from .runner import DetectOptions, Runner
    from ..media.sources import resolve_source
    from ..model_files.official import resolve_weights

    bundled = not args.cfg and not args.weights
    if bundled:  # the bundled demo model, on its sample image by default
        from ..model_files.demo import NOTE, demo_files

        demo = demo_files()
        args.cfg, args.weights = demo["cfg"], demo["weights"]
        args.names = args.names or demo["names"]
        args.source = args.source or demo["image"]
        print(NOTE, file=sys.stderr)
    elif not args.cfg or not args.weights:
        args.parser.error("detect needs both --cfg and --weights, or neither for the bundled demo model "
                          f"(e.g. --cfg yolov4-tiny.cfg --weights yolov4-tiny.weights; `{PROG} info` lists the shipped cfgs)")
    if args.source is None:
        args.parser.error("detect needs a SOURCE with --cfg and --weights (an image, folder, glob, video, list, "
                          "camera index or stream URL)")
    if args.threads:
        _core.set_threads(args.threads)
    source = resolve_source(args.source)  # before loading the model: a typo should fail fast
    tiles = None
    if args.tiles:
        from ..tiling import parse_tiles

        tiles = parse_tiles(args.tiles)
        if not 0 <= args.tile_overlap < 1:
            raise ValueError(f"--tile-overlap must be in [0, 1), got {args.tile_overlap}")
    if args.track or args.count_line or args.count_zone:  # a missing tracker library too
        from ..tracking.counting import make_counters
        from ..tracking.tracker import DEFAULT_TRACKER, tracker_class

        args.track = args.track or DEFAULT_TRACKER
        tracker_class(args.track)
        make_counters(args.count_line, args.count_zone)
    cfg = resolve_cfg(args.cfg)
    if not bundled:
        args.weights = resolve_weights(args.weights)
    net, names_path = _load_network(cfg, args.weights, args.names, args.device, args.precision,
                                    args.allow_partial)
    options = DetectOptions(args.thresh, args.nms, args.letterbox, args.out, max_frames=args.max_frames,
                            drop=not args.no_drop, reconnect=args.reconnect, show=args.show,
                            save_labels=args.save_labels, save_crops=args.save_crops,
                            print_each=args.print_detections, video_out=args.out_video, track=args.track,
                            track_params={k: getattr(args, k) for k in TRACK_PARAMS if getattr(args, k) is not None},
                            count_lines=args.count_line, count_zones=args.count_zone, trail=args.trail,
                            tiles=tiles, tile_overlap=args.tile_overlap)
    # else a long video's results pile up
    runner = Runner(net, source, options, keep_results=bool(args.json or args.darknet_json))
    interrupted = complete = False
    try:
        runner.run()
        complete = True
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if args.json:  # also on Ctrl-C and errors: what was computed is kept, marked as partial
            w, h = net.input_size
            doc: Dict[str, Any] = {
                "source": args.source,
                "model": {"cfg": cfg, "weights": args.weights, "names": names_path, "input_size": [w, h],
                          "classes": net.classes, "device": net.device, "thresh": args.thresh,
                          "nms": args.nms, "letterbox": args.letterbox},
                "complete": complete,  # false: stopped by an error or Ctrl-C, these are the results so far
                "outputs": runner.outputs,
                "results": runner.results,
            }
            if tiles:
                doc["model"]["tiles"] = tiles if tiles == "auto" else f"{tiles[0]}x{tiles[1]}"
                doc["model"]["tile_overlap"] = args.tile_overlap
            if options.track:
                doc["model"]["tracker"] = options.track
                doc["model"]["tracker_params"] = options.track_params
            if runner.counts or options.count_lines or options.count_zones:
                doc["counts"] = runner.counts  # each source's counters at its end
            if interrupted:
                doc["interrupted"] = True
            write_json(args.json, doc)
            print(f"detections: {args.json}", file=sys.stderr)
        if args.darknet_json:
            from ..outputs.darknet_json import write_darknet_json

            write_darknet_json(args.darknet_json, runner.results)
            print(f"detections (Darknet's format): {args.darknet_json}", file=sys.stderr)
    return report_skips(runner.failures)


def cmd_info(args: argparse.Namespace) -> int:
    import json

    from ..diagnostics.sysinfo import format_info, info

    if args.metal_source:
        from .. import metal_source

        sys.stdout.write(metal_source())
        return 0
    if args.coverage:
        from ..diagnostics.coverage import format_coverage, layer_coverage
        from ..devices import default_device, resolve

        device = resolve(args.device or default_device())
        rows = layer_coverage(args.coverage, device)
        print(json.dumps({"cfg": args.coverage, "device": device, "layers": rows}, indent=1) if args.json
              else format_coverage(args.coverage, device, rows))
        return 0
    d = info()
    print(json.dumps(d, indent=1, default=str) if args.json else format_info(d))
    return 0


def cmd_cfglayers(args: argparse.Namespace) -> int:
    from ..model_files.cfgfiles import cfg_with_size, resolve_cfg

    cfg = resolve_cfg(args.cfg)
    path = cfg_with_size(cfg, args.width, args.height) if (args.width or args.height) else cfg
    try:
        net, _ = _load_network(path, None, None, "cpu")
    except ValueError as e:  # name the user's cfg, not our temporary copy
        raise ValueError(str(e).replace(path, cfg)) from None
    finally:
        if path != cfg:
            os.unlink(path)
    w, h = net.input_size
    print(f"{cfg}: {len(net.layers)} layers, input {w} x {h} x {net.channels}")
    print(net.layers)
    return 0


# ---- entry point ----------------------------------------------------------------------------
def _error_text(e: BaseException) -> str:
    text = str(e) if not isinstance(e, OSError) or not e.filename else f"{e.strerror}: {e.filename}"
    return " ".join(text.split()) or type(e).__name__  # one line, whatever the message held


def _quiet_opencv() -> None:
    """OpenCV logs errors only: our messages say what failed, its warnings would repeat it."""
    try:
        import cv2

        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
    except (ImportError, AttributeError):
        pass


def _quiet_ffmpeg(verbose: bool) -> None:
    """FFmpeg (inside OpenCV) prints every decoding error itself, thousands of lines for one damaged
    stretch of video, above our one line that says what was skipped. OpenCV reads this variable
    when it first opens a video (-8: AV_LOG_QUIET); a value the user set is kept."""
    if not verbose:
        os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line `argv` (default sys.argv[1:]); returns the exit code. Darknet's own
    command lines (`detector train ...`) are translated first (darknet_argv.py)."""
    from .darknet_argv import DarknetArgvError, translate

    argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        argv = translate(argv) or argv
    except DarknetArgvError as e:
        print(f"{PROG}: error: {_error_text(e)}", file=sys.stderr)
        return exit_codes.USAGE_ERROR
    except (OSError, ValueError) as e:  # the .data file it reads the names from
        print(f"{PROG}: error: {_error_text(e)}", file=sys.stderr)
        return exit_codes.INPUT_ERROR
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv  # train's launcher runs it once per device
    _quiet_opencv()
    _quiet_ffmpeg(getattr(args, "verbose", False))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return exit_codes.INTERRUPTED
    except exit_codes.OutputError as e:
        print(f"{PROG}: error: {_error_text(e)}", file=sys.stderr)
        return exit_codes.OUTPUT_ERROR
    except (OSError, ValueError, RuntimeError) as e:  # DarknetError is a ValueError
        print(f"{PROG}: error: {_error_text(e)}", file=sys.stderr)
        return exit_codes.INPUT_ERROR


if __name__ == "__main__":
    sys.exit(main())
