#!/usr/bin/env bash
# Builds the native module with ThreadSanitizer into build/tsan and runs the thread-stress test
# (src-test/test_threads.py) against it, so that a data race in a binding or below is reported.
#
#   tools/thread_sanitizer.sh build   # once (or after a C++ change): several minutes on 2 cores
#   tools/thread_sanitizer.sh run     # the stress test under TSan; its report goes to stderr
#
# Python itself is not instrumented, so libtsan is preloaded (it must be loaded first) and the races
# TSan reports are those between threads inside the module. The exit status is pytest's; TSan's
# summary lines ("ThreadSanitizer: reported N warnings") say whether it found anything.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TSAN_DIR=${TSAN_DIR:-$ROOT/build/tsan}
# the interpreter itself, not a wrapper script (pyenv's shim is bash, which crashes with libtsan preloaded)
PY=${PYTHON:-$(python -c "import sys; print(sys.executable)")}

case "${1:-}" in
build)
    FLAGS="-fsanitize=thread -fno-omit-frame-pointer -g -O1"
    cmake -S "$ROOT" -B "$TSAN_DIR" -G Ninja -DDARKNET_PY_MODULE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DDARKNET_PY_CUDA=OFF \
        "-DCMAKE_CXX_FLAGS=$FLAGS" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" \
        "-DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=thread" "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread" \
        -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)"
    cmake --build "$TSAN_DIR" -j "${JOBS:-2}"
    # the package with the instrumented module beside it (the Python files are the tree's own)
    rm -rf "$TSAN_DIR/pkg" && mkdir -p "$TSAN_DIR/pkg"
    cp -rL "$ROOT/python/darknet_py" "$TSAN_DIR/pkg/"
    rm -f "$TSAN_DIR/pkg/darknet_py/"_core*.so
    cp "$TSAN_DIR"/_core*.so "$TSAN_DIR/pkg/darknet_py/"
    ;;
run)
    LIBTSAN="$(${CXX:-c++} -print-file-name=libtsan.so)"
    # halt_on_error=0: report every race, not only the first; second_deadlock_stack: both stacks.
    LD_PRELOAD="$LIBTSAN" PYTHONPATH="$TSAN_DIR/pkg" DARKNET_PY_THREADS=2 \
    TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:report_signal_unsafe=0" \
        "$PY" -m pytest -q -s -p no:cacheprovider "$ROOT/src-test/test_threads.py" "${@:2}"
    ;;
*)
    sed -n '2,10p' "$0"; exit 2 ;;
esac
