// A caching allocator over raw device allocations (after PyTorch's): a freed block is kept and
// handed out again for a request of about its size, so a steady-state forward or training iteration
// never calls cudaMalloc/cudaFree (both synchronize the whole device) and buffers keep their
// addresses (which CUDA graphs rely on). Plain C++ over two callbacks, so it is unit-tested without
// a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>

namespace dn {

struct MemoryStats {
    uint64_t in_use = 0;         // bytes handed out now (rounded sizes)
    uint64_t reserved = 0;       // bytes allocated from the device now (in use + cached)
    uint64_t peak_in_use = 0;
    uint64_t peak_reserved = 0;  // what the device had to provide at most: compare with PyTorch's
                                 // max_memory_reserved
};

class MemoryPool {
public:
    using RawAlloc = std::function<void*(size_t bytes)>;  // null when the device is out of memory
    using RawFree = std::function<void(void* p)>;
    MemoryPool(RawAlloc alloc, RawFree free) : raw_alloc_(std::move(alloc)), raw_free_(std::move(free)) {}
    ~MemoryPool() { release_cached(); }
    MemoryPool(const MemoryPool&) = delete;
    MemoryPool& operator=(const MemoryPool&) = delete;

    // A block of at least `bytes`; null when the device is out of memory even after the cache was
    // given back to it.
    void* take(size_t bytes);
    // Returns a block from take() to the cache.
    void give(void* p);
    // Returns a block from take() to the device, not the cache: for a block that will not be asked
    // for again (an outgrown workspace), which the cache would otherwise keep reserved.
    void release(void* p);
    // Gives every cached block back to the device.
    void release_cached();
    const MemoryStats& stats() const { return stats_; }

    // The size class of a request: 512-byte steps below 1 MiB, 2 MiB steps above (large blocks are
    // few, so rounding them costs little and lets a slightly smaller request reuse them).
    static size_t rounded(size_t bytes);

private:
    RawAlloc raw_alloc_;
    RawFree raw_free_;
    std::multimap<size_t, void*> cached_;        // size -> free block
    std::unordered_map<void*, size_t> in_use_;   // block -> size
    MemoryStats stats_;
};

}  // namespace dn
