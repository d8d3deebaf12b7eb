"""The `darknet_py export` command: a Darknet cfg + weights to an ONNX model (export_onnx), or to a Core ML
object detector when the output ends in .mlpackage (export_coreml)."""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any

from .argtypes import add_allow_partial_option, positive_int, size_wxh, unit_interval

EXPORT_EXAMPLES = """\
The model's input is the blob `Network.forward` takes: N x C x H x W float32, RGB, 0..1, resized
without letterboxing as `darknet_py detect` does. Its outputs are the yolo heads as `Network.forward`
returns them (yolo_<layer>: N x anchors*(5+classes) x H x W, after the head's logistic), or a
classifier's last layer (output). With --postprocess they are the detections after decoding and
NMS instead: boxes (x1, y1, x2, y2 relative to the input), scores, classes, batch_index.

Needs the onnx package: pip install "darknet-engine[onnx]".

An output ending in .mlpackage is a Core ML object detector instead (macOS 13+, the Neural Engine with
--half): an ML Program running the network and the yolo decode, then Core ML's NMS, as Xcode's preview
and Vision read it. Input `image`: RGB of the network's size (or --size), resized without letterboxing;
outputs `confidence` (K x classes) and `coordinates` (K x 4: centre x, y, width, height relative to the
image); --thresh and --nms are its default thresholds, --names its class labels. Batch 1 (--batch and
--dynamic-batch do not apply). Needs coremltools: pip install "darknet-engine[coreml]". See
README_GPU_APPLE_METAL.md.

examples:
  darknet_py export yolov4-tiny.cfg yolov4-tiny.weights -o yolov4-tiny.onnx
  darknet_py export yolov4-tiny.cfg yolov4-tiny.weights -o yolov4-tiny-640.onnx --size 640x640 --dynamic-batch
  darknet_py export yolov3-tiny.cfg yolov3-tiny.weights -o detector.onnx --postprocess --thresh 0.3
  darknet_py export yolov4-tiny.cfg yolov4-tiny.weights -o yolov4-tiny-fp16.onnx --half
  darknet_py export yolov4-tiny.cfg yolov4-tiny.weights -o yolov4-tiny.mlpackage --half
"""


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    """Registers the `export` subcommand on the CLI's subparsers."""
    p = sub.add_parser("export", help="write a cfg + weights as an ONNX model or a Core ML detector",
                       description="Export a Darknet network (cfg + weights) to ONNX, batchnorm folded into the\n"
                                   "convolutions, for ONNX Runtime, TensorRT, OpenVINO, OpenCV and other runtimes;\n"
                                   "or, to FILE.mlpackage, as a Core ML object detector for macOS and iOS.",
                       epilog=EXPORT_EXAMPLES, formatter_class=formatter)
    p.add_argument("cfg", metavar="CFG", help="network .cfg: a path or a shipped cfg's name")
    p.add_argument("weights", metavar="WEIGHTS", help="Darknet .weights file, or an official model's name "
                                                      "(yolov4-tiny: the file `darknet_py weights get` downloaded)")
    add_allow_partial_option(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the .onnx file (or .mlpackage: Core ML) to write")
    p.add_argument("--size", type=size_wxh, metavar="WxH", help="input width x height (default: the cfg's)")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--batch", type=positive_int, default=1, metavar="N", help="fixed batch size (default: 1)")
    batch.add_argument("--dynamic-batch", action="store_true", help="leave the batch size open (a symbolic dimension)")
    precision = p.add_mutually_exclusive_group()
    precision.add_argument("--precision", choices=["fp32", "fp16"], default="fp32",
                           help="fp16: float16 weights and activations (half the file), float32 input and\n"
                                "outputs, as `detect --precision fp16` runs (default: %(default)s)")
    precision.add_argument("--half", dest="precision", action="store_const", const="fp16", help="--precision fp16")
    p.add_argument("--postprocess", action="store_true",
                   help="decode boxes and run NMS in the model: outputs boxes, scores, classes, batch_index")
    p.add_argument("--thresh", type=unit_interval, default=0.25,
                   help="with --postprocess (always with .mlpackage): confidence threshold (default: %(default)s)")
    p.add_argument("--nms", type=unit_interval, default=0.45,
                   help="with --postprocess (always with .mlpackage): NMS IoU threshold, 0 turns NMS off\n"
                        "(default: %(default)s)")
    p.add_argument("--names", metavar="FILE",
                   help=".mlpackage: class names, one a line (default: the shipped coco.names for 80 classes,\n"
                        "else the class numbers)")
    p.set_defaults(func=cmd_export, parser=p)
    return p


def is_coreml(path: str) -> bool:
    """Whether an output path asks for Core ML (a .mlpackage) rather than ONNX."""
    return path.rstrip("/\\").lower().endswith(".mlpackage")


# the formats export writes, by the output's extension
WRITES = (".onnx", ".mlpackage")


def check_output_name(path: str) -> None:
    """Refuses an output whose extension names a format export does not write (.tflite, .pt, ...)."""
    ext = os.path.splitext(path.rstrip("/\\"))[1].lower()
    if ext not in WRITES:
        raise ValueError(f"export writes {', '.join(WRITES)} files, not {ext or 'files without an extension'}: "
                         f"{path} (name the output e.g. {os.path.splitext(path)[0] or 'model'}.onnx)")


def cmd_export(args: argparse.Namespace) -> int:
    if is_coreml(args.output):
        return _export_coreml(args)
    if args.names:
        args.parser.error("--names applies to Core ML (an output ending in .mlpackage); ONNX models carry no names")
    from ..model_files.cfgfiles import resolve_cfg
    from ..export.onnx_model import export_onnx
    from ..export.onnx_graph import require_onnx
    from .progress import Progress

    from ..model_files.official import resolve_weights
    from ..model_files.weights_fit import load_checked

    check_output_name(args.output)
    require_onnx()  # before loading a large network: say at once what is missing
    weights = resolve_weights(args.weights)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = load_checked(resolve_cfg(args.cfg), weights, "cpu", allow_partial=args.allow_partial,
                           on_warning=lambda text: warnings.warn(text))
        with Progress(len(net.layers), "layers", label="export") as bar:
            summary = export_onnx(net, args.output, args.size, args.batch, args.dynamic_batch, args.postprocess,
                                  args.thresh, args.nms, on_layer=lambda _: bar.update(), precision=args.precision)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    print(summary.line())
    return 0


def _export_coreml(args: argparse.Namespace) -> int:
    from ..export.coreml_model import export_coreml, require_coremltools
    from ..model_files.cfgfiles import names_mismatch, resolve_cfg, resolve_names
    from ..network import read_names
    from .progress import Progress

    if args.dynamic_batch or args.batch != 1:
        args.parser.error("a Core ML model (.mlpackage) takes one image: --batch and --dynamic-batch do not apply")
    require_coremltools()  # before loading a large network: say at once what is missing
    from ..model_files.official import resolve_weights
    from ..model_files.weights_fit import load_checked

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = load_checked(resolve_cfg(args.cfg), resolve_weights(args.weights), "cpu",
                           allow_partial=args.allow_partial, on_warning=lambda text: warnings.warn(text))
        names_path = resolve_names(args.names, net.classes)
        if names_path is not None:
            net.names = read_names(names_path)
            mismatch = names_mismatch(names_path, len(net.names), net.classes)
            if mismatch:
                warnings.warn(mismatch)
        else:
            warnings.warn(f"no --names given for {net.classes} classes: the model's labels are the class numbers")
        with Progress(len(net.layers), "layers", label="export") as bar:
            summary = export_coreml(net, args.output, args.size, args.precision, args.thresh, args.nms,
                                    on_layer=lambda _: bar.update())
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    print(summary.line())
    return 0
