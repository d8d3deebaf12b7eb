"""Fuzz driver for .cfg and .weights parsing (run by test_fuzz.py in a subprocess, so that a
segfault or abort is reported as a failing test instead of killing pytest).

    python src-test/fuzz_driver.py cfg --seed 1 --count 5000 --out /tmp/fuzz --base cfg/yolov3-tiny.cfg ...
    python src-test/fuzz_driver.py weights --seed 1 --count 200 --out /tmp/fuzz --base cfg/yolov3-tiny.cfg \
        --weights ../shared/models/yolov3-tiny.weights
    python src-test/fuzz_driver.py cfg --seed 1 --case 1234 ...     # replay one case

Every case is derived from (seed, case index) alone, so a failure can be replayed exactly. Before
a case runs, its input is written to OUT/<mode>-seed<S>-case<i>.<ext>; it is deleted when the case
ends cleanly, so after a crash the file left behind is the input that crashed. Each case must
either succeed (then a forward pass, and detection for yolo nets, must succeed or raise) or raise
DarknetError / FileNotFoundError with a non-empty message. Anything else (another exception type,
an empty message) is printed as a FAIL line and the file is kept. The last line is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import resource
import struct
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from darknet_py import DarknetError, _core

SECTIONS = ["net", "convolutional", "conv", "connected", "maxpool", "max", "local_avgpool", "avgpool", "avg", "route",
            "shortcut", "upsample", "reorg", "reorg3d", "sam", "scale_channels", "dropout", "cost", "softmax", "yolo",
            "batchnorm", "region", "bogus", ""]

# Option lines that switch layers into their less common modes.
OPTION_LINES = [
    "stride=-2", "stride=-3", "stride=64", "stride=0", "stride_x=3", "stride_y=2", "reverse=1", "maxpool_depth=1",
    "out_channels=7", "new_coords=1", "scale_x_y=1.05", "weights_type=per_channel", "weights_type=per_feature",
    "weights_normalization=softmax", "weights_normalization=relu", "groups=2", "groups=3", "group_id=1", "dilation=2",
    "dilation=1000", "scale_wh=1", "from=-3", "from=-1,-2", "from=0", "layers=-1,-4", "layers=0", "layers=-1,-1,-1",
    "padding=1024", "size=1024", "size=7", "pad=1", "filters=1", "filters=1048576", "classes=1", "classes=1048576",
    "num=65536", "mask=0,1,2,3,4,5,6,7,8", "anchors=1,1", "anchors=0,0,0,0", "activation=normalize_channels",
    "activation=normalize_channels_softmax", "activation=relu6", "activation=nonsense", "batch_normalize=1",
    "output=16777216", "output=3", "temperature=0.0001", "groups=1000000", "probability=0.99", "nms_kind=diounms",
    "width=65536", "height=65536", "channels=65536", "batch=65536", "subdivisions=7", "=", "==", "a=b=c", "key=",
    "policy=steps", "steps=1,2,3", "scales=", "[", "]", "[]", "[[net]]", "# comment", "mask=", "layers=", "from=",
]

NUMBERS = ["0", "1", "-1", "2", "3", "-2", "7", "13", "255", "65536", "65537", "1000000", "2147483647", "2147483648",
           "-2147483648", "9223372036854775808", "4294967296", "1e30", "-1e30", "1e-30", "0.5", "-0.5", "1.0", "1.5",
           "nan", "inf", "-inf", "0x10", "1e3", "", " ", "abc", "1,2", ",", ",,", "1 2", "--1", "+3", "00", "1e",
           ".", "-0", "3.4e38", "1,", "1,-1", "\t", "\u00e9", "%s%n"]

NUM_RE = re.compile(r"-?\d+(\.\d*)?(e-?\d+)?")

# Memory the driver process may map: an engine that tries to allocate absurd memory hits this and
# raises MemoryError (reported as a failure) instead of taking the machine down.
ADDRESS_SPACE_LIMIT = 6 << 30


def resize_cfg(text: str, size: int) -> str:
    # a reduced input size keeps every forward pass cheap
    text = re.sub(r"(?m)^\s*width\s*=.*$", f"width={size}", text)
    return re.sub(r"(?m)^\s*height\s*=.*$", f"height={size}", text)


# ---------------------------------------------------------------------------------------------
# cfg mutations: each takes (rng, list of lines) and returns the new list of lines


def m_truncate(rng, lines):
    text = "\n".join(lines)
    return text[:rng.randrange(len(text) + 1)].split("\n")


def m_delete_lines(rng, lines):
    for _ in range(rng.randint(1, 3)):
        if lines:
            del lines[rng.randrange(len(lines))]
    return lines


def m_duplicate_line(rng, lines):
    if lines:
        line = lines[rng.randrange(len(lines))]
        lines.insert(rng.randrange(len(lines) + 1), line)
    return lines


def option_indices(lines):
    return [i for i, l in enumerate(lines) if "=" in l and not l.lstrip().startswith(("#", "["))]


def m_replace_number(rng, lines):
    idx = [i for i in option_indices(lines) if NUM_RE.search(lines[i].split("=", 1)[1])]
    for _ in range(rng.randint(1, 3)):
        if not idx:
            break
        i = rng.choice(idx)
        key, value = lines[i].split("=", 1)
        matches = list(NUM_RE.finditer(value))
        if not matches:  # an earlier replacement in this loop removed the number
            continue
        m = rng.choice(matches)
        new = rng.choice(NUMBERS) if rng.random() < 0.7 else str(rng.randint(-100, 100))
        lines[i] = key + "=" + value[:m.start()] + new + value[m.end():]
    return lines


def m_extreme_value(rng, lines):
    idx = option_indices(lines)
    if idx:
        i = rng.choice(idx)
        key = lines[i].split("=", 1)[0]
        lines[i] = key + "=" + rng.choice(["1000000", "65536", "-1", "0", "2147483647", "1e9", "100000", "4096"])
    return lines


def section_spans(lines):
    heads = [i for i, l in enumerate(lines) if l.lstrip().startswith("[")]
    return [(h, heads[k + 1] if k + 1 < len(heads) else len(lines)) for k, h in enumerate(heads)]


def m_remove_section(rng, lines):
    spans = section_spans(lines)
    if spans:
        a, b = rng.choice(spans)
        del lines[a:b]
    return lines


def m_rename_section(rng, lines):
    spans = section_spans(lines)
    if spans:
        a, _ = rng.choice(spans)
        lines[a] = "[" + rng.choice(SECTIONS) + "]"
    return lines


def m_move_section(rng, lines):
    spans = section_spans(lines)
    if len(spans) > 2:
        a, b = rng.choice(spans[1:])
        block = lines[a:b]
        del lines[a:b]
        heads = [h for h, _ in section_spans(lines)][1:] + [len(lines)]
        at = rng.choice(heads)
        lines[at:at] = block
    return lines


def m_insert_option(rng, lines):
    for _ in range(rng.randint(1, 3)):
        lines.insert(rng.randrange(1, len(lines) + 1) if lines else 0, rng.choice(OPTION_LINES))
    return lines


def m_insert_section(rng, lines):
    block = ["[" + rng.choice(SECTIONS[1:20]) + "]"] + [rng.choice(OPTION_LINES) for _ in range(rng.randint(0, 4))]
    spans = section_spans(lines)
    at = rng.choice([a for a, _ in spans[1:]] + [len(lines)]) if spans else len(lines)
    lines[at:at] = block
    return lines


def m_random_bytes(rng, lines):
    # works on the text; the caller encodes with surrogateescape so raw bytes survive
    text = "\n".join(lines)
    for _ in range(rng.randint(1, 8)):
        pos = rng.randrange(len(text) + 1)
        junk = "".join(chr(rng.choice([0, 1, 9, 10, 13, 32, 35, 44, 61, 91, 93, 127]) if rng.random() < 0.5
                           else 0xDC80 + rng.randrange(128)) for _ in range(rng.randint(1, 4)))
        text = text[:pos] + junk + text[pos + rng.randint(0, 3):]
    return text.split("\n")


CFG_MUTATIONS = [m_truncate, m_delete_lines, m_duplicate_line, m_replace_number, m_replace_number, m_extreme_value,
                 m_remove_section, m_rename_section, m_move_section, m_insert_option, m_insert_option,
                 m_insert_section, m_random_bytes]


def mutate_cfg(rng: random.Random, text: str) -> bytes:
    lines = text.split("\n")
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 5])):
        lines = rng.choice(CFG_MUTATIONS)(rng, lines)
    return "\n".join(lines).encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------------------
# weights mutations: (rng, bytes) -> bytes


def w_truncate(rng, data):
    cut = rng.choice([0, rng.randrange(1, 21), rng.randrange(len(data) + 1), len(data) - rng.randrange(1, 9)])
    return data[:max(cut, 0)]


def w_header(rng, data):
    data = data.ljust(12, b"\0")  # a truncated file gets a full header again
    fields = list(struct.unpack("<3i", data[:12]))
    i = rng.randrange(3)
    fields[i] = rng.choice([0, 1, 2, 999, 1000, 1001, 2 ** 31 - 1, -(2 ** 31), -1, rng.randrange(-2 ** 31, 2 ** 31)])
    return struct.pack("<3i", *fields) + data[12:]


def w_header_bytes(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if len(b) > 0:
            b[rng.randrange(min(20, len(b)))] = rng.randrange(256)
    return bytes(b)


def w_body_bytes(rng, data):
    b = bytearray(data)
    special = [struct.pack("<f", v) for v in (float("nan"), float("inf"), float("-inf"), 3.4e38, -3.4e38, 1e-45, 0.0)]
    for _ in range(rng.randint(1, 50)):
        pos = rng.randrange(20, max(21, len(b) - 4))
        b[pos:pos + 4] = rng.choice(special) if rng.random() < 0.5 else bytes(rng.randrange(256) for _ in range(4))
    return bytes(b[:len(data)])


def w_all_special(rng, data):
    # every weight NaN / Inf / huge: forward and NMS must cope with non-finite values
    v = rng.choice([float("nan"), float("inf"), -3.4e38, 1e30])
    body = np.full(max(len(data) - 20, 0) // 4, v, np.float32).tobytes()
    return data[:20] + body + data[20 + len(body):]


def w_append(rng, data):
    return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))


def w_empty(rng, data):
    return b""


WEIGHTS_MUTATIONS = [w_truncate, w_truncate, w_header, w_header, w_header_bytes, w_body_bytes, w_body_bytes,
                     w_all_special, w_append, w_empty]


def mutate_weights(rng: random.Random, data: bytes) -> bytes:
    for _ in range(rng.choice([1, 1, 2])):
        data = rng.choice(WEIGHTS_MUTATIONS)(rng, data)
    return data


# ---------------------------------------------------------------------------------------------
# Running one case


def exercise(net: "_core.Net", rng: random.Random, stats: Counter) -> None:
    """Forward (and detect) on a small random input when the network is cheap enough to run.
    Skipping a costly net is not a failure: building it without absurd allocations is what is tested."""
    layers = net.layers()
    elems = sum(int(np.prod(l["output"])) for l in layers)
    if net.width * net.height * net.channels > 1 << 20 or elems > 8 << 20 or net.total_bflops() > 0.5:
        stats["forward skipped (too costly)"] += 1
        return
    x = np.random.default_rng(rng.randrange(2 ** 32)).uniform(0, 1, (1, net.channels, net.height, net.width))
    x = x.astype(np.float32)
    # the reference backend now and then: its loops are separate code with their own bounds
    if rng.random() < 0.1 and net.total_bflops() < 0.05:
        net.set_backend("reference")
    try:
        net.forward(x, [len(layers) - 1])
    finally:
        net.set_backend("cpu")
    stats["forward ok"] += 1
    yolo = list(net.yolo_layers)
    boxes = sum(layers[i]["output"][1] * layers[i]["output"][2] * len(net.yolo_info(i)["mask"]) for i in yolo)
    if yolo and boxes <= 5000:
        size = (net.width * 2 + 1, net.height + 3)
        if rng.random() < 0.1:  # degenerate original-image sizes must raise, not divide by zero
            size = rng.choice([(0, 0), (0, 7), (7, -1), (2 ** 31 - 1, 1), (1, 2 ** 31 - 1)])
        net.detect(x, [size], 0.005, 0.45, bool(rng.random() < 0.5))
        stats["detect ok"] += 1


def expected_error(e: BaseException) -> bool:
    return isinstance(e, (DarknetError, FileNotFoundError)) and bool(str(e).strip())


def run_cfg_case(path: Path, rng: random.Random, stats: Counter) -> None:
    net = _core.Net(str(path), "cpu")
    stats["built"] += 1
    exercise(net, rng, stats)


class WeightsTarget:
    def __init__(self, cfg_path: str):
        self.cfg_path = cfg_path
        self.net = _core.Net(cfg_path, "cpu")


def run_weights_case(target: WeightsTarget, path: Path, rng: random.Random, stats: Counter) -> None:
    target.net.load_weights(str(path), -1)
    stats["loaded"] += 1
    exercise(target.net, rng, stats)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["cfg", "weights"])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--case", type=int, help="run only this case index")
    ap.add_argument("--out", required=True, help="folder for the mutated inputs")
    ap.add_argument("--base", action="append", required=True, help="base .cfg (repeatable)")
    ap.add_argument("--weights", help="base .weights for --base[0] (weights mode); synthesized if absent")
    ap.add_argument("--size", type=int, default=64, help="input width/height the base cfgs are resized to")
    ap.add_argument("--address-space-gib", type=float, default=ADDRESS_SPACE_LIMIT / (1 << 30),
                    help="RLIMIT_AS for this process (0: none)")
    args = ap.parse_args(argv)

    if args.address_space_gib > 0:  # 0 for sanitizer builds, which reserve terabytes of shadow memory
        limit = int(args.address_space_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    warnings.simplefilter("ignore")
    _core.set_threads(1)  # cases are small; one thread keeps timing stable on shared CI cores
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bases = [resize_cfg(Path(b).read_text(), args.size) for b in args.base]

    if args.mode == "weights":
        base_cfg = out / "base.cfg"
        base_cfg.write_text(bases[0])
        target = WeightsTarget(str(base_cfg))
        if args.weights:
            base_weights = Path(args.weights).read_bytes()
        else:  # synthesized: our writer, random parameters
            r = np.random.default_rng(args.seed)
            for i in range(len(target.net.layers())):
                for v in target.net.params(i).values():
                    v[...] = r.uniform(0.1, 0.5, v.shape)  # positive: valid batch-norm variances
            tmp = out / "base.weights"
            target.net.save_weights(str(tmp))
            base_weights = tmp.read_bytes()

    stats, failures = Counter(), []
    cases = [args.case] if args.case is not None else range(args.count)
    for i in cases:
        rng = random.Random(f"{args.mode}-{args.seed}-{i}")
        if args.mode == "cfg":
            path = out / f"cfg-seed{args.seed}-case{i}.cfg"
            path.write_bytes(mutate_cfg(rng, rng.choice(bases)))
        else:
            path = out / f"weights-seed{args.seed}-case{i}.weights"
            path.write_bytes(mutate_weights(rng, base_weights))
        print(f"CASE {i} {path}", flush=True)
        try:
            if args.mode == "cfg":
                run_cfg_case(path, rng, stats)
            else:
                run_weights_case(target, path, rng, stats)
        except BaseException as e:  # noqa: B902 - classifying everything is the point
            if isinstance(e, KeyboardInterrupt):
                raise
            if not expected_error(e):
                failures.append({"case": i, "path": str(path), "type": type(e).__name__, "message": str(e)[:500]})
                print("FAIL " + json.dumps(failures[-1]), flush=True)
                continue
            stats[type(e).__name__] += 1
        path.unlink()
    print(json.dumps({"seed": args.seed, "mode": args.mode, "cases": len(cases), "failures": failures,
                      "stats": dict(stats)}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
