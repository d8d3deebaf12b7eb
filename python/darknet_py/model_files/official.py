"""The official COCO-trained weights: where they come from, where they are kept, how they are checked.

`darknet_py weights get NAME` downloads one into the weights folder: $DARKNET_PY_WEIGHTS_DIR, else
~/.cache/darknet_py/weights ($XDG_CACHE_HOME/darknet_py/weights where that is set). `--weights NAME`
on detect, map, train and export then takes that file. $DARKNET_PY_WEIGHTS_URL replaces the servers
with one base URL (FILE is fetched from BASE/FILE): a mirror, or a local server in the tests.

A downloaded file is checked before it is kept: its size (the one the cfg's layers take, the same
as the published file's), Darknet's header (major, minor, revision, seen), and a load into the
shipped cfg with no float missing or left over. Of the four, only yolov3-tiny has a checksum to
compare with (the md5 of the original release's file, recorded with the test models); the Darknet
releases publish none for yolov4-tiny, yolov4 and yolov7-tiny.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from ..exit_codes import PROG

DIR_ENV = "DARKNET_PY_WEIGHTS_DIR"
URL_ENV = "DARKNET_PY_WEIGHTS_URL"


@dataclass(frozen=True)
class Official:
    name: str
    url: str
    cfg: str                     # the shipped cfg it belongs to
    size: Optional[int] = None   # bytes, where recorded
    md5: Optional[str] = None    # where one is known

    @property
    def filename(self) -> str:
        return self.name + ".weights"


_RELEASES = "https://github.com/AlexeyAB/darknet/releases/download"
# The sizes are those the shipped cfgs' layers take after Darknet 0.2's 20-byte header (verify checks
# that too); for yolov3-tiny, yolov4-tiny and yolov4 they are also the published files' sizes.
OFFICIAL: Dict[str, Official] = {o.name: o for o in [
    Official("yolov3-tiny", "https://pjreddie.com/media/files/yolov3-tiny.weights", "yolov3-tiny.cfg",
             35434956, "3bcd6b390912c18924b46b26a9e7ff53"),
    Official("yolov4-tiny", f"{_RELEASES}/darknet_yolo_v4_pre/yolov4-tiny.weights", "yolov4-tiny.cfg", 24251276),
    Official("yolov4", f"{_RELEASES}/darknet_yolo_v3_optimal/yolov4.weights", "yolov4.cfg", 257717640),
    Official("yolov7-tiny", f"{_RELEASES}/yolov4/yolov7-tiny.weights", "yolov7-tiny.cfg", 24967560),
]}


def weights_dir() -> Path:
    env = os.environ.get(DIR_ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "darknet_py" / "weights"


def official_name(text: str) -> Optional[str]:
    """The official model `text` names ("yolov4-tiny" or "yolov4-tiny.weights", no folder), or None."""
    if os.sep in text or "/" in text:
        return None
    name = text[:-len(".weights")] if text.endswith(".weights") else text
    return name if name in OFFICIAL else None


def url_of(o: Official) -> str:
    base = os.environ.get(URL_ENV)
    return f"{base.rstrip('/')}/{o.filename}" if base else o.url


def get_command(name: str) -> str:
    return f"{PROG} weights get {name}"


def resolve_weights(text: str) -> str:
    """The weights file for a --weights argument: a path as given when that file exists; else, for a
    bare official name (yolov4-tiny, yolov4-tiny.weights), the downloaded file in weights_dir().
    Raises FileNotFoundError with the command that gets it."""
    if os.path.isfile(text):
        return text
    name = official_name(text)
    if name is None:
        raise FileNotFoundError(not_found_text(text))
    path = weights_dir() / OFFICIAL[name].filename
    if path.is_file():
        return str(path)
    raise FileNotFoundError(f"the official {name} weights are not downloaded yet (looked in {weights_dir()}): "
                            f"run `{get_command(name)}`")


def not_found_text(path: str) -> str:
    return (f"weights file not found: {path} (the official weights: `{PROG} weights get NAME`, "
            f"NAME one of {', '.join(OFFICIAL)}; `{PROG} weights list` shows them)")


def md5_of(path: str) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(o: Official, path: str) -> str:
    """Checks a downloaded file; returns a one-line description, raises ValueError saying what is wrong."""
    from .cfgfiles import resolve_cfg
    from .weights_fit import check_fit, expected_bytes, read_header
    from ..network import Network

    size = os.path.getsize(path)
    if o.size is not None and size != o.size:
        raise ValueError(f"{path}: {size} bytes, the published {o.filename} has {o.size}")
    h = read_header(path)
    if not (0 <= h.major < 1000 and 0 <= h.minor < 1000 and h.seen >= 0):
        raise ValueError(f"{path}: not a Darknet weights header (version {h.major}.{h.minor}.{h.revision}, "
                         f"seen {h.seen})")
    net = Network(resolve_cfg(o.cfg), device="cpu")
    want = expected_bytes(net, h.size)
    if size != want:
        raise ValueError(check_fit(net, path) or f"{path}: {size} bytes, {o.cfg} takes {want}")
    problem = check_fit(net, path)
    if problem is not None:
        raise ValueError(problem)
    net.load_weights(path)  # the engine reads every float into its layer
    if o.md5 is not None and md5_of(path) != o.md5:
        raise ValueError(f"{path}: md5 differs from the published file's ({o.md5})")
    return (f"{size} bytes, header {h.major}.{h.minor}.{h.revision}, seen {h.seen}, fits {o.cfg}"
            + (", md5 matches" if o.md5 else ""))
