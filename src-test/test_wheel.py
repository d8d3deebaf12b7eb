"""Wheels that run anywhere: the cibuildwheel config, the libraries the module links, and (opt-in,
it compiles) a wheel built by `pip wheel`, installed into a fresh venv and put through the op
parity tests with every CPU kernel copy this machine runs forced in turn.

DARKNET_PY_WHEEL_TEST=1 builds the wheel from this checkout's build tree (build/<wheel tag>,
incremental after `pip install .`: about a minute); =fresh builds it from scratch in a temporary
directory (several minutes on 2 cores: too long for every CI run). Both need scikit-build-core
and pybind11 installed (the build runs without isolation: nothing is downloaded).
"""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from darknet_py import _core

REPO = Path(__file__).resolve().parents[1]

# What a manylinux wheel may link (the manylinux policies' system libraries), and on macOS the
# system's own libraries and frameworks (Accelerate); everything else must be built in.
LINUX_ALLOWED = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
                 "librt.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:
        tomllib = pytest.importorskip("tomli", reason="needs tomllib (Python 3.11) or tomli to read pyproject.toml")
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_cibuildwheel_config():
    cfg = _pyproject()["tool"]["cibuildwheel"]
    assert set(cfg["linux"]["archs"]) == {"x86_64", "aarch64"}
    assert cfg["macos"]["archs"] == ["arm64"]
    assert "musllinux" in cfg["skip"]
    # the wheel's own test run: the files it names exist
    cmd = cfg["test-command"]
    for word in cmd.split():
        if word.startswith("{project}/"):
            assert (REPO / word[len("{project}/"):]).is_file(), f"test-command names a missing file: {word}"
    assert "test_ops.py" in cmd and "test_isa_dispatch.py" in cmd


def _needed_libraries(so: Path):
    if sys.platform.startswith("linux"):
        tool = shutil.which("readelf") or pytest.skip("readelf (binutils) not found")
        out = subprocess.run([tool, "-dW", str(so)], capture_output=True, text=True, check=True).stdout
        return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    if sys.platform == "darwin":
        out = subprocess.run(["otool", "-L", str(so)], capture_output=True, text=True, check=True).stdout
        return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]
    pytest.skip(f"no library check for {sys.platform}")


def _check_links(so: Path):
    libs = _needed_libraries(so)
    if sys.platform == "darwin":
        bad = [x for x in libs if not x.startswith(("/usr/lib/", "/System/Library/Frameworks/"))]
    else:
        bad = [x for x in libs if x not in LINUX_ALLOWED]
    assert not bad, f"{so.name} links libraries a target machine may lack: {bad} (all: {libs})"


def test_core_links_only_system_libraries():
    _check_links(Path(_core.__file__))


def _pip_wheel(out: Path, fresh: bool) -> Path:
    for mod in ("scikit_build_core", "pybind11"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed: the wheel is built without isolation (pip install scikit-build-core pybind11)")
    cmd = [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-build-isolation", "--no-deps", "-q", "-w", str(out)]
    if fresh:
        cmd += ["-C", f"build-dir={out / 'build'}"]
    subprocess.run(cmd, check=True, cwd=REPO)
    wheels = glob.glob(str(out / "darknet_py-*.whl"))
    assert len(wheels) == 1, wheels
    return Path(wheels[0])


def _fresh_venv(root: Path) -> Path:
    """A venv without pip; _see_outer_packages then lets it see this interpreter's packages (numpy,
    pytest, cv2) behind its own site-packages, so the wheel's darknet_py is the one imported."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return py, Path(purelib)


def _see_outer_packages(purelib: Path):
    # written after the install: pip would otherwise find this checkout's darknet_py through it
    outer = [p for p in sys.path if p and Path(p).is_dir() and "site-packages" in p]
    (purelib / "_outer_env.pth").write_text("\n".join(outer) + "\n")


@pytest.mark.skipif(not os.environ.get("DARKNET_PY_WHEEL_TEST"),
                    reason="builds a wheel (a minute from this checkout's build tree, several from scratch): "
                           "set DARKNET_PY_WHEEL_TEST=1 (reuse build/) or =fresh")
def test_wheel_installs_and_passes_op_parity_with_each_isa(tmp_path):
    t0 = time.perf_counter()
    wheel = _pip_wheel(tmp_path / "dist", os.environ["DARKNET_PY_WHEEL_TEST"] == "fresh")
    t_build = time.perf_counter() - t0
    libs = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith((".so", ".dylib", ".pyd")) or ".so." in n]
    assert len(libs) == 1 and libs[0].startswith("darknet_py/_core"), f"unexpected native files in the wheel: {libs}"

    py, purelib = _fresh_venv(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True)
    _see_outer_packages(purelib)
    probe = "import darknet_py, darknet_py._core as c; print(c.__file__); print(','.join(c.cpu_isa()['runnable']))"
    where, runnable = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True,
                                     cwd=tmp_path).stdout.split()
    assert Path(where).resolve().is_relative_to((tmp_path / "venv").resolve()), f"imported {where}, not the wheel's"
    _check_links(Path(where))

    for isa in runnable.split(","):
        r = subprocess.run([str(py), "-m", "pytest", str(REPO / "src-test" / "test_ops.py"), "-q", "-x",
                            "-p", "no:cacheprovider", "-k", "not oclgrind and not pocl and not opencl"],
                           capture_output=True, text=True, cwd=REPO, env=dict(os.environ, DARKNET_PY_ISA=isa))
        assert r.returncode == 0, f"DARKNET_PY_ISA={isa}:\n{r.stdout[-4000:]}{r.stderr[-2000:]}"
        assert " passed" in r.stdout.splitlines()[-1], r.stdout[-500:]
        print(f"DARKNET_PY_ISA={isa}: {r.stdout.splitlines()[-1]}")
    print(f"wheel built in {t_build:.0f} s, whole test {time.perf_counter() - t0:.0f} s")
