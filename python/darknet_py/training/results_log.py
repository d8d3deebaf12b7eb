"""Training's log for programs: `results.csv` beside chart.png, one row per iteration, and the same
scalars as TensorBoard events where tensorboardX is installed (the `tensorboard` extra).

Columns: iteration, images (seen), loss, avg_loss, learning_rate, seconds (the iteration's own),
images_per_second (over the run so far, as the log line), loss_scale (fp16; 1 otherwise), map50 (on
the rows where mAP@0.5 was measured, empty elsewhere), then per [yolo] head h<layer>_<figure> for the
figures of Darknet's `Region` lines: loss, avg_iou, class, obj, no_obj, recall50, recall75, count.
A resumed run (start iteration > 0) appends to the file it finds, after dropping the rows past its start
(a run killed after its last save logged iterations it will run again); a new run starts it over.

tensorboardX (MIT) rather than torch.utils.tensorboard: it writes the same event files without
PyTorch, and the reader is TensorBoard itself (`tensorboard --logdir <backup>/tensorboard`).
"""
from __future__ import annotations

import csv
import os
from typing import Any, Dict, List, Optional

CSV_NAME = "results.csv"
TENSORBOARD_DIR = "tensorboard"
BASE_COLUMNS = ["iteration", "images", "loss", "avg_loss", "learning_rate", "seconds", "images_per_second",
                "loss_scale", "map50"]
HEAD_FIGURES = ["loss", "avg_iou", "class", "obj", "no_obj", "recall50", "recall75", "count"]


def head_columns(layers: List[int]) -> List[str]:
    return [f"h{layer}_{figure}" for layer in layers for figure in HEAD_FIGURES]


class ResultsLog:
    """Writes a row per iteration (add) to backup/results.csv, flushed each row (a crash loses no row
    written), and the scalars to TensorBoard events where tensorboardX imports."""

    def __init__(self, backup: str, heads: List[int], start: int, tensorboard: bool = True) -> None:
        self.path = os.path.join(backup, CSV_NAME)
        self.columns = BASE_COLUMNS + head_columns(heads)
        append = start > 0 and os.path.isfile(self.path) and self._header() == self.columns
        if append:
            self._keep_rows_up_to(start)
        self._file = open(self.path, "a" if append else "w", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file, lineterminator="\n")
        if not append:
            self._csv.writerow(self.columns)
            self._file.flush()
        self.events: Optional[str] = None
        self._tb = None
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                pass
            else:
                self.events = os.path.join(backup, TENSORBOARD_DIR)
                self._tb = SummaryWriter(self.events)

    def _keep_rows_up_to(self, iteration: int) -> None:
        """Rewrites the file with its header and the whole rows of iterations up to `iteration`."""
        from ..outputs.files import write_text

        with open(self.path, newline="", encoding="utf-8") as f:
            text = f.read()
        lines = [ln.rstrip("\r") for ln in text.split("\n")[:-1]]  # whole lines only: a cut last one is dropped
        keep = [lines[0]] + [ln for ln in lines[1:] if ln.split(",")[0].isdigit() and int(ln.split(",")[0]) <= iteration
                             and len(next(csv.reader([ln]))) == len(self.columns)]
        write_text(self.path, "".join(ln + "\n" for ln in keep))

    def _header(self) -> List[str]:
        with open(self.path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), [])

    def add(self, row: Dict[str, Any], heads: List[Dict[str, Any]]) -> None:
        """row: BASE_COLUMNS' values (map50 None where not measured); heads: the merged head statistics."""
        values = dict(row)
        for h in heads:
            for figure in HEAD_FIGURES:
                values[f"h{h['layer']}_{figure}"] = h[figure]
        self._csv.writerow(["" if values.get(c) is None else _text(values[c]) for c in self.columns])
        self._file.flush()
        if self._tb is not None:
            step = int(row["iteration"])
            for c in self.columns[2:]:
                if values.get(c) is not None:
                    self._tb.add_scalar(_tag(c), float(values[c]), step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _text(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _tag(column: str) -> str:
    """TensorBoard groups by the part before '/': train/loss, train/h30_avg_iou, val/map50."""
    return ("val/" if column == "map50" else "train/") + column
