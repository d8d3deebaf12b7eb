"""The fake Metal device as `darknet_py selftest --opener fake_metal_opener:open_fake_metal` makes it, in
the selftest's own process and in each child that judges a fast path (test-only)."""
import os

from darknet_py import _core


def open_fake_metal():
    """MetalDevice over FakeMetalApi, its MPS paths chosen from the environment as the real device's."""
    return _core.fake_metal_device(mps_env=os.environ.get("DARKNET_PY_MPS"))
