"""Shared pytest fixtures.

Tests that need the reference cfgs or the real yolov3-tiny weights take them from
``../shared`` (a sibling of the repository checkout).  When that directory is absent
(e.g. a bare clone in CI) those tests skip with a reason instead of failing.
"""
import os
import tempfile
from pathlib import Path

import pytest

# Oclgrind (the OpenCL simulator the GPU backend's tests use) checks every kernel for data races
# and out-of-bounds accesses and writes what it finds to this log; set before the engine opens the
# device. A report fails the session (pytest_sessionfinish below).
OCLGRIND_LOG = Path(tempfile.gettempdir()) / f"darknet_py-oclgrind-{os.getpid()}.log"
os.environ["OCLGRIND_LOG"] = str(OCLGRIND_LOG)
os.environ.setdefault("OCLGRIND_DATA_RACES", "1")


def oclgrind_reports() -> str:
    return OCLGRIND_LOG.read_text(errors="replace") if OCLGRIND_LOG.is_file() else ""


def pytest_sessionfinish(session, exitstatus):
    reports = oclgrind_reports()
    OCLGRIND_LOG.unlink(missing_ok=True)
    if reports.strip():
        print(f"\nOclgrind found errors in the kernels (data races or out-of-bounds accesses):\n{reports[:20000]}")
        session.exitstatus = 1

# Path(__file__) = <repo>/src-test/conftest.py -> parents[1] = <repo>; shared sits beside it.
_SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not _SHARED.is_dir():
        pytest.skip(f"../shared is absent: {_SHARED} not found (reference cfgs and weights live there)")
    return _SHARED


@pytest.fixture(scope="session")
def shared_cfg_dir(shared_dir) -> Path:
    d = shared_dir / "cfg"
    if not d.is_dir():
        pytest.skip(f"../shared is absent: {d} not found")
    return d


@pytest.fixture(scope="session")
def yolov3_tiny(shared_dir) -> dict:
    m = shared_dir / "models"
    paths = {"cfg": m / "yolov3-tiny.cfg", "weights": m / "yolov3-tiny.weights",
             "names": m / "coco.names"}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        pytest.skip(f"../shared is absent: missing {', '.join(missing)}")
    return paths
