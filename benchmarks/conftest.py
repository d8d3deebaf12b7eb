"""pytest-benchmark suite (`pytest benchmarks/`; not part of the README's test command).

Threads: DARKNET_PY_BENCH_THREADS (default: every usable core), for our engine and OpenCV alike.
Figures that are not timings (peak memory, frames or images per second) are added to each
benchmark's extra_info (saved with --benchmark-json) and printed at the end of the run.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bc  # noqa: E402

try:
    import pytest_benchmark  # noqa: F401

    HAVE_BENCHMARK = True
except ImportError:
    HAVE_BENCHMARK = False

_REPORT: List[str] = []


def report(line: str) -> None:
    """A line for the end-of-run summary."""
    _REPORT.append(line)


def pytest_terminal_summary(terminalreporter):
    if _REPORT:
        terminalreporter.section("darknet_py benchmark figures")
        for line in _REPORT:
            terminalreporter.write_line(line)


if not HAVE_BENCHMARK:
    @pytest.fixture
    def benchmark():
        pytest.skip("pytest-benchmark is not installed: pip install pytest-benchmark (or .[bench])")


@pytest.fixture(scope="session")
def threads() -> int:
    n = int(os.environ.get("DARKNET_PY_BENCH_THREADS", bc.usable_cpus()))
    bc.set_threads(n)
    return n


@pytest.fixture(scope="session")
def workdir():
    with tempfile.TemporaryDirectory(prefix="darknet_py-bench-") as d:
        yield d


@pytest.fixture(scope="session")
def random_models(workdir, threads):
    """name -> (Network, cfg, weights) with seeded random weights, built once per session."""
    cache: Dict[str, Tuple] = {}

    def get(model: bc.Model):
        if model.name not in cache:
            cache[model.name] = bc.random_model(model, workdir)
        return cache[model.name]

    return get


@pytest.fixture(autouse=True)
def _timings_wanted(request):
    # these tests exist to report timings; with --benchmark-disable there are none to report
    if request.config.getoption("benchmark_disable", default=False):
        pytest.skip("--benchmark-disable: the benchmark suite has nothing to measure")
