"""`darknet_py selftest`: the op parity harness of the test suite, run on the user's own hardware.

Every op of the Backend contract, forward and backward, runs on the chosen device and on the naive
`reference` backend with the cases and tolerances of op_cases.py (the same list src-test/test_ops.py
uses); then a short training run (a small detector, a few iterations from the same Darknet init and
batches) runs on the device and on a second backend (cpu; reference when the device is cpu), and the
losses must agree. A table goes to stdout, a JSON report to a file, and the exit status is 3 when
anything differs (1 when the selftest could not run at all).

The results file: the contract with the devices
-----------------------------------------------
Written to `_core.selftest_results_path(device)`: $DARKNET_PY_CACHE_DIR, else $XDG_CACHE_HOME/darknet_py,
else ~/Library/Caches/darknet_py (macOS) or ~/.cache/darknet_py, file `selftest-<device>.json` with
':' written as '-' (selftest-opencl-0.json). `--json FILE` writes FILE instead (the devices then do
not see it). The path and the reading are C++ (src-lib/selftest_results.h), so that a device
(MetalDevice, CudaDevice) reads it where it decides which vendor fast paths to use:

    {"format": 1, "device": "metal", "device_name": "...", "darknet_py": "0.1.0", "date": "...",
     "quick": false, "passed": true, "ops": [{"op": "gemm", "direction": "forward", "cases": 52,
     "failed": 0, "max_error": 1.2e-06, "worst_ratio": 0.02, "passed": true, "failure": ""}, ...],
     "training": {...}, "fast_paths": {"mps_gemm": true, "mps_conv2d": false, ...}, "complete": true,
     "judged_paths": {"mps_conv2d": {"passed": false, "ops": [...], "failure": "killed by SIGABRT; ..."}, ...}}

"fast_paths" maps each vendor fast path of the device (FAST_PATHS below, by device kind: the MPS
paths on Metal; none on OpenCL or the CPU) to whether every case of every op it serves passed. The
engine reads only that key: `fast_path_passed(device, name)` in C++, `_core.selftest_fast_paths(device)` in Python. A
device enables a fast path only where it passed.

The order, so that nothing a vendor library does can lose the report: first every op's cases and the
training run on the device's own kernels (DARKNET_PY_SELFTEST unset, DARKNET_PY_MPS=off), and the report
is written, every fast path in it failed ("not judged yet"). Then each fast path is judged in a child
process of its own with DARKNET_PY_SELFTEST=<its name> (the device enables that path alone and fails
the op on any failure of it instead of falling back), on the cases of the ops it serves. MPS and MPSGraph
reject some shapes with a C assertion that calls abort(), not an Objective-C exception: a child that
aborts, crashes, or runs past --path-timeout (killed) fails its path with the signal or the timeout and
the last lines of its stderr under "judged_paths", and the report is written again after each path.
Last, the training run once more in a child with every path that passed on ("training_with_fast_paths"):
if it fails, all of them are marked failed. The environment variables changed for this are restored.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

# Vendor fast paths per device kind: name -> the ops whose cases judge it (a path is enabled only when
# every case of every op listed passed). A device that adds one lists it here.
_CONV_OPS = ["conv2d", "conv2d_backward_data", "conv2d_backward_weights"]
FAST_PATHS: Dict[str, Dict[str, List[str]]] = {
    # src-metal/metal_fast_paths.h. A convolution that MPSGraph declines (or a 1x1 one) runs as GEMMs
    # on MPS, so the convolution ops judge mps_gemm too: their failure cannot tell the two apart.
    "metal": {
        "mps_gemm": ["gemm"] + _CONV_OPS,
        "mps_conv2d": ["conv2d"],
        "mps_conv2d_backward": ["conv2d_backward_data", "conv2d_backward_weights"],
        "mps_pool": ["pool"],
        "mps_pool_backward": ["pool_backward"],
        "mps_batchnorm": ["batchnorm_train", "batchnorm_activate_train"],  # the second: MPSGraph, then activate
        "mps_batchnorm_backward": ["batchnorm_backward", "batchnorm_activate_backward"],
    },
}

SELFTEST_ENV = "DARKNET_PY_SELFTEST"
MPS_ENV = "DARKNET_PY_MPS"
PATH_TIMEOUT_S = 3600.0  # one fast path's cases in its child process (the largest cfg shapes take the
# reference backend minutes); past it the child is killed as hung
STDERR_TAIL_LINES = 3   # of a child that died: an MPS assertion is its last words on stderr
QUICK_CASES_PER_OP = 2
TRAIN_LOSS_RTOL = 1e-3  # as test_gpu_backend's training comparison: float sums in another order

SELFTEST_EXAMPLES = """\
examples:
  darknet_py selftest --device opencl:0
  darknet_py selftest --device metal --json metal-report.json
  darknet_py selftest --quick
"""


@dataclass
class OpResult:
    op: str
    direction: str  # "forward", "backward" (gradients) or "training" (batch statistics, optimizer steps)
    cases: int = 0
    failed: int = 0
    max_error: float = 0.0
    worst_ratio: float = 0.0  # largest error / tolerance (<= 1 passes)
    failure: str = ""  # the first failing case and why
    case_ids: List[str] = field(default_factory=list, repr=False)

    @property
    def passed(self) -> bool:
        return self.failed == 0

    def to_dict(self) -> dict:
        return {"op": self.op, "direction": self.direction, "cases": self.cases, "failed": self.failed,
                "max_error": _finite(self.max_error), "worst_ratio": _finite(self.worst_ratio),
                "passed": self.passed, "failure": self.failure}


def _finite(v: float):
    return v if np.isfinite(v) else None  # JSON has no inf


def _training_direction(op: str) -> str:
    """Gradients are "backward"; batchnorm's batch-statistics forward, the optimizer steps and loss
    scaling's unscale "training"."""
    return "training" if op in ("batchnorm_train", "batchnorm_activate_train", "sgd_update", "adam_update",
                                "unscale_check") else "backward"


def select_cases(quick: bool, precision: str = "fp32", ref=None, dw_in_half: bool = False,
                 cfg_ops: Optional[List[str]] = None):
    """(case, direction) pairs: all of op_cases (in half: half_op_cases' half_cases, half_train_cases and
    half_conv_backward_cases, `ref` the reference Ops; dw_in_half: the device may form a weight
    gradient in half, cuDNN in bf16), or with `quick` the QUICK_CASES_PER_OP smallest cases (by input
    size) of each op and direction. `cfg_ops` (fp32, not quick): also the cases of those ops at the
    largest shapes of the shipped cfgs (cfg_cases: how a fast path is judged)."""
    from .half_op_cases import half_cases, half_conv_backward_cases, half_train_cases
    from .op_cases import CASES, TRAIN_CASES

    if precision == "fp32":
        train = TRAIN_CASES
        pairs = [(c, "forward") for c in CASES]
    else:
        train = half_train_cases(precision, ref) + half_conv_backward_cases(precision, ref, dw_in_half)
        pairs = [(c, "forward") for c in half_cases(precision, ref)]
    pairs += [(c, _training_direction(c.op)) for c in train]
    if not quick:
        if cfg_ops and precision == "fp32":
            from .cfg_cases import cfg_cases

            forward = {"conv2d", "pool", "gemm"}
            pairs += [(c, "forward" if c.op in forward else _training_direction(c.op))
                      for c in cfg_cases(ops=set(cfg_ops))]
        return pairs

    def size(case) -> int:
        return sum(np.asarray(a).size for a in case.args if isinstance(a, np.ndarray)) + \
            sum(np.asarray(x).size for a in case.args if isinstance(a, list) for x in a if isinstance(x, np.ndarray))

    by_op: Dict[tuple, list] = {}
    for c, d in pairs:
        by_op.setdefault((c.op, d), []).append(c)
    picked = set()
    for key, cs in by_op.items():
        for c in sorted(cs, key=size)[:QUICK_CASES_PER_OP]:
            picked.add(id(c))
    return [(c, d) for c, d in pairs if id(c) in picked]


def _perturbed(ops, op: str):
    """`ops` with `op`'s results shifted by 0.01: a stand-in for a broken kernel (--perturb)."""
    from .op_cases import flat_outputs

    class Perturbed:
        def __getattr__(self, name):
            f = getattr(ops, name)
            if name != op:
                return f
            return lambda *a: [np.asarray(o, np.float32) + np.float32(0.01) for o in flat_outputs(f(*a))]

    return Perturbed()


class SelftestError(ValueError):
    """The selftest cannot judge what it was given (exit status 1, as a DarknetError)."""


def check_judging(device) -> None:
    """Refuses a device object made in another judging mode than the environment's: its fast paths were
    chosen when it was made (DARKNET_PY_SELFTEST then), so the selftest would judge other paths than
    it reports. A device name is opened here and now, so it always matches."""
    if isinstance(device, str):
        return
    judged = getattr(device, "judged_fast_paths", None)
    want = os.environ.get(SELFTEST_ENV, "")
    if judged is not None and judged != want:
        made = f"{SELFTEST_ENV}={judged}" if judged else f"outside judging mode ({SELFTEST_ENV} unset)"
        now = f"{SELFTEST_ENV}={want}" if want else "our own kernels (no fast path judged)"
        raise SelftestError(f"selftest: this device object was made {made}, but the selftest is judging {now}; "
                            f"make the device after setting {SELFTEST_ENV}, or pass its name instead")


def open_device(device, opener: Optional[str] = None):
    """`device` itself (a name or a device object), or what `opener` ("module:function", test-only:
    a device a child process can make, such as the fake Metal device) returns, as (kept, device):
    `kept` keeps the device alive."""
    if not opener:
        return device, device
    module, _, function = opener.partition(":")
    made = getattr(importlib.import_module(module), function)()
    return made, getattr(made, "device", made)


def run_ops(device, quick: bool, perturb: Optional[str] = None, progress: bool = True,
            precision: str = "fp32", only: Optional[List[str]] = None) -> List[OpResult]:
    """The parity cases on `device` (a name or a device object); with `only`, those of the ops in it,
    the largest shapes of the shipped cfgs included (how a fast path is judged)."""
    from .. import _core
    from .half_op_cases import forms_dw_in_half
    from .op_cases import check_case
    from ..commands.progress import Progress

    check_judging(device)
    ref, dev = _core.Ops("reference"), _core.Ops(device)
    dev.storage = precision  # a device without it: DarknetError "precision fp16 does not run on cpu (...)"
    if perturb:
        dev = _perturbed(dev, perturb)
    name = device if isinstance(device, str) else "metal"
    pairs = select_cases(quick, precision, ref, forms_dw_in_half(name, precision), cfg_ops=only)
    if only is not None:
        pairs = [(c, d) for c, d in pairs if c.op in only]
    results: Dict[tuple, OpResult] = {}
    bar = Progress(len(pairs), "cases", label=f"selftest {device}") if progress else None
    try:
        for case, direction in pairs:
            r = results.setdefault((case.op, direction), OpResult(case.op, direction))
            r.cases += 1
            try:
                c = check_case(ref, dev, case)
                ok, err, ratio, why = c.ok, c.max_error, c.worst_ratio, c.message
            except (ValueError, RuntimeError) as e:  # DarknetError is a ValueError
                ok, err, ratio, why = False, float("inf"), float("inf"), f"raised {e}"
            r.max_error, r.worst_ratio = max(r.max_error, err), max(r.worst_ratio, ratio)
            if not ok:
                r.failed += 1
                r.failure = r.failure or f"{case.id}: {why}"
            if bar:
                bar.update()
    finally:
        if bar:
            bar.close()
    return list(results.values())


TRAIN_CFG = """[net]
batch=2
subdivisions=1
width=32
height=32
channels=3
momentum=0.9
decay=0.0005
learning_rate=0.002
burn_in=0
max_batches=100
policy=constant

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
size=1
stride=1
pad=1
filters=21
activation=linear

[yolo]
mask=0,1,2
anchors=4,4, 8,8, 14,14
classes=2
num=3
jitter=.2
ignore_thresh=.7
truth_thresh=1
random=0
"""


def _net(path: str, device):
    from .. import _core

    if isinstance(device, str):
        return _core.Net(path, device)
    net = _core.Net(path, "cpu")  # a device object (test-only: opener): the network moved onto it
    _core.run_network_on(net, device)
    return net


def run_training(device, iterations: int, seed: int = 11) -> dict:
    """The same small detector trained `iterations` steps on `device` and on a second backend (cpu,
    or reference when device is cpu): the yolo loss of every step must agree within TRAIN_LOSS_RTOL.
    A run that raised (a Metal command buffer that failed on the GPU, ...) fails with its error in
    "failure", as an op's case does."""
    from .. import _core
    from ..training.init_weights import darknet_init

    other = "reference" if isinstance(device, str) and device == "cpu" else "cpu"
    batch, size, classes = 2, 32, 2
    fd, path = tempfile.mkstemp(suffix=".cfg", prefix="darknet_py_selftest_")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(TRAIN_CFG)
        losses = {}
        for key, d in (("other", other), ("device", device)):
            net = _net(path, d)
            darknet_init(net, seed)
            rng = np.random.default_rng(seed)
            out = []
            for _ in range(iterations):
                x = rng.uniform(0, 1, (batch, 3, size, size)).astype(np.float32)
                truths = [np.array([[*rng.uniform(0.2, 0.8, 2), *rng.uniform(0.1, 0.4, 2), rng.integers(classes)]],
                                   np.float32) for _ in range(batch)]
                net.forward_train(x, [])
                out.append(float(sum(h["loss"] for h in net.yolo_loss(truths))))
                net.backward()
                net.update(0.002, batch)
            losses[key] = out
    except (ValueError, RuntimeError) as e:  # DarknetError is a ValueError
        return {"iterations": iterations, "compared_with": other, "losses": [], "losses_compared_with": [],
                "max_rel_diff": None, "passed": False, "failure": f"raised {e}"}
    finally:
        os.unlink(path)
    want, got = np.array(losses["other"]), np.array(losses["device"])
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-30)
    passed = bool(np.all(np.isfinite(got)) and np.all(rel <= TRAIN_LOSS_RTOL))
    return {"iterations": iterations, "compared_with": other, "losses": losses["device"],
            "losses_compared_with": losses["other"], "max_rel_diff": _finite(float(rel.max())), "passed": passed,
            "failure": ""}


def fast_path_results(device: str, ops: List[OpResult]) -> Dict[str, bool]:
    kind = device.split(":")[0]
    passed = {}
    for r in ops:
        passed[r.op] = passed.get(r.op, True) and r.passed
    return {name: all(passed.get(op, False) for op in served)
            for name, served in FAST_PATHS.get(kind, {}).items()}


@contextlib.contextmanager
def environment(**changes):
    """os.environ with `changes` (None: unset) inside, exactly as it was again after."""
    saved = {k: os.environ.get(k) for k in changes}

    def put(values):
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    put(changes)
    try:
        yield
    finally:
        put(saved)


def _stderr_tail(text) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [l for l in (text or "").splitlines() if l.strip()]
    return ("; stderr: " + " | ".join(lines[-STDERR_TAIL_LINES:])) if lines else ""


def _in_child(spec: dict, judging: str, timeout: float):
    """Runs _judge_main on `spec` in a child process with DARKNET_PY_SELFTEST=`judging`: (what it wrote,
    "") or (None, why it wrote nothing: the signal, the exit status or the timeout, with the last lines
    the child wrote on stderr)."""
    with tempfile.TemporaryDirectory(prefix="darknet_py_selftest_") as tmp:
        spec = dict(spec, out=os.path.join(tmp, "out.json"))
        env = dict(os.environ)
        env[SELFTEST_ENV] = judging
        env.pop(MPS_ENV, None)
        try:
            r = subprocess.run([sys.executable, "-m", "darknet_py.diagnostics.selftest", "--judge-path",
                                json.dumps(spec)], env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return None, f"timed out after {timeout:g} s (killed){_stderr_tail(e.stderr)}"
        if r.returncode < 0:
            try:
                sig = signal.Signals(-r.returncode).name
            except ValueError:
                sig = f"signal {-r.returncode}"
            return None, f"killed by {sig}{_stderr_tail(r.stderr)}"
        if r.returncode != 0 or not os.path.exists(spec["out"]):
            return None, f"exited with status {r.returncode}{_stderr_tail(r.stderr)}"
        with open(spec["out"]) as f:
            return json.load(f), ""


def judge_path(device: str, name: str, ops: List[str], quick: bool, perturb: Optional[str] = None,
               opener: Optional[str] = None, timeout: float = PATH_TIMEOUT_S) -> dict:
    """Fast path `name` judged in a child process of its own: DARKNET_PY_SELFTEST=<name> turns on that
    path alone, the child runs the cases of `ops` and writes their results. MPS and MPSGraph reject
    some shapes with a C assertion (abort()), not an exception, and may hang or crash: whatever the
    child does, this returns {"passed", "ops", "failure"}, the failure naming the signal, the exit
    status or the timeout, with the last lines the child wrote on stderr."""
    spec = {"device": device, "ops": ops, "quick": quick, "perturb": perturb, "opener": opener}
    results, why = _in_child(spec, name, timeout)
    if results is None:
        return {"passed": False, "ops": [], "failure": why}
    failed = [o for o in results if not o["passed"]]
    failure = f"{failed[0]['op']} ({failed[0]['direction']}): {failed[0]['failure']}" if failed else ""
    if not results:
        failure = "no case of " + ", ".join(ops)
    return {"passed": bool(results) and not failed, "ops": results, "failure": failure}


def judge_training(device: str, paths: List[str], quick: bool, opener: Optional[str] = None,
                   timeout: float = PATH_TIMEOUT_S) -> dict:
    """The training run again in a child process with the fast paths `paths` (those that passed) all on
    and judged: run_training's dict, or a failed one naming the signal or timeout."""
    spec = {"device": device, "training": 2 if quick else 5, "opener": opener}
    t, why = _in_child(spec, ",".join(paths), timeout)
    if t is None:
        return {"iterations": spec["training"], "compared_with": "cpu", "losses": [], "losses_compared_with": [],
                "max_rel_diff": None, "passed": False, "failure": why}
    return t


def _judge_main(spec_text: str) -> int:
    """The child of judge_path (the cases of the spec's ops) and judge_training (the training run) on
    the spec's device; what it found is written to the spec's "out"."""
    spec = json.loads(spec_text)
    kept, dev = open_device(spec["device"], spec.get("opener"))
    if spec.get("training"):
        check_judging(dev)
        out = run_training(dev, iterations=spec["training"])
    else:
        out = [r.to_dict() for r in run_ops(dev, spec["quick"], spec.get("perturb"), progress=False,
                                            only=spec["ops"])]
    with open(spec["out"], "w") as f:
        json.dump(out, f)
    del kept
    return 0


def run_selftest(device: str, quick: bool = False, perturb: Optional[str] = None, progress: bool = True,
                 precision: str = "fp32", opener: Optional[str] = None, on_report=None,
                 path_timeout: float = PATH_TIMEOUT_S) -> dict:
    """Runs everything on `device` (a concrete name, not "auto") and returns the report (see the
    module docstring). First every op's cases and the training run on the device's own kernels (its
    fast paths off); the report then goes to `on_report` (the CLI writes it: it survives whatever
    follows), every fast path marked failed, "not judged yet". Then each fast path of the device is
    judged in a child process of its own (judge_path), the report going to `on_report` again after each.
    In fp16 / bf16: the ops that take half storage (their cases in that precision, the training ops'
    included), no training run (it compares the device with the CPU, which trains in fp32 only: half
    training differs from it by rounding) and no fast-path verdicts (the devices read those from the
    fp32 report). `opener` (test-only, "module:function") makes the device instead of its name, in
    this process and in each child. The environment is left as it was found."""
    from .. import __version__
    from .. import _core

    kind = device.split(":")[0]
    paths = FAST_PATHS.get(kind, {}) if precision == "fp32" else {}
    # our own kernels first: no path judged, none on
    with environment(**{SELFTEST_ENV: None, MPS_ENV: "off" if paths else os.environ.get(MPS_ENV)}):
        kept, dev = open_device(device, opener)
        ops = run_ops(dev, quick, perturb, progress, precision)
        if precision == "fp32":
            training = run_training(dev, iterations=2 if quick else 5)
        else:
            training = {"iterations": 0, "compared_with": "-", "max_rel_diff": None, "passed": True, "failure": "",
                        "skipped": f"the training run compares with the CPU's fp32: not run in {precision} "
                                   "(the half training ops are checked above)"}
        name = getattr(dev, "name", None) or next((d["name"] for d in _core.devices() if d.get("id") == device),
                                                  device)
        del kept, dev
    # what the verdicts are about: a device trusts only a report of its own system, GPU and version
    report = {
        "format": 1, "device": device, "system": _core.system_version(), "device_name": name,
        "darknet_py": __version__, "precision": precision,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick, "complete": not paths, "passed": all(r.passed for r in ops) and training["passed"],
        "ops": [r.to_dict() for r in ops], "training": training,
        "fast_paths": {p: False for p in paths},
        "judged_paths": {p: {"passed": False, "ops": [], "failure": "not judged yet"} for p in paths},
    }
    key = "judged_paths"
    own_passed = report["passed"]
    if on_report:
        on_report(report)
    for p, served in paths.items():
        if progress:
            print(f"selftest {device}: judging {p} in a child process", file=sys.stderr, flush=True)
        verdict = judge_path(device, p, served, quick, perturb, opener, path_timeout)
        report[key][p] = verdict
        report["fast_paths"][p] = verdict["passed"]
        report["passed"] = own_passed and all(v["passed"] for v in report[key].values())
        if on_report:
            on_report(report)
    passed = [p for p, ok in report["fast_paths"].items() if ok]
    if passed:
        # the paths that passed, together, in the training run: one that fails turns them all off (which
        # of them broke it is not known); the report is written first with them off, as before each path
        report["fast_paths"] = {p: False for p in paths}
        if on_report:
            on_report(report)
        if progress:
            print(f"selftest {device}: the training run with {', '.join(passed)} in a child process",
                  file=sys.stderr, flush=True)
        t = judge_training(device, passed, quick, opener, path_timeout)
        report["training_with_fast_paths"] = dict(t, fast_paths=passed)
        report["fast_paths"] = {p: p in passed and t["passed"] for p in paths}
        report["passed"] = report["passed"] and t["passed"]
    report["complete"] = True
    if on_report:
        on_report(report)
    return report


def format_table(report: dict) -> str:
    rows = [("op", "direction", "cases", "max error", "err/tol", "result")]
    for r in report["ops"]:
        err = "inf" if r["max_error"] is None else f"{r['max_error']:.2e}"
        ratio = "inf" if r["worst_ratio"] is None else f"{r['worst_ratio']:.3f}"
        result = "ok" if r["passed"] else f"FAIL ({r['failed']})"
        rows.append((r["op"], r["direction"], str(r["cases"]), err, ratio, result))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    t = report["training"]
    lines.append("")
    if t.get("skipped"):
        lines.append(f"training: {t['skipped']}")
    else:
        lines.append(f"training: {t['iterations']} iterations vs {t['compared_with']}, loss max relative difference "
                     f"{t['max_rel_diff'] if t['max_rel_diff'] is None else format(t['max_rel_diff'], '.2e')}: "
                     f"{'ok' if t['passed'] else 'FAIL'}")
    if t["failure"]:
        lines.append(f"FAIL training: {t['failure']}")
    tf = report.get("training_with_fast_paths")
    if tf:
        lines.append(f"training with {', '.join(tf['fast_paths'])}: {'ok' if tf['passed'] else 'FAIL'}"
                     + (f" ({tf['failure']}): those paths are disabled" if not tf["passed"] else ""))
    for r in report["ops"]:
        if not r["passed"]:
            lines.append(f"FAIL {r['op']} ({r['direction']}): {r['failure']}")
    judged = report.get("judged_paths", {})
    for name, ok in report["fast_paths"].items():
        why = judged.get(name, {}).get("failure", "")
        lines.append(f"fast path {name}: {'passed (enabled)' if ok else 'FAILED (disabled)'}"
                     + (f": {why}" if why and not ok else ""))
    lines.append(f"{report['device']} ({report['device_name']}){' in ' + report['precision'] if report.get('precision', 'fp32') != 'fp32' else ''}: "
                 f"{'all passed' if report['passed'] else 'MISMATCHES: see above'}")
    return "\n".join(lines)


def write_report(report: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, path)  # a device never reads a half-written file


def add_parser(sub, formatter) -> argparse.ArgumentParser:
    """Registers the `selftest` subcommand on the CLI's subparsers."""
    from ..devices import PRECISIONS, add_device_option

    p = sub.add_parser("selftest", help="check every op of a device against the reference, on this machine",
                       description="Run every op, forward and backward, on DEVICE and on the naive reference backend\n"
                                   "and compare (the test suite's parity cases), then a short training run against\n"
                                   "the CPU. Prints a table, writes a JSON report (the Metal and CUDA devices read\n"
                                   "it to enable only the vendor fast paths that passed). Exit status: 0 all\n"
                                   "passed, 3 a mismatch, 1 could not run.",
                       epilog=SELFTEST_EXAMPLES, formatter_class=formatter)
    add_device_option(p)
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp16 / bf16: the ops that take half storage, in that precision, against the reference\n"
                        "(no training run; the report goes beside the fp32 one, selftest-<device>-<precision>.json)")
    p.add_argument("--json", metavar="FILE",
                   help="write the report to FILE instead of the user cache folder (where the devices read it;\n"
                        "the path is printed at the end)")
    p.add_argument("--quick", action="store_true",
                   help=f"the {QUICK_CASES_PER_OP} smallest cases of each op and a 2-step training run (seconds)")
    p.add_argument("--path-timeout", metavar="SECONDS", type=float, default=PATH_TIMEOUT_S,
                   help=f"each vendor fast path is judged in a child process of its own; one that runs longer\n"
                        f"is killed and its path marked failed (default {PATH_TIMEOUT_S:g})")
    p.add_argument("--perturb", metavar="OP", help=argparse.SUPPRESS)  # test-only: breaks OP's results
    p.add_argument("--opener", metavar="MODULE:FUNCTION", help=argparse.SUPPRESS)  # test-only: makes the device
    p.set_defaults(func=cmd_selftest, parser=p)
    return p


def cmd_selftest(args: argparse.Namespace) -> int:
    from .. import _core, exit_codes
    from ..devices import default_device, resolve

    device = args.device if args.opener else resolve(args.device or default_device())
    path = args.json or _core.selftest_results_path(device)
    if args.precision != "fp32" and not args.json:  # the devices read the fp32 report's fast paths
        path = path[:-len(".json")] + f"-{args.precision}.json"
    # written after our own kernels' cases and again after each fast path: a process that dies while
    # judging one still leaves a report whose unjudged paths are failed
    report = run_selftest(device, quick=args.quick, perturb=args.perturb, precision=args.precision,
                          opener=args.opener, on_report=lambda r: write_report(r, path),
                          path_timeout=args.path_timeout)
    print(format_table(report))
    print(f"report: {path}")
    return exit_codes.OK if report["passed"] else exit_codes.SELFTEST_MISMATCH


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--judge-path":
    sys.exit(_judge_main(sys.argv[2]))
