"""`darknet_py train CFG` with no dataset: a few minutes on synthetic shapes that end with a detector.

The dataset is `darknet_py synth`'s coloured shapes (synth.generate), made once into the per-user
cache folder (`$DARKNET_PY_CACHE_DIR`, else `$XDG_CACHE_HOME/darknet_py`, `~/.cache/darknet_py`,
`~/Library/Caches/darknet_py` on macOS: where the selftest report goes) and reused after. The cfg
is trained as given except for what makes it a few-minute run: the demo model's input size, a
batch of 16, a schedule scaled to the iterations (burn_in and steps) and the dataset's 4 classes.

From random weights a detector takes thousands of iterations (the demo model took 3000 of 32
images), so a cfg with the demo model's layers and k times its filters, yolov4-tiny among them,
starts from the demo model's weights widened to it (widen.py) and the demo's anchors: it detects
from the start and the run fine-tunes it on the shapes. Any other cfg starts from Darknet's random
initialisation, and the log says what that gives. Everything the run writes goes into one folder,
and it ends with the command that detects with the new weights on the bundled sample image.
"""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

IMAGES = 600
CLASSES = 4
SIZE = 256  # the images' and the network's size: the demo model's
BATCH = 16
SEED = 1  # the dataset's, and the training's unless --seed gives another
MAX_BATCHES = 100  # from the demo's start: mAP@0.5 0.98 in 2.5 to 4 minutes on 2 shared CPU cores (docs/training.md)

Say = Callable[[str], None]


@dataclass
class Plan:
    """What the quick start trains: the dataset, the cfg copy, the start weights (None: random), the
    run folder and the names file in it."""

    data: str
    cfg: str
    weights: Optional[str]
    folder: str
    names: str


def cache_dir() -> str:
    """The per-user cache folder the engine uses (its selftest reports live there too)."""
    from .. import _core

    return os.path.dirname(_core.selftest_results_path("cpu"))


def dataset(say: Say, folder: Optional[str] = None) -> str:
    """The .data file of the quick-start dataset, generated into `folder` (default: the cache)
    unless it is already complete there (synth writes its .data file last)."""
    from ..data.synth import DATA_NAME, generate

    folder = folder or os.path.join(cache_dir(), f"quickstart-shapes-{IMAGES}-{SIZE}-seed{SEED}")
    data = os.path.join(folder, DATA_NAME)
    if os.path.isfile(data):
        say(f"synthetic dataset: {data} (cached)")
        return data
    say(f"making the synthetic dataset once: {IMAGES} images of {SIZE}x{SIZE} in {folder}")
    return generate(folder, IMAGES, CLASSES, (SIZE, SIZE), SEED, valid_fraction=0.1, progress=True)


def run_folder(cfg: str, where: str = ".") -> str:
    """A new folder for this run: quickstart-<cfg name>, else the first free quickstart-<cfg name>-N,
    so that a second run never overwrites the first one's weights."""
    base = os.path.join(os.path.abspath(where), f"quickstart-{os.path.splitext(os.path.basename(cfg))[0]}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def net_options(max_batches: int) -> Dict[str, object]:
    """The [net] options of the quick start's schedule: burn-in over the first tenth, the rate
    divided by 10 at 80% and 90% (Darknet's usual steps)."""
    return {"batch": BATCH, "subdivisions": 1, "width": SIZE, "height": SIZE,
            "max_batches": max_batches, "burn_in": max(1, max_batches // 10),
            "policy": "steps", "steps": f"{max(1, max_batches * 8 // 10)},{max(1, max_batches * 9 // 10)}",
            "scales": ".1,.1"}


def demo_anchors() -> Tuple[List[Tuple[float, float]], List[List[int]]]:
    """The demo model's anchors and its heads' masks, in file order."""
    from ..model_files.cfg_edit import CfgEditor, heads_and_convs, value
    from ..model_files.demo import demo_files

    ed = CfgEditor.from_file(demo_files()["cfg"])
    heads = [head for head, _conv in heads_and_convs(ed)]
    numbers = [float(v) for v in (value(ed.lines, heads[0], "anchors") or "").split(",")]
    masks = [[int(m) for m in (value(ed.lines, h, "mask") or "").split(",")] for h in heads]
    return list(zip(numbers[0::2], numbers[1::2])), masks


def quickstart_cfg(cfg: str, folder: str, max_batches: int, demo: bool = True) -> Tuple[str, List[str]]:
    """A copy of `cfg` in `folder` with the quick start's [net] options and, with `demo`, its
    classes and the demo model's anchors and masks (when its heads number as many as the demo's):
    (its path, the lines changed). Without `demo` the classes are left to train's adaptation,
    which then also takes --weights made for `cfg` (all but the heads)."""
    from ..model_files.cfg_edit import CfgEditor, adapt_classes, cfg_classes, heads_and_convs, set_anchors, set_net_options

    ed = CfgEditor.from_file(cfg)
    set_net_options(ed, net_options(max_batches))
    if demo and cfg_classes(ed) not in (None, CLASSES):
        adapt_classes(ed, CLASSES)
    if demo:
        pairs, masks = demo_anchors()
        if len(heads_and_convs(ed)) == len(masks):
            set_anchors(ed, pairs, masks)
    os.makedirs(folder, exist_ok=True)
    path = ed.write(os.path.join(folder, f"{os.path.splitext(os.path.basename(cfg))[0]}-quickstart.cfg"))
    return path, list(ed.changes)


def demo_start(cfg: str, folder: str, seed: int, say: Say) -> Optional[str]:
    """The demo model's weights widened to `cfg`, written into `folder`; None (said why) when `cfg`
    is not the demo's layers with k times its filters."""
    import cv2

    from .. import _core
    from ..model_files.demo import demo_files
    from .widen import WidenError, widen

    files = demo_files()
    narrow = _core.Net(files["cfg"], "cpu")
    narrow.load_weights(files["weights"], -1)
    wide = _core.Net(cfg, "cpu")
    image = _core.preprocess(cv2.imread(files["image"]), narrow.width, narrow.height, False)[None]
    try:
        convs = widen(wide, narrow, image, seed)
    except WidenError as e:
        say(f"no shipped weights fit {os.path.basename(cfg)} ({e}): it starts from Darknet's random "
            "initialisation, and a detector from scratch takes thousands of iterations (the demo model took 3000)")
        return None
    path = os.path.join(folder, f"{os.path.splitext(os.path.basename(cfg))[0]}_start.weights")
    wide.save_weights(path, -1)
    say(f"start: {path}, the bundled demo model's {convs} convolutions widened to {os.path.basename(cfg)} "
        "(each channel repeated: the same detections), with a little noise so that the copies train apart")
    return path


def prepare(cfg: str, out: Optional[str], max_batches: int, seed: int, say: Say, demo: bool = True) -> Plan:
    """The dataset, the run folder (`out`, else a new one), the cfg copy and, with `demo`, the start
    weights from the demo model (without: the caller's own weights, or random ones)."""
    from ..data.darknet_files import read_data_file

    data = dataset(say)
    folder = os.path.abspath(out) if out else run_folder(cfg)
    os.makedirs(folder, exist_ok=True)
    say(f"run folder: {folder} (everything this run writes goes here)")
    qcfg, changes = quickstart_cfg(cfg, folder, max_batches, demo)
    notes: List[str] = []  # said after the cfg's lines, which depend on them
    weights = demo_start(qcfg, folder, seed, notes.append) if demo else None
    if demo and weights is None:  # the cfg's own anchors, not those made for the demo's layers
        qcfg, changes = quickstart_cfg(cfg, folder, max_batches, demo=False)
    say(f"cfg: {qcfg}, a copy of {cfg} with these lines changed:")
    for line in [f"  {change}" for change in changes] + notes:
        say(line)
    names = os.path.join(folder, os.path.basename(read_data_file(data).names))
    shutil.copyfile(read_data_file(data).names, names)
    return Plan(data, qcfg, weights, folder, names)


def detect_command(plan: Plan, weights: str) -> str:
    """The command that detects with `weights` on the bundled sample image, into the run folder.
    Its cfg is the one the weights are named after (train names them <cfg>_best.weights ...): the
    quick start's copy, or train's copy of it for the dataset's classes."""
    from ..model_files.demo import demo_files

    trained = os.path.join(os.path.dirname(weights), os.path.basename(weights).rsplit("_", 1)[0] + ".cfg")
    cfg = trained if os.path.isfile(trained) else plan.cfg
    args = [demo_files()["image"], "--cfg", cfg, "--weights", weights, "--names", plan.names,
            "--out", os.path.join(plan.folder, "detections")]
    return "darknet_py detect " + " ".join(shlex.quote(a) for a in args)
