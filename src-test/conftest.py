"""Shared pytest fixtures.

Tests that need the reference cfgs or the real yolov3-tiny weights take them from
``../shared`` (a sibling of the repository checkout).  When that directory is absent
(e.g. a bare clone in CI) those tests skip with a reason instead of failing.
"""
from pathlib import Path

import pytest

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
