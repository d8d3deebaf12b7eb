#!/usr/bin/env bash
# The CPU op parity cases of src-test/test_ops.py (cpu against reference, forward and backward, and
# the optimizer steps) on 64-bit ARM Linux, under emulation: the module cross-compiled for aarch64,
# where the CPU kernels have one copy, neon (cmake/cpu_isa.cmake), imported by Debian's arm64 Python
# under qemu-aarch64. From anywhere in the checkout, as root or with write access to the cache:
#
#   tools/arm64_emulated_ops.sh [pytest options]  check the tools, prepare the arm64 Python (once),
#                                                 cross-build, run; exit status: pytest's
#   tools/arm64_emulated_ops.sh --check           only say what is missing, one line each (exit 2)
#   tools/arm64_emulated_ops.sh --prepare         only fetch and unpack the arm64 Python
#
# Tools: aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu), qemu-aarch64 (qemu-user),
# cmake, ninja and pybind11 in $PYTHON's environment (default python3). Preparing downloads Debian 12's
# arm64 python3.11 (apt-get download: needs `dpkg --add-architecture arm64 && apt-get update`) and
# the aarch64 wheels of numpy, opencv-python-headless (darknet_py imports cv2) and pytest (pip), and
# unpacks them into $DARKNET_PY_ARM64_ROOT (default ~/.cache/darknet_py/arm64-python3.11), reused
# by later runs. The build goes to build/aarch64-linux, reused too.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
PYVER=3.11  # Debian 12's
ROOT=${DARKNET_PY_ARM64_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/darknet_py/arm64-python$PYVER}
BUILD=$REPO/build/aarch64-linux
# The interpreter and its standard library, the shared libraries they and the module link
# (libstdc++ for ours), and the headers and config script the module is built against.
DEBS=(libc6 libgcc-s1 libstdc++6 python$PYVER-minimal libpython$PYVER-minimal libpython$PYVER-stdlib
      libpython$PYVER-dev libexpat1 zlib1g libffi8 libbz2-1.0 liblzma5 libuuid1 libssl3)
WHEELS=(numpy "opencv-python-headless>=4.5,<5" "pytest>=7")
PREPARED="${DEBS[*]} ${WHEELS[*]}"  # written when complete: another list means prepare again
SELECT="cpu and (test_op_matches_reference or test_training_op_matches_reference or test_optimizer_steps_match_darknet)"

missing() {  # one line per missing tool, saying how to get it
  command -v aarch64-linux-gnu-g++ >/dev/null || echo "no aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)"
  command -v qemu-aarch64 >/dev/null || echo "no qemu-aarch64 (apt-get install qemu-user)"
  command -v cmake >/dev/null || echo "no cmake (pip install cmake)"
  command -v ninja >/dev/null || echo "no ninja (pip install ninja)"
  "$PY" -m pybind11 --cmakedir >/dev/null 2>&1 || echo "no pybind11 in $PY (pip install pybind11)"
}

prepared() { [ "$(cat "$ROOT/prepared" 2>/dev/null)" = "$PREPARED" ]; }

prepare() {
  apt-cache show "python$PYVER-minimal:arm64" >/dev/null 2>&1 || {
    echo "apt has no python$PYVER-minimal:arm64: dpkg --add-architecture arm64 && apt-get update (Debian 12)" >&2
    exit 2
  }
  local tmp=$ROOT.partial
  rm -rf "$tmp" && mkdir -p "$tmp/debs"
  (cd "$tmp/debs" && apt-get download -qq "${DEBS[@]/%/:arm64}")
  for deb in "$tmp"/debs/*.deb; do dpkg -x "$deb" "$tmp"; done
  rm -r "$tmp/debs"
  # manylinux2014 (glibc 2.17): each of these has such wheels, which any arm64 Linux of the decade runs
  "$PY" -m pip install -q --disable-pip-version-check --target "$tmp/site" --only-binary=:all: \
    --platform manylinux2014_aarch64 --python-version $PYVER --implementation cp --abi "cp${PYVER/./}" "${WHEELS[@]}"
  echo "$PREPARED" > "$tmp/prepared"
  rm -rf "$ROOT" && mv "$tmp" "$ROOT"
}

case "${1:-}" in
--check)
  lack=$(missing)
  prepared || lack+="${lack:+$'\n'}no arm64 Python in $ROOT (tools/arm64_emulated_ops.sh --prepare)"
  [ -z "$lack" ] || { echo "$lack"; exit 2; }
  exit 0 ;;
--prepare)
  prepare
  exit 0 ;;
esac

lack=$(missing)
[ -z "$lack" ] || { echo "$lack" >&2; exit 2; }
prepared || prepare

# No LTO, and the bindings at -O0 (most of the build at -O3), as the other test builds (src-test/module_parity.py
# QUICK_BUILD); the engine and the CPU kernels keep their -O3. No CUDA: cmake/cuda.cmake leaves it out of cross builds.
cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$REPO/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DDARKNET_PY_MODULE=ON -DPython_ROOT_DIR="$ROOT/usr" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" \
  -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DCMAKE_BUILD_TYPE=Quick
cmake --build "$BUILD" --parallel "$(nproc)"

# The package as the source tree has it, with the aarch64 module beside its Python files
stage=$BUILD/python
rm -rf "$stage" && mkdir -p "$stage/darknet_py"
ln -s "$REPO"/python/darknet_py/* "$stage/darknet_py/"
cp "$BUILD"/_core.cpython-*-aarch64-linux-gnu.so "$stage/darknet_py/"

cd "$REPO"
# One interpreter start (seconds under emulation): the module's report, then pytest. On a Cortex-A53
# (ARMv8.0-A: NEON and nothing newer), so that an instruction beyond arm64's baseline faults here.
env -u DARKNET_PY_ISA -u PYTHONHOME PYTHONNOUSERSITE=1 PYTHONPATH="$stage:$ROOT/site" \
  PYTHONPYCACHEPREFIX="$BUILD/pycache" qemu-aarch64 -cpu cortex-a53 -L "$ROOT" "$ROOT/usr/bin/python$PYVER" -c '
import json, platform, sys
import pytest
from darknet_py import _core
print("emulated:", platform.machine(), _core.__file__, "cpu_isa", json.dumps(_core.cpu_isa()), flush=True)
sys.exit(pytest.main(sys.argv[1:]))' \
  src-test/test_ops.py -q -p no:cacheprovider -k "$SELECT" "$@"
