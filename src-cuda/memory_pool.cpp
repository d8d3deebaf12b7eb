#include "memory_pool.h"

#include <algorithm>

namespace dn {

size_t MemoryPool::rounded(size_t bytes) {
    const size_t small = 512, large = 2u << 20;
    if (bytes == 0) bytes = 1;
    size_t step = bytes < (1u << 20) ? small : large;
    return (bytes + step - 1) / step * step;
}

void* MemoryPool::take(size_t bytes) {
    size_t size = rounded(bytes);
    // The smallest cached block that fits, unless it would waste more than a quarter of itself (a
    // small request must not pin a huge block that a later large request needs).
    auto it = cached_.lower_bound(size);
    void* p = nullptr;
    if (it != cached_.end() && it->first - size <= it->first / 4) {
        size = it->first;
        p = it->second;
        cached_.erase(it);
    } else {
        p = raw_alloc_(size);
        if (!p && !cached_.empty()) {  // out of memory: give the cache back and try once more
            release_cached();
            p = raw_alloc_(size);
        }
        if (!p) return nullptr;
        stats_.reserved += size;
        stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    }
    in_use_[p] = size;
    stats_.in_use += size;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    return p;
}

void MemoryPool::give(void* p) {
    auto it = in_use_.find(p);
    if (it == in_use_.end()) return;  // not ours (or given twice): nothing to do
    stats_.in_use -= it->second;
    cached_.emplace(it->second, p);
    in_use_.erase(it);
}

void MemoryPool::release(void* p) {
    auto it = in_use_.find(p);
    if (it == in_use_.end()) return;
    stats_.in_use -= it->second;
    stats_.reserved -= it->second;
    in_use_.erase(it);
    raw_free_(p);
}

void MemoryPool::release_cached() {
    for (auto& [size, p] : cached_) {
        raw_free_(p);
        stats_.reserved -= size;
    }
    cached_.clear();
}

}  // namespace dn
