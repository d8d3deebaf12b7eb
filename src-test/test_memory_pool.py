"""The CUDA device's caching allocator (src-cuda/memory_pool.cpp), over host memory: it is plain C++,
so its rules are tested on every machine (the CUDA tests check the steady state on a GPU)."""
from darknet_py import _core

MiB = 1 << 20


def test_size_classes():
    assert _core.HostMemoryPool.rounded(1) == 512
    assert _core.HostMemoryPool.rounded(513) == 1024
    assert _core.HostMemoryPool.rounded(MiB - 1) == MiB
    assert _core.HostMemoryPool.rounded(MiB + 1) == 2 * MiB  # 2 MiB steps from 1 MiB on
    assert _core.HostMemoryPool.rounded(5 * MiB) == 6 * MiB


def test_a_freed_block_is_handed_out_again_without_a_new_allocation():
    pool = _core.HostMemoryPool(64 * MiB)
    a = pool.take(3 * MiB)
    pool.give(a)
    assert pool.take(3 * MiB - 100) == a  # same size class: the cached block
    assert pool.raw_allocated == 4 * MiB
    s = pool.stats()
    assert (s["in_use"], s["reserved"], s["peak_reserved"]) == (4 * MiB, 4 * MiB, 4 * MiB)


def test_a_small_request_does_not_take_a_much_larger_cached_block():
    pool = _core.HostMemoryPool(64 * MiB)
    big = pool.take(16 * MiB)
    pool.give(big)
    small = pool.take(MiB - 1)
    assert small != big and pool.raw_allocated == 17 * MiB
    assert pool.take(14 * MiB) == big  # within a quarter of the block's size: reused


def test_out_of_memory_gives_the_cache_back_and_retries():
    pool = _core.HostMemoryPool(10 * MiB)
    a = pool.take(8 * MiB)
    pool.give(a)
    b = pool.take(4 * MiB)  # 8 MiB cached is too wasteful for 4, and 8 + 4 > 10: release, then allocate
    assert b != 0 and pool.raw_allocated == 4 * MiB
    assert pool.take(8 * MiB) == 0  # truly out of memory: 0, and nothing leaked
    assert pool.stats()["in_use"] == 4 * MiB
    assert pool.stats()["peak_reserved"] == 8 * MiB


def test_giving_back_twice_or_a_foreign_pointer_is_harmless():
    pool = _core.HostMemoryPool(8 * MiB)
    a = pool.take(1000)
    pool.give(a)
    pool.give(a)
    pool.give(12345)
    assert pool.stats()["in_use"] == 0
    pool.release_cached()
    assert pool.raw_allocated == 0 and pool.stats()["reserved"] == 0


def test_a_released_block_goes_back_to_the_device_not_the_cache():
    pool = _core.HostMemoryPool(64 * MiB)
    a, b = pool.take(4 * MiB), pool.take(MiB - 1)  # rounded: 4 MiB and 1 MiB
    pool.release(a)
    pool.release(a)  # twice: harmless
    assert pool.raw_allocated == MiB
    s = pool.stats()
    assert (s["in_use"], s["reserved"], s["peak_reserved"]) == (MiB, MiB, 5 * MiB)
    assert pool.take(4 * MiB) not in (0, b) and pool.raw_allocated == 5 * MiB  # a new allocation
