"""Ultralytics dataset YAML files, read as a Darknet .data file.

    path: ../datasets/coco8     # dataset root (relative: to the YAML's folder, then the current one)
    train: images/train         # a folder of images, or a list file of image paths, relative to path
    val: images/val
    names: {0: person, 1: bicycle}   # or a list: [person, bicycle]

Images in `images/...` have their labels in `labels/...` (Ultralytics' img2label_paths), which
data.darknet_files.label_path_for finds (the `images` folder nearest the file becomes `labels`).
The labels are YOLO's text format, the same as Darknet's. A folder is read recursively, in sorted
order (as Ultralytics globs it), for the image extensions OpenCV reads.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List

YAML_SUFFIXES = (".yaml", ".yml")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".jp2", ".pbm", ".pgm", ".ppm")


def is_yaml(path: str) -> bool:
    return os.fspath(path).lower().endswith(YAML_SUFFIXES)


def _load(path: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise ValueError(f"{path}: reading a dataset YAML needs PyYAML (pip install pyyaml)") from None
    with open(path, encoding="utf-8", errors="replace") as f:
        try:
            return yaml.safe_load(f)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark is not None else path
            raise ValueError(f"{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None


def yaml_names(path: str) -> List[str]:
    """The class names of a dataset YAML (`names:` as a list or as {index: name})."""
    doc = _load(path)
    names = doc.get("names") if isinstance(doc, dict) else None
    if isinstance(names, dict):
        try:
            keys = sorted(int(k) for k in names)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: `names:` keys must be class numbers 0, 1, ...") from None
        if keys != list(range(len(keys))):
            raise ValueError(f"{path}: `names:` must number the classes 0..{len(keys) - 1} without gaps")
        return [str(names[k] if k in names else names[str(k)]) for k in keys]
    if isinstance(names, list) and names:
        return [str(n) for n in names]
    raise ValueError(f"{path}: no `names:` (a list of class names, or {{0: name, 1: name}})")


def yaml_dataset_fields(path: str, resolve: Callable[[str, str], str]) -> Dict[str, Any]:
    """The .data fields of an Ultralytics dataset YAML: classes = the number of names, train / valid
    = the `train` / `val` folder or list (resolved by `resolve(path, base_dir)`), names = the YAML
    itself (read_names_file reads its names)."""
    doc = _load(path)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping with path, train, val and names")
    names = yaml_names(path)
    base = os.path.dirname(os.path.abspath(path))
    root = resolve(str(doc["path"]), base) if doc.get("path") else base
    fields: Dict[str, Any] = {"classes": len(names), "names": os.fspath(path)}
    for key, attr in (("train", "train"), ("val", "valid")):
        entry = doc.get(key)
        if isinstance(entry, list):
            if len(entry) != 1:
                raise ValueError(f"{path}: `{key}:` lists {len(entry)} sources; darknet_py takes one folder "
                                 "or list file per split (merge them into one list file)")
            entry = entry[0]
        if entry:
            fields[attr] = resolve(str(entry), root)
    return fields


def list_images(folder: str) -> List[str]:
    """The images under `folder`, recursively, sorted by path."""
    out = []
    for d, subdirs, files in os.walk(folder):
        subdirs.sort()
        out += [os.path.join(d, f) for f in files if f.lower().endswith(IMAGE_SUFFIXES)]
    return sorted(out)
