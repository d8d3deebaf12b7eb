"""Editing a Darknet .cfg as text: the class count of its heads, [net] options, anchors.

Darknet makes its users change `classes=` in every [yolo] section and `filters=` of the
convolution before each by hand (filters = (classes + 5) * anchors of that head; the darknet
README's "how to train" steps), which is where many broken cfgs come from. These functions make
those edits and say which lines changed. Everything else in the file (comments, order, spacing)
is kept, so the result diffs cleanly against the original.

    ed = adapt_classes(CfgEditor.from_file("yolov4-tiny.cfg"), 4)
    ed.write("my.cfg")
    # ed.changes: ["line 229: classes=80 -> classes=4", "line 221: filters=255 -> filters=27", ...]
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..outputs.files import write_text

# the head sections and the outputs per anchor besides the classes (Darknet's parser.c checks
# of l.outputs: yolo x, y, w, h, objectness; Gaussian_yolo adds 4 uncertainties; region `coords+1`)
HEAD_EXTRA = {"yolo": 5, "gaussian_yolo": 9, "region": None}
CONV_SECTIONS = ("convolutional", "conv")
_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


@dataclass
class Section:
    name: str  # lower case, without brackets
    header: int  # index of the [name] line
    keys: Dict[str, int] = field(default_factory=dict)  # key -> index of its line
    last: int = 0  # index of the section's last key line (or the header)


def _strip_comment(line: str) -> str:
    return re.split(r"[#;]", line, 1)[0]


def sections(lines: Sequence[str]) -> List[Section]:
    """The sections of a cfg, in order, with the line index of each key (lines before the first
    section are ignored, as Darknet does)."""
    out: List[Section] = []
    for i, raw in enumerate(lines):
        line = _strip_comment(raw).strip()
        if line.startswith("["):
            out.append(Section(line.strip("[] ").lower(), i, {}, i))
        elif out and line:
            m = _KEY.match(line)
            if m:
                out[-1].keys[m.group(1)] = i
                out[-1].last = i
    return out


def value(lines: Sequence[str], section: Section, key: str, default: Optional[str] = None) -> Optional[str]:
    if key not in section.keys:
        return default
    m = _KEY.match(_strip_comment(lines[section.keys[key]]))
    return m.group(2) if m else default


class CfgEditor:
    """A cfg's lines with key edits; `changes` says, per edit, the original line and old/new text."""

    def __init__(self, text: str, name: str = "cfg") -> None:
        self.name = name
        self.lines = text.splitlines()
        self.changes: List[str] = []
        self._inserted: List[int] = []  # original indices after which a line was inserted

    @classmethod
    def from_file(cls, path: str) -> "CfgEditor":
        with open(path, encoding="utf-8", errors="replace") as f:
            return cls(f.read(), path)

    def sections(self) -> List[Section]:
        return sections(self.lines)

    def _original_line(self, index: int) -> int:
        """1-based line number in the original file of the current line `index`."""
        return index + 1 - sum(1 for j in self._inserted if j < index)

    def set(self, section: Section, key: str, new: str) -> None:
        """key=new in `section`: replaced in place, or added after the section's last key."""
        if key in section.keys:
            i = section.keys[key]
            old = self.lines[i].strip()
            comment = self.lines[i][len(_strip_comment(self.lines[i])):]
            line = f"{key}={new}" + (f" {comment.strip()}" if comment.strip() else "")
            if _KEY.match(_strip_comment(old)).group(2) != new:  # type: ignore[union-attr]
                self.changes.append(f"line {self._original_line(i)}: {_strip_comment(old).strip()} -> {key}={new}")
                self.lines[i] = line
            return
        at = section.last + 1
        self.changes.append(f"[{section.name}] of line {self._original_line(section.header)}: added {key}={new}")
        self.lines.insert(at, f"{key}={new}")
        self._inserted.append(at)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def write(self, path: str) -> str:
        write_text(path, self.text())
        return path


# ---- the edits --------------------------------------------------------------------------------
def heads_and_convs(ed: CfgEditor) -> List[Tuple[Section, Section]]:
    """Each head section ([yolo], [Gaussian_yolo], [region]) with the [convolutional] just before
    it, whose filters make the head's input. Raises ValueError naming the line when a head does not
    follow a convolution (a cfg whose filters we cannot know how to change)."""
    secs = ed.sections()
    out = []
    for k, s in enumerate(secs):
        if s.name not in HEAD_EXTRA:
            continue
        prev = secs[k - 1] if k else None
        if prev is None or prev.name not in CONV_SECTIONS:
            raise ValueError(f"{ed.name}:{s.header + 1}: [{s.name}] does not follow a [convolutional] "
                             "section: cannot tell which filters= feed it")
        out.append((s, prev))
    if not out:
        raise ValueError(f"{ed.name}: no [yolo], [Gaussian_yolo] or [region] section: not a detector cfg")
    return out


def _anchors_of_head(lines: Sequence[str], head: Section) -> int:
    """How many anchors a head predicts per cell: the count of its mask (all `num` without one)."""
    mask = value(lines, head, "mask")
    if mask:
        return len([m for m in mask.split(",") if m.strip()])
    return int(value(lines, head, "num", "1") or 1)


def head_filters(lines: Sequence[str], head: Section, classes: int) -> int:
    """The filters the convolution before `head` needs for `classes` (Darknet's parser checks)."""
    extra = HEAD_EXTRA[head.name]
    if extra is None:  # [region]: (classes + coords + 1) * num
        coords = int(value(lines, head, "coords", "4") or 4)
        return (classes + coords + 1) * int(value(lines, head, "num", "1") or 1)
    return (classes + extra) * _anchors_of_head(lines, head)


def cfg_classes(ed: CfgEditor) -> Optional[int]:
    """The class count of the cfg's last head (what Darknet's detector takes); None without a head."""
    heads = [s for s in ed.sections() if s.name in HEAD_EXTRA]
    if not heads:
        return None
    return int(value(ed.lines, heads[-1], "classes", "20") or 20)  # Darknet's default for yolo/region


def adapt_classes(ed: CfgEditor, classes: int) -> CfgEditor:
    """Sets classes=`classes` in every head and the filters of the convolution before each."""
    if classes < 1:
        raise ValueError(f"classes must be at least 1, got {classes}")
    for head, conv in heads_and_convs(ed):
        ed.set(head, "classes", str(classes))
        ed.set(conv, "filters", str(head_filters(ed.lines, head, classes)))
    return ed


def set_net_options(ed: CfgEditor, options: Dict[str, object]) -> CfgEditor:
    """Sets keys of [net] (or [network]), replacing them in place or adding them at its end."""
    net = next((s for s in ed.sections() if s.name in ("net", "network")), None)
    if net is None:
        raise ValueError(f"{ed.name}: no [net] section")
    for key, v in options.items():
        if v is not None:
            ed.set(net, key, str(v))
            net = next(s for s in ed.sections() if s.name in ("net", "network"))  # indices may have moved
    return ed


def set_anchors(ed: CfgEditor, anchors: Sequence[Tuple[float, float]], masks: Sequence[Sequence[int]]) -> CfgEditor:
    """Writes `anchors` (w, h pairs, Darknet's order) into every [yolo] section, `masks[k]` into the
    k-th, num = len(anchors), and the filters before each head for its new mask size."""
    pairs = ", ".join(f"{max(1, int(w))},{max(1, int(h))}" for w, h in anchors)  # truncated, as Darknet prints them
    heads = heads_and_convs(ed)
    if len(masks) != len(heads):
        raise ValueError(f"{ed.name}: {len(heads)} heads but {len(masks)} masks")
    for k in range(len(heads)):
        # sections are re-read before each edit: an added line moves the sections after it
        for key, v in (("mask", ",".join(str(m) for m in masks[k])), ("anchors", pairs), ("num", str(len(anchors)))):
            ed.set(heads_and_convs(ed)[k][0], key, v)
        head, conv = heads_and_convs(ed)[k]
        classes = int(value(ed.lines, head, "classes", "20") or 20)
        ed.set(conv, "filters", str(head_filters(ed.lines, head, classes)))
    return ed


def adapted_name(cfg: str, classes: int) -> str:
    """`yolov4-tiny.cfg`, 4 -> `yolov4-tiny-4classes.cfg` (the weights take the cfg's name)."""
    return f"{os.path.splitext(os.path.basename(cfg))[0]}-{classes}classes.cfg"
