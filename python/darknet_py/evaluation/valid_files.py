"""`darknet_py valid DATA CFG WEIGHTS`: Darknet's `detector valid` (validate_detector), the detections of
every image of the .data file's valid list written as Darknet writes them for the VOC evaluation
scripts: one file per class, `<results>/comp4_det_test_<class name>.txt` (results = the .data file's
`results` key, default ./results; --out replaces the `comp4_det_test_` prefix), a line per detection
with print_detector_detections' format: `<image id> <probability> <xmin> <ymin> <xmax> <ymax>`, the id
being the image's file name up to its first dot, the box in 1-based pixels clipped to the image, each
number printed with C's %f. Darknet's settings: thresh 0.001, NMS 0.6, letterbox where the cfg's [net]
says letter_box=1. Only the .data file's `eval = voc` (the default) is written: Darknet's coco, bdd,
kitti and imagenet outputs are refused naming the key.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from ..exit_codes import PROG

VALID_THRESH, VALID_NMS = 0.001, 0.6  # validate_detector's


def image_id(path: str) -> str:
    """Darknet's basecfg: the file name after the last separator, cut at its first dot."""
    return os.path.basename(path.replace("\\", "/")).split(".")[0]


def detection_lines(path: str, detections, width: int, height: int) -> List[tuple]:
    """(class id, line) of each detection, print_detector_detections' arithmetic in 1-based pixels."""
    out = []
    for d in detections:
        xmin, ymin = max(d.x + 1, 1.0), max(d.y + 1, 1.0)
        xmax, ymax = min(d.x + d.w + 1, float(width)), min(d.y + d.h + 1, float(height))
        out.append((d.class_id, f"{image_id(path)} {d.confidence:f} {xmin:f} {ymin:f} {xmax:f} {ymax:f}\n"))
    return out


def write_valid_files(data_path: str, cfg: str, weights: str, prefix: str = "comp4_det_test_",
                      device: Optional[str] = None) -> List[str]:
    """Writes the class files; returns their paths."""
    from ..data.darknet_files import read_data_file, read_image_list, read_names_file
    from ..media.sources import read_image
    from ..network import Network
    from .evaluate import net_letterbox

    data = read_data_file(data_path)
    kind = data.extra.get("eval", "voc")
    if kind != "voc":
        raise ValueError(f"{data.where('eval')}: eval = {kind}: only Darknet's voc result files are written here "
                         f"(`{PROG} map` measures mAP for any data set)")
    names = read_names_file(data.require("names"))
    folder = data.extra.get("results", "results")
    os.makedirs(folder, exist_ok=True)
    net = Network(cfg, weights, device=device)
    letterbox = net_letterbox(net)
    paths = [os.path.join(folder, f"{prefix}{name}.txt") for name in names]
    files = [open(p, "w", encoding="utf-8", newline="\n") for p in paths]
    try:
        for image_path in read_image_list(data.require("valid")):
            image = read_image(image_path)
            dets = net.detect(image, VALID_THRESH, VALID_NMS, letterbox)
            for class_id, line in detection_lines(image_path, dets, image.shape[1], image.shape[0]):
                files[class_id].write(line)
    finally:
        for f in files:
            f.close()
    return paths


def add_parser(sub, formatter) -> None:
    p = sub.add_parser("valid", help="write the valid list's detections as Darknet's `detector valid` does",
                       description=__doc__.split("\n\n")[0].replace("`darknet_py valid DATA CFG WEIGHTS`: ", ""),
                       formatter_class=formatter)
    p.add_argument("data", metavar="DATA", help="Darknet .data file (valid =, names =; results = the output folder)")
    p.add_argument("cfg", metavar="CFG", help="network .cfg: a path or a shipped cfg's name")
    p.add_argument("weights", metavar="WEIGHTS", help="Darknet .weights file")
    p.add_argument("--out", default="comp4_det_test_", metavar="PREFIX",
                   help="the files' name prefix, before the class name (default: %(default)s, Darknet's -out)")
    from ..devices import add_device_option

    add_device_option(p)
    p.set_defaults(func=cmd_valid, parser=p)


def cmd_valid(args: argparse.Namespace) -> int:
    from ..model_files.cfgfiles import resolve_cfg

    paths = write_valid_files(args.data, resolve_cfg(args.cfg), args.weights, args.out, args.device)
    print(f"detections of the valid list: {os.path.dirname(paths[0]) if paths else '.'}/{args.out}<class>.txt",
          file=sys.stderr)
    return 0
