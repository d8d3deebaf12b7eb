#!/usr/bin/env python3
"""Compare `darknet_py map` with Darknet's own `detector map`, run side by side on synthetic sets.

    python tools/darknet_map_compare.py DARKNET [--build-dir DIR] [--work DIR] [--set NAME:N:K:SEED:WxH ...]

DARKNET is hank-ai's Darknet (github.com/hank-ai/darknet): a bare git directory, a git work tree
or a plain source tree. Nothing of it is kept in this repository: it is cloned (a plain tree is
copied) into BUILD_DIR/src and built there as a CPU build unless BUILD_DIR/build/src-cli/darknet
exists already:

    cmake -S BUILD_DIR/src -B BUILD_DIR/build -DCMAKE_BUILD_TYPE=Release -DDARKNET_TRY_CUDA=OFF \
          -DDARKNET_TRY_ROCM=OFF -DDARKNET_TRY_ONNX=OFF -DDARKNET_TRY_OPENBLAS=ON
    make -C BUILD_DIR/build -j JOBS darknetcli

(run from BUILD_DIR/src: Darknet's CM_version.cmake names the version from `git describe --tags`,
so the source must be a git clone with tags; a plain tree gets a one-commit repository tagged
v0.0). It needs OpenCV's C++ development files and, for BLAS, OpenBLAS's 64-bit-integer build
(Debian: libopencv-dev libopenblas64-dev; Darknet's CMake asks for BLA_SIZEOF_INTEGER 8 and
includes cblas-openblas64.h). The build is checked to be CPU-only (no CUDA library linked).

The model is the bundled demo (python/darknet_py/models/demo: shapes-demo.cfg/.weights, 4
classes). Each set is `darknet_py synth` with every image in the valid list; a set of K < 4
classes is evaluated with the 4-class model and names as it is (its labels use a subset of the
classes, the others have no truths: AP 0, still counted in mAP by both). The defaults: 200 images
K=4 at 256x256 (the network's size: no resize, so only the counting rules and the numerics are
compared), 150 images K=4 at 320x240, 120 images K=3 at 416x416, 100 images K=1 at 512x384.

For each set both are run at --thresh (0.25) and --iou-thresh (0.5): Darknet as
`darknet detector map DATA CFG WEIGHTS -dont_show -thresh T -iou_thresh I`, ours through the
Python API (compute_map, CPU, counts="darknet", resize="opencv": hank-ai's map resizes the images
with OpenCV's INTER_LINEAR_EXACT, not with Darknet's resize_image as our default does; --resize
darknet shows what our default gives, which differs wherever the images are not of the network's
size). The table shows mAP, per-class AP, TP, FP, FN,
precision, recall, F1 and average IoU for both and whether they match, at Darknet's printed
precision: the counts exactly; AP to 4 decimals of a percent (a value within float error of a
rounding boundary may print one step off: marked "~" and accepted); mAP within that of the mean of
Darknet's APs (it prints 2 decimals itself); the ratios to 6 significant digits; IoU to 1e-4. Darknet's CPU forward differs from ours in the last bits, so
the detections that may flip are listed apart, from our detections:
  conf~thresh    detections within --eps (1e-4) of the confidence threshold;
  iou~iou_thresh detections above the threshold whose best truth's IoU is within --eps of it;
  order          truths claimed (IoU above the threshold) in one image by detections both above
                 and below the confidence threshold: Darknet's counts give such a truth a TP only
                 when a detection above the threshold comes first in its collection order
                 (evaluate.py's module doc), so these depend on the detection order after NMS;
  shared         truths claimed in one image by two or more detections above the threshold: one
                 TP whatever the order, but which one's IoU counts in the average IoU depends on it;
  AP rank        neighbours in a class's confidence ranking within --eps, one a TP and one not:
                 a last-bit difference may swap them and change that class's AP in its last digits.
Exit status: 0 when every set matches, 1 on a mismatch, 2 when Darknet cannot be built or run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "python" / "darknet_py" / "models" / "demo"
DEMO_CFG, DEMO_WEIGHTS, DEMO_NAMES = DEMO / "shapes-demo.cfg", DEMO / "shapes-demo.weights", DEMO / "shapes.names"
DEMO_CLASSES = 4
DEFAULT_SETS = ("k4-a:200:4:1:256x256", "k4-b:150:4:2:320x240", "k3:120:3:3:416x416", "k1:100:1:4:512x384")
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DDARKNET_TRY_CUDA=OFF", "-DDARKNET_TRY_ROCM=OFF",
               "-DDARKNET_TRY_ONNX=OFF", "-DDARKNET_TRY_OPENBLAS=ON")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ToolError(Exception):
    """Darknet could not be built or run (exit status 2)."""


# ---- building Darknet ----------------------------------------------------------------------------
def _run(cmd: List[str], cwd: Path, log: Path) -> None:
    with open(log, "a") as f:
        f.write(f"\n$ (cd {cwd} && {' '.join(cmd)})\n")
        f.flush()
        rc = subprocess.call(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if rc:
        tail = "".join(log.read_text(errors="replace").splitlines(True)[-25:])
        raise ToolError(f"{' '.join(cmd)} failed (exit {rc}); the end of {log}:\n{tail}")


def _is_git(path: Path) -> bool:
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def darknet_binary(source: Path, build_dir: Path, jobs: int) -> Path:
    """Darknet's CLI built (if not yet) from `source` in `build_dir`, CPU only."""
    exe = build_dir / "build" / "src-cli" / "darknet"
    src = build_dir / "src"
    log = build_dir / "build.log"
    build_dir.mkdir(parents=True, exist_ok=True)
    if not exe.exists():
        if not (src / "CMakeLists.txt").exists():
            if src.exists():
                shutil.rmtree(src)
            if _is_git(source):
                _run(["git", "clone", "-q", str(source), str(src)], build_dir, log)
            elif (source / "CMakeLists.txt").exists():
                shutil.copytree(source, src, symlinks=True)
                for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                            ["git", "-c", "user.name=compare", "-c", "user.email=compare@localhost", "commit", "-qm",
                             "source tree"], ["git", "tag", "v0.0"]):
                    _run(cmd, src, log)
            else:
                raise ToolError(f"{source}: neither a git directory nor a Darknet source tree (no CMakeLists.txt)")
        print(f"building Darknet in {build_dir} (log: {log}) ...", file=sys.stderr, flush=True)
        t0 = time.time()
        _run(["cmake", "-S", str(src), "-B", str(build_dir / "build"), *CMAKE_FLAGS], src, log)
        _run(["make", "-C", str(build_dir / "build"), f"-j{jobs}", "darknetcli"], src, log)
        print(f"built in {time.time() - t0:.0f} s", file=sys.stderr)
    if not exe.exists():
        raise ToolError(f"{exe} was not built (see {log})")
    cache = build_dir / "build" / "CMakeCache.txt"
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    if "libcudart" in ldd or "libcublas" in ldd or (cache.exists() and "CMAKE_CUDA_COMPILER:" in cache.read_text()):
        raise ToolError(f"{exe} is a CUDA build; this comparison is for Darknet's CPU build")
    return exe


def darknet_commit(build_dir: Path) -> str:
    r = subprocess.run(["git", "describe", "--tags", "--long", "--always"], cwd=build_dir / "src",
                       capture_output=True, text=True)
    return r.stdout.strip() or "?"


# ---- the sets ------------------------------------------------------------------------------------
@dataclass
class SetSpec:
    name: str
    images: int
    classes: int
    seed: int
    size: str


def parse_set(text: str) -> SetSpec:
    try:
        name, n, k, seed, size = text.split(":")
        spec = SetSpec(name, int(n), int(k), int(seed), size)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME:N:K:SEED:WxH, got {text!r}") from None
    if not 1 <= spec.classes <= DEMO_CLASSES:
        raise argparse.ArgumentTypeError(f"{text}: K must be 1..{DEMO_CLASSES} (the demo model's classes)")
    return spec


def make_set(spec: SetSpec, work: Path) -> Path:
    """The synthetic set (every image in the valid list) and a .data file for the 4-class model."""
    folder = work / spec.name
    data = folder / "compare.data"
    if not data.exists():
        if folder.exists():
            shutil.rmtree(folder)
        subprocess.check_call([sys.executable, "-m", "darknet_py", "synth", str(folder), "--images", str(spec.images),
                               "--classes", str(spec.classes), "--seed", str(spec.seed), "--size", spec.size,
                               "--valid-fraction", "1"], stdout=subprocess.DEVNULL)
        data.write_text(f"classes = {DEMO_CLASSES}\nvalid = {folder / 'valid.txt'}\ntrain = {folder / 'valid.txt'}\n"
                        f"names = {DEMO_NAMES}\nbackup = {folder / 'backup'}\n")
    return data


# ---- results of both -----------------------------------------------------------------------------
@dataclass
class ClassRow:
    ap: float  # fraction
    tp: int
    fp: int
    fn: int
    truths: int
    f1: float
    avg_iou: float


@dataclass
class Summary:
    map: float
    classes: List[ClassRow]
    tp: int
    fp: int
    fn: int
    precision: float
    recall: float
    f1: float
    avg_iou: float
    detections: int
    truths: int
    printed_map: Optional[float] = None  # Darknet's own mAP line (2 decimals of a percent)


def parse_darknet(text: str) -> Summary:
    """Darknet's `detector map` report (hank-ai's layout: detector_map.cpp, format_map_ap_row_values)."""
    text = ANSI.sub("", text.replace("\r", "\n"))
    m = re.search(r"detections_count=(\d+), unique_truth_count=(\d+)", text)
    head = re.search(r"^\s*-- -{5,}.*$", text, re.M)
    if not m or not head:
        raise ToolError("Darknet's output has no mAP table:\n" + text[-3000:])
    rows = []
    for line in text[head.end():].splitlines()[1:]:
        tok = line.split()
        if len(tok) < 9 or not tok[0].isdigit():
            break
        ap, tp, fp, fn, gt, f1, iou = tok[-7:]
        rows.append(ClassRow(float(ap) / 100, int(tp), int(fp), int(fn), int(gt), float(f1) / 100, float(iou) / 100))
    pr = re.search(r"conf_thresh=\S+, precision=(\S+), recall=(\S+), F1 score=(\S+)", text)
    cnt = re.search(r"conf_thresh=\S+, TP=(\d+), FP=(\d+), FN=(-?\d+), average IoU=(\S+)%", text)
    mp = re.search(r"mean average precision \(mAP@\S+\)=(\S+)%", text)
    if not (pr and cnt and mp and rows):
        raise ToolError("cannot read Darknet's summary lines:\n" + text[-3000:])
    fl = lambda s: float(s) if s not in ("nan", "-nan") else 0.0  # noqa: E731
    return Summary(sum(r.ap for r in rows) / len(rows), rows, int(cnt[1]), int(cnt[2]), int(cnt[3]), fl(pr[1]),
                   fl(pr[2]), fl(pr[3]), fl(cnt[4]) / 100, int(m[1]), int(m[2]), float(mp[1]) / 100)


def run_darknet(exe: Path, data: Path, thresh: float, iou_thresh: float, log: Path) -> Tuple[Summary, float]:
    cmd = [str(exe), "detector", "map", str(data), str(DEMO_CFG), str(DEMO_WEIGHTS), "-dont_show",
           "-thresh", repr(thresh), "-iou_thresh", repr(iou_thresh)]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=data.parent, capture_output=True, text=True, errors="replace")
    log.write_text(f"$ {' '.join(cmd)}\n{r.stdout}\n--- stderr ---\n{r.stderr}")
    if r.returncode:
        raise ToolError(f"Darknet exited {r.returncode} (output: {log}):\n{(r.stdout + r.stderr)[-3000:]}")
    return parse_darknet(r.stdout + "\n" + r.stderr), time.time() - t0


@dataclass
class Borderline:
    conf: List[str] = field(default_factory=list)
    iou: List[str] = field(default_factory=list)
    order: List[str] = field(default_factory=list)
    rank: List[str] = field(default_factory=list)
    shared: List[str] = field(default_factory=list)


def run_ours(data: Path, thresh: float, iou_thresh: float, eps: float, device: str,
             resize: str) -> Tuple[Summary, Borderline, float]:
    import numpy as np

    from darknet_py import Network
    from darknet_py.evaluation.evaluate import compute_map, net_letterbox, network_detections
    from darknet_py.media.sources import read_image

    net = Network(str(DEMO_CFG), str(DEMO_WEIGHTS), None, device)
    letterbox = net_letterbox(net)
    names: List[str] = []

    def detections_for(path: str):
        names.append(os.path.basename(path))
        return network_detections(net, read_image(path), letterbox, resize)

    t0 = time.time()
    res = compute_map(str(data), detections_for=detections_for, classes=net.classes, iou_thresh=iou_thresh,
                      thresh=thresh, coco=False, progress=False)
    seconds = time.time() - t0
    rows = []
    for c in res.classes:
        f1 = 2 * c.precision * c.recall / (c.precision + c.recall) if c.precision + c.recall else 0.0
        rows.append(ClassRow(c.ap, c.tp, c.fp, c.fn, c.truths, f1, c.avg_iou))
    ours = Summary(res.map, rows, res.tp, res.fp, res.fn, res.precision, res.recall, res.f1, res.avg_iou,
                   res.detections, res.truths)

    # the detections whose outcome a last-bit difference (or the detection order) may flip
    acc = res.accumulator  # type: ignore[attr-defined]
    b = Borderline()
    for i, (conf, cls, truth, iou) in enumerate(zip(acc._conf, acc._cls, acc._truth, acc._iou)):
        img = names[i]
        for c, k, t, u in zip(conf, cls, truth, iou):
            if abs(c - thresh) <= eps:
                b.conf.append(f"{img} class {k} conf {c:.6f} iou {u:.4f}")
            if c > thresh - eps and t >= 0 and abs(u - iou_thresh) <= eps:
                b.iou.append(f"{img} class {k} conf {c:.6f} iou {u:.6f}")
        matched = (truth >= 0) & (iou > iou_thresh)
        for t in np.unique(truth[matched]):
            claim = matched & (truth == t)
            if np.sum(conf[claim] > thresh) > 1:
                b.shared.append(f"{img} truth #{int(t)} claimed above the threshold by confidences "
                                f"{', '.join(f'{c:.4f}' for c in conf[claim & (conf > thresh)])} with IoUs "
                                f"{', '.join(f'{u:.4f}' for u in iou[claim & (conf > thresh)])}")
            if np.any(conf[claim] > thresh) and np.any(conf[claim] <= thresh):
                first = int(np.flatnonzero(claim)[0])
                b.order.append(f"{img} truth #{int(t)} claimed by confidences {', '.join(f'{c:.4f}' for c in conf[claim])} "
                               f"(ours: first {conf[first]:.4f}, {'TP' if conf[first] > thresh else 'FP'})")
    # the AP's ranking: neighbours of one class within eps of each other, one a TP and one not
    conf, cls, truth, iou, _ = acc._ranked()
    tp = acc._tp_flags(truth, iou, iou_thresh)
    for k in range(acc.n_classes):
        idx = np.flatnonzero(cls == k)
        for a, c in zip(idx[:-1], idx[1:]):
            if conf[a] - conf[c] <= eps and tp[a] != tp[c]:
                b.rank.append(f"class {k} confidences {conf[a]:.7f} ({'TP' if tp[a] else 'FP'}), "
                              f"{conf[c]:.7f} ({'TP' if tp[c] else 'FP'})")
    return ours, b, seconds


# ---- the table -----------------------------------------------------------------------------------
def _pct(v: float) -> float:
    return round(100 * v, 4)


def compare(dn: Summary, ours: Summary) -> List[Tuple[str, str, str, bool]]:
    """(quantity, Darknet, ours, equal at Darknet's printed precision)."""
    rows: List[Tuple[str, str, str, bool]] = []
    sig = lambda a, b: abs(a - b) <= 1e-5 * max(abs(a), abs(b), 1e-3)  # noqa: E731  (6 significant digits printed)

    def add(name: str, a, b, same: bool) -> None:
        rows.append((name, str(a), str(b), bool(same)))

    ours_map4 = sum(round(100 * c.ap, 4) for c in ours.classes) / len(ours.classes) / 100
    add("mAP (mean of printed APs)", f"{100 * dn.map:.6f}%", f"{100 * ours_map4:.6f}% ({100 * ours.map:.6f}%)",
        abs(dn.map - ours.map) <= (0.00005 + 1e-5) / 100)
    add("mAP (printed)", f"{100 * (dn.printed_map or 0):.2f}%", f"{100 * ours.map:.2f}%",
        f"{100 * (dn.printed_map or 0):.2f}" == f"{100 * ours.map:.2f}")
    for k, (a, b) in enumerate(zip(dn.classes, ours.classes)):
        # Darknet prints 100.0f * (float)AP to 4 decimals: a value within float error of a rounding
        # boundary may print one step off ("~")
        near = abs(100 * b.ap - round(100 * a.ap, 4)) <= 0.00005 + 1e-5
        add(f"class {k} AP", f"{100 * a.ap:.4f}%", f"{100 * b.ap:.4f}%" + ("~" if near and _pct(a.ap) != _pct(b.ap) else ""),
            _pct(a.ap) == _pct(b.ap) or near)
        add(f"class {k} TP/FP/FN/GT", f"{a.tp}/{a.fp}/{a.fn}/{a.truths}", f"{b.tp}/{b.fp}/{b.fn}/{b.truths}",
            (a.tp, a.fp, a.fn, a.truths) == (b.tp, b.fp, b.fn, b.truths))
        add(f"class {k} F1, avg IoU", f"{a.f1:.4f}, {a.avg_iou:.4f}", f"{b.f1:.4f}, {b.avg_iou:.4f}",
            abs(a.f1 - b.f1) < 1.5e-6 and abs(a.avg_iou - b.avg_iou) < 1e-4)
    if len(dn.classes) != len(ours.classes):
        add("classes", len(dn.classes), len(ours.classes), False)
    add("detections, truths", f"{dn.detections}, {dn.truths}", f"{ours.detections}, {ours.truths}",
        (dn.detections, dn.truths) == (ours.detections, ours.truths))
    add("TP", dn.tp, ours.tp, dn.tp == ours.tp)
    add("FP", dn.fp, ours.fp, dn.fp == ours.fp)
    add("FN", dn.fn, ours.fn, dn.fn == ours.fn)
    add("precision", f"{dn.precision:.6g}", f"{ours.precision:.6g}", sig(dn.precision, ours.precision))
    add("recall", f"{dn.recall:.6g}", f"{ours.recall:.6g}", sig(dn.recall, ours.recall))
    add("F1", f"{dn.f1:.6g}", f"{ours.f1:.6g}", sig(dn.f1, ours.f1))
    add("average IoU", f"{100 * dn.avg_iou:.4f}%", f"{100 * ours.avg_iou:.4f}%", abs(dn.avg_iou - ours.avg_iou) < 1e-4)
    return rows


def print_table(title: str, rows: List[Tuple[str, str, str, bool]], border: Borderline, limit: int) -> None:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(max(len(r[1]) for r in rows), len("Darknet"))
    w2 = max(max(len(r[2]) for r in rows), len("darknet_py"))
    print(f"\n== {title}")
    print(f"  {'':{w0}}  {'Darknet':>{w1}}  {'darknet_py':>{w2}}  match")
    for name, a, b, same in rows:
        print(f"  {name:{w0}}  {a:>{w1}}  {b:>{w2}}  {'yes' if same else 'NO'}")
    for what, items in (("conf~thresh", border.conf), ("iou~iou_thresh", border.iou), ("order", border.order),
                        ("shared", border.shared), ("AP rank", border.rank)):
        print(f"  borderline {what}: {len(items)}")
        for line in items[:limit]:
            print(f"    {line}")
        if len(items) > limit:
            print(f"    ... {len(items) - limit} more")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("darknet", type=Path, help="hank-ai Darknet: bare git dir, git work tree or source tree")
    ap.add_argument("--build-dir", type=Path, default=Path("/tmp/darknet-map-compare/darknet"),
                    help="where Darknet is cloned and built (default: %(default)s)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/darknet-map-compare/sets"),
                    help="where the synthetic sets and Darknet's logs go (default: %(default)s)")
    ap.add_argument("--set", dest="sets", action="append", type=parse_set, metavar="NAME:N:K:SEED:WxH",
                    help=f"a set (repeatable; default: {' '.join(DEFAULT_SETS)})")
    ap.add_argument("--thresh", type=float, default=0.25)
    ap.add_argument("--iou-thresh", type=float, default=0.5)
    ap.add_argument("--eps", type=float, default=1e-4, help="borderline distance (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="make -j for Darknet's build")
    ap.add_argument("--device", default="cpu", help="our device (default: %(default)s)")
    ap.add_argument("--resize", choices=("opencv", "darknet"), default="opencv",
                    help="our resize to the network size (compute_map's resize): `opencv` is hank-ai's\n"
                         "(cv::resize INTER_LINEAR_EXACT), `darknet` Darknet's resize_image, our default\n"
                         "(default: %(default)s)")
    ap.add_argument("--show", type=int, default=10, help="borderline cases listed per kind (default: %(default)s)")
    args = ap.parse_args(argv)
    sets = args.sets or [parse_set(s) for s in DEFAULT_SETS]
    try:
        exe = darknet_binary(args.darknet.resolve(), args.build_dir.resolve(), args.jobs)
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Darknet: {exe} ({darknet_commit(args.build_dir.resolve())}, CPU); model: {DEMO_CFG.name}; "
          f"thresh {args.thresh}, iou_thresh {args.iou_thresh}; ours with resize={args.resize}")
    args.work.mkdir(parents=True, exist_ok=True)
    mismatched = []
    for spec in sets:
        data = make_set(spec, args.work.resolve())
        try:
            dn, t_dn = run_darknet(exe, data, args.thresh, args.iou_thresh, data.parent / "darknet_map.log")
        except ToolError as e:
            print(f"error: {spec.name}: {e}", file=sys.stderr)
            return 2
        ours, border, t_ours = run_ours(data, args.thresh, args.iou_thresh, args.eps, args.device, args.resize)
        rows = compare(dn, ours)
        print_table(f"{spec.name}: {spec.images} images, {spec.classes} of {DEMO_CLASSES} classes labelled, "
                    f"seed {spec.seed}, {spec.size} (Darknet {t_dn:.0f} s, ours {t_ours:.0f} s)", rows, border,
                    args.show)
        if not all(r[3] for r in rows):
            mismatched.append(spec.name)
    print(f"\n{len(sets) - len(mismatched)} of {len(sets)} sets match"
          + (f"; mismatched: {', '.join(mismatched)}" if mismatched else ""))
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
