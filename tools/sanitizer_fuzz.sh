#!/usr/bin/env bash
# Builds the native module with AddressSanitizer + UndefinedBehaviorSanitizer into its own folder and
# runs the stateful API fuzz (src-test/api_fuzz_driver.py) against it in chunks, so that any memory
# error or undefined behaviour in a binding or below aborts its chunk with a report.
#
#   tools/sanitizer_fuzz.sh build                  # once (or after a change): ~10 min on 2 cores
#   tools/sanitizer_fuzz.sh run SEED CHUNKS COUNT  # CHUNKS chunks of COUNT sequences, seeds SEED, SEED+1, ...
#
# Outputs: $ASAN_DIR/logs/chunk-<seed>.{out,err}; the last line of each .out is the driver's JSON summary.
# A chunk that crashed or was aborted by a sanitizer has a non-zero status in chunks.tsv and its report
# in the .err file (replay its last CASE with --case).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ASAN_DIR=${ASAN_DIR:-$ROOT/build/asan-install}
PY=${PYTHON:-python}

case "${1:-}" in
build)
    # -O1 keeps the stacks readable; -fno-sanitize-recover turns every UBSan finding into an abort.
    cd "$ROOT"
    SKBUILD_BUILD_DIR=build/asan SKBUILD_CMAKE_BUILD_TYPE=RelWithDebInfo \
    SKBUILD_CMAKE_ARGS="-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1" \
        "$PY" -m pip install --no-build-isolation --no-deps -q --upgrade --target "$ASAN_DIR" .
    ;;
run)
    SEED=${2:?seed}; CHUNKS=${3:?chunks}; COUNT=${4:?count per chunk}
    mkdir -p "$ASAN_DIR/logs"
    # libstdc++ is preloaded too: python itself does not link it, and ASan's __cxa_throw interceptor
    # must find the real one at start-up (else the first C++ exception aborts with a CHECK failure).
    LIBASAN="$(${CXX:-c++} -print-file-name=libasan.so) $(${CXX:-c++} -print-file-name=libstdc++.so)"
    for ((i = 0; i < CHUNKS; ++i)); do
        s=$((SEED + i))
        # detect_leaks=0: CPython's own allocations at exit are not ours to report.
        # allocator_may_return_null=1: an absurd allocation raises MemoryError instead of aborting.
        set +e
        LD_PRELOAD="$LIBASAN" PYTHONPATH="$ASAN_DIR" PYTHONFAULTHANDLER=1 \
        ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            "$PY" "$ROOT/src-test/api_fuzz_driver.py" --seed "$s" --count "$COUNT" \
            > "$ASAN_DIR/logs/chunk-$s.out" 2> "$ASAN_DIR/logs/chunk-$s.err"
        rc=$?
        set -e
        printf '%s\t%s\t%s\n' "$s" "$rc" "$(tail -n 1 "$ASAN_DIR/logs/chunk-$s.out")" >> "$ASAN_DIR/logs/chunks.tsv"
    done
    ;;
*)
    sed -n '2,12p' "$0"; exit 2 ;;
esac
