// The training loader's cache of decoded images (data/image_cache.py): one region of shared memory that
// every loader worker (thread or process) maps, so that each file is decoded once per run instead of once
// per draw. Decoding was 0.66-0.70 ms of a 1.8-2.3 ms sample on the 16-core H100 host
// (benchmarks/RESULTS_GPU.md, "The loader alone"). The region: a header, a table of one entry per
// training image, then the pixels.
//
// Workers coordinate through atomics in the region (lock-free 64-bit atomics are address-free, so they
// work across processes that map the same memory): an image is stored by whoever decodes it first (its
// entry claimed with a compare-exchange, its bytes taken from the arena with another); the entry is marked
// ready only after the pixels are written (release), and read only after that mark is seen (acquire).
// Nobody ever waits on an entry: a worker that finds one being written decodes the file itself, so a
// worker that dies mid-write costs the others a decode, never a hang.
#pragma once
#include <cstdint>

namespace dn {

// Bytes of a region holding `entries` images in `capacity` bytes of pixels.
int64_t image_cache_region_bytes(int64_t entries, int64_t capacity);

// Lays out a region of image_cache_region_bytes(entries, capacity) bytes: header and table zeroed (every
// entry empty), the pixels left as they are.
void image_cache_init(void* region, int64_t entries, int64_t capacity);

// Whether `region` (of `size` bytes) was laid out by image_cache_init: its mark and sizes agree.
bool image_cache_valid(const void* region, int64_t size);
int64_t image_cache_entries(const void* region);

struct CachedImage {
    int64_t offset;              // of the first pixel, from the region's start
    int rows, cols, channels;    // channels 0: a 2-D (grey) image
};

// Image `index`, if stored (counted as a hit, else a miss).
bool image_cache_find(void* region, int64_t index, CachedImage* out);

// Stores image `index` (rows x cols x max(1, channels) bytes, rows contiguous, `pixels`) if no one has
// claimed it and the arena has room; false otherwise. An image that did not fit is not tried again.
bool image_cache_store(void* region, int64_t index, const uint8_t* pixels, int rows, int cols, int channels);

struct ImageCacheStats {
    int64_t entries;              // the images it has room to index
    int64_t capacity, used;       // arena bytes
    int64_t stored, hits, misses;  // images stored; finds that found one, that did not
};
ImageCacheStats image_cache_stats(const void* region);

}  // namespace dn
