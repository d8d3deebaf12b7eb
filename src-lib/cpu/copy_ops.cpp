#include "copy_ops.h"

#include <algorithm>
#include <cstring>

#include "thread_pool.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace cpu {

namespace {

// The least floats a thread of a parallel copy gets: 64 KB. A copy of about this much takes a few
// microseconds, about what handing work to another thread costs, so smaller ones stay on the caller.
constexpr size_t kCopyGrain = 16384;

// Output planes per pool task of the upsample: enough that a task writes ~64 KB.
size_t planes_per_task(size_t plane) { return std::max<size_t>(1, kCopyGrain / std::max<size_t>(plane, 1)); }

// One output row of a stride-2 upsample: dst[2j] = dst[2j + 1] = scale * src[j]. A loop of its own
// (constant stride) so that the compiler turns it into vector loads and interleaving shuffles.
void widen_row_2(const float* src, int w, float scale, float* dst) {
    for (int j = 0; j < w; ++j) {
        float v = scale * src[j];
        dst[2 * j] = v;
        dst[2 * j + 1] = v;
    }
}

void widen_row(const float* src, int w, int stride, float scale, float* dst) {
    for (int j = 0; j < w; ++j) {
        float v = scale * src[j];
        for (int s = 0; s < stride; ++s) dst[j * stride + s] = v;
    }
}

}  // namespace

void copy_blocks(const float* src, size_t src_stride, float* dst, size_t dst_stride, size_t block, size_t samples) {
    const size_t total = block * samples;
    // [b, e) of the floats of all blocks laid end to end, split where a block ends
    auto copy = [&](size_t b, size_t e) {
        while (b < e) {
            size_t n = b / block, off = b % block, len = std::min(e - b, block - off);
            std::memcpy(dst + n * dst_stride + off, src + n * src_stride + off, len * sizeof(float));
            b += len;
        }
    };
    // One contiguous range per thread. Handing out many smaller pieces (the pool's usual few per
    // thread) was slower than a single thread for copies over ~1 MB in yolov4-tiny (ranges of
    // 170 KB taken turn about by the two threads; measured, cause not pinned down), while whole
    // halves copy 1.7-1.9x faster than one thread.
    size_t parts = std::min<size_t>((size_t)ThreadPool::instance().threads(), total / kCopyGrain);
    if (parts <= 1) return copy(0, total);
    ThreadPool::instance().parallel_for(parts, [&](size_t p0, size_t p1) {
        copy(total * p0 / parts, total * p1 / parts);
    });
}

// Each input row is widened once into the first of its `stride` output rows, which is then copied
// to the others (the general loop's division per output float made it 4x slower than this).
void upsample_nearest(const Tensor& x, int stride, float scale, Tensor& y) {
    const Shape &xs = x.shape(), &ys = y.shape();
    const size_t planes = (size_t)ys.n * ys.c;
    auto run = [&](size_t p0, size_t p1) {
        for (size_t nc = p0; nc < p1; ++nc) {
            const float* src = x.data() + nc * xs.plane();
            float* dst = y.data() + nc * ys.plane();
            for (int i = 0; i < xs.h; ++i) {
                float* first = dst + (size_t)i * stride * ys.w;
                if (stride == 2) widen_row_2(src + (size_t)i * xs.w, xs.w, scale, first);
                else widen_row(src + (size_t)i * xs.w, xs.w, stride, scale, first);
                for (int s = 1; s < stride; ++s) std::memcpy(first + (size_t)s * ys.w, first, ys.w * sizeof(float));
            }
        }
    };
    // parallel_for runs it on the caller when it is one task's worth
    ThreadPool::instance().parallel_for(planes, run, planes_per_task(ys.plane()));
}

}  // namespace cpu
}  // namespace DARKNET_ISA
}  // namespace dn
