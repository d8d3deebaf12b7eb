"""The `darknet_py export` command: a Darknet cfg + weights to an ONNX model (export_onnx)."""
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

examples:
  darknet_py export yolov4-tiny.cfg yolov4-tiny.weights -o yolov4-tiny.onnx
  darknet_py export yolov4-tiny.cfg yolov4-tiny.weights -o yolov4-tiny-640.onnx --size 640x640 --dynamic-batch
  darknet_py export yolov3-tiny.cfg yolov3-tiny.weights -o detector.onnx --postprocess --thresh 0.3
  darknet_py export yolov4-tiny.cfg yolov4-tiny.weights -o yolov4-tiny-fp16.onnx --half
"""


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    """Registers the `export` subcommand on the CLI's subparsers."""
    p = sub.add_parser("export", help="write a cfg + weights as an ONNX model",
                       description="Export a Darknet network (cfg + weights) to ONNX, batchnorm folded into the\n"
                                   "convolutions, for ONNX Runtime, TensorRT, OpenVINO, OpenCV and other runtimes.",
                       epilog=EXPORT_EXAMPLES, formatter_class=formatter)
    p.add_argument("cfg", metavar="CFG", help="network .cfg: a path or a shipped cfg's name")
    p.add_argument("weights", metavar="WEIGHTS", help="Darknet .weights file, or an official model's name "
                                                      "(yolov4-tiny: the file `darknet_py weights get` downloaded)")
    add_allow_partial_option(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the .onnx file to write")
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
                   help="with --postprocess: confidence threshold (default: %(default)s)")
    p.add_argument("--nms", type=unit_interval, default=0.45,
                   help="with --postprocess: NMS IoU threshold, 0 turns NMS off (default: %(default)s)")
    p.set_defaults(func=cmd_export, parser=p)
    return p


# the formats export writes, by the output's extension
WRITES = (".onnx",)


def check_output_name(path: str) -> None:
    """Refuses an output whose extension names a format export does not write (.tflite, .pt, ...)."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in WRITES:
        raise ValueError(f"export writes {', '.join(WRITES)} files, not {ext or 'files without an extension'}: "
                         f"{path} (name the output e.g. {os.path.splitext(path)[0] or 'model'}.onnx)")


def cmd_export(args: argparse.Namespace) -> int:
    from ..model_files.cfgfiles import resolve_cfg
    from ..export.onnx_model import export_onnx
    from ..network import Network
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
