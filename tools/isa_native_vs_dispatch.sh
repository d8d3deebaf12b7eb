#!/usr/bin/env bash
# The run-time dispatched build against a -march=native one (the target: "within 3 %"), in one
# command, offline. From the repository root, in a Python environment that has the test extra
# (numpy, opencv-python, scikit-build-core, pybind11; e.g. after pip install ".[test]"):
#
#   tools/isa_native_vs_dispatch.sh [isa_compare.py options, e.g. --models yolov4-tiny --blocks 8]
#
# It builds this checkout twice, each into its own venv under $WORK (default /tmp/darknet_isa):
#   native:   pip install . -Ccmake.define.DARKNET_PY_NATIVE=ON  (cmake/cpu_isa.cmake: one copy, -march=native)
#   dispatch: pip install .                                      (avx512, avx2, generic; picked at run time)
# without build isolation and without the index (--no-build-isolation --no-deps --no-index), each
# with its own build dir ($WORK/build-*, kept, so a rerun rebuilds only what changed; the
# checkout's build/ is left alone). The venvs see this environment's packages through a .pth
# file (like --system-site-packages, but also when this environment is itself a venv), ahead of
# which sits each venv's own darknet_py. Then benchmarks/isa_compare.py times them against each
# other: A = native, B = dispatched, so B/A <= 1.03 is the target.
#
# PYTHON picks the outer interpreter (default: python3 on PATH); DARKNET_PY_THREADS is ignored
# (isa_compare.py sets --threads, default 2). Two full builds: 5-10 minutes on 2 cores.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/darknet_isa}
PY=${PYTHON:-python3}

"$PY" -c "import scikit_build_core, pybind11, numpy, cv2" 2>/dev/null || {
  echo "$PY lacks scikit-build-core, pybind11, numpy or opencv-python: install the test extra (pip install '.[test]')" >&2
  exit 2
}
mkdir -p "$WORK"
# this environment's package directories, for the .pth file of each venv
OUTER_SITE=$("$PY" -c "import sys; print('\n'.join(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))))")

build() {  # build NAME [pip config settings...]
  local name=$1; shift
  local venv=$WORK/venv-$name
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  local purelib
  purelib=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  printf '%s\n' "$OUTER_SITE" > "$purelib/_outer_env.pth"
  echo "== building $name into $venv (build dir $WORK/build-$name)" >&2
  local t0=$SECONDS
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps --no-index --force-reinstall \
    -Cbuild-dir="$WORK/build-$name" "$@" "$REPO"
  # the venv's own darknet_py, not the outer one behind it
  "$venv/bin/python" - "$venv" <<'EOF'
import sys
from pathlib import Path
import darknet_py._core as core
if not Path(core.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()):
    sys.exit(f"{sys.argv[1]} imports {core.__file__}, not its own build")
print(f"   {core.__file__}: native_build={core.build_info()['native_build']}, CPU kernels "
      f"{core.cpu_isa()['active']} (built: {', '.join(core.cpu_isa()['built'])})", file=sys.stderr)
EOF
  echo "   built in $((SECONDS - t0)) s" >&2
}

build native -Ccmake.define.DARKNET_PY_NATIVE=ON
build dispatch -Ccmake.define.DARKNET_PY_NATIVE=OFF

echo "== load before timing: $(cat /proc/loadavg 2>/dev/null || uptime)" >&2
"$WORK/venv-native/bin/python" "$REPO/benchmarks/isa_compare.py" \
  --a "$WORK/venv-native/bin/python" --b "$WORK/venv-dispatch/bin/python" "$@"
echo "== load after timing: $(cat /proc/loadavg 2>/dev/null || uptime)" >&2
