"""The order our NMS leaves detections in is hank-ai Darknet's: its do_nms_sort / diounms_sort
(box.cpp) sort the detection array with std::sort (sort_box_detections), class after class, and
`detector map` (detector_map.cpp, detector_map_calculations_thread) collects the detections in that
order, which decides its TP/FP counts at the threshold (test_map.py). Most keys are ties (a box has no
probability for most classes), so the order is that of GCC's std::sort, which src-lib/yolo/gnu_sort.h
writes out for every platform. Checked here against the compiler's own std::sort, permutation by
permutation (libstdc++ only: another standard library has another algorithm)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX = os.environ.get("CXX") or shutil.which("g++")

PROGRAM = r"""
#include "gnu_sort.h"
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

static long cases = 0, bad = 0;
static void check(const std::vector<float>& key) {
    size_t n = key.size();
    std::vector<int> a(n), b(n);
    for (size_t i = 0; i < n; ++i) a[i] = b[i] = (int)i;
    auto less = [&](int p, int q) { return key[q] < key[p]; };  // descending, as sort_box_detections
    std::sort(a.begin(), a.end(), less);
    dn::gnu_sort(b.data(), b.data() + n, less);
    ++cases;
    if (a != b) ++bad;
}

int main() {
#ifndef __GLIBCXX__
    std::printf("not libstdc++\n");
    return 3;
#endif
    // the hand-traced case of test_seventeen_ties (below)
    {
        std::vector<float> key(17, 0.0f);
        key[0] = 1;
        std::vector<int> b(17);
        for (int i = 0; i < 17; ++i) b[i] = i;
        dn::gnu_sort(b.data(), b.data() + 17, [&](int p, int q) { return key[q] < key[p]; });
        for (int v : b) std::printf("%d ", v);
        std::printf("\n");
    }
    std::mt19937 rng(1);
    for (int trial = 0; trial < 6000; ++trial) {
        int n = trial < 80 ? trial : 1 + (int)(rng() % (trial % 9 == 0 ? 3000 : 200));
        int distinct = 1 + (int)(rng() % (rng() % 2 ? 4 : 1000));
        std::vector<float> key(n);
        for (auto& k : key) k = (rng() % 3 == 0) ? 0.f : float(rng() % distinct) / distinct;
        check(key);
        if (trial % 40 == 0)  // sorted, reversed, organ pipe
            for (int mode = 0; mode < 3; ++mode) {
                for (int i = 0; i < n; ++i) key[i] = float(mode == 0 ? i : mode == 1 ? n - i : (i < n / 2 ? i : n - i));
                check(key);
            }
    }
    // McIlroy's adversary fixes keys that drive std::sort to its depth limit (the heapsort fallback)
    for (int n : {100, 1000, 3000}) {
        std::vector<int> val(n), ptr(n);
        int gas = n, nsolid = 0, candidate = 0;
        for (int i = 0; i < n; ++i) val[i] = gas, ptr[i] = i;
        std::sort(ptr.begin(), ptr.end(), [&](int x, int y) {
            if (val[x] == gas && val[y] == gas) val[x == candidate ? x : y] = nsolid++;
            if (val[x] == gas) candidate = x;
            else if (val[y] == gas) candidate = y;
            return val[x] < val[y];
        });
        std::vector<float> key(n);
        for (int i = 0; i < n; ++i) key[i] = float(-val[i]);  // check() sorts descending
        check(key);
        for (auto& k : key) k = float(int(k) / 3);
        check(key);
    }
    std::printf("%ld %ld\n", cases, bad);
    return 0;
}
"""


@pytest.fixture(scope="module")
def sort_check(tmp_path_factory):
    if not CXX:
        pytest.skip("no C++ compiler")
    d = tmp_path_factory.mktemp("gnu_sort")
    (d / "check.cpp").write_text(PROGRAM)
    exe = d / "check"
    subprocess.run([CXX, "-O2", "-std=c++17", f"-I{ROOT / 'src-lib' / 'yolo'}", str(d / "check.cpp"), "-o", str(exe)],
                   check=True, capture_output=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    if r.returncode == 3:
        pytest.skip("the compiler's standard library is not libstdc++")
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")


def test_same_permutations_as_std_sort(sort_check):
    cases, bad = map(int, sort_check[1].split())
    assert cases > 6000 and bad == 0


def test_seventeen_ties(sort_check):
    # 17 detections, only the first with a probability for the class sorted last (key 1, the rest 0).
    # Introsort: more than 16, so one partition first. The median of elements 1, 8 and 16 (all 0) is
    # element 8, moved to the front as the pivot; partitioning from both ends swaps 16<->1, 15<->2, ...,
    # 10<->7 and stops at position 9, the key-1 element 0 sitting at 8. The final insertion sort moves
    # element 0 to the front and leaves the ties as they are:
    #   0, 8, 16, 15, 14, 13, 12, 11, 10, 9, 7, 6, 5, 4, 3, 2, 1
    # where a stable sort (qsort's merge sort in glibc up to 2.36: AlexeyAB's Darknet) keeps 0, 1, ..., 16.
    # In `detector map` this decides which of two detections of one truth is collected first.
    assert [int(v) for v in sort_check[0].split()] == [0, 8, 16, 15, 14, 13, 12, 11, 10, 9, 7, 6, 5, 4, 3, 2, 1]
