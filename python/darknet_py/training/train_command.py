"""The `train` command: its arguments, the order of CFG and DATA, the quick start without DATA, and
one process per device (the launcher, or one rank of it); the training itself is train.train."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, Tuple

from ..commands.argtypes import gigabytes_or_auto, non_negative_int, positive_float, positive_int
from ..devices import add_precision_option, check_name
from ..distributed import DEFAULT_TIMEOUT, RankInfo, init_process_group
from ..distributed.launch import launch, report_peer_lost, watch_launcher
from ..distributed.plan import BATCH_MODES, check_cfg_splits, split_devices
from ..exit_codes import INTERRUPTED
from . import quickstart
from .train import train

TRAIN_EXAMPLES = """\
Trains the detector CFG on the `train` list of DATA, as `darknet detector train` does: Darknet's
batch/subdivisions, learning-rate policy and augmentation from the cfg. DATA is a Darknet .data
file or an Ultralytics dataset YAML (path, train, val, names); CFG and DATA may come in either
order (Darknet's is DATA CFG): a cfg is the file with a [net] section.

Without DATA it trains CFG for a few minutes on a synthetic dataset of shapes (made once in the
cache folder), seed 1 unless --seed, into a new folder quickstart-<cfg>/ (--out: another), and
prints the command that detects with the new weights. A cfg with the layers of the bundled demo
model and k times its filters (yolov4-tiny) starts from the demo's weights widened to it; any
other cfg from random weights, which a few minutes do not make a detector of.

When DATA's class count differs from the cfg's, a copy of the cfg with `classes` of every [yolo]
and `filters` of the convolution before each changed is written to the backup folder and
trained; --weights made for the original cfg (e.g. 80-class yolov4-tiny.weights) then gives every
layer but those convolutions.

In the backup folder (--out, else the .data file's `backup`, else ./backup): <cfg>_last.weights
every 100 iterations, <cfg>_N.weights every --save-every, <cfg>_best.weights when the mAP improves
(--map, with the evaluation plots of the best weights in plots/), <cfg>_final.weights at the end,
and chart.png. Resume with --weights <cfg>_last.weights. Ctrl-C saves <cfg>_last.weights and stops.

examples:
  darknet_py train yolov4-tiny.cfg
  darknet_py train yolov4-tiny.cfg shapes/shapes.data --map
  darknet_py train shapes/shapes.data yolov4-tiny.cfg --weights yolov4-tiny.weights --clear
  darknet_py train yolov4-tiny.cfg coco8.yaml --max-batches 2000
  darknet_py train shapes/shapes.data my-shapes.cfg --weights backup/my-shapes_last.weights
  darknet_py train coco.data yolov4-tiny.cfg --device cuda:0,1,2,3   # one process per GPU (also --gpus 0,1,2,3)

Several devices (N): one process per device. --batch-mode split (default): a step is the cfg's
batch; each device trains batch/N of it in subdivisions/N passes of batch/subdivisions images (or,
when N does not divide subdivisions, subdivisions passes of batch/(N x subdivisions)); learning_rate,
burn_in and max_batches mean what they mean on one device: the same training curve. --batch-mode
per-gpu (Darknet's -gpus): each device trains the whole batch in subdivisions passes, a step is
batch x N images, max_batches still counts steps; Darknet's README then divides learning_rate by N
by hand. Either way `seen` grows by batch per step, so _last.weights resumes on any device count.
Across hosts run the same command under torchrun or srun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT): see the README's "Several GPUs, several hosts".
"""


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    """Registers the `train` subcommand on the CLI's subparsers."""
    p = sub.add_parser("train", help="train a detector (CFG [DATA]: no DATA = a quick demonstration on shapes)",
                       description="Train a YOLO detector from a .cfg and a Darknet .data file or dataset YAML.",
                       epilog=TRAIN_EXAMPLES, formatter_class=formatter)
    p.add_argument("first", metavar="CFG", help="network .cfg (a path or a shipped cfg's name), or DATA (Darknet's order)")
    p.add_argument("second", metavar="DATA", nargs="?",
                   help="Darknet .data file or Ultralytics dataset YAML (or CFG); none: synthetic shapes")
    p.add_argument("--weights", metavar="W", help="start from these weights (a _last.weights resumes; an official model's name, e.g.\n"
                        "yolov4-tiny: the file `darknet_py weights get` downloaded)")
    p.add_argument("--clear", action="store_true", help="reset the iteration count (seen) to 0")
    p.add_argument("--map", action="store_true", help="measure mAP@0.5 on the valid list; keep <cfg>_best.weights")
    p.add_argument("--map-every", type=positive_int, metavar="N",
                   help="mAP every N iterations (default: Darknet's max(100, 4 epochs))")
    p.add_argument("--save-every", type=positive_int, metavar="N",
                   help="keep <cfg>_N.weights every N iterations (default: 1000, or 10000 past 10000 batches)")
    p.add_argument("--out", metavar="DIR", help="backup folder (default: the .data file's backup, else ./backup; "
                        "without DATA: a new quickstart-<cfg> folder)")
    p.add_argument("--threads", type=positive_int, metavar="N", help="CPU threads (default: all cores)")
    p.add_argument("--workers", type=non_negative_int, metavar="N",
                   help="image loading workers (default: min(4, cores) on the CPU, min(8, cores - 1) on a GPU); "
                        "see --loader and the README on picking N")
    p.add_argument("--loader", choices=("auto", "threads", "processes"), default="auto",
                   help="run the workers as threads or processes (processes scale with cores; default auto: "
                        "processes when training on a GPU with 2+ workers, else threads)")
    p.add_argument("--cache-images", type=gigabytes_or_auto, default="auto", metavar="GB",
                   help="keep up to GB of decoded training images in memory the loader's workers share, so that each file "
                        "is decoded once instead of at every draw (the same batches; only what is stored takes memory). Default auto: "
                        "a quarter of the available memory (none on Windows); 0: off")
    p.add_argument("--max-batches", type=positive_int, metavar="N",
                   help="train to iteration N (replaces the cfg's; without DATA: default %d)" % quickstart.MAX_BATCHES)
    p.add_argument("--seed", type=int, metavar="S", help="random seed: initialisation, data, augmentation")
    p.add_argument("--verbose", action="store_true", help="print the per-head statistics every iteration")
    p.add_argument("--device", "--backend", dest="device", type=_device_list_arg, default=None, metavar="DEVICE",
                   help="where the network trains: cpu, opencl[:N], cuda[:N], metal or auto (default: $DARKNET_PY_DEVICE, "
                        "else auto). A list trains data-parallel, one process per device: cuda:0,1,2,3")
    p.add_argument("--gpus", metavar="LIST", help="Darknet's -gpus 0,1,2,3: the same as --device cuda:0,1,2,3")
    p.add_argument("--batch-mode", choices=BATCH_MODES, default="split",
                   help="several devices: split (default) divides the cfg's batch among them, so that "
                        "learning_rate, burn_in and max_batches mean what they mean on one device (the same training "
                        "curve); per-gpu is Darknet's -gpus: each device trains the whole batch, a step sees batch x "
                        "devices images (Darknet's README then divides learning_rate by the device count by hand)")
    p.add_argument("--dist-timeout", type=positive_float, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"several devices: seconds a rank waits for the others before it stops all (default "
                        f"{DEFAULT_TIMEOUT:g}; rank 0's mAP runs while they wait)")
    p.add_argument("--collective", choices=("auto", "nccl", "tcp"), default="auto",
                   help="several devices: how gradients are summed: nccl (CUDA devices, the default there when NCCL "
                        "is found), tcp (the engine's ring over TCP: any device)")
    add_precision_option(p, training=True)
    p.set_defaults(func=cmd_train, parser=p)
    return p


def input_kind(path: str) -> str:
    """'cfg' or 'data' for a `train` argument, from its content: a dataset YAML is data, a file with
    a [net] section a cfg, any other existing file data; a name that is no file but a shipped cfg's
    is a cfg. Raises FileNotFoundError naming the argument otherwise."""
    from ..model_files.cfgfiles import resolve_cfg
    from ..data.dataset_yaml import is_yaml

    if os.path.isfile(path):
        if is_yaml(path):
            return "data"
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.split("#", 1)[0].strip().lower() in ("[net]", "[network]"):
                    return "cfg"
        return "data"
    try:
        resolve_cfg(path)
    except FileNotFoundError as e:  # name it as what it may be: either
        raise FileNotFoundError(str(e).replace("cfg file not found", "not found (neither a file nor a shipped cfg)")
                                .replace(" (not a file, nor a shipped .cfg file: ", " (shipped cfgs: ")) from None
    return "cfg"


def _is_cfg(path: Optional[str]) -> bool:
    try:
        return path is not None and input_kind(path) == "cfg"
    except FileNotFoundError:
        return False


def _kind_of(path: str, other: Optional[str]) -> str:
    """input_kind(path); a missing file that is a dataset by its extension, or beside a cfg, is named
    as the data file it is meant to be (not as a cfg that was not found)."""
    try:
        return input_kind(path)
    except FileNotFoundError:
        if path.lower().endswith((".data", ".yaml", ".yml")) or _is_cfg(other):
            raise FileNotFoundError(f"data file not found: {path} (a Darknet .data file or an Ultralytics "
                                    "dataset YAML)") from None
        raise


def order_inputs(first: str, second: Optional[str]) -> Tuple[Optional[str], str]:
    """(data, cfg) from `train`'s one or two positional arguments, in either order."""
    kinds = [_kind_of(first, second)] + ([_kind_of(second, first)] if second is not None else [])
    if kinds == ["data"]:
        raise ValueError(f"{first} is a dataset, not a cfg (no [net] section): give the cfg too, "
                         f"e.g. darknet_py train yolov4-tiny.cfg {first}")
    if second is None:
        return None, first
    if kinds[0] == kinds[1]:
        what = "cfgs ([net] sections)" if kinds[0] == "cfg" else "datasets (no [net] section)"
        raise ValueError(f"{first} and {second} are both {what}: give one cfg and one .data file or dataset YAML")
    return (first, second) if kinds[0] == "data" else (second, first)


def _device_list_arg(text: str) -> str:
    try:
        for name in split_devices(text):
            check_name(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def cmd_train(args: argparse.Namespace) -> int:
    data, cfg = order_inputs(args.first, args.second)
    if args.weights:  # a path, or an official model's name: the file `weights get` downloaded
        from ..model_files.official import resolve_weights

        args.weights = resolve_weights(args.weights)
    if args.gpus and args.device:
        raise ValueError("--gpus and --device both name the devices: give one")
    devices = split_devices(args.device) if args.device else [None]
    if args.gpus:
        devices = split_devices("cuda:" + args.gpus.strip())
    calc_map, map_every, max_batches, out = args.map, args.map_every, args.max_batches, args.out
    plan = None
    if data is None:
        if len(devices) > 1:
            raise ValueError("the quick start (no DATA) trains on one device: give DATA to train on several")
        from ..model_files.cfgfiles import resolve_cfg

        def say(text: str) -> None:
            print(text, flush=True)

        max_batches = max_batches or quickstart.MAX_BATCHES
        args.seed = quickstart.SEED if args.seed is None else args.seed
        say(f"No dataset given: training {cfg} for {max_batches} iterations on synthetic shapes "
            f"({quickstart.CLASSES} classes, {quickstart.SIZE}x{quickstart.SIZE}), seed {args.seed}. "
            f"On your own data: darknet_py train {cfg} my.data (a Darknet .data file or an Ultralytics dataset YAML)")
        plan = quickstart.prepare(resolve_cfg(cfg), out, max_batches, args.seed, say, demo=not args.weights)
        data, cfg, out = plan.data, plan.cfg, plan.folder
        if plan.weights:  # another network's iteration count: this run counts from 0
            args.weights, args.clear = plan.weights, True
        calc_map = True
        map_every = map_every or max(1, max_batches // 2)
    info = RankInfo.from_env()
    stop_asked = None
    if info is None or info.world_size == 1:
        if len(devices) > 1:  # this process is the launcher: one process per device runs this same command
            from ..model_files.cfgfiles import resolve_cfg

            check_cfg_splits(resolve_cfg(cfg), len(devices), args.batch_mode)
            return launch([str(d) for d in devices], getattr(args, "argv", sys.argv[1:]))
        group = None
        device = devices[0]
    else:  # one rank, started by our launcher, torchrun or srun
        stop_asked = watch_launcher()
        if len(devices) > 1 and info.local_rank >= len(devices):
            raise ValueError(f"LOCAL_RANK={info.local_rank} but --device lists {len(devices)} devices")
        device = devices[info.local_rank] if len(devices) > 1 else devices[0]
        if device in (None, "auto", "cuda"):  # one device per rank on this host: the LOCAL_RANK-th GPU
            from ..devices import default_device, resolve

            device = resolve(device or default_device())
            if device.startswith("cuda:"):
                device = f"cuda:{info.local_rank}"
        group = init_process_group(info, device, collective=args.collective, timeout=args.dist_timeout)
    from .. import _core

    try:
        r = train(data, cfg, args.weights, clear=args.clear, calc_map=calc_map, map_every=map_every,
                  save_every=args.save_every, out_dir=out, threads=args.threads, max_batches=max_batches,
                  seed=args.seed, workers=args.workers, verbose=args.verbose, device=device, group=group,
                  batch_mode=args.batch_mode, loader_kind=args.loader, precision=args.precision,
                  cache_images=args.cache_images,
                  callback=(lambda _: not stop_asked.is_set()) if stop_asked is not None else None)
    except _core.CollectiveError as e:  # another rank died or hangs: that rank's launcher line says why
        return report_peer_lost(str(e))
    if stop_asked is not None and stop_asked.is_set():  # the launcher's Ctrl-C: every rank stopped at this step
        if group.rank == 0:
            print(f"interrupted at iteration {r.iteration}: saved {r.last}", file=sys.stderr)
        return INTERRUPTED
    if group is None or group.rank == 0:
        print(f"iteration {r.iteration} in {r.seconds:.1f} s ({r.images_per_second:.1f} images/s, "
              f"{100 * r.data_wait_share:.1f}% waiting for data); weights: {r.weights}"
              + (f"; best mAP@0.5 {r.best_map:.4f}: {r.best}" if r.best else ""), file=sys.stderr)
        if plan is not None:
            from .quickstart import detect_command

            print(f"Detect with the new weights:\n  {detect_command(plan, r.best or r.weights)}", flush=True)
    return 0
