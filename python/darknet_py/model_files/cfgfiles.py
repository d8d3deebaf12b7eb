"""Finding model files: a path, or the name of a cfg/names file shipped with the package."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import List, Optional


def shipped_dir() -> Path:
    """Where the shipped cfgs live: installed next to the native module (CMake installs cfg/ there)."""
    from .. import _core

    return Path(_core.__file__).resolve().parent / "cfg"


def shipped_files(suffix: str = "") -> List[str]:
    """Names of the shipped files ending with `suffix` (e.g. ".cfg"), sorted."""
    d = shipped_dir()
    return sorted(p.name for p in d.iterdir() if p.is_file() and p.name.endswith(suffix)) if d.is_dir() else []


def resolve_model_file(name: str, what: str, suffix: str) -> str:
    """`name` as a path if that file exists, else the shipped file of that name (with or without
    `suffix`). Raises FileNotFoundError naming the file and what is shipped."""
    if os.path.isfile(name):
        return name
    # only bare names are looked up among the shipped files: "models/x.cfg" is clearly a path
    if os.sep not in name and "/" not in name:
        for candidate in (name, name + suffix):
            p = shipped_dir() / candidate
            if p.is_file():
                return str(p)
    shipped = ", ".join(shipped_files(suffix)) or "none"
    raise FileNotFoundError(f"{what} not found: {name} (not a file, nor a shipped {suffix} file: {shipped})")


def resolve_cfg(name: str) -> str:
    return resolve_model_file(name, "cfg file", ".cfg")


def resolve_names(name: Optional[str], classes: int) -> Optional[str]:
    """The names file to use: the one given, else the shipped coco.names for an 80-class net."""
    if name is not None:
        return resolve_model_file(name, "names file", ".names")
    coco = shipped_dir() / "coco.names"
    return str(coco) if classes == 80 and coco.is_file() else None


def cfg_with_size(cfg: str, width: Optional[int], height: Optional[int]) -> str:
    """A temporary copy of `cfg` whose [net] width/height are replaced (or added); the caller
    deletes it. Darknet reads the input size from the cfg only, so a copy is the honest way to
    show the layer table at another size. Keys that [net] lacks are added at its end, which moves
    later lines down by one or two in error messages; existing keys are replaced in place."""
    with open(cfg, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    wanted = {"width": width, "height": height}
    out: List[str] = []
    in_net, seen = False, set()
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("["):
            if in_net:  # leaving [net]: add the keys it did not have
                out += [f"{k}={v}" for k, v in wanted.items() if v is not None and k not in seen]
            in_net = stripped.lower() in ("[net]", "[network]")
        elif in_net:
            m = re.match(r"\s*(width|height)\s*=", line)
            if m and wanted[m.group(1)] is not None:
                seen.add(m.group(1))
                line = f"{m.group(1)}={wanted[m.group(1)]}"
        out.append(line)
    if in_net:
        out += [f"{k}={v}" for k, v in wanted.items() if v is not None and k not in seen]
    fd, path = tempfile.mkstemp(prefix=Path(cfg).stem + "-", suffix=".cfg")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return path


def names_mismatch(names_path: str, n_names: int, classes: int) -> Optional[str]:
    """The one-line warning for a names file that does not have one name per class, or None.
    Darknet stops there (it waits for a key); we go on and label the unnamed classes by number."""
    if n_names < classes:
        return (f"{names_path}: {n_names} names for {classes} classes: classes {n_names}..{classes - 1} "
                f"are shown by number")
    if n_names > classes:
        return f"{names_path}: {n_names} names for {classes} classes: the last {n_names - classes} are unused"
    return None
