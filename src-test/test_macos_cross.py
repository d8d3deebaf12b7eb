"""The macOS arm64 build, compiled on Linux through CMakeLists.txt's Apple branch.

Every translation unit of the extension (the engine, the NEON copy of the CPU kernels, the
Accelerate GEMM, the Metal device's C++ and Objective-C++, the bindings) is compiled for
arm64-apple-macos by zig's clang (`pip install ziglang`: it carries macOS's libc and libc++ headers)
with cmake/toolchains/macos-arm64.cmake, so the Apple logic of the CMake files runs too (framework
lookup, the one NEON copy, the Metal device built, the minimum macOS). No Apple SDK is here: the
frameworks are empty folders for CMake to find, and their API comes from our declarations
(src-metal/apple_api_decls/, DARKNET_PY_APPLE_API_DECLS), which tools/macos_sdk_check.py compares
with Apple's real SDK headers. The static engine library is archived; the module is not linked (there
are no framework stubs to link against: tools/macos_sdk_check.py links it against the real SDK).

About a minute on 2 cores from scratch, at -O0 (nothing built here runs); the build folder
build/macos-arm64 is reused.
"""
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

import module_parity

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "macos-arm64"
FRAMEWORKS = ["Accelerate", "Foundation", "Metal", "MetalPerformanceShaders", "MetalPerformanceShadersGraph"]


def _minimum_macos_in_cmake() -> str:
    return re.search(r"set\(DARKNET_PY_MACOS_MIN ([0-9.]+)\)", (REPO / "CMakeLists.txt").read_text()).group(1)


def test_one_minimum_macos():
    """CMake, the wheel build and the Metal README name the same oldest macOS."""
    minimum = _minimum_macos_in_cmake()
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.findall(r'MACOSX_DEPLOYMENT_TARGET = "([0-9.]+)"', pyproject) == [minimum]
    readme = (REPO / "README_GPU_APPLE_METAL.md").read_text()
    assert f"macOS {minimum} or later" in readme
    assert set(re.findall(r"macOS (1[0-9](?:\.[0-9])?) or later", readme)) == {minimum}


def _zig() -> Path:
    try:
        import ziglang
    except ImportError:
        pytest.skip("ziglang is not installed (pip install ziglang): it is the compiler of the macOS cross build")
    for tool in ("cmake", "ninja"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not found on PATH")
    pytest.importorskip("pybind11", reason="pybind11 (the test extra) gives the bindings' headers")
    return Path(ziglang.__file__).parent / "zig"


# zig's driver takes its target from -target; CMake's Apple logic adds clang's -arch and --target.
# -O0 last: nothing built here runs, and the release flags' -O3 would double the time (the real-SDK
# check, tools/macos_sdk_check.py, compiles at the release flags). For the same reason no debug info
# and none of the UndefinedBehaviorSanitizer checks zig's driver adds at -O0 (-g0 -fno-sanitize=all:
# _core.cpp 17.0 -> 12.6 s of CPU on 2 cores); neither changes what compiles.
WRAPPER = """#!/bin/sh
skip=
for a in "$@"; do
  shift
  if [ -n "$skip" ]; then skip=; continue; fi
  case "$a" in
    -arch) skip=1; continue ;;
    --target=*) continue ;;
  esac
  set -- "$@" "$a"
done
exec "{zig}" c++ -target aarch64-macos.{minimum} "$@" -O0 -g0 -fno-sanitize=all
"""


def _tools(zig: Path, minimum: str) -> dict:
    bindir = BUILD / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    scripts = {"c++": WRAPPER.format(zig=zig, minimum=minimum),
               "ar": f'#!/bin/sh\nexec "{zig}" ar "$@"\n', "ranlib": f'#!/bin/sh\nexec "{zig}" ranlib "$@"\n'}
    for name, text in scripts.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    sdk = BUILD / "frameworks-only-sdk"
    for fw in FRAMEWORKS:  # for CMake's find_library; the API itself comes from apple_api_decls/
        (sdk / "System/Library/Frameworks" / f"{fw}.framework").mkdir(parents=True, exist_ok=True)
    return {"bin": bindir, "sdk": sdk}


def _is_macho_arm64(path: Path) -> bool:
    head = path.read_bytes()[:8]
    return head[:4] == b"\xcf\xfa\xed\xfe" and int.from_bytes(head[4:8], "little") == 0x0100000C  # CPU_TYPE_ARM64


def _sources() -> list:
    """Every C++ and Objective-C++ source that CMakeLists.txt and cmake/cpu_isa.cmake name."""
    text = (REPO / "CMakeLists.txt").read_text() + (REPO / "cmake" / "cpu_isa.cmake").read_text()
    return sorted(set(re.findall(r"\b(src-[a-z]+/[\w/]+\.(?:cpp|mm))\b", text)))


def test_every_translation_unit_compiles_for_arm64_macos():
    zig = _zig()
    minimum = _minimum_macos_in_cmake()
    tools = _tools(zig, minimum)
    flags = "-DDARKNET_PY_APPLE_API_DECLS"
    configure = [
        "cmake", "-S", str(REPO), "-B", str(BUILD), "-G", "Ninja",
        f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'cmake/toolchains/macos-arm64.cmake'}",
        f"-DCMAKE_CXX_COMPILER={tools['bin'] / 'c++'}", f"-DCMAKE_OBJCXX_COMPILER={tools['bin'] / 'c++'}",
        f"-DCMAKE_AR={tools['bin'] / 'ar'}", f"-DCMAKE_RANLIB={tools['bin'] / 'ranlib'}",
        f"-DCMAKE_OSX_SYSROOT={tools['sdk']}", f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_OBJCXX_FLAGS={flags}",
        "-DDARKNET_PY_METAL=ON", "-DDARKNET_PY_MODULE=ON", *module_parity.QUICK_BUILD,
        f"-Dpybind11_DIR={__import__('pybind11').get_cmake_dir()}",
        # no macOS Python here: the bindings compile against this one's headers (pyconfig.h says Linux)
        f"-DPython_INCLUDE_DIR={sysconfig.get_paths()['include']}",
    ]
    r = subprocess.run(configure, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # CMake's Apple branch ran: the deployment target defaulted to the minimum, one NEON copy, Metal built
    assert "darknet_py: CPU kernel copies: neon" in r.stdout
    assert "darknet_py: Metal device built" in r.stdout
    cache = (BUILD / "CMakeCache.txt").read_text()
    assert f"CMAKE_OSX_DEPLOYMENT_TARGET:STRING={minimum}" in cache

    # everything but the module's link: the engine archive and the bindings' objects
    targets = subprocess.run(["ninja", "-C", str(BUILD), "-t", "targets", "all"], capture_output=True, text=True,
                             check=True).stdout
    core_objects = [line.split(":")[0] for line in targets.splitlines()
                    if re.match(r"CMakeFiles/_core\.dir/.*\.o:", line)]
    r = subprocess.run(["ninja", "-C", str(BUILD), "darknet_engine", *core_objects], capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]

    objects = {str(p.relative_to(BUILD)): p for p in BUILD.glob("CMakeFiles/**/*.o")}
    missing, not_arm64 = [], []
    for src in _sources():
        if src.startswith("src-cuda/") and "memory_pool" not in src:
            continue  # the CUDA device is built only where a CUDA toolkit is found, never on macOS
        found = [p for name, p in objects.items() if name.endswith(src + ".o")]
        if not found:
            missing.append(src)
        not_arm64 += [str(p) for p in found if not _is_macho_arm64(p)]
    assert not missing, f"not compiled for macOS: {missing}"
    assert not not_arm64, f"not Mach-O arm64 objects: {not_arm64}"
    assert _is_macho_arm64(next(BUILD.glob("CMakeFiles/darknet_cpu_neon.dir/src-lib/cpu/gemm.cpp.o")))
    archive = BUILD / "libdarknet_engine.a"
    assert archive.is_file() and archive.read_bytes()[:8] == b"!<arch>\n"
    print(f"{len(objects)} objects compiled for arm64-apple-macos{minimum}")

    # a deployment target below the minimum (as a wheel build would set it) is refused, naming both
    older = f"{int(minimum.split('.')[0]) - 1}.0"
    r = subprocess.run(configure[:4] + [str(BUILD / "refused"), *configure[5:]], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, MACOSX_DEPLOYMENT_TARGET=older))
    assert r.returncode != 0 and f"is {older}: darknet_py needs macOS {minimum} or later" in " ".join(r.stderr.split())


def test_macos_workflow_lets_only_gpu_steps_fail():
    """.github/workflows/macos.yml: the wheel is built, installed and tested with nothing allowed to
    fail; the steps that need the GPU run only where a Metal device was found (else one warning line
    says why) and only they may fail, since MPS is unreliable on hosted runners' paravirtual GPU."""
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow")
    flow = yaml.safe_load((REPO / ".github" / "workflows" / "macos.yml").read_text())
    (job,) = flow["jobs"].values()
    assert job["runs-on"].startswith("macos-") and job["env"]["MACOSX_DEPLOYMENT_TARGET"] == _minimum_macos_in_cmake()
    steps = {s.get("name", s.get("uses")): s for s in job["steps"]}
    gpu = "steps.metal.outputs.usable == 'true'"
    for name, step in steps.items():
        if step.get("continue-on-error"):
            assert gpu in step.get("if", ""), f"{name!r} may fail without needing the GPU"
    assert "::warning::no usable Metal device" in steps["Metal device"]["run"]
    run = "\n".join(s.get("run", "") for s in job["steps"])
    assert "pip wheel" in run and "pytest src-test -q" in run
    assert "darknet_py selftest --device metal --json" in run
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and "selftest-metal.json" in uploads[0]["with"]["path"]
