"""Training a detector: Darknet's `detector train` (detector.c train_detector) on the engine's
training bindings (the `train` command: train_command.py).

    import darknet_py
    result = darknet_py.train("shapes.data", "shapes.cfg", max_batches=2000, calc_map=True,
                              callback=lambda s: print(s["iteration"], s["avg_loss"]))

One iteration is Darknet's: `subdivisions` forward/backward passes of batch/subdivisions images
each (gradients accumulate), then one update over `batch` images with the rate of
lr_policy.LrSchedule. Its loss is Darknet's: per pass the mean over the [yolo] heads of each head's
cost (the sum of its squared deltas, get_network_cost), summed over the passes and divided by
`batch`; the average loss is 0.9 * avg + 0.1 * loss, starting at the first loss.

Files, in the backup folder (--out, else the .data file's `backup`, else ./backup), each written
atomically (checkpoint.py), `<cfg>` being the cfg's file name without its extension:
  <cfg>_last.weights   every 100 iterations, and when training ends, stops or is interrupted
  <cfg>_N.weights      every `save_every` iterations (Darknet: 1000, or 10000 past 10000 batches)
  <cfg>_best.weights   when the mAP improves (calc_map), mAP measured on the `valid` list every
                       max(100, 4 epochs) iterations (and not before burn_in) and at the end
  <cfg>_final.weights  at max_batches
  chart.png            average loss and mAP against iterations, redrawn as training goes
  results.csv          a row per iteration: the log line's figures and each head's (results_log.py);
  tensorboard/         the same as TensorBoard events, where tensorboardX is installed
  plots/               the evaluation plots of <cfg>_best.weights (evaluation/plots.py), when it is saved
  <cfg>-<K>classes.cfg the cfg adapted to the dataset's K classes, when the cfg's differ
                       (fit_cfg_to_classes); <cfg> is then this file's name

The .weights files store `seen`; training from `_last.weights` continues at its iteration and rate
(`clear` restarts from 0). As in Darknet the momentum is not stored, so a resumed run restarts
it from zero. A NaN or infinite loss (or parameters) stops training with TrainingDiverged before
anything non-finite is written: the previous `_last.weights` stays as it was.
"""
from __future__ import annotations

import contextlib
import glob
import math
import os
import random
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple

import numpy as np

from .chart import Chart
from ..distributed.plan import plan_ranks
from .checkpoint import remove_stale_temporaries, save_weights_atomic
from .lr_policy import LrSchedule
from .phase_hook import phase
from .queued_step import QueuedStep, read_at_once
from .results_log import CSV_NAME, ResultsLog
from .weights_transfer import load_start_weights, weights_layers_in_file  # noqa: F401 (public here too)
from .train_rate import ThroughputMeter, default_train_workers, image_cache_summary, use_processes

LAST_EVERY = 100  # Darknet saves <cfg>_last.weights every 100 iterations
# DARKNET_PY_HALF_BATCHES=0: fp16 / bf16 training loads float32 batches, converted on the device, instead
# of batches in the network's half type (data/batch_storage.py); for A/B timing, the same losses either way
HALF_BATCHES_ENV = "DARKNET_PY_HALF_BATCHES"
# DARKNET_PY_PIN_BATCHES=0: the loader's batch buffers are not page-locked for the device (data/process_loader.py),
# so each batch is copied into staging buffers by the CPU on its way up; for A/B timing, the same batches either way
PIN_BATCHES_ENV = "DARKNET_PY_PIN_BATCHES"
MULTISCALE_EVERY = 10  # random=1 picks a new network size every 10 iterations
CHART_NAME = "chart.png"
PLOTS_NAME = "plots"  # the best weights' evaluation plots (evaluation/plots.py), in the backup folder


class StopTraining(Exception):
    """Raise from a training callback to stop training after the current iteration
    (`_last.weights` is saved; train() returns normally with result.stopped = True)."""


class TrainingDiverged(RuntimeError):
    """The loss or the parameters became NaN or infinite; nothing non-finite was saved."""

    def __init__(self, message: str, iteration: int, last_good: Optional[str]) -> None:
        super().__init__(message)
        self.iteration, self.last_good = iteration, last_good


@dataclass
class TrainResult:
    iteration: int  # the iteration reached (Darknet's numbering: seen / batch)
    start_iteration: int
    max_batches: int
    seed: int
    backup_dir: str
    last: Optional[str] = None  # paths of the files written (None: not written)
    final: Optional[str] = None
    best: Optional[str] = None
    best_map: Optional[float] = None
    maps: List[Tuple[int, float]] = field(default_factory=list)
    losses: List[Tuple[int, float, float]] = field(default_factory=list)  # (iteration, loss, avg loss)
    chart: Optional[str] = None
    plots: Optional[str] = None  # the folder of the best weights' evaluation plots (calc_map)
    stopped: bool = False  # True: stopped early by the callback
    seconds: float = 0.0
    images_per_second: float = 0.0  # training images per second over this run's iterations
    data_wait_share: float = 0.0  # the share of those iterations' time spent waiting for the loader
    device_wait_share: float = 0.0  # ... and for the device (GPU devices; near 0: the host's work limits)
    loader: str = ""  # how the batches were prepared: "threads x4", "processes x8, bf16 batches, page-locked batches"
    image_cache: Optional[Dict[str, int]] = None  # the loader's image cache at the end (ImageCache.stats), if any
    skipped_steps: int = 0  # fp16: steps skipped because the gradients overflowed (loss scaling)
    net: Any = field(default=None, repr=False)  # the trained darknet_py._core.Net (its last input size)

    @property
    def weights(self) -> Optional[str]:
        """The weights to use: final if training completed, else last."""
        return self.final or self.last


# ---- helpers --------------------------------------------------------------------------------
def _finite_params(raw) -> bool:
    for i in range(len(raw.layers())):
        for v in raw.params(i).values():
            if not np.isfinite(v).all():
                return False
    return True


def _copy_params(src, dst) -> None:
    for i in range(len(src.layers())):
        dst.set_params(i, src.params(i))


@contextlib.contextmanager
def _ctrl_c_deferred():
    """Holds a Ctrl-C (SIGINT) arriving inside the block until its end, so that a step's update and
    the iteration number it belongs to change together. Only the main thread receives signals; in
    another the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hit = []
    old = signal.signal(signal.SIGINT, lambda *_: hit.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if hit:
        raise KeyboardInterrupt


def _broadcast_int(group, value: int) -> int:
    """Rank 0's integer in [0, 2^64) on every rank (the others pass 0): 16-bit digits, exact in float32."""
    digits = np.array([(value >> (16 * i)) & 0xFFFF for i in range(4)], np.float32)
    summed = group.all_reduce(digits)
    return sum(int(d) << (16 * i) for i, d in enumerate(summed))


def _host_image_cache(group, images: int, capacity: "int | str", warn: Callable[[str], None]):
    """One image cache for the data-parallel ranks of each host instead of one per rank: the same images
    decoded once and held once. Local rank 0 makes it under a name made of rank 0's random token; the
    others attach once every host's exists. None (no cache) on every rank if a maker failed; a rank that
    cannot attach goes without (each draw decoded), the others keep it."""
    from ..data.image_cache import ImageCache, auto_capacity

    token = _broadcast_int(group, secrets.randbits(48) if group.rank == 0 else 0)
    name = f"dnpy_cache_{token:012x}"
    cache, made = None, 1.0
    if group.local_rank == 0:
        size = auto_capacity() if capacity == "auto" else int(capacity)
        try:
            cache = ImageCache(images, size, name=name) if size > 0 else None
        except OSError as e:
            warn(f"the ranks' image cache ({size / 2 ** 20:.0f} MB of shared memory) could not be made ({e}): images "
                 "are decoded at each draw")
        made = float(cache is not None)
    if group.all_reduce(np.array([made], np.float32))[0] < group.size:  # also waits until every cache exists
        if cache is not None:
            cache.close()
        return None
    if cache is None:
        try:
            cache = ImageCache.attach(name)
        except OSError as e:  # LOCAL_RANK not given per host, say: this rank decodes at each draw
            warn(f"rank {group.rank}: cannot use this host's image cache {name} ({e}): images are decoded at each draw")
            return None
    return cache


def _head_line(layer: int, s: Dict[str, float]) -> str:
    """Darknet's per-head line (yolo_layer.c, before the v3 loss printout)."""
    return (f"Region {layer} Avg IOU: {s['avg_iou']:.6f}, Class: {s['class']:.6f}, Obj: {s['obj']:.6f}, "
            f"No Obj: {s['no_obj']:.6f}, .5R: {s['recall50']:.6f}, .75R: {s['recall75']:.6f},  count: {s['count']}")


def _merge_heads(passes: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """Per-head statistics of one iteration from those of its passes: the per-object figures
    (IoU, class, obj, recalls) weighted by the passes' object counts, no-obj and loss averaged."""
    out = []
    for k in range(len(passes[0])):
        heads = [p[k] for p in passes]
        count = sum(h["count"] for h in heads)
        m = {"layer": heads[0]["layer"], "count": count, "loss": sum(h["loss"] for h in heads),
             "no_obj": sum(h["no_obj"] for h in heads) / len(heads)}
        for key in ("avg_iou", "class", "obj", "recall50", "recall75"):
            m[key] = sum(h[key] * h["count"] for h in heads) / count if count else 0.0
        out.append(m)
    return out


class _Console:
    """Iteration lines on `out`; on a terminal, a progress bar with ETA kept on stderr's last line."""

    def __init__(self, out: TextIO, bar: bool) -> None:
        self.out, self.bar = out, bar
        self.bar_text = ""
        self.device = ""  # shown in the bar once the network is on it

    def line(self, text: str, err: bool = False) -> None:
        if self.bar and self.bar_text:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        stream = sys.stderr if err else self.out
        stream.write(text + "\n")
        stream.flush()
        if self.bar and self.bar_text:
            sys.stderr.write(self.bar_text)
            sys.stderr.flush()

    def progress(self, iteration: int, start: int, total: int, eta_s: float, avg_loss: float) -> None:
        if not self.bar:
            return
        import shutil

        from ..commands.progress import format_duration

        done = (iteration - start) / max(1, total - start)
        width = max(10, min(40, shutil.get_terminal_size().columns - 60))
        filled = int(width * min(1.0, done))
        self.bar_text = (f"\r{self.device + ' ' if self.device else ''}{iteration}/{total} |{'#' * filled}{'.' * (width - filled)}| {100 * done:3.0f}%  "
                         f"avg loss {avg_loss:.3f}  ETA {format_duration(eta_s)}")
        sys.stderr.write(self.bar_text + "\033[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self.bar and self.bar_text:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.bar_text = ""


def fit_cfg_to_classes(cfg: str, classes: int, folder: str, say: Callable[[str], None]) -> str:
    """`cfg` when its heads have `classes` classes; else an adapted copy written to `folder`
    (cfg_edit.adapt_classes: classes of every head, filters of the convolution before each), its
    changed lines reported through `say`."""
    from ..model_files.cfg_edit import CfgEditor, adapt_classes, adapted_name, cfg_classes

    ed = CfgEditor.from_file(cfg)
    have = cfg_classes(ed)
    if have is None or have == classes:  # no head: the engine's check below says so
        return cfg
    path = adapt_classes(ed, classes).write(os.path.join(folder, adapted_name(cfg, classes)))
    say(f"{cfg} has classes={have}, the dataset {classes}: training {path}, a copy with these lines changed:")
    for change in ed.changes:
        say(f"  {change}")
    return path


def batch_storage(precision: str) -> str:
    """The loader's batch type for a training in `precision`: the network's own (a half one halves the
    bytes written, staged and uploaded), unless DARKNET_PY_HALF_BATCHES=0 asks for float32 batches."""
    return precision if os.environ.get(HALF_BATCHES_ENV, "1") != "0" else "fp32"


# ---- the loop -------------------------------------------------------------------------------
def train(data: str, cfg: str, weights: Optional[str] = None, *, clear: bool = False, calc_map: bool = False,
          map_every: Optional[int] = None, save_every: Optional[int] = None, out_dir: Optional[str] = None,
          threads: Optional[int] = None, max_batches: Optional[int] = None, seed: Optional[int] = None,
          workers: Optional[int] = None, callback: Optional[Callable[[Dict[str, Any]], Any]] = None,
          verbose: bool = False, heads_every: int = 10, device: Optional[str] = None, stream: Optional[TextIO] = None,
          progress: Optional[bool] = None, chart: bool = True, multiscale: bool = True,
          quiet: bool = False, loader_kind: str = "auto", group: Any = None,
          batch_mode: str = "split", precision: str = "auto", cache_images: "int | str" = "auto") -> TrainResult:
    """Trains the detector `cfg` on the `train` list of the Darknet .data file `data` (or an
    Ultralytics dataset YAML). When the cfg's class count differs from the data's, an adapted copy
    is written to the backup folder and trained (fit_cfg_to_classes); `weights` made for the
    original cfg then give every layer but the head convolutions (weights_transfer.py).

    weights: start from these weights (all layers, or the leading layers a pretrained prefix file
    holds), continuing at the iteration its `seen` gives unless `clear`. calc_map: measure mAP@0.5
    on the `valid` list every `map_every` iterations (default Darknet's max(100, 4 epochs)) and keep
    `<cfg>_best.weights`. save_every: also keep `<cfg>_N.weights` every N iterations. out_dir: the
    backup folder. threads: CPU threads for the engine. max_batches: replaces the cfg's (the end of
    training, and the poly/sgdr schedules that use it). seed: initialisation, data order and
    augmentation (None: a random seed, printed); the same seed gives the same run, and a resumed run
    draws the batches an uninterrupted one would have. workers: the loader's workers (0: load in this
    thread; default train_rate.default_train_workers). loader_kind: "threads", "processes" (they
    scale with cores; data/process_loader.py) or "auto" (processes when training on a GPU with
    workers > 1, else threads). callback(stats): called after every iteration with a dict
    (iteration, loss, avg_loss, rate, seconds, load_seconds, images, eta_seconds, width, height, heads, map, best_map,
    max_batches, net: the _core.Net being trained); returning False or raising StopTraining stops
    training. verbose: the per-head lines
    every iteration (else every `heads_every`). multiscale=False ignores random=1 (a fixed size).
    quiet: no iteration lines. group: this process's darknet_py.distributed.ProcessGroup when it is
    one rank of a data-parallel training (rank 0 alone prints, saves, draws the chart and measures
    mAP; the others train quietly); batch_mode: how the cfg's batch maps onto the ranks
    (distributed/plan.py: "split" or "per-gpu"). precision: "auto" (the default: bf16 or fp16 on a
    GPU, fp32 on a CPU, devices.auto_precision, named in the log), "fp32", or "fp16" / "bf16" on a GPU
    device: activations and their gradients in half, weights, their gradients and the optimizer in
    fp32; fp16 scales the loss dynamically and skips a step whose gradients overflowed (the log says
    so; TrainResult.skipped_steps counts them). cache_images: bytes of decoded images the loader's
    workers share (data/image_cache.py: each file decoded once; "auto": a quarter of the available memory;
    0: off); data-parallel ranks share one per host. Returns a TrainResult; raises TrainingDiverged on NaN/Inf."""
    from .. import _core
    from ..model_files.cfgfiles import resolve_cfg
    from ..data import (BatchLoader, darknet_truth, random_network_size, read_data_file, read_image_list,
                       read_names_file)
    from ..data.batch_storage import batch_dtype

    t_start = time.perf_counter()
    ranks, is_root = (group.size, group.rank == 0) if group is not None else (1, True)
    if not is_root:  # rank 0's duties: the console, the files, mAP
        quiet, chart, calc_map = True, False, False
    out = stream if stream is not None else sys.stdout
    tty = sys.stderr.isatty() if progress is None else bool(progress)
    con = _Console(out, tty and not quiet)

    def say(text: str) -> None:
        if not quiet:
            con.line(text)

    def warn(text: str) -> None:
        con.line(f"warning: {text}", err=True)

    cfg = resolve_cfg(cfg)
    spec = read_data_file(data)
    classes = spec.require("classes")
    backup = os.path.abspath(out_dir or spec.backup or "backup")
    os.makedirs(backup, exist_ok=True)
    adapted_from = None
    fitted = fit_cfg_to_classes(cfg, classes, backup, say)
    if fitted != cfg:
        adapted_from, cfg = cfg, fitted
    base = os.path.splitext(os.path.basename(cfg))[0]
    # a run killed inside a save leaves its hidden temporary file; its complete files are intact
    if is_root:  # (another rank would race with rank 0's first writes)
        remove_stale_temporaries(backup, [glob.escape(base) + "_*.weights", CHART_NAME, CSV_NAME])
        remove_stale_temporaries(os.path.join(backup, PLOTS_NAME), ["*.png"])
    if seed is None:
        seed = random.SystemRandom().randrange(2 ** 31)
    if group is not None:  # one seed for all: the ranks' shards are of the same batches
        shared = _broadcast_int(group, seed % 2 ** 64 if is_root else 0)
        seed = shared if shared < 2 ** 63 else shared - 2 ** 64
    if threads:
        _core.set_threads(int(threads))

    # ---- the network: Darknet's random initialisation, then the weights if given
    from .init_weights import darknet_init

    from ..devices import default_device, resolve

    device = resolve(device or default_device())
    raw = _core.Net(cfg, device)
    if precision == "auto":  # devices.auto_precision; the choice and its reason go to the log
        from ..devices import auto_precision, auto_precision_line

        precision, why = auto_precision(device)
        line = auto_precision_line(precision, why)
        if line:
            say(line)
    raw.precision = precision  # one line naming what the device runs when it can't
    con.device = device
    for w in raw.warnings:
        warn(str(w))
    heads = list(raw.yolo_layers)
    if not heads:
        raise ValueError(f"{cfg}: no [yolo] layer: `train` trains detectors")
    net_classes = raw.yolo_info(heads[-1])["classes"]
    if net_classes != classes:
        raise ValueError(f"{spec.where('classes')}: classes = {classes} but the cfg's [yolo] layers have "
                         f"classes={net_classes}")
    darknet_init(raw, seed)
    if weights and is_root and load_start_weights(raw, weights, adapted_from, say, warn):
        clear = True  # another network's iteration count means nothing for this one
    if clear:
        raw.seen = 0
    if group is not None:  # every rank starts from rank 0's weights and iteration
        group.collective.broadcast_params(raw, 0)
        raw.seen = _broadcast_int(group, int(raw.seen) if is_root else 0)
        _core.set_collective(raw, group.collective)

    opts = raw.net_options()
    if max_batches is not None:
        opts["max_batches"] = int(max_batches)
    total = int(opts["max_batches"])
    if total <= 0:
        raise ValueError(f"{cfg}: [net] has no max_batches: set it, or pass max_batches (--max-batches)")
    schedule = LrSchedule.from_options(opts)
    batch, subdivisions = int(opts["batch"]), int(opts["subdivisions"])
    plan = plan_ranks(batch, subdivisions, ranks, batch_mode)  # one rank: passes = subdivisions, mini = batch / subdivisions
    start = int(raw.seen) // batch
    if start >= total:
        raise ValueError(f"{weights}: already trained to iteration {start} (seen = {raw.seen} images), not below "
                         f"max_batches = {total}: raise max_batches, or restart with clear (--clear)")
    raw.seen = start * batch  # a whole number of iterations, as the iteration count derives from it
    lr_rng = random.Random(seed)

    # ---- mAP: a second network at the cfg's size, given the training weights before each measure
    eval_net = None
    valid_list = spec.valid or spec.train
    if calc_map:
        from ..network import Network

        if not valid_list or not os.path.exists(valid_list) or not read_image_list(valid_list):
            raise ValueError(f"{spec.where('valid')}: no valid image list for mAP ({valid_list}); "
                             "set `valid =` in the .data file or train without --map")
        eval_net = Network(cfg, None, None, device)
        if spec.names and os.path.isfile(spec.names):
            eval_net.names = read_names_file(spec.names)

    # ---- data
    workers = default_train_workers(device) if workers is None else workers
    processes = use_processes(loader_kind, device, workers)
    storage = batch_storage(precision)
    if processes and loader_kind == "auto":
        from ..data.process_loader import batch_ring_bytes, shared_memory_shortfall

        # random=1 sizes reach about twice the cfg's pixels
        problem = shared_memory_shortfall(2 * batch_ring_bytes(plan.mini, raw.channels, raw.width, raw.height,
                                                               itemsize=batch_dtype(storage).itemsize))
        if problem:
            warn(problem + "; loading in threads")
            processes = False
    cache, host_cache = cache_images, None  # host_cache: the ranks' shared one, this rank closes its mapping
    if group is not None and cache_images != 0 and spec.train and os.path.exists(spec.train):
        host_cache = _host_image_cache(group, len(read_image_list(spec.train)), cache_images, warn)
        cache = host_cache if host_cache is not None else 0
    try:
        loader = BatchLoader.from_files(data, cfg, batch_size=plan.mini, seed=seed, workers=workers,
                                        start=start * plan.passes, iteration_images=plan.step_images,
                                        processes=processes, shard=(group.rank, ranks) if group is not None else (0, 1),
                                        storage=storage, cache=cache, on_problem=lambda kind, path, message: warn(message),
                                        pin_for=raw if os.environ.get(PIN_BATCHES_ENV, "1") != "0" else None)
    except BaseException:
        if host_cache is not None:
            host_cache.close()
        raise
    result_loader = f"{'processes' if processes else 'threads'} x{workers}" if workers else "this thread"
    if storage != "fp32":
        result_loader += f", {storage} batches"
    train_images = len(loader.paths)
    aug = loader.options
    init_w, init_h = raw.width, raw.height
    multiscale = multiscale and bool(aug.get("random"))
    random_coef = float(aug.get("random") or 0)
    random_coef = 1.4 if random_coef == 1.0 else random_coef
    if map_every is None:
        map_every = max(100, 4 * train_images // batch)  # AlexeyAB: every 4 epochs, at least 100

    result = TrainResult(iteration=start, start_iteration=start, max_batches=total, seed=seed, backup_dir=backup,
                         net=raw, loader=result_loader)
    # (on the CPU a step runs as it is queued, and DARKNET_PY_SYNC_STATS=1 reads mid-step: no device wait to see)
    rate_meter = ThroughputMeter(queued_device=not device.startswith("cpu") and not read_at_once())
    ch = Chart(os.path.join(backup, CHART_NAME), total, title=f"{base}  batch {batch}") if chart else None
    if ch is not None:
        result.chart = ch.save()
    log = ResultsLog(backup, list(raw.yolo_layers), start) if is_root else None
    if save_every is None:
        save_every = 1000 if total <= 10000 else 10000
    path_last = os.path.join(backup, f"{base}_last.weights")
    last_saved_at: Optional[int] = None

    def save(path: str, iteration: int) -> Optional[str]:
        if not is_root:
            return None
        if not _finite_params(raw):
            raise TrainingDiverged(
                f"training stopped at iteration {iteration}: the parameters hold NaN or Inf (training diverged); "
                f"{path} was not written" + (f"; the last good weights are {path_last} (iteration {last_saved_at})"
                                             if last_saved_at is not None else "") +
                ". Lower learning_rate or raise burn_in in the cfg.", iteration,
                path_last if last_saved_at is not None else None)
        return save_weights_atomic(raw, path)

    def save_last(iteration: int) -> None:
        nonlocal last_saved_at
        result.last = save(path_last, iteration)
        last_saved_at = iteration

    say(f"{base}: {len(raw.layers())} layers on {device}, {init_w}x{init_h}, batch {batch} (subdivisions {subdivisions}), "
        f"{train_images} training images, seed {seed}, loader {result_loader}")
    if loader.cache is not None:
        say(f"image cache: up to {loader.cache.stats()['capacity'] / 2 ** 30:.1f} GB of decoded images, shared by the "
            "loader's workers (--cache-images; 0: off)")
    if group is not None:
        say(f"data parallel: {ranks} ranks ({group.collective.name}), batch mode {batch_mode}: each trains "
            f"{plan.passes} x {plan.mini} images per step, a step sees {plan.step_images} images")
    say(f"Learning Rate: {schedule.learning_rate:g}, Momentum: {opts['momentum']:g}, Decay: {opts['decay']:g}, "
        f"policy {schedule.policy}, burn_in {schedule.burn_in}, max_batches {total}")
    if calc_map:
        say(f"mAP calculations will be every {map_every} iterations")
    if log is not None:
        say(f"log: {log.path}" + (f", TensorBoard events in {log.events}" if log.events else ""))
    if start:
        say(f"resuming at iteration {start} (seen = {raw.seen} images)")

    iteration, avg_loss = start, -1.0
    iter_map = start
    best_map = -1.0
    last_map: Optional[float] = None
    ema_seconds: Optional[float] = None
    # The throughput figures count wall time from report to report (the saves, the chart and the log between
    # steps included), less the mAP passes: what a user waits for per image.
    last_report: Optional[float] = None
    map_seconds = 0.0  # mAP passes since the last report
    count = 0  # iterations in this run (Darknet's `count`, for the multi-scale cadence)
    # The device never waits for the host mid-step: a step is queued whole (forward, loss, backward
    # and update of every pass) and its loss is read, checked and reported at the top of the next
    # iteration, before that one queues anything (queued_step.py). So the NaN/Inf stop now comes
    # after the diverged step's update was queued (no longer before it); it still comes before any
    # save, all of which happen in this report or after it, and the report of the last step is read
    # before the loop ends. Callbacks still see the weights of their iteration, before the next step.
    at_once = read_at_once()
    unchecked: List[QueuedStep] = []  # the step whose update ran but whose loss is not checked yet

    def queue_step() -> Optional[QueuedStep]:
        """Queues iteration + 1 whole, or returns None at max_batches."""
        nonlocal iteration, count
        if iteration >= total:
            return None
        # random=1: a new size every 10 iterations; the largest at the start and for the last 100
        if multiscale and count % MULTISCALE_EVERY == 0:
            largest = count == 0 or iteration > total - 100
            rng = np.random.default_rng([seed, iteration, 0x51E])
            w, h = random_network_size(init_w, init_h, rng, random_coef, int(aug.get("resize_step", 32)),
                                       largest=largest)
            if (w, h) != (raw.width, raw.height):
                raw.resize_input(w, h)
            loader.set_size(w, h)
            if verbose:
                say(f"Resizing to {w} x {h}")
        count += 1
        phase("iteration", f"begin {iteration + 1}")

        t0 = time.perf_counter()
        step = QueuedStep(iteration + 1, at_once)
        for p in range(plan.passes):
            images, truths = loader.next_batch()
            step.load_seconds += loader.last_wait
            raw.forward_train(images, [])
            step.add_pass(raw.queue_yolo_loss([darknet_truth(t) for t in truths]))
            # the last pass's gradients are summed over the ranks while its backward runs
            raw.backward(all_reduce=group is not None and p == plan.passes - 1)
        with _ctrl_c_deferred():  # a Ctrl-C finds the weights, `iteration` and `unchecked` in agreement
            iteration += 1
            phase("iteration", f"update {iteration}")
            step.rate = schedule.rate(iteration, lr_rng)
            # Adam's step is the iteration, as Darknet, so resuming continues it. fp16: the device checks
            # the gradients for overflow and skips the step itself; the report of the next step learns it
            step.add_update(raw.queue_update(step.rate, plan.update_batch, iteration))
            raw.seen = iteration * batch
            unchecked[:] = [step]
        step.seconds = time.perf_counter() - t0
        return step

    def learn_update(step: QueuedStep) -> None:
        """Whether the step's update applied (fp16 loss scaling), with its log line if it was skipped."""
        if step.learn_update():
            result.skipped_steps += 1
            say(f"{step.iteration}: fp16 gradients overflowed at loss scale {step.loss_scale:g}: step skipped, "
                f"loss scale now {step.next_loss_scale:g}")

    queued: Optional[QueuedStep] = None
    before: Optional[QueuedStep] = None  # the step reported last: its update's check is read one step late
    try:
        queued = queue_step()
        while queued is not None:  # the report of the step queued last (`iteration` is its number)
            step, queued = queued, None
            t_read = time.perf_counter()
            passes = step.read()  # waits for the step's loss kernels: the loop's wait for the device
            device_wait = time.perf_counter() - t_read
            loss_sum = step.loss_sum(passes)
            if group is not None:  # every rank sees the step's loss (and stops together on NaN)
                loss_sum = float(group.all_reduce(np.array([loss_sum], np.float32))[0])
            seconds = step.seconds + (time.perf_counter() - t_read)
            loss = loss_sum / plan.update_batch
            if not math.isfinite(loss):
                raise TrainingDiverged(
                    f"training stopped at iteration {iteration}: the loss is {loss} (training diverged); "
                    "these weights were not saved" +
                    (f"; the last good weights are {path_last} (iteration {last_saved_at})"
                     if last_saved_at is not None else "") +
                    ". Lower learning_rate or raise burn_in in the cfg, or check the labels.",
                    iteration, path_last if last_saved_at is not None else None)
            unchecked.clear()  # (a Ctrl-C from here on saves weights whose loss was checked)
            rate, load_seconds = step.rate, step.load_seconds
            if before is not None:  # its update ran before this step's loss kernels: no wait
                learn_update(before)
            before = step
            now = time.perf_counter()
            wall = seconds if last_report is None else now - last_report - map_seconds
            last_report, map_seconds = now, 0.0
            rate_meter.add(plan.step_images, wall, load_seconds, device_wait)  # every rank's images
            avg_loss = loss if avg_loss < 0 else avg_loss
            avg_loss = avg_loss * 0.9 + loss * 0.1
            ema_seconds = wall if ema_seconds is None else 0.95 * ema_seconds + 0.05 * wall
            eta = (total - iteration) * ema_seconds
            merged = _merge_heads(passes)
            result.iteration = iteration
            result.losses.append((iteration, loss, avg_loss))
            if ch is not None:
                ch.add_loss(iteration, loss, avg_loss)

            if verbose or (heads_every and iteration % heads_every == 0):
                for m in merged:
                    say(_head_line(m["layer"], m))
            # Darknet's line to the byte (train_detector's printf), then the throughput
            say(f" {iteration}: {loss:f}, {avg_loss:f} avg loss, {rate:f} rate, {seconds:f} seconds, "
                f"{iteration * batch} images, {eta / 3600:f} hours left, {rate_meter.line()}" +
                (f", loss scale {raw.loss_scale:g}" if precision == "fp16" else ""))

            # mAP at Darknet's cadence: every map_every iterations (not before burn_in) and at the end
            if eval_net is not None and (iteration >= max(iter_map + map_every, schedule.burn_in)
                                         or iteration == total):
                from ..evaluation.evaluate import compute_map, write_evaluation_plots

                map_start = time.perf_counter()
                _copy_params(raw, eval_net)
                con.close()
                phase("map", f"begin {iteration}")
                r = compute_map(data, network=eval_net, iou_thresh=0.5, progress=tty and not quiet, coco=False)
                phase("map", f"end {iteration}")
                iter_map, last_map = iteration, r.map
                result.maps.append((iteration, r.map))
                if ch is not None:
                    ch.add_map(iteration, r.map)
                say(f"\n mean_average_precision (mAP@0.50) = {r.map:f} ")  # Darknet's line, its last space too
                if r.map > best_map:
                    best_map = r.map
                    result.best = save(os.path.join(backup, f"{base}_best.weights"), iteration)
                    result.best_map = best_map
                    result.plots = os.path.join(backup, PLOTS_NAME)
                    write_evaluation_plots(result.plots, r.accumulator, r)  # type: ignore[attr-defined]
                    say(f"New best mAP! Saved {result.best} (its evaluation plots: {result.plots}{os.sep})")
                if ch is not None:
                    ch.save()
                map_seconds += time.perf_counter() - map_start

            if log is not None:
                log.add({"iteration": iteration, "images": iteration * batch, "loss": loss, "avg_loss": avg_loss,
                         "learning_rate": rate, "seconds": seconds, "images_per_second": rate_meter.images_per_second,
                         "loss_scale": raw.loss_scale if precision == "fp16" else 1.0,
                         "map50": last_map if iter_map == iteration else None}, merged)
            if iteration % save_every == 0:
                save(os.path.join(backup, f"{base}_{iteration}.weights"), iteration)
            if iteration % LAST_EVERY == 0:
                save_last(iteration)
            if ch is not None:
                ch.maybe_save()
            con.progress(iteration, start, total, eta, avg_loss)

            stop = False
            if callback is not None:
                info = {"iteration": iteration, "loss": loss, "avg_loss": avg_loss, "rate": rate, "seconds": seconds,
                        "load_seconds": load_seconds, "images": iteration * batch, "eta_seconds": eta,
                        "width": raw.width, "height": raw.height, "heads": merged, "map": last_map,
                        "best_map": best_map if best_map >= 0 else None, "max_batches": total,
                        "net": raw}
                try:
                    stop = callback(info) is False
                except StopTraining:
                    stop = True
            if group is not None:  # a stop on any rank stops every rank after this same step
                stop = bool(group.all_reduce(np.array([stop], np.float32))[0])
            if stop:
                result.stopped = True
                say(f"stopped by the callback at iteration {iteration}")
                break
            queued = queue_step()
    except KeyboardInterrupt:
        con.close()
        # a step whose update ran but whose loss is unchecked: it too must be finite to save its weights
        unread_ok = not unchecked or math.isfinite(unchecked[0].loss_sum(unchecked[0].read()))
        if is_root and iteration > start and last_saved_at != iteration and unread_ok and _finite_params(raw):
            save_last(iteration)
            con.line(f"interrupted at iteration {iteration}: saved {path_last}", err=True)
        raise
    finally:
        con.close()
        if log is not None:
            log.close()
        if loader.cache is not None:
            result.image_cache = loader.cache.stats()
        if loader.pinned:
            result.loader += ", page-locked batches"
        loader.close()
        if host_cache is not None:
            host_cache.close()
        result.seconds = time.perf_counter() - t_start
        result.images_per_second, result.data_wait_share = rate_meter.images_per_second, rate_meter.wait_share
        result.device_wait_share = rate_meter.device_wait_share
        if ch is not None:
            try:
                ch.save()
            except OSError:
                pass

    if before is not None:  # the last step's update check (this read waits for its backward, once)
        learn_update(before)
    if last_saved_at != iteration:
        save_last(iteration)
    if iteration >= total:
        result.final = save(os.path.join(backup, f"{base}_final.weights"), iteration)
        say(f"training done: {result.final}")
    if result.image_cache:
        say(image_cache_summary(result.image_cache))
    if rate_meter.iterations:
        say(rate_meter.summary(result.loader))
    if precision == "fp16":
        say(f"fp16 loss scaling: {result.skipped_steps} step(s) skipped for overflow, loss scale {raw.loss_scale:g}")
    return result
