"""The `darknet_py weights` command: `get` downloads an official model's weights, `list` shows them.

A download goes to NAME.weights.part in the weights folder and is renamed NAME.weights only once it is
complete and checked (model_files/official.py says how), so a file of that name is always whole. An
interrupted download is resumed from the .part file with an HTTP Range request, both by the retries
of one run and by the next run.

HTTP is the standard library's urllib: it follows the redirects of GitHub's release links, speaks
HTTPS with the system's certificates and sends the Range header as given; that is all a download
needs, so no extra dependency.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

from .argtypes import non_negative_int
from ..exit_codes import PROG
from ..model_files.official import DIR_ENV, OFFICIAL, URL_ENV, Official, url_of, verify, weights_dir

WEIGHTS_EXAMPLES = f"""\
The official COCO-trained weights (80 classes, the shipped coco.names) of {", ".join(OFFICIAL)},
each for the shipped cfg of its name. They are kept in ${DIR_ENV}, else ~/.cache/darknet_py/weights;
--weights NAME on detect, map, train and export then uses that file. ${URL_ENV} (or --base-url)
fetches FILE from BASE/FILE instead of the Darknet projects' servers, e.g. from a mirror.

examples:
  {PROG} weights get yolov4-tiny
  {PROG} detect photo.jpg --cfg yolov4-tiny --weights yolov4-tiny
  {PROG} weights get yolov4 --dir models/
  {PROG} weights list
"""

CHUNK = 1 << 16


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("weights", help="download the official weights (get), show them (list)",
                       description="Download and list the official COCO-trained weights.",
                       epilog=WEIGHTS_EXAMPLES, formatter_class=formatter)
    wsub = p.add_subparsers(dest="weights_command", metavar="{get,list}")
    wsub.required = True
    g = wsub.add_parser("get", help="download an official model's weights (resumes a partial download)",
                        description="Download an official model's weights, resuming a partial download, "
                                    "and check them (size, header, a full load into the shipped cfg).",
                        epilog=WEIGHTS_EXAMPLES, formatter_class=formatter)
    g.add_argument("name", metavar="NAME", choices=sorted(OFFICIAL), help=f"one of {', '.join(OFFICIAL)}")
    g.add_argument("--dir", metavar="D", help=f"folder to keep it in (default: ${DIR_ENV}, else "
                                              "~/.cache/darknet_py/weights)")
    g.add_argument("--base-url", metavar="URL", help=f"fetch FILE from URL/FILE (default: ${URL_ENV}, "
                                                     "else the Darknet projects' servers)")
    g.add_argument("--retries", type=non_negative_int, default=3, metavar="N",
                   help="resume an interrupted download up to N times (default: %(default)s)")
    g.set_defaults(func=cmd_get, parser=g)
    lst = wsub.add_parser("list", help="the official models, their sizes and whether they are downloaded",
                          formatter_class=formatter)
    lst.add_argument("--dir", metavar="D", help="the weights folder (default: as for get)")
    lst.add_argument("--json", action="store_true", help="print the list as JSON")
    lst.set_defaults(func=cmd_list, parser=lst)
    p.set_defaults(func=lambda args: p.error("give a subcommand: get or list"), parser=p)
    return p


def _folder(args: argparse.Namespace) -> Path:
    return Path(args.dir).expanduser() if args.dir else weights_dir()


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def download(url: str, part: Path, expected: Optional[int], label: str) -> None:
    """Fetches url into `part`, continuing after the bytes it already holds (HTTP Range). Raises
    OSError (urllib's errors are OSErrors) when the connection fails or ends early."""
    from .progress import Progress

    have = part.stat().st_size if part.is_file() else 0
    if expected is not None and have == expected:
        return
    request = urllib.request.Request(url, headers={"User-Agent": f"{PROG}"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing after what we hold: the .part may be complete
            return
        raise OSError(f"{url}: HTTP {e.code} {e.reason}") from None
    with response:
        resumed = have > 0 and response.status == 206
        if have and not resumed:  # the server sent the whole file: start over
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else expected
        if resumed:
            print(f"{label}: resuming at {_mb(have)}", file=sys.stderr)
        with open(part, "ab" if resumed else "wb") as f, \
                Progress(None if total is None else (total - have) // 1000, "kB", label=label) as bar:
            got = 0
            while True:
                try:
                    chunk = response.read(CHUNK)
                except Exception as e:  # http.client.IncompleteRead, a reset connection, a timeout
                    raise OSError(f"{url}: the download broke off after {_mb(have + got)} ({type(e).__name__})") from None
                if not chunk:
                    break
                f.write(chunk)
                before = got // 1000
                got += len(chunk)
                bar.update(got // 1000 - before)
    if total is not None and have + got < total:
        raise OSError(f"{url}: the download broke off after {_mb(have + got)} of {_mb(total)}")


def get(o: Official, folder: Path, retries: int = 3, say=print) -> Path:
    """Downloads (or resumes) and checks `o` into folder/NAME.weights; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / o.filename
    if final.is_file():
        say(f"{o.name}: already downloaded: {final} ({verify(o, str(final))})")
        return final
    part = folder / (o.filename + ".part")
    url = url_of(o)
    say(f"{o.name}: {url} -> {final}")
    for attempt in range(retries + 1):
        try:
            download(url, part, o.size, o.name)
            break
        except OSError as e:
            if attempt == retries:
                raise OSError(f"{e}; the part downloaded is kept in {part}: run `{PROG} weights get {o.name}` "
                              "again to resume") from None
            print(f"{e}; resuming ({attempt + 1} of {retries})", file=sys.stderr)
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
    try:
        checked = verify(o, str(part))
    except ValueError as e:  # a damaged file is not kept: the next run starts afresh
        part.unlink()
        raise ValueError(f"{e} (deleted; run `{PROG} weights get {o.name}` again)") from None
    os.replace(part, final)
    say(f"{o.name}: {final} ({checked})")
    return final


def cmd_get(args: argparse.Namespace) -> int:
    if args.base_url:
        os.environ[URL_ENV] = args.base_url
    get(OFFICIAL[args.name], _folder(args), args.retries)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    folder = _folder(args)
    rows = []
    for o in OFFICIAL.values():
        path = folder / o.filename
        part = folder / (o.filename + ".part")
        rows.append({"name": o.name, "cfg": o.cfg, "url": o.url, "size": o.size,
                     "downloaded": path.is_file(), "path": str(path),
                     "partial_bytes": part.stat().st_size if part.is_file() else 0})
    if args.json:
        print(json.dumps({"dir": str(folder), "weights": rows}, indent=1))
        return 0
    print(f"weights folder: {folder}")
    for r in rows:
        size = _mb(r["size"]) if r["size"] else "size unknown"
        state = "downloaded" if r["downloaded"] else \
            (f"partial ({_mb(r['partial_bytes'])})" if r["partial_bytes"] else "not downloaded")
        print(f"  {r['name']:<12} {size:>20}  {state}")
    return 0
