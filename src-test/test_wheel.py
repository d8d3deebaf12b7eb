"""Wheels that run anywhere: the cibuildwheel config, the libraries the module links, and a wheel
built by `pip wheel`, installed into a fresh venv and put through the op parity tests (cpu against
reference) and the dispatch tests with every CPU kernel copy this machine runs forced in turn.

The wheel test runs by default. It builds from the tree `pip install .` left under build/<wheel
tag> (pyproject's build-dir), without isolation and without the index (scikit-build-core and
pybind11 come with the test extra), so only what changed is rebuilt: after an isolated
`pip install ".[test]"` (CI's) the steps that named the deleted build environment's cmake
(_adopt_build_tree: the generated kernel text, so the CUDA kernels where nvcc is found, the ISA
copies' isolation, the link), and the bindings if pybind11 came from there too: 11 of the 91
steps, about half the first build's time on 2 cores (CUDA's nvcc step and the blob that embeds its
output are most of it); after a `--no-build-isolation` install nothing.
DARKNET_PY_WHEEL_TEST=0 skips it; =fresh builds from scratch in a temporary directory (several
minutes on 2 cores).
"""
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import module_parity
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


WHEEL_TEST = os.environ.get("DARKNET_PY_WHEEL_TEST", "1").strip().lower()

def _build_tools():
    for mod in ("scikit_build_core", "pybind11"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed: the wheel is built without isolation, so nothing is downloaded "
                        f"(pip install '.[test]' brings it)")
    for tool in ("cmake", "ninja"):
        if importlib.util.find_spec(tool) is None and shutil.which(tool) is None:
            pytest.skip(f"{tool} is neither on PATH nor installed in Python (pip install {tool}): the wheel is built "
                        f"without isolation, which would otherwise fetch it")


def _build_tree() -> Path:
    """The tree `pip install .` left for this interpreter: build/<wheel tag> (pyproject's build-dir)."""
    interpreter = f"cp{sys.version_info.major}{sys.version_info.minor}-"
    trees = []
    for info in REPO.glob(f"build/{interpreter}*/.skbuild-info.json"):
        try:
            source = json.loads(info.read_text()).get("source_dir")
        except (OSError, ValueError):
            continue
        if source and Path(source).resolve() == REPO:
            trees.append(info.parent)
    if not trees:
        pytest.skip(f"no build tree of `pip install .` for this Python under {REPO / 'build'}: install first, or set "
                    f"DARKNET_PY_WHEEL_TEST=fresh to build the wheel from scratch (several minutes)")
    return max(trees, key=lambda t: (t / ".skbuild-info.json").stat().st_mtime)


def _cached(tree: Path, name: str):
    for line in (tree / "CMakeCache.txt").read_text(errors="replace").splitlines():
        if line.startswith(name + ":"):
            return line.split("=", 1)[1]
    return None


def _cmake_version_here() -> str:
    """The version of the cmake scikit-build-core will run here ("" if none is found)."""
    try:
        from scikit_build_core.cmake import CMake

        return str(CMake.default_search(env=os.environ).version)  # as scikit-build-core's wheel build searches
    except Exception:  # no cmake, or an older scikit-build-core without this API: no adoption
        return ""


def _adopt_build_tree(tree: Path, cmake_version_here=_cmake_version_here) -> str:
    """Let this environment's scikit-build-core reuse a tree another one configured.

    scikit-build-core deletes the CMake cache and CMakeFiles/ (every object file) when the tree
    was configured by another install of itself: after CI's `pip install ".[test]"`, the isolated
    build environment that pip has deleted since, because the cache may point into it. What it
    cached from there is pybind11's location (CMake searches again when the cached directory is
    gone, and ninja recompiles the files whose headers vanished: the bindings), the build tool
    (passed anew on each run) and, where the isolated build installed its own cmake (pyenv's cmake
    shim does not run there, so it does in CI), that cmake: CMake records its own path anew on
    each configure, and ninja reruns the custom commands that named it (the kernel text's and
    CUDA blob's generators, the ISA copies' isolation) and what depends on their output. So the
    tree is marked as this environment's when its cmake still exists or had this cmake's version:
    11 of the 91 build steps run again instead of all. Not after another CMake version (the cache's
    CMAKE_CACHE_*_VERSION): then scikit-build-core starts over (minutes, still right)."""
    import scikit_build_core

    info_file = tree / ".skbuild-info.json"
    info = json.loads(info_file.read_text())
    here = str(Path(scikit_build_core.__file__).parent.resolve())
    if info.get("skbuild_path") == here:
        return "configured by this environment"
    cmake = _cached(tree, "CMAKE_COMMAND") if (tree / "CMakeCache.txt").is_file() else None
    if not cmake:
        return "configured by another scikit-build-core, without a CMake cache: rebuilt from scratch"
    if not Path(cmake).is_file():
        then = ".".join(_cached(tree, f"CMAKE_CACHE_{part}_VERSION") or "?" for part in ("MAJOR", "MINOR", "PATCH"))
        now = cmake_version_here()
        if then != now:
            return f"configured with a cmake that is gone ({cmake}), version {then}, not {now or 'none'} as here: " \
                   f"rebuilt from scratch"
    other = info.get("skbuild_path")
    info["skbuild_path"] = here
    info_file.write_text(json.dumps(info, indent=2))
    return f"configured by another scikit-build-core ({other}): reused"


def _pip_wheel(out: Path, fresh: bool) -> Path:
    # --no-index: the build may not download; what it needs is installed (the test extra)
    cmd = [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-build-isolation", "--no-deps", "--no-index",
           "-q", "-w", str(out)]
    if fresh:
        cmd += ["-C", f"build-dir={out / 'build'}"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, f"pip wheel failed:\n{r.stdout[-4000:]}{r.stderr[-4000:]}"
    wheels = glob.glob(str(out / "darknet_engine-*.whl"))
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


@pytest.mark.skipif(WHEEL_TEST in ("0", "no", "off", "false"),
                    reason="DARKNET_PY_WHEEL_TEST=0: the wheel build, its install into a fresh venv and its op "
                           "parity runs per forced ISA are skipped")
def test_wheel_installs_and_passes_op_parity_with_each_isa(tmp_path):
    fresh = WHEEL_TEST == "fresh"
    _build_tools()
    # else every tree an isolated install left would be rebuilt from scratch (minutes), quietly
    assert _cmake_version_here().count(".") >= 2, "scikit-build-core's cmake search found no cmake version"
    how = "built from scratch" if fresh else "build tree " + _adopt_build_tree(_build_tree())
    t0 = time.perf_counter()
    wheel = _pip_wheel(tmp_path / "dist", fresh)
    t_build = time.perf_counter() - t0
    libs = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith((".so", ".dylib", ".pyd")) or ".so." in n]
    assert len(libs) == 1 and libs[0].startswith("darknet_py/_core"), f"unexpected native files in the wheel: {libs}"
    # the module as the wheel carries it, before any install step could touch it
    _check_links(Path(zipfile.ZipFile(wheel).extract(libs[0], tmp_path / "unpacked")))

    py, purelib = _fresh_venv(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True)
    _see_outer_packages(purelib)
    probe = "import darknet_py, darknet_py._core as c; print(c.__file__)"
    where = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True,
                           cwd=tmp_path).stdout.strip()
    assert Path(where).resolve().is_relative_to((tmp_path / "venv").resolve()), f"imported {where}, not the wheel's"
    _check_links(Path(where))

    for line in module_parity.run_per_isa(str(py), tmp_path / "venv", tmp_path):
        print(line)
    print(f"wheel {how} in {t_build:.0f} s; whole test {time.perf_counter() - t0:.0f} s")


def test_build_tree_is_adopted_while_its_cmake_exists_or_had_this_version(tmp_path):
    pytest.importorskip("scikit_build_core")
    import scikit_build_core

    here = str(Path(scikit_build_core.__file__).parent.resolve())
    info = tmp_path / ".skbuild-info.json"
    gone = str(tmp_path / "pip-build-env-x" / "cmake")
    for cmake, version_here, adopted in ((sys.executable, "", True), (gone, "4.4.5", True), (gone, "4.4.4", False),
                                         (gone, "", False)):
        info.write_text(json.dumps({"source_dir": str(REPO), "skbuild_path": "/tmp/pip-build-env-x/scikit_build_core"}))
        (tmp_path / "CMakeCache.txt").write_text(f"# cache\nCMAKE_COMMAND:INTERNAL={cmake}\nCMAKE_CACHE_MAJOR_VERSION:INTERNAL=4"
                                                 f"\nCMAKE_CACHE_MINOR_VERSION:INTERNAL=4\nCMAKE_CACHE_PATCH_VERSION:INTERNAL=5\n")
        how = _adopt_build_tree(tmp_path, lambda v=version_here: v)
        assert (json.loads(info.read_text())["skbuild_path"] == here) == adopted, how
        assert ("reused" in how) == adopted, how
        if adopted:  # and the next build finds it its own
            assert _adopt_build_tree(tmp_path).startswith("configured by this environment")
        else:
            assert f"version 4.4.5, not {version_here or 'none'} as here: rebuilt from scratch" in how
