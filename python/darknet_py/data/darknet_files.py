"""Darknet's dataset files: the .data file, image lists, and where an image's label file lives.

Path resolution (our rule, documented for users): a relative path in a .data file or an image
list is looked up first relative to the folder of the file that names it, then relative to the
current directory (Darknet's only rule: it runs from its own folder with `train = data/train.txt`).
The first that exists wins; when neither exists the file-relative path is kept, so that the
error that follows names the place we expected. This lets a dataset folder be moved or copied
as a whole, which Darknet's CWD-relative paths do not allow, and still reads Darknet's own files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .dataset_yaml import is_yaml, list_images, yaml_dataset_fields, yaml_names

# pjreddie Darknet's layout: these folder names hold images, `labels` beside them holds the .txt
# files (COCO's images/, VOC's JPEGImages/). See labels_folder_path.
_IMAGE_DIRS = ("images", "JPEGImages")


class DataFileError(ValueError):
    """A malformed .data file, image list or names file; the message starts with `path:line:`."""


def resolve_relative(path: str, base_dir: str) -> str:
    """`path` as written in a file in `base_dir`: absolute paths as they are, relative ones first
    against `base_dir`, then against the current directory (see the module docstring)."""
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return path
    beside = os.path.normpath(os.path.join(base_dir, path))
    if os.path.exists(beside) or not os.path.exists(path):
        return beside
    return os.path.abspath(path)


# ---- .data ----------------------------------------------------------------------------------
@dataclass
class DataFile:
    """A parsed .data file. Paths are resolved (see resolve_relative); None when absent."""

    path: str
    classes: Optional[int] = None
    train: Optional[str] = None
    valid: Optional[str] = None
    names: Optional[str] = None
    backup: Optional[str] = None
    extra: Dict[str, str] = field(default_factory=dict)  # other keys (eval, results, map, ...) as written
    lines: Dict[str, int] = field(default_factory=dict)  # key -> line number, for error messages

    def require(self, key: str):
        """The value of `key`, or a DataFileError naming the .data file when it is missing."""
        value = getattr(self, key)
        if value is None:
            raise DataFileError(f"{self.path}: no `{key} = ...` line (needed here)")
        return value

    def where(self, key: str) -> str:
        """`path:line` of `key`, for messages about its value."""
        return f"{self.path}:{self.lines[key]}" if key in self.lines else self.path


_PATH_KEYS = ("train", "valid", "names", "backup")


def read_data_file(path: str) -> DataFile:
    """Parses a Darknet .data file: `key = value` lines; blank lines and lines starting with `#`
    or `;` are skipped (as Darknet's read_data_cfg). Unlike Darknet, spaces inside a value are
    kept (paths with spaces work) and a malformed line is an error, not a message. An Ultralytics
    dataset YAML (.yaml, .yml) is read as the equivalent .data file (data.dataset_yaml)."""
    path = os.fspath(path)
    if is_yaml(path):
        return DataFile(path=path, **yaml_dataset_fields(path, resolve_relative))
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    base = os.path.dirname(os.path.abspath(path))
    data = DataFile(path=path)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise DataFileError(f"{path}:{number}: expected `key = value`, got {raw.strip()!r}")
        if key in data.lines:
            raise DataFileError(f"{path}:{number}: `{key}` given twice (first on line {data.lines[key]})")
        data.lines[key] = number
        if key == "classes":
            try:
                data.classes = int(value)
            except ValueError:
                raise DataFileError(f"{path}:{number}: classes must be an integer, got {value!r}") from None
            if data.classes < 1:
                raise DataFileError(f"{path}:{number}: classes must be at least 1, got {data.classes}")
        elif key in _PATH_KEYS:
            if not value:
                raise DataFileError(f"{path}:{number}: `{key}` has no value")
            setattr(data, key, resolve_relative(value, base))
        else:
            data.extra[key] = value
    return data


# ---- image lists and names ------------------------------------------------------------------
def read_image_list(path: str) -> List[str]:
    """The image paths of a train/valid list: one per line; blank lines and `#` comments are
    skipped (Darknet would try to load them as images); surrounding spaces and CR are stripped;
    relative paths are resolved as resolve_relative does. A folder (an Ultralytics dataset's
    `train: images/train`) lists the images under it, sorted."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return list_images(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    base = os.path.dirname(os.path.abspath(path))
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            out.append(resolve_relative(line, base))
    return out


def read_names_file(path: str) -> List[str]:
    """Class names, one per line (Darknet's get_labels keeps every line; we drop trailing blank lines
    so that a final newline or two does not add empty classes). A dataset YAML gives its `names:`."""
    if is_yaml(path):
        return yaml_names(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        names = [line.strip() for line in f.read().splitlines()]
    while names and not names[-1]:
        names.pop()
    return names


# ---- label path rule ------------------------------------------------------------------------
# AlexeyAB Darknet's replace_image_to_label (src/utils.c): only these folders are swapped, COCO's
# and VOC's; a generic images/ folder is not (that line is commented out there).
_DARKNET_FOLDER_SWAPS = tuple((a.replace("/", sep), b.replace("/", sep)) for sep in ("/", "\\") for a, b in (
    ("/images/train2017/", "/labels/train2017/"), ("/images/val2017/", "/labels/val2017/"),
    ("/JPEGImages/", "/labels/"), ("/images/train2014/", "/labels/train2014/"),
    ("/images/val2014/", "/labels/val2014/")))


def replace_image_to_label(image_path: str) -> str:
    """Darknet's label path for an image (AlexeyAB's replace_image_to_label, current releases): the
    COCO and VOC image folders (`/images/train2017/`, `/images/val2014/`, `/JPEGImages/`, ...) become
    their `labels` folders, and the extension becomes `.txt`; any other path keeps its folder, so
    the label sits beside the image. Darknet swaps only the extensions it knows (.jpg .png .bmp
    .ppm .tiff ..., and warns otherwise); any extension -> .txt is what it means, and what a .webp
    or .jp2 needs."""
    out = image_path
    for a, b in _DARKNET_FOLDER_SWAPS:
        out = out.replace(a, b, 1)  # Darknet's find_replace: the first occurrence
    return os.path.splitext(out.strip(" \t"))[0] + ".txt"


def labels_folder_path(image_path: str) -> str:
    """pjreddie Darknet's layout (and older darknet_py synth datasets): the folder named `images` or
    `JPEGImages` nearest the file becomes `labels`; the path itself when there is none."""
    head, name = os.path.split(image_path)
    parts = head.replace("\\", "/").split("/") if head else []
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _IMAGE_DIRS:
            parts[i] = "labels"
            break
    name = os.path.splitext(name)[0] + ".txt"
    sep = "\\" if "\\" in head and "/" not in head else "/"
    return sep.join(parts + [name]) if parts else name


def label_path_for(image_path: str) -> str:
    """The label file to read for `image_path`: the one current Darknet reads (replace_image_to_label);
    when that file does not exist but one in the labels/ folder beside images/ does, that one
    (pjreddie's layout, which datasets made for it still have). Else Darknet's path, whose absence
    means an image without objects."""
    rule = replace_image_to_label(image_path)
    if os.path.exists(rule):
        return rule
    legacy = labels_folder_path(image_path)
    return legacy if os.path.exists(legacy) else rule
