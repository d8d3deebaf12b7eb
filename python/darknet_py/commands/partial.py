"""`darknet_py partial CFG WEIGHTS OUT N`: Darknet's `partial`, the first N layers' weights of a network
written on their own, a backbone to train a new model from (`yolov4-tiny.conv.29` from
`yolov4-tiny.weights`). As Darknet, the copy's count of images seen starts at 0."""
from __future__ import annotations

import argparse
import sys

from ..exit_codes import PROG
from .argtypes import non_negative_int

EXAMPLES = f"""\
examples:
  {PROG} partial yolov4-tiny.cfg yolov4-tiny.weights yolov4-tiny.conv.29 29
  {PROG} partial yolov4.cfg yolov4.weights yolov4.conv.137 137
"""


def add_parser(sub, formatter) -> None:
    p = sub.add_parser("partial", help="write the first N layers' weights (a backbone to train from), as Darknet's",
                       description="Write the first N layers' weights of a network to a file of their own, as "
                                   "Darknet's `partial` does:\na backbone that `train --weights` starts a new "
                                   "model from (the other layers start from Darknet's initialisation).",
                       epilog=EXAMPLES, formatter_class=formatter)
    p.add_argument("cfg", metavar="CFG", help="the network's .cfg: a path or a shipped cfg's name")
    p.add_argument("weights", metavar="WEIGHTS", help="its Darknet .weights file")
    p.add_argument("out", metavar="OUT", help="the file to write (e.g. yolov4-tiny.conv.29)")
    p.add_argument("layers", metavar="N", type=non_negative_int, help="how many layers, from the first")
    p.set_defaults(func=cmd_partial, parser=p)


def cmd_partial(args: argparse.Namespace) -> int:
    from ..model_files.cfgfiles import resolve_cfg
    from ..network import Network

    net = Network(resolve_cfg(args.cfg), device="cpu")
    n = min(args.layers, len(net.layers))
    net.load_weights(args.weights, max_layers=n)
    net._net.seen = 0
    net.save_weights(args.out, max_layers=n)
    print(f"{args.out}: layers 0-{n - 1} of {args.weights} ({n} of {len(net.layers)})" if n else
          f"{args.out}: no layers (a header only)", file=sys.stderr)
    return 0
