"""Darknet's own command lines, translated into ours in this one place, so that Darknet's tutorials
and scripts run as written (AlexeyAB's and hank-ai's READMEs):

    darknet_py detector train DATA CFG [WEIGHTS] -map -dont_show -gpus 0,1 -clear
    darknet_py detector test DATA CFG WEIGHTS [IMAGE] -thresh 0.25 -ext_output -out result.json < list.txt
    darknet_py detector map DATA CFG WEIGHTS -iou_thresh 0.75 -points 101
    darknet_py detector valid DATA CFG WEIGHTS     (results/comp4_det_test_<class>.txt)
    darknet_py detector demo DATA CFG WEIGHTS [VIDEO | -c 0] -out_filename res.avi -dont_show
    darknet_py detector calc_anchors DATA -num_of_clusters 9 -width 416 -height 416
    darknet_py detect CFG WEIGHTS [IMAGE]          (detector test with the 80 COCO names)
    darknet_py partial CFG WEIGHTS OUT N           (our own command, in Darknet's form)

Darknet reads its options anywhere on the line, one dash each (`-thresh 0.25`), and the rest in
order as DATA CFG WEIGHTS FILE. An option Darknet has and we do not is refused in one line naming
it; a near miss (`-mAP`, `--dont-show`) is refused with what it was probably meant to be.
"""
from __future__ import annotations

import difflib
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..exit_codes import PROG

# Darknet's option -> (takes a value, our arguments for it: a function of the value, or None when it
# changes nothing here). Per verb; COMMON applies to all of them.
Translation = Optional[Callable[[str], List[str]]]
COMMON: Dict[str, Tuple[bool, Translation]] = {
    "-dont_show": (False, None),  # we never open a window unless asked (-show)
    "-nogpu": (False, lambda v: ["--device", "cpu"]),
}
TEST: Dict[str, Tuple[bool, Translation]] = {
    "-thresh": (True, lambda v: ["--thresh", v]),
    "-ext_output": (False, None),  # every detection's box is printed with its coordinates anyway
    "-save_labels": (False, lambda v: ["--save-labels"]),
    "-letter_box": (False, lambda v: ["--letterbox"]),
    "-out": (True, lambda v: ["--darknet-json", v]),
    "-show": (False, lambda v: ["--show"]),
    "-i": (True, lambda v: _gpu(v)),
}
DEMO: Dict[str, Tuple[bool, Translation]] = {
    **{k: TEST[k] for k in ("-thresh", "-ext_output", "-letter_box", "-i", "-show")},
    "-out_filename": (True, lambda v: ["--out-video", v]),
    "-c": (True, None),  # the camera index: becomes the source (see _demo)
}
TRAIN: Dict[str, Tuple[bool, Translation]] = {
    "-map": (False, lambda v: ["--map"]),
    "-verbose": (False, lambda v: ["--verbose"]),
    "-clear": (False, lambda v: ["--clear"]),
    "-gpus": (True, lambda v: ["--gpus", v]),
    "-i": (True, lambda v: _gpu(v)),
}
MAP: Dict[str, Tuple[bool, Translation]] = {
    "-thresh": (True, lambda v: ["--thresh", v]),
    "-iou_thresh": (True, lambda v: ["--iou-thresh", v]),
    "-points": (True, lambda v: ["--points", v]),
    "-letter_box": (False, lambda v: ["--letterbox"]),
    "-i": (True, lambda v: _gpu(v)),
}
VALID: Dict[str, Tuple[bool, Translation]] = {
    "-out": (True, lambda v: ["--out", v]),  # the result files' prefix
    "-i": (True, lambda v: _gpu(v)),
}
ANCHORS: Dict[str, Tuple[bool, Translation]] = {
    "-num_of_clusters": (True, lambda v: ["--num-of-clusters", v]),
    "-width": (True, lambda v: ["--width", v]),
    "-height": (True, lambda v: ["--height", v]),
    "-show": (False, None),  # Darknet draws the clusters in a window; the anchors are printed either way
}
# Darknet's options that we do not have, with what to use instead where there is something
NOT_HERE: Dict[str, str] = {
    "-mjpeg_port": "the MJPEG server is not implemented; `detect --show` shows the frames",
    "-json_port": "the JSON server is not implemented; `detect --json FILE` writes the detections",
    "-json_file_output": "use -out FILE (Darknet's result.json format) or `detect --json FILE`",
    "-mAP_epochs": f"`{PROG} train --map-every N` sets how often mAP is measured (in iterations)",
    "-show_imgs": "the augmented training images are not shown",
    "-benchmark": "not implemented",
    "-benchmark_layers": "not implemented",
    "-hier": "hierarchical (yolo9000) thresholds are not implemented",
    "-prefix": "not implemented; -out_filename names the annotated video",
    "-avgframes": "not implemented",
    "-time_limit_sec": "not implemented",
    "-http_port": "not implemented",
    "-log": "not implemented; redirect the output instead (2> output.log)",
    "-dontdraw_bbox": "not implemented",
    "-s": "not implemented",
    "-random": "not implemented",
    "-export_video": "not implemented",
}
VERBS = {"test": TEST, "demo": DEMO, "train": TRAIN, "map": MAP, "valid": VALID, "calc_anchors": ANCHORS}
NOT_VERBS = {"recall": f"use `{PROG} map DATA CFG WEIGHTS` (it prints the recall)",
             "draw": "not implemented"}


# Darknet writes its annotated image to ./predictions.jpg (each image over the last); ours go to this
# folder under their own names (and a video to -out_filename where given)
ANNOTATED = "predictions"


class DarknetArgvError(ValueError):
    """A Darknet command line we cannot run as written, with what to do instead."""


def _gpu(index: str) -> List[str]:
    """Darknet's -i N: CUDA GPU N where one was found (a Darknet built without GPU ignores it too)."""
    from ..devices import devices

    found = any(d["kind"] == "cuda" and d["found"] for d in devices())
    return ["--device", f"cuda:{index}"] if found else []


def _split(verb: str, args: Sequence[str], table: Dict[str, Tuple[bool, Translation]]):
    """Darknet's options of `args` translated, its positionals in order, and the raw option values."""
    table = {**COMMON, **table}
    ours: List[str] = []
    positionals: List[str] = []
    values: Dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a in table:
            takes, translate = table[a]
            value = ""
            if takes:
                if i + 1 >= len(args):
                    raise DarknetArgvError(f"Darknet's {a} needs a value")
                value, i = args[i + 1], i + 1
            values[a] = value
            if translate is not None:
                ours += translate(value)
        elif a in NOT_HERE:
            raise DarknetArgvError(f"Darknet's {a} is not supported by {PROG}: {NOT_HERE[a]}")
        elif a.startswith("-") and len(a) > 1 and not _is_number(a):
            raise DarknetArgvError(_unknown(a, verb, table))
        else:
            positionals.append(a)
        i += 1
    return ours, positionals, values


def _is_number(a: str) -> bool:
    try:
        float(a)
        return True
    except ValueError:
        return False


def _unknown(option: str, verb: str, table: Dict[str, Tuple[bool, Translation]]) -> str:
    """The message for an option neither Darknet's nor ours: with the one it was likely meant to be."""
    known = list(table) + [k for k in NOT_HERE if k not in table]
    spelled = "-" + option.lstrip("-").replace("-", "_")
    by_case = [k for k in known if k.lower() == spelled.lower()]
    close = by_case or difflib.get_close_matches(spelled, known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else f" (Darknet's detector {verb} takes: {', '.join(sorted(table))})"
    return f"unknown option {option} for Darknet's detector {verb}{hint}"


def _need(verb: str, positionals: List[str], names: Sequence[str], at_most: int) -> None:
    if len(positionals) < len(names):
        raise DarknetArgvError(f"Darknet's detector {verb} needs {' '.join(names)} (got {len(positionals)} of them)")
    if len(positionals) > at_most:
        extra = " ".join(positionals[at_most:])
        raise DarknetArgvError(f"Darknet's detector {verb}: unexpected {extra!r} after the {at_most} file arguments")


def _names_of(data: str) -> List[str]:
    """--names from a .data file's names= line, where it has one."""
    from ..data.darknet_files import read_data_file

    names = read_data_file(data).names
    return ["--names", names] if names else []


def _verb_at(args: Sequence[str]) -> int:
    """Where detector's command is: its first word that is not an option or an option's value (hank-ai's
    README puts options first: `detector -map -dont_show train ...`); -1 if none."""
    takes = {k for t in (COMMON, *VERBS.values()) for k, (v, _) in t.items() if v}
    i = 0
    while i < len(args):
        if not args[i].startswith("-"):
            return i
        if args[i] in NOT_HERE:  # (whether it takes a value is not known here)
            raise DarknetArgvError(f"Darknet's {args[i]} is not supported by {PROG}: {NOT_HERE[args[i]]}")
        i += 2 if args[i] in takes else 1
    return -1


def _detector(args: Sequence[str]) -> List[str]:
    at = _verb_at(args)
    if at < 0:
        raise DarknetArgvError(f"Darknet's detector needs a command: {', '.join(VERBS)}")
    verb, rest = args[at], list(args[:at]) + list(args[at + 1:])
    if verb in NOT_VERBS:
        raise DarknetArgvError(f"Darknet's detector {verb} is not supported by {PROG}: {NOT_VERBS[verb]}")
    if verb not in VERBS:
        close = difflib.get_close_matches(verb, list(VERBS), n=1)
        raise DarknetArgvError(f"unknown Darknet command detector {verb}" +
                               (f"; did you mean detector {close[0]}?" if close else f" ({', '.join(VERBS)})"))
    ours, pos, values = _split(verb, rest, VERBS[verb])
    if verb == "train":
        _need(verb, pos, ("DATA", "CFG"), 3)
        return ["train", pos[0], pos[1]] + (["--weights", pos[2]] if len(pos) > 2 else []) + ours
    if verb in ("map", "valid"):
        _need(verb, pos, ("DATA", "CFG", "WEIGHTS"), 3)
        return [verb, *pos] + ours
    if verb == "calc_anchors":
        _need(verb, pos, ("DATA",), 1)
        return ["calc_anchors", pos[0]] + ours
    if verb == "test":
        _need(verb, pos, ("DATA", "CFG", "WEIGHTS"), 4)
        # without FILE Darknet reads image paths from stdin (`< list.txt`), one a line
        source = pos[3] if len(pos) > 3 else "-"
        return (["detect", source, "--cfg", pos[1], "--weights", pos[2], "--print-detections"] + _names_of(pos[0]) +
                ["--out", ANNOTATED] + ours)
    # demo: a video or stream, else the camera -c N (0 by default), as Darknet
    _need(verb, pos, ("DATA", "CFG", "WEIGHTS"), 4)
    source = pos[3] if len(pos) > 3 else values.get("-c", "0")
    return ["detect", source, "--cfg", pos[1], "--weights", pos[2]] + _names_of(pos[0]) + ["--out", ANNOTATED] + ours


def _detect_shortcut(args: Sequence[str]) -> List[str]:
    """Darknet's `detect CFG WEIGHTS [IMAGE]`: detector test with the COCO names (an 80-class cfg gets
    the shipped coco.names anyway)."""
    ours, pos, _ = _split("test", args, TEST)
    if len(pos) < 2 or len(pos) > 3:
        raise DarknetArgvError("Darknet's detect needs CFG WEIGHTS [IMAGE]")
    source = pos[2] if len(pos) > 2 else "-"
    return ["detect", source, "--cfg", pos[0], "--weights", pos[1], "--print-detections", "--out", ANNOTATED] + ours


def _looks_like_cfg(arg: str) -> bool:
    return arg.endswith(".cfg") or (not arg.startswith("-") and os.path.isfile(arg) and not _is_image(arg))


def _is_image(arg: str) -> bool:
    return os.path.splitext(arg)[1].lower() in (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


def translate(argv: Sequence[str]) -> Optional[List[str]]:
    """Our command line for Darknet's `argv` (without the program name), or None when argv is not
    in Darknet's form (then it is ours, and runs as it is). DarknetArgvError says what cannot run."""
    if not argv:
        return None
    if argv[0] == "detector":
        return _detector(argv[1:])
    # `detect CFG WEIGHTS [IMAGE]` is Darknet's; ours is `detect SOURCE --cfg CFG --weights W`
    if argv[0] == "detect" and len(argv) >= 3 and _looks_like_cfg(argv[1]) and not argv[2].startswith("-"):
        return _detect_shortcut(argv[1:])
    return None
