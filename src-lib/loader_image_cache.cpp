#include "loader_image_cache.h"

#include <atomic>
#include <cstring>
#include <new>

namespace dn {
namespace {

static_assert(std::atomic<int64_t>::is_always_lock_free, "the cache's atomics must be lock-free to be shared");
static_assert(sizeof(std::atomic<int64_t>) == sizeof(int64_t), "the cache's layout needs plain-sized atomics");

constexpr uint64_t kMark = 0x3141434d49504e44ull;  // "DNPIMCA1": a darknet_py image cache
constexpr int64_t kAlign = 64;                     // table and every image start on a cache line

enum State : int64_t { kEmpty = 0, kWriting = 1, kReady = 2, kNoRoom = 3 };

struct Header {
    uint64_t mark;
    int64_t entries, capacity, arena;  // arena: offset of the pixels from the region's start
    std::atomic<int64_t> used, stored, hits, misses;
};

struct Entry {
    std::atomic<int64_t> state;
    int64_t offset;
    int32_t rows, cols, channels, unused;
};

int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
int64_t arena_offset(int64_t entries) { return aligned(aligned(sizeof(Header)) + entries * (int64_t)sizeof(Entry)); }

Header* header(void* region) { return static_cast<Header*>(region); }
const Header* header(const void* region) { return static_cast<const Header*>(region); }
Entry* entry(void* region, int64_t index) {
    return reinterpret_cast<Entry*>(static_cast<char*>(region) + aligned(sizeof(Header))) + index;
}

}  // namespace

int64_t image_cache_region_bytes(int64_t entries, int64_t capacity) { return arena_offset(entries) + capacity; }

void image_cache_init(void* region, int64_t entries, int64_t capacity) {
    std::memset(region, 0, (size_t)arena_offset(entries));  // the header and the table: every entry kEmpty
    Header* h = new (region) Header{};  // its atomics start at 0
    h->entries = entries;
    h->capacity = capacity;
    h->arena = arena_offset(entries);
    std::atomic_thread_fence(std::memory_order_release);
    h->mark = kMark;
}

bool image_cache_valid(const void* region, int64_t size) {
    if (size < (int64_t)sizeof(Header)) return false;
    const Header* h = header(region);
    return h->mark == kMark && h->entries >= 0 && h->capacity >= 0 && h->arena == arena_offset(h->entries) &&
           image_cache_region_bytes(h->entries, h->capacity) <= size;
}

int64_t image_cache_entries(const void* region) { return header(region)->entries; }

bool image_cache_find(void* region, int64_t index, CachedImage* out) {
    Entry* e = entry(region, index);
    if (e->state.load(std::memory_order_acquire) != kReady) {
        header(region)->misses.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    *out = {e->offset, e->rows, e->cols, e->channels};
    header(region)->hits.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool image_cache_store(void* region, int64_t index, const uint8_t* pixels, int rows, int cols, int channels) {
    Header* h = header(region);
    Entry* e = entry(region, index);
    int64_t expected = kEmpty;
    if (!e->state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) return false;
    const int64_t bytes = (int64_t)rows * cols * (channels > 0 ? channels : 1);
    int64_t used = h->used.load(std::memory_order_relaxed), end;
    do {
        end = used + aligned(bytes);
        if (end > h->capacity) {
            e->state.store(kNoRoom, std::memory_order_relaxed);
            return false;
        }
    } while (!h->used.compare_exchange_weak(used, end, std::memory_order_relaxed));
    e->offset = h->arena + used;
    e->rows = rows;
    e->cols = cols;
    e->channels = channels;
    std::memcpy(static_cast<char*>(region) + e->offset, pixels, (size_t)bytes);
    e->state.store(kReady, std::memory_order_release);
    h->stored.fetch_add(1, std::memory_order_relaxed);
    return true;
}

ImageCacheStats image_cache_stats(const void* region) {
    const Header* h = header(region);
    return {h->entries, h->capacity, h->used.load(), h->stored.load(), h->hits.load(), h->misses.load()};
}

}  // namespace dn
