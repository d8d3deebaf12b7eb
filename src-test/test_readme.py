"""Every ```python block of README.md and of the pages in docs/ runs as written, and fails this test on
any error.

How a block's files are found: each block runs (exec, in this process, its own namespace) in a
fresh temporary working directory that holds STAND_INS below: the files README blocks name that a
fresh clone does not have. The bundled demo model stands in for every detector (its cfg is written
there as `yolov3-tiny.cfg`, `yolov4-tiny.cfg`, ...; its weights as `yolov4-tiny.weights`, ...; its
names as `coco.names`), its sample image for photos, its sample video for videos, a tiny cfg for
`my.cfg` (so that a training example's thousands of iterations take seconds) and a small synthetic
dataset for `shapes/`. A block that reads a file not listed fails with FileNotFoundError naming it:
add that name to STAND_INS (an input) or write the file earlier in the block (an output). A block
that needs hardware (an OpenCL or CUDA device) is skipped, saying so, where there is none. Where
the only OpenCL devices are the test extra's CPU runtimes, an OpenCL block runs in a subprocess
that sees pocl alone (the simulator, Oclgrind, listed first, takes 20 s to load a network).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from darknet_py.model_files.demo import demo_files

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README] + sorted((REPO / "docs").glob("*.md"))
DEMO = demo_files()

# a 2-layer detector at 32x32: 2000 training iterations in a few seconds on 2 cores
TINY_TRAIN_CFG = """[net]
batch=2
subdivisions=1
width=32
height=32
channels=3
learning_rate=0.001
max_batches=100
policy=constant

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=leaky

[convolutional]
size=1
stride=1
pad=1
filters=27
activation=linear

[yolo]
mask=0,1,2
anchors=4,4, 8,8, 14,14
classes=4
num=3
"""

DETECTORS = ("yolov3-tiny", "yolov4-tiny", "yolov4-tiny-3l", "yolov7-tiny", "yolov4")
STAND_INS = {
    **{f"{m}.cfg": DEMO["cfg"] for m in DETECTORS},
    **{f"{m}.weights": DEMO["weights"] for m in DETECTORS},
    "coco.names": DEMO["names"],
    "dog.jpg": DEMO["image"],
    "photo.jpg": DEMO["image"],
    "video.mp4": DEMO["video"],
    "video.MOV": DEMO["video"],
    "my.cfg": TINY_TRAIN_CFG,  # text: written as the file
    "shapes/": "synth",        # a darknet_py synth dataset (shapes/shapes.data, images, labels)
}


def python_blocks():
    """("page:line" of the opening fence, code) for each ```python block of README.md and docs/*.md."""
    blocks = []
    for page in PAGES:
        lines, start = page.read_text(encoding="utf-8").splitlines(), None
        for number, line in enumerate(lines, 1):
            if start is None and re.fullmatch(r"```python\s*", line):
                start = number
            elif start is not None and line.strip() == "```":
                blocks.append((f"{page.relative_to(REPO)}:{start}", "\n".join(lines[start:number - 1]) + "\n"))
                start = None
    return blocks


BLOCKS = python_blocks()


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> Path:
    from darknet_py.data.synth import generate

    root = tmp_path_factory.mktemp("readme_stand_ins")
    for name, what in STAND_INS.items():
        if what == "synth":
            generate(str(root / name), images=6, classes=4, size=(64, 64), seed=1, valid_fraction=0.5,
                     relative=True)
        elif "\n" in what:
            (root / name).write_text(what)
        else:
            shutil.copy(what, root / name)
    return root


def _missing_hardware(code: str):
    import darknet_py

    found = {str(d.get("id", "")).split(":")[0] for d in darknet_py.devices() if d.get("found", True)}
    for kind in ("opencl", "cuda"):
        if re.search(rf"device=\"{kind}", code) and kind not in found:
            return f"the block runs on {kind} and this machine has no {kind} device"
    return None


def _pocl_only_env():
    """An environment in which pyopencl's bundled pocl is the only OpenCL runtime, or None where
    there is a real OpenCL GPU or no bundled pocl."""
    import darknet_py
    from darknet_py.diagnostics.opencl_runtime import _bundled_icds, _pyopencl_folder

    if any(d.get("found") and d.get("kind") == "opencl" and d.get("is_gpu") for d in darknet_py.devices()):
        return None
    folder = _pyopencl_folder()
    pocl = [p for p in _bundled_icds(os.path.join(folder, ".libs"))] if folder else []
    pocl = [p for p in pocl if "pocl" in os.path.basename(p).lower()]
    if not pocl or not glob.glob(os.path.join(folder, ".libs", "libOpenCL*.so*")):
        return None
    python_path = str(Path(darknet_py.__file__).resolve().parents[1])
    return {**os.environ, "OCL_ICD_VENDORS": pocl[0], "PYTHONPATH": python_path}


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 5, "the ```python blocks of README.md and docs/ were not found"
    assert any(where.startswith("README.md:") for where, _ in BLOCKS)


@pytest.mark.parametrize("line,code", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_readme_python_block_runs(line, code, stand_ins, tmp_path, monkeypatch):
    reason = _missing_hardware(code)
    if reason:
        pytest.skip(reason)
    work = tmp_path / "work"
    shutil.copytree(stand_ins, work)
    env = _pocl_only_env() if 'device="opencl' in code else None
    if env is not None:
        r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{line} failed (OpenCL on pocl):\n{r.stderr[-3000:]}"
        return
    monkeypatch.chdir(work)
    try:
        exec(compile(code, line, "exec"), {"__name__": "__readme__"})
    except FileNotFoundError as e:
        pytest.fail(f"{line}: {e} (an input the block names: add it to STAND_INS in {__file__})")
