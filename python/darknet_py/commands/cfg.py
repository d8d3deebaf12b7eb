"""The `cfg` command: `darknet_py cfg adapt CFG --classes K -o OUT.cfg` (cfg_edit.adapt_classes)."""
from __future__ import annotations

import argparse
from typing import Any

from .argtypes import positive_int

CFG_EXAMPLES = """\
adapt: sets classes=K in every [yolo] (also [Gaussian_yolo], [region]) section and filters= of the
convolution before each ((K + 5) * anchors of that head for [yolo]), the edits Darknet's README
asks you to make by hand, and prints the lines it changed. Everything else is kept as it was.

examples:
  darknet_py cfg adapt yolov4-tiny.cfg --classes 4 -o yolov4-tiny-4.cfg
  darknet_py cfg adapt my.cfg --classes 1 -o my-1class.cfg
"""


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("cfg", help="edit a cfg: `cfg adapt CFG --classes K -o OUT` changes its class count",
                       description="Edit a Darknet cfg.", epilog=CFG_EXAMPLES, formatter_class=formatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    a = actions.add_parser("adapt", help="set the class count of every head and the filters before it",
                           description="Write a copy of CFG for K classes.", epilog=CFG_EXAMPLES,
                           formatter_class=formatter)
    a.add_argument("cfg", metavar="CFG", help="a .cfg path or a shipped cfg's name")
    a.add_argument("--classes", type=positive_int, required=True, metavar="K", help="the number of classes")
    a.add_argument("-o", "--output", required=True, metavar="OUT.cfg", help="the file to write")
    a.set_defaults(func=cmd_cfg_adapt, parser=a)
    return p


def cmd_cfg_adapt(args: argparse.Namespace) -> int:
    from ..model_files.cfg_edit import CfgEditor, adapt_classes
    from ..model_files.cfgfiles import resolve_cfg

    cfg = resolve_cfg(args.cfg)
    ed = adapt_classes(CfgEditor.from_file(cfg), args.classes)
    ed.write(args.output)
    print(f"wrote {args.output}: {cfg} for {args.classes} classes" +
          (", lines changed:" if ed.changes else " (it already had them: no line changed)"))
    for change in ed.changes:
        print(f"  {change}")
    return 0
