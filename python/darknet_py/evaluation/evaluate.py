"""mAP of a detector on the `valid` list of a Darknet .data file, with Darknet's definitions
(`darknet detector map`, validate_detector_map in Darknet's detector.c), and the `map` command.

Darknet's rules, as implemented here:
- Detections are collected at confidence .005 after NMS .45, one per (box, class above .005), and
  ranked by confidence across all images. Ties keep the collection order (image order, then the
  detector's order): AlexeyAB's Darknet sorts with qsort, whose order for ties is unspecified;
  glibc's merge-sort qsort (before 2.37) keeps input order, which is what a stable sort reproduces
  (hank-ai's: see the last point).
- A detection's truth is the truth of the same class in the same image with the highest IoU,
  provided that IoU is strictly above the IoU threshold (Darknet: `current_iou > iou_thresh`).
  In rank order it is a TP if that truth is not matched yet, else a FP (a duplicate); it never
  falls back to its second-best truth.
- points=0: area under the precision envelope over every recall step, from recall 0 (VOC2010+,
  ImageNet; Darknet's default). points=11 (VOC2007) and 101 (COCO): the mean over recall points
  r = i/(points-1) of the highest precision at any rank with recall >= r (0 where none).
- mAP is the mean over ALL classes of the network: Darknet divides by `classes`, so a class without
  ground truth (AP 0 by its formulas: recall is always 0) still counts, and lowers mAP.
- At the confidence threshold (--thresh, strictly above as Darknet does) TP, FP, precision, recall,
  F1 and average IoU; the average IoU is the sum of the TPs' IoUs over TP+FP, as Darknet prints it
  (per class too: its AvgIoU column). Darknet counts these while it collects the detections, image
  by image, not in rank order (hank-ai's src-lib/detector_map.cpp, detector_map_calculations_thread;
  AlexeyAB's validate_detector_map): a detection above the threshold is a FP when a detection
  collected before it in the same image (whatever its confidence, even one below the threshold) has
  the same best truth. counts="ranked" instead gives each truth to its most confident match (the
  AP's rule), which counts a TP wherever the AP does: Darknet's rule can count fewer TPs.
- So the collection order matters. It is the order of the detection array after NMS, then the
  classes in order, and Network.detect returns it: hank-ai's get_network_boxes lists each [yolo]
  layer's boxes anchor by anchor, each over the locations (yolo_num_detections_v3), and
  do_nms_sort / diounms_sort sort the array class after class with std::sort, which leaves it sorted
  by the last class and its ties (most boxes have no probability for that class) in the order GCC's
  std::sort gives them; src-lib/yolo/detect.cpp does the same on every platform (gnu_sort.h).
  AlexeyAB's Darknet lists the boxes location by location and sorts with qsort (glibc's merge sort up
  to 2.36 keeps ties in place), so its counts may differ from hank-ai's by a few; we follow hank-ai.
- The boxes are matched as predicted, not clipped to the image (Darknet takes dets[i].bbox).
- Images: AlexeyAB's validation resizes with Darknet's resize_image (letterbox_image with the cfg's
  letter_box), as our detect and training do: resize="darknet", the default. hank-ai's Darknet V5
  loads each image with OpenCV's cv::resize INTER_LINEAR_EXACT straight to the network size
  (Darknet::load_image in its loading thread) and then corrects the boxes for a letterbox of an image
  of the network's size, which changes nothing: its code ignores letter_box, though its cfg option
  (and the LETTERBOX_DATA branch around get_network_boxes) means letterboxing. resize="opencv"
  (`map --resize opencv`) reproduces it; tools/darknet_map_compare.py runs hank-ai's `detector map`
  beside ours that way and matches it to every printed digit on the synthetic sets.
- Ties of equal confidence in the AP's ranking keep collection order here; hank-ai ranks with
  std::sort over its analysis order, which follows its threads' timing, so not reproducible.

Beyond Darknet: per class FN, precision and recall at the threshold; the confusion matrix
(confusion.py, from the same TP flags, so its diagonal is the TP count); `compute_map(plots=DIR)`
(`map --plots`) draws it and the PR/F1/P/R curves (plots.py); `save_errors=DIR` (`--save-errors`)
writes the images with a FP or FN, drawn (error_images.py).

Boxes are (x, y, w, h) with x, y the top-left corner; detections and truths of one image must use
the same units (the file-based path uses fractions of the image size, as the labels do; IoU does
not change when both axes are scaled).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from .. import exit_codes
from ..exit_codes import report_skips
from .plots import PLOT_FILES, Curves, curves, write_plots
from .box_iou import iou_matrix
from .confusion import confusion_matrix, per_image_outcomes
from ..commands.argtypes import add_allow_partial_option, positive_int, unit_interval
from ..devices import add_device_option, add_precision_option

VALID_POINTS = (0, 11, 101)
COUNTS = ("darknet", "ranked")  # how TP/FP at the confidence threshold are counted (module doc)
RESIZES = ("darknet", "opencv")  # how the images are brought to the network size (network_detections)
COLLECT_THRESH = 0.005  # Darknet's validate_detector_map collects detections above this
NMS_THRESH = 0.45
# COCO's IoU thresholds .50:.05:.95, written as k/100 so that e.g. .80 is the same double as 80/100
COCO_IOUS = tuple(k / 100 for k in range(50, 100, 5))


class Truth(NamedTuple):
    """One ground-truth object; (x, y) is the top-left corner."""

    class_id: int
    x: float
    y: float
    w: float
    h: float


class Box(NamedTuple):
    """One detection as the evaluation sees it (any object with these attributes will do,
    e.g. darknet_py.Detection)."""

    class_id: int
    confidence: float
    x: float
    y: float
    w: float
    h: float


# ---- the metric ------------------------------------------------------------------------------
def average_precision(tp: Sequence[bool], n_truth: int, points: int = 0) -> float:
    """AP of one class from its detections' TP flags in rank order (highest confidence first)."""
    if points not in VALID_POINTS:
        raise ValueError(f"points must be one of {VALID_POINTS}, got {points}")
    tp = np.asarray(tp, dtype=bool)
    if n_truth <= 0 or tp.size == 0:
        return 0.0  # Darknet: recall is 0 at every rank, so both formulas give 0
    ctp = np.cumsum(tp)
    precision = ctp / np.arange(1, tp.size + 1)
    recall = ctp / n_truth
    envelope = np.maximum.accumulate(precision[::-1])[::-1]  # best precision at this rank or later
    if points == 0:
        steps = np.diff(np.concatenate(([0.0], recall)))
        return float(np.sum(steps * envelope))
    # recall never decreases with rank, so "ranks with recall >= r" is a suffix: its best precision
    # is the envelope at its first rank
    r = np.arange(points) / (points - 1)
    first = np.searchsorted(recall, r, side="left")
    ok = first < tp.size
    return float(np.sum(envelope[first[ok]]) / points)


@dataclass
class ClassResult:
    class_id: int
    name: str
    ap: float
    tp: int  # at the confidence threshold
    fp: int  # at the confidence threshold
    truths: int
    detections: int  # all collected (above .005)
    fn: int = 0  # truths - tp
    precision: float = 0.0  # tp / (tp + fp) at the confidence threshold (0 without detections)
    recall: float = 0.0  # tp / truths
    avg_iou: float = 0.0  # the TPs' IoUs summed over tp + fp at the confidence threshold (Darknet's AvgIoU column)


@dataclass
class MapResult:
    iou_thresh: float
    points: int
    thresh: float
    map: float
    classes: List[ClassResult]
    tp: int
    fp: int
    fn: int
    precision: float
    recall: float
    f1: float
    avg_iou: float
    detections: int
    truths: int
    images: int
    map_50_95: Optional[float] = None
    skipped: List[str] = field(default_factory=list)  # "path: what is wrong" per image that could not be read
    counts: str = "darknet"
    # rows: the truth's class, then "background" (a detection matching no truth); columns: the
    # detection's class, then "missed" (a truth no detection found); see confusion.py
    confusion: Optional[List[List[int]]] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def report(self) -> str:
        """The result as Darknet prints it, plus the COCO-style line."""
        lines = [f" detections_count = {self.detections}, unique_truth_count = {self.truths}"]
        for c in self.classes:
            lines.append(f"class_id = {c.class_id}, name = {c.name}, ap = {100 * c.ap:.2f}%   "
                         f"(TP = {c.tp}, FP = {c.fp})   FN = {c.fn}, precision = {c.precision:.2f}, "
                         f"recall = {c.recall:.2f}")
        t = self.thresh
        lines += ["", f" for conf_thresh = {t:.2f}, precision = {self.precision:.2f}, recall = {self.recall:.2f}, "
                      f"F1-score = {self.f1:.2f}",
                  f" for conf_thresh = {t:.2f}, TP = {self.tp}, FP = {self.fp}, FN = {self.fn}, "
                  f"average IoU = {100 * self.avg_iou:.2f} %", ""]
        how = f"used {self.points} Recall-points" if self.points else "used Area-Under-Curve for each unique Recall"
        lines += [f" IoU threshold = {100 * self.iou_thresh:.0f} %, {how}",
                  f" mean average precision (mAP@{self.iou_thresh:.2f}) = {self.map:.6f}, or {100 * self.map:.2f} %"]
        if self.map_50_95 is not None:
            lines.append(f" mean average precision (mAP@0.50:0.95, mean over IoU 0.50:0.05:0.95, same recall points)"
                         f" = {self.map_50_95:.6f}, or {100 * self.map_50_95:.2f} %")
        return "\n".join(lines)


class Accumulator:
    """Collects detections and truths image by image; `result()` computes the metrics. Only each
    detection's best same-class truth and its IoU are kept, which is all any IoU threshold needs:
    that truth is the detection's match exactly when its IoU is above the threshold."""

    def __init__(self, classes: int, names: Optional[Sequence[str]] = None) -> None:
        if classes < 1:
            raise ValueError(f"classes must be at least 1, got {classes}")
        self.n_classes = classes
        self.names = list(names) if names else []
        self._conf: List[np.ndarray] = []
        self._cls: List[np.ndarray] = []
        self._truth: List[np.ndarray] = []
        self._iou: List[np.ndarray] = []
        self.truth_counts = np.zeros(classes, dtype=np.int64)
        self.image_boxes: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per image: detections, truths, classes
        self.n_truths = 0
        self.images = 0

    def add(self, detections: Iterable[Any], truths: Iterable[Truth]) -> None:
        """One image: its detections (class_id, confidence, x, y, w, h) and its truths."""
        dets = list(detections)
        tr = [t for t in truths if 0 <= int(t[0]) < self.n_classes]
        dc = np.array([int(d.class_id) for d in dets], dtype=np.int64)
        keep = (dc >= 0) & (dc < self.n_classes)  # a detector gives no other class; be safe
        dets = [d for d, k in zip(dets, keep) if k]
        dc = dc[keep]
        db = np.array([[d.x, d.y, d.w, d.h] for d in dets], dtype=np.float64).reshape(-1, 4)
        tc = np.array([int(t[0]) for t in tr], dtype=np.int64)
        tb = np.array([t[1:5] for t in tr], dtype=np.float64).reshape(-1, 4)
        best = np.full(len(dets), -1, dtype=np.int64)
        best_iou = np.zeros(len(dets))
        if len(dets) and len(tr):
            iou = np.where(dc[:, None] == tc[None, :], iou_matrix(db, tb), -1.0)
            j = np.argmax(iou, axis=1)  # the first of equal IoUs, as Darknet's strict `>` keeps
            best_iou = iou[np.arange(len(dets)), j]
            best = np.where(best_iou > 0, self.n_truths + j, -1)
            best_iou = np.maximum(best_iou, 0.0)
        self._conf.append(np.array([float(d.confidence) for d in dets], dtype=np.float64))
        self._cls.append(dc)
        self._truth.append(best)
        self._iou.append(best_iou)
        self.image_boxes.append((db, tb, tc))
        np.add.at(self.truth_counts, tc, 1)
        self.n_truths += len(tr)
        self.images += 1

    def _ranked(self):
        """Confidence, class, best truth and its IoU of every detection, best confidence first, and
        the rank order itself (indices into the collection order)."""
        def cat(parts: List[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype)

        conf = cat(self._conf, np.float64)
        order = np.argsort(-conf, kind="stable")  # ties keep collection order (see module doc)
        return (conf[order], cat(self._cls, np.int64)[order], cat(self._truth, np.int64)[order],
                cat(self._iou, np.float64)[order], order)

    @staticmethod
    def _tp_flags(truth: np.ndarray, iou: np.ndarray, iou_thresh: float) -> np.ndarray:
        """TP flags in the order given: matched above the threshold, and the first in that order to
        claim its truth. In rank order these are the AP's flags; in collection order, Darknet's
        flags for the counts at the confidence threshold."""
        pos = np.flatnonzero((truth >= 0) & (iou > iou_thresh))
        _, first = np.unique(truth[pos], return_index=True)
        tp = np.zeros(truth.size, dtype=bool)
        tp[pos[first]] = True
        return tp

    def _aps(self, tp: np.ndarray, cls: np.ndarray, points: int) -> np.ndarray:
        return np.array([average_precision(tp[cls == c], int(self.truth_counts[c]), points)
                         for c in range(self.n_classes)])

    def result(self, iou_thresh: float = 0.5, points: int = 0, thresh: float = 0.25,
               coco: bool = True, counts: str = "darknet") -> MapResult:
        if points not in VALID_POINTS:
            raise ValueError(f"points must be one of {VALID_POINTS}, got {points}")
        if counts not in COUNTS:
            raise ValueError(f"counts must be one of {', '.join(COUNTS)}, got {counts!r}")
        conf, cls, truth, iou, order = self._ranked()
        tp = self._tp_flags(truth, iou, iou_thresh)
        aps = self._aps(tp, cls, points)
        collected = np.empty_like(order)
        collected[order] = np.arange(order.size)  # collection index -> rank
        if counts == "darknet":  # first claim in collection order (truth ids are unique across images)
            tp_count = np.zeros_like(tp)
            tp_count[collected] = self._tp_flags(truth[collected], iou[collected], iou_thresh)
        else:
            tp_count = tp
        above = conf > thresh
        tp_t, fp_t = tp_count & above, ~tp_count & above
        classes = []
        for c in range(self.n_classes):
            n_tp_c, n_fp_c, n_truth_c = int(np.sum(tp_t[cls == c])), int(np.sum(fp_t[cls == c])), int(self.truth_counts[c])
            classes.append(ClassResult(c, self.names[c] if c < len(self.names) else str(c), float(aps[c]),
                                       n_tp_c, n_fp_c, n_truth_c, int(np.sum(cls == c)), n_truth_c - n_tp_c,
                                       n_tp_c / (n_tp_c + n_fp_c) if n_tp_c + n_fp_c else 0.0,
                                       n_tp_c / n_truth_c if n_truth_c else 0.0,
                                       float(np.sum(iou[tp_t & (cls == c)])) / (n_tp_c + n_fp_c) if n_tp_c + n_fp_c else 0.0))
        n_tp, n_fp = int(tp_t.sum()), int(fp_t.sum())
        precision = n_tp / (n_tp + n_fp) if n_tp + n_fp else 0.0  # Darknet prints nan here
        recall = n_tp / self.n_truths if self.n_truths else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        avg_iou = float(np.sum(iou[tp_t])) / (n_tp + n_fp) if n_tp + n_fp else 0.0
        map_50_95 = None
        if coco:  # AP only: rank order
            map_50_95 = float(np.mean([self._aps(self._tp_flags(truth, iou, t), cls, points).mean()
                                       for t in COCO_IOUS]))
        self.outcomes = per_image_outcomes(self.image_boxes, cls[collected], conf[collected], tp_count[collected],
                                           above[collected], truth[collected], iou_thresh)
        matrix = confusion_matrix(self.outcomes, self.n_classes)
        return MapResult(iou_thresh, points, thresh, float(aps.mean()), classes, n_tp, n_fp, self.n_truths - n_tp,
                         precision, recall, f1, avg_iou, int(conf.size), self.n_truths, self.images, map_50_95,
                         counts=counts, confusion=matrix.tolist())

    def curves(self, iou_thresh: float = 0.5) -> Curves:
        """Precision and recall per class against the confidence (the AP's matching, in rank order)."""
        conf, cls, truth, iou, _ = self._ranked()
        return curves(conf, cls, self._tp_flags(truth, iou, iou_thresh), self.truth_counts)


def evaluate(images: Iterable[Tuple[Iterable[Any], Iterable[Truth]]], classes: int, iou_thresh: float = 0.5,
             points: int = 0, thresh: float = 0.25, names: Optional[Sequence[str]] = None,
             coco: bool = True, counts: str = "darknet") -> MapResult:
    """mAP from in-memory data: one (detections, truths) pair per image, in image order, each
    image's detections in the detector's order (which Darknet's counts depend on: module doc)."""
    acc = Accumulator(classes, names)
    for dets, truths in images:
        acc.add(dets, truths)
    return acc.result(iou_thresh, points, thresh, coco, counts)


# ---- Darknet's files (parsed by darknet_py.data.darknet_files) ------------------------------------
def read_truths(label_file: str, classes: int, warn: Callable[[str], None]) -> List[Truth]:
    """An image's ground truth from its label file. A missing or empty file means no objects, as
    in Darknet (a background image, no warning); bad lines are reported and skipped by the data
    package's reader, as training does."""
    from ..data.labels import DataReporter, read_labels

    quiet = ("missing-label", "empty-label")
    reporter = DataReporter(lambda kind, path, message: None if kind in quiet else warn(message))
    rows = read_labels(label_file, classes, reporter)
    return [Truth(int(c), float(x) - float(w) / 2, float(y) - float(h) / 2, float(w), float(h))
            for c, x, y, w, h in rows]


def net_letterbox(net: Any) -> bool:
    """The cfg's [net] letter_box: Darknet's validation letterboxes the images when it is set."""
    try:
        return bool(net._net.net_options()["letter_box"])
    except (AttributeError, KeyError):  # an engine without net_options: read the cfg's [net]
        section = ""
        with open(net.cfg_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                s = line.split("#", 1)[0].strip()
                if s.startswith("["):
                    section = s.lower()
                elif section in ("[net]", "[network]") and s.replace(" ", "").startswith("letter_box="):
                    return s.split("=", 1)[1].strip() not in ("0", "")
        return False


# ---- running a network over a dataset ------------------------------------------------------------
def _read_or_reason(path: str) -> Union[np.ndarray, str]:
    """The BGR image, or what is wrong with the file (one line naming it)."""
    from ..media.sources import read_image

    try:
        return read_image(path)
    except (OSError, ValueError) as e:
        return str(e)


def _prefetched(paths: Sequence[str], ahead: int = 4) -> Iterator[Tuple[str, Union[np.ndarray, str]]]:
    """(path, BGR image or why it cannot be read) in order, decoding the next few in a thread
    (OpenCV frees the GIL)."""
    with ThreadPoolExecutor(1) as pool:
        futures = [pool.submit(_read_or_reason, p) for p in paths[:ahead]]
        for i, p in enumerate(paths):
            if i + ahead < len(paths):
                futures.append(pool.submit(_read_or_reason, paths[i + ahead]))
            yield p, futures[i].result()
            futures[i] = None  # type: ignore[call-overload]  # free the image


def network_detections(net: Any, image: np.ndarray, letterbox: bool, resize: str = "darknet") -> List[Box]:
    """The network's detections with Darknet's validation settings, in fractions of the image, not
    clipped to it (Darknet matches the boxes as predicted: a box past the border keeps its IoU).

    resize "darknet": Darknet's resize_image (or its letterbox), as AlexeyAB's validate_detector_map
    and our detect do. "opencv": as hank-ai's Darknet V5 `detector map` (detector_map.cpp's loading
    thread, Darknet::load_image): OpenCV's cv::resize with INTER_LINEAR_EXACT straight to the network
    size, so letter_box is ignored (its correction of the boxes then sees an image of the network's
    size, which it leaves as they are)."""
    if resize not in RESIZES:
        raise ValueError(f"resize must be one of {', '.join(RESIZES)}, got {resize!r}")
    h, w = image.shape[:2]
    if resize == "opencv":
        import cv2

        nw, nh = net.input_size
        if (w, h) != (nw, nh):
            image = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_LINEAR_EXACT)
            w, h = nw, nh  # the boxes come in its pixels; as fractions they are the original's
        letterbox = False
    return [Box(d.class_id, d.confidence, d.x / w, d.y / h, d.w / w, d.h / h)
            for d in net.detect(image, COLLECT_THRESH, NMS_THRESH, letterbox, clip=False)]


def compute_map(data: str, cfg: Optional[str] = None, weights: Optional[str] = None, *,
                network: Any = None, detections_for: Optional[Callable[[str], Sequence[Any]]] = None,
                classes: Optional[int] = None, iou_thresh: float = 0.5, points: int = 0, thresh: float = 0.25,
                letterbox: Optional[bool] = None, device: Optional[str] = None, coco: bool = True,
                progress: bool = True, verbose: bool = False, counts: str = "darknet",
                plots: Optional[str] = None, save_errors: Optional[str] = None, resize: str = "darknet") -> MapResult:
    """mAP of a detector on the `valid` list of the .data file `data`.

    The detector is, in order of precedence: `detections_for(image_path)` returning boxes
    (class_id, confidence, x, y, w, h, top-left, in fractions of the image size); `network` (a
    darknet_py.Network, e.g. the one being trained); or Network(cfg, weights). The network is run
    with Darknet's validation settings (thresh .005, NMS .45, letterbox per the cfg's [net]
    letter_box unless `letterbox` is given; `resize`: see network_detections). `verbose` prints
    Darknet's report to stdout. `plots`: a folder for the evaluation plots (plots.PLOT_FILES);
    `save_errors`: a folder for the images with false positives or negatives at `thresh`, drawn
    (error_images.py)."""
    from ..data.darknet_files import label_path_for, read_data_file, read_image_list, read_names_file
    from ..commands.progress import Progress

    if resize not in RESIZES:
        raise ValueError(f"resize must be one of {', '.join(RESIZES)}, got {resize!r}")

    spec = read_data_file(data)
    key = "valid" if spec.valid else "train"  # Darknet falls back to the train list too
    valid = spec.valid or spec.train
    if not valid:
        raise ValueError(f"{data}: no `valid =` (nor `train =`) line names the images to evaluate")
    if not os.path.exists(valid):
        raise FileNotFoundError(f"{spec.where(key)}: the {key} list {valid} does not exist")
    paths = read_image_list(valid)
    if not paths:
        raise ValueError(f"{valid}: the {key} list named by {spec.where(key)} is empty (one image path per line)")

    if detections_for is None:
        if network is None:
            if cfg is None:
                raise ValueError("compute_map needs a detector: cfg (and weights), network or detections_for")
            from ..network import Network

            network = Network(cfg, weights, None, device)
        if letterbox is None:
            letterbox = net_letterbox(network)
    n_classes = classes or (network.classes if network is not None else spec.classes)
    if not n_classes:
        raise ValueError(f"{data}: no `classes =` line, and no network to take the class count from")
    if spec.classes is not None and spec.classes != n_classes:
        warnings.warn(f"{spec.where('classes')}: classes = {spec.classes} but the network has {n_classes}; "
                      f"using {n_classes}")
    if spec.names and os.path.isfile(spec.names):
        names = read_names_file(spec.names)
        from ..model_files.cfgfiles import names_mismatch

        mismatch = names_mismatch(spec.names, len(names), n_classes)
        if mismatch:
            warnings.warn(mismatch)
    else:
        if spec.names:
            warnings.warn(f"{spec.where('names')}: the names file {spec.names} does not exist: classes are shown by number")
        names = list(network.names) if network is not None else []

    acc = Accumulator(n_classes, names)
    skipped: List[str] = []
    evaluated: List[str] = []  # the images added to acc, in order
    bar = Progress(len(paths), "images", "mAP") if progress else None
    warned = set()

    def warn(msg: str) -> None:
        if msg in warned:
            return
        warned.add(msg)
        if bar is not None:
            bar.message(f"warning: {msg}")
        else:
            print(f"warning: {msg}", file=sys.stderr)

    try:
        if detections_for is not None:
            source: Iterable[Tuple[str, Any]] = ((p, None) for p in paths)
        else:
            source = _prefetched(paths)
        for path, image in source:
            if detections_for is not None:
                dets = detections_for(path)
            elif isinstance(image, str):
                warn(f"skipped: {image} (its objects are not counted)")
                skipped.append(image)
                if bar is not None:
                    bar.update()
                continue
            else:
                dets = network_detections(network, image, bool(letterbox), resize)
            acc.add(dets, read_truths(label_path_for(path), n_classes, warn))
            evaluated.append(path)
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    result = acc.result(iou_thresh, points, thresh, coco, counts)
    result.skipped = skipped
    result.accumulator = acc  # type: ignore[attr-defined]  # for plots later (train --map); not in to_dict
    if verbose:
        print(result.report())
    if plots:
        write_evaluation_plots(plots, acc, result)
        if verbose:
            print(f"plots: {plots}/ ({', '.join(PLOT_FILES)})")
    if save_errors:
        from .error_images import save_error_images

        written = save_error_images(save_errors, evaluated, acc.outcomes, acc.names)
        if verbose:
            print(f"images with false positives or negatives at thresh {thresh:g}: {len(written)} in {save_errors}/")
    return result


def write_evaluation_plots(folder: str, acc: Accumulator, result: MapResult) -> Dict[str, str]:
    """The plots of `result` (computed by `acc`) into `folder`."""
    return write_plots(folder, acc.curves(result.iou_thresh), np.array(result.confusion), acc.names)


# ---- the `map` command -----------------------------------------------------------------------
MAP_EXAMPLES = f"""\
Runs the network over the `valid` list of the .data file (labels: the image's path with the
extension .txt, as Darknet finds them, else in a labels/ folder beside images/; a missing label
file means no objects) and prints Darknet's mAP report: per-class AP with
TP and FP at --thresh; precision, recall, F1 and average IoU at --thresh; mAP at --iou-thresh; and
the mean over IoU 0.50:0.05:0.95.

An image of the list that cannot be read is named on stderr and skipped (its objects are not
counted); the skips are listed at the end and the exit code is {exit_codes.SKIPPED}.

examples:
  darknet_py map shapes.data shapes.cfg shapes_best.weights
  darknet_py map coco.data yolov4-tiny.cfg yolov4-tiny.weights --points 101 --json map.json
  darknet_py map shapes.data shapes.cfg shapes_best.weights --plots plots/ --save-errors errors/

{exit_codes.HELP}
"""


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    """Registers the `map` subcommand on the CLI's subparsers."""
    p = sub.add_parser("map", help="mean average precision on a dataset's valid list (Darknet's detector map)",
                       description="Mean average precision of a network on the images of a .data file's valid list.",
                       epilog=MAP_EXAMPLES, formatter_class=formatter)
    p.add_argument("data", metavar="DATA", help="Darknet .data file (valid =, names =, classes =)")
    p.add_argument("cfg", metavar="CFG", help="network .cfg: a path or a shipped cfg's name")
    p.add_argument("weights", metavar="WEIGHTS", help="Darknet .weights file, or an official model's name "
                                                      "(yolov4-tiny: the file `darknet_py weights get` downloaded)")
    add_allow_partial_option(p)
    p.add_argument("--iou-thresh", type=unit_interval, default=0.5, help="IoU for a match (default: %(default)s)")
    p.add_argument("--points", type=int, choices=VALID_POINTS, default=0,
                   help="0: area under the curve (VOC2010+), 11: VOC2007, 101: COCO (default: %(default)s)")
    p.add_argument("--thresh", type=unit_interval, default=0.25,
                   help="confidence threshold for TP/FP, precision, recall, F1, IoU (default: %(default)s)")
    p.add_argument("--letterbox", action="store_true", help="letterbox even if the cfg has no letter_box=1")
    p.add_argument("--resize", choices=RESIZES, default="darknet",
                   help="`darknet`: Darknet's resize_image, as AlexeyAB's Darknet and `detect`; `opencv`: OpenCV's\n"
                        "INTER_LINEAR_EXACT straight to the network size (no letterbox), as hank-ai's Darknet V5\n"
                        "`detector map` (default: %(default)s)")
    p.add_argument("--counts", choices=COUNTS, default="darknet",
                   help="TP/FP at --thresh: `darknet` counts as Darknet does (a detection is a FP when one collected\n"
                        "before it in the same image, of any confidence, has its truth); `ranked` gives each truth to\n"
                        "its most confident match, as the AP does (default: %(default)s)")
    p.add_argument("--json", metavar="FILE", help="also write the results to this JSON file (the confusion matrix too)")
    p.add_argument("--plots", metavar="DIR", help="write the confusion matrix and the PR, F1, precision and recall\n"
                                                  "curves per class as PNGs into DIR")
    p.add_argument("--save-errors", metavar="DIR", help="write the images with false positives or negatives at\n"
                                                        "--thresh into DIR, with them drawn")

    p.add_argument("--threads", type=positive_int, metavar="N", help="CPU threads (default: all cores)")
    add_device_option(p)
    add_precision_option(p)
    p.set_defaults(func=cmd_map, parser=p)
    return p


def cmd_map(args: argparse.Namespace) -> int:
    from .. import _core
    from ..model_files.cfgfiles import resolve_cfg
    from ..outputs.files import write_json

    if args.threads:
        _core.set_threads(args.threads)
    if not os.path.isfile(args.data):
        raise FileNotFoundError(f"data file not found: {args.data}")
    cfg = resolve_cfg(args.cfg)
    from ..model_files.official import resolve_weights
    from ..model_files.weights_fit import load_checked

    args.weights = resolve_weights(args.weights)
    net = load_checked(cfg, args.weights, args.device, args.precision, args.allow_partial,
                       on_warning=lambda text: print(f"warning: {text}", file=sys.stderr))
    if net.precision_reason:
        print(net.precision_reason, file=sys.stderr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = compute_map(args.data, network=net, iou_thresh=args.iou_thresh, points=args.points,
                             thresh=args.thresh, letterbox=True if args.letterbox else None, verbose=True,
                             counts=args.counts, plots=args.plots, save_errors=args.save_errors,
                             resize=getattr(args, "resize", "darknet"))
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if args.json:
        doc = {"data": args.data, "cfg": cfg, "weights": args.weights, **result.to_dict()}
        write_json(args.json, doc)
        print(f"results: {args.json}", file=sys.stderr)

    return report_skips(result.skipped)
