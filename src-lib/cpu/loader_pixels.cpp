// See loader_pixels.h. Compiled once per instruction set (isa.h), with -ffp-contract=off (OpenCV's
// HSV formulas multiply then add: a fused multiply-add in the AVX2 copy would change the bits; the two
// written out by hand, in level_value and loader_hsv_avx2.h's unit8, compute a division exactly) and
// -fno-trapping-math (GCC then turns the float selects below into vector blends; no FP exception
// flags are read): cmake/cpu_isa.cmake.
//
// The colour formulas are OpenCV's 8-bit ones (modules/imgproc/src/color_hsv.simd.hpp, RGB2HSV_b and
// HSV2RGB_b), written as plain loops over one row that the compiler vectorises: the row is first
// split into int planes (a stride-3 byte load does not vectorise: byte shuffles do it with AVX2 and
// NEON, split_row), the two division tables OpenCV
// looks up are computed by a float division instead (the same integers for every entry, no gather:
// src-test/test_loader_pixels.py runs 2^21 colours against cv2.cvtColor), and the jitter tables are
// applied as arithmetic where that reproduces them (JitterColumn). HSV -> RGB truncates to 8 bits as
// OpenCV's vector blocks do (its scalar tail for the last pixels of a row rounds instead, hence
// differences of at most one level there). In the AVX2 copies the jittered round trip of a colour row
// runs in intrinsics (loader_hsv_avx2.h), the same operations in two stages.
#include "loader_pixels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../half_convert.h"
#include "isa.h"

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace {

constexpr int kHsvShift = 12;  // OpenCV's fixed-point shift
constexpr int kHalf = 1 << (kHsvShift - 1);

#if defined(__AVX2__)
// 16 interleaved 3-byte pixels (48 bytes, loaded as three 16-byte registers) -> their three channels,
// 16 bytes each: each channel gathers its bytes from the three registers with one byte shuffle per
// register (-1: a zero byte) and ORs the three together
inline void deinterleave16(const uint8_t* src, __m128i& c0, __m128i& c1, __m128i& c2) {
    const __m128i a = _mm_loadu_si128((const __m128i*)src), b = _mm_loadu_si128((const __m128i*)(src + 16)),
                  c = _mm_loadu_si128((const __m128i*)(src + 32));
    c0 = _mm_or_si128(_mm_or_si128(
             _mm_shuffle_epi8(a, _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)),
             _mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1))),
             _mm_shuffle_epi8(c, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13)));
    c1 = _mm_or_si128(_mm_or_si128(
             _mm_shuffle_epi8(a, _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)),
             _mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1))),
             _mm_shuffle_epi8(c, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14)));
    c2 = _mm_or_si128(_mm_or_si128(
             _mm_shuffle_epi8(a, _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)),
             _mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1))),
             _mm_shuffle_epi8(c, _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15)));
}

// 16 bytes (in reverse order with flip) -> 16 ints at out
inline void widen16(__m128i v, bool flip, int* out) {
    if (flip) v = _mm_shuffle_epi8(v, _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    _mm256_storeu_si256((__m256i*)out, _mm256_cvtepu8_epi32(v));
    _mm256_storeu_si256((__m256i*)(out + 8), _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
}
#endif

// One row of 3-channel pixels -> int planes r, g, b; flip: read right to left (the horizontal flip, free
// here: every later step works pixel by pixel). A stride-3 load does not vectorise, and one by one this
// step was a quarter of the pass: with AVX2 (the AVX2 and AVX-512 copies) and NEON it goes in blocks of
// 16 pixels (AVX2 copy on a 2-core AMD EPYC: the pass 0.59-0.62 ms instead of 0.73-0.91 at 416x416),
// the rest of the row, and the baseline copies, one by one.
void split_row(const uint8_t* src, int n, bool bgr, bool flip, int* r, int* g, int* b) {
    int ri = bgr ? 2 : 0, bi = 2 - ri;
    int i = 0;
#if defined(__AVX2__) || defined(__ARM_NEON)
    int* planes[3] = {bgr ? b : r, g, bgr ? r : b};  // the int plane of each source channel
    for (; i + 16 <= n; i += 16) {
        const uint8_t* block = src + 3 * (flip ? n - 16 - i : i);  // output pixels i.. are source n-1-i.. flipped
#if defined(__AVX2__)
        __m128i c0, c1, c2;
        deinterleave16(block, c0, c1, c2);
        widen16(c0, flip, planes[0] + i), widen16(c1, flip, planes[1] + i), widen16(c2, flip, planes[2] + i);
#else
        uint8x16x3_t c = vld3q_u8(block);
        for (int k = 0; k < 3; ++k) {
            uint8x16_t v = c.val[k];
            if (flip) v = vrev64q_u8(vextq_u8(v, v, 8));
            uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_u8(vget_high_u8(v));
            int* out = planes[k] + i;
            vst1q_s32(out, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(lo))));
            vst1q_s32(out + 4, vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(lo))));
            vst1q_s32(out + 8, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(hi))));
            vst1q_s32(out + 12, vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(hi))));
        }
#endif
    }
#endif
    if (flip)
        for (; i < n; ++i) {
            const uint8_t* px = src + 3 * (n - 1 - i);
            r[i] = px[ri], g[i] = px[1], b[i] = px[bi];
        }
    else
        for (; i < n; ++i) r[i] = src[3 * i + ri], g[i] = src[3 * i + 1], b[i] = src[3 * i + bi];
}

// r, g, b -> OpenCV's 8-bit H (0..180), S, V, in place (r becomes H, g S, b V).
void rgb_to_hsv(int n, int* __restrict r_h, int* __restrict g_s, int* __restrict b_v) {
    for (int i = 0; i < n; ++i) {
        int r = r_h[i], g = g_s[i], b = b_v[i];
        int v = std::max(b, std::max(g, r));
        int diff = v - std::min(b, std::min(g, r));
        // sdiv_table[v] = round((255 << 12) / v), hdiv_table180[diff] = round((180 << 12) / (6 diff));
        // v = 0 or diff = 0 makes s or h 0 whatever the divisor, so 1 stands in for 0
        int sdiv = (int)(1044480.f / (float)std::max(v, 1) + 0.5f);
        int hdiv = (int)(122880.f / (float)std::max(diff, 1) + 0.5f);
        int s = (diff * sdiv + kHalf) >> kHsvShift;
        int hn = v == r ? g - b : (v == g ? b - r + 2 * diff : r - g + 4 * diff);
        int h = (hn * hdiv + kHalf) >> kHsvShift;  // arithmetic shift, as OpenCV's on a negative h
        r_h[i] = h + (h < 0 ? 180 : 0), g_s[i] = s, b_v[i] = v;
    }
}

// One column of the jitter tables (a level x -> its new level), as the pass applies it: the tables
// augment._hsv_lut writes are clamp(rint(x + 179 dhue)) and clamp(rint(x * d)), which are
// clamp((x * mul + add) >> 16) for some integers mul, add: that form vectorises, where a byte lookup
// per pixel and channel was the pass's slowest step (three dependent loads and stores a pixel; an AVX2
// gather was slower still on an AMD EPYC). The form is found from the table itself and checked
// against all 256 entries; a table it does not reproduce (a product within 2^-16 of a half level)
// is looked up entry by entry, so the result is the table's in every case.
struct JitterColumn {
    int table[256];
    bool affine = false;
    int mul = 0, add = 0;
};

constexpr int kAffineShift = 16;

inline int affine_level(int x, int mul, int add) { return std::min(std::max((x * mul + add) >> kAffineShift, 0), 255); }

// column: 0 hue (an offset: mul = 1 << 16), 1 saturation, 2 value (a factor: add = half a level)
void set_column(JitterColumn& c, const uint8_t* tables, int column) {
    for (int x = 0; x < 256; ++x) c.table[x] = tables[3 * x + column];
    const int64_t one = 1 << kAffineShift, half = one / 2;
    if (column == 0) {
        int x0 = 0;  // an unclamped entry gives the offset (none: every level clamps to 0 or 255)
        while (x0 < 255 && (c.table[x0] == 0 || c.table[x0] == 255)) ++x0;
        c.mul = (int)one, c.add = (int)((c.table[x0] - x0) * one + half);
    } else {  // the factor's range: t * 2^16 <= x * mul + half < (t + 1) * 2^16 for each x (t = 255: >= only)
        int64_t lo = 0, hi = 255 * one;
        for (int64_t x = 1; x < 256; ++x) {
            int64_t t = c.table[x];
            lo = std::max(lo, (t * one - half + x - 1) / x);  // the ceiling; negative (t = 0): no bound
            if (t < 255) hi = std::min(hi, ((t + 1) * one - half - 1) / x);
        }
        c.mul = (int)std::max<int64_t>(lo, 0), c.add = (int)half;
        if (lo > hi || (int64_t)c.mul * 255 + half >= ((int64_t)1 << 31)) return;  // no such factor in 32 bits
    }
    c.affine = true;
    for (int x = 0; x < 256 && c.affine; ++x) c.affine = affine_level(x, c.mul, c.add) == c.table[x];
}

// x[i] = its new level through column c
void apply_column(const JitterColumn& c, int* __restrict x, int n) {
    if (c.affine)
        for (int i = 0; i < n; ++i) x[i] = affine_level(x[i], c.mul, c.add);
    else
        for (int i = 0; i < n; ++i) x[i] = c.table[x[i]];
}

// What a level (0..255) becomes in a batch row: level / 255 (as Darknet's mat_to_image and
// augment.to_chw divide), or the level itself (int: a half row rounds level / 255 afterwards,
// levels_to_half_row).
template <class T>
inline T level_value(int level);
template <>
inline float level_value<float>(int level) {
#if defined(__FMA__)  // the same float without a division (loader_hsv_avx2.h's unit8: Markstein's step)
    const float x = (float)level, q = x * (1.0f / 255.0f);
    return std::fma(std::fma(-q, 255.0f, x), 1.0f / 255.0f, q);
#else
    return (float)level / 255.0f;
#endif
}
template <>
inline int level_value<int>(int level) { return level; }

// 8-bit H (above 179 wraps round the circle), S, V -> the R, G, B rows of the batch: OpenCV's
// HSV2RGB_simd on h, s / 255, v / 255, times 255 truncated to a level, then level_value (/ 255).
template <class T>
void hsv_to_rgb_rows(const int* __restrict hue, const int* __restrict sat, const int* __restrict val, int n,
                     T* __restrict r_out, T* __restrict g_out, T* __restrict b_out) {
    const float hscale = 6.0f / 180;
    for (int i = 0; i < n; ++i) {
        float h = (float)hue[i] * hscale;
        float s = (float)sat[i] * (1.0f / 255.0f), v = (float)val[i] * (1.0f / 255.0f);
        int pre_sector = (int)h;
        h -= (float)pre_sector;
        float tab0 = v, tab1 = v * (1.0f - s), tab2 = v * (1.0f - s * h), tab3 = v * (1.0f - s * (1.0f - h));
        // OpenCV's sector (pre_sector - trunc(pre_sector / 6) * 6, in floats: the same integer) picks
        // the tabs: one select after another, last match first (GCC makes each a vector blend with
        // -fno-trapping-math; nested ?: stay branches and the loop scalar)
        int sector = pre_sector - (int)((float)pre_sector * (1.0f / 6.0f)) * 6;
        float b = tab2, g = tab1, r = tab3;
        b = sector < 5 ? tab0 : b, b = sector == 2 ? tab3 : b, b = sector < 2 ? tab1 : b;
        g = sector == 3 ? tab2 : g, g = sector < 3 ? tab0 : g, g = sector < 1 ? tab3 : g;
        r = sector < 4 ? tab1 : r, r = sector == 1 ? tab2 : r, r = sector < 1 ? tab0 : r, r = sector > 4 ? tab0 : r;
        r_out[i] = level_value<T>((int)(r * 255.0f));
        g_out[i] = level_value<T>((int)(g * 255.0f));
        b_out[i] = level_value<T>((int)(b * 255.0f));
    }
}

// Levels -> [0, 1], as Darknet's mat_to_image (and augment.to_chw) divide.
void levels_to_row(const int* __restrict levels, int n, float* __restrict out) {
    for (int i = 0; i < n; ++i) out[i] = level_value<float>(levels[i]);
}

// Levels -> the half bits of level / 255: the float levels_to_row writes, rounded by half_convert's own
// steps (inline there, so this loop vectorises: a 256-entry table looked up per value cost 0.45 ms an
// image, as much as the rest of the pass). Every nonzero level / 255 (at least 1/255) is a normal fp16.
void levels_to_half_row(const int* __restrict levels, int n, bool bf16, uint16_t* __restrict out) {
    for (int i = 0; i < n; ++i) {
        float v = level_value<float>(levels[i]);
        uint32_t u;
        std::memcpy(&u, &v, 4);
        out[i] = bf16 ? bf16_bits_not_nan(u) : (u == 0 ? (uint16_t)0 : f16_bits_normal(u));
    }
}

#if defined(__AVX2__) && defined(__FMA__)
#include "loader_hsv_avx2.h"
#endif

}  // namespace

void cpu_pixels_into_batch(const PixelsIntoBatch& p) {
    const int w = p.w;
    const bool half = p.dst_type != DType::f32;
    // one row as three int planes (the source levels, then H, S, V), and three more for its R, G, B
    // levels where they are not written straight into a float row
    std::vector<int> buffer(6 * (size_t)w);
    int *p0 = buffer.data(), *p1 = p0 + w, *p2 = p1 + w;
    JitterColumn hue, sat, val;
    if (p.tables) set_column(hue, p.tables, 0), set_column(sat, p.tables, 1), set_column(val, p.tables, 2);
#if defined(__AVX2__) && defined(__FMA__)
    const bool vectors = p.tables && p.channels == 3 && hue.affine && sat.affine && val.affine;
    hsv_avx2::Jitter jitter;
    const JitterColumn* columns[3] = {&hue, &sat, &val};
    for (int c = 0; c < 3; ++c)
        jitter.mul[c] = _mm256_set1_epi32(columns[c]->mul), jitter.add[c] = _mm256_set1_epi32(columns[c]->add);
#endif
    // element offset of row y of plane c in dst
    auto at = [&](int y, int c) { return y * p.dst_row_stride + c * p.dst_plane_stride; };
    auto store = [&](const int* levels, int y, int c, int x0 = 0) {  // levels of pixels x0.. of a row into dst
        if (half)
            levels_to_half_row(levels, w - x0, p.dst_type == DType::bf16, (uint16_t*)p.dst + at(y, c) + x0);
        else
            levels_to_row(levels, w - x0, (float*)p.dst + at(y, c) + x0);
    };
    for (int y = 0; y < p.h; ++y) {
        const uint8_t* row = p.src + y * p.src_row_stride;
        if (p.channels == 1) {  // grey: only the value column applies (as cv2.LUT on the one plane)
            for (int i = 0; i < w; ++i) p0[i] = row[p.flip ? w - 1 - i : i];
            if (p.tables) apply_column(val, p0, w);
            store(p0, y, 0);
            continue;
        }
#if defined(__AVX2__) && defined(__FMA__)
        if (vectors) {  // loader_hsv_avx2.h, the pixels past its blocks as below
            int done = hsv_avx2::jittered_hsv_row(row, w, p.bgr, p.flip, jitter, p0, p1, p2);
            if (done < w) {  // split_row's pixel i reads source pixel w - 1 - i when flipped
                split_row(row + 3 * (p.flip ? 0 : done), w - done, p.bgr, p.flip, p0 + done, p1 + done, p2 + done);
                rgb_to_hsv(w - done, p0 + done, p1 + done, p2 + done);
                apply_column(hue, p0 + done, w - done), apply_column(sat, p1 + done, w - done);
                apply_column(val, p2 + done, w - done);
            }
            int *r = p2 + w, *g = r + w, *b = g + w;
            if (half) {  // the levels, then their halves in a loop of its own
                done = hsv_avx2::rgb_row(p0, p1, p2, w, r, g, b);
                hsv_to_rgb_rows(p0 + done, p1 + done, p2 + done, w - done, r + done, g + done, b + done);
                store(r, y, 0), store(g, y, 1), store(b, y, 2);
            } else {  // straight into the float rows, the last w % 8 pixels through the int planes
                float* row_r = (float*)p.dst + at(y, 0);
                done = hsv_avx2::rgb_row(p0, p1, p2, w, row_r, row_r + p.dst_plane_stride, row_r + 2 * p.dst_plane_stride);
                hsv_to_rgb_rows(p0 + done, p1 + done, p2 + done, w - done, r, g, b);
                store(r, y, 0, done), store(g, y, 1, done), store(b, y, 2, done);
            }
            continue;
        }
#endif
        split_row(row, w, p.bgr, p.flip, p0, p1, p2);
        if (!p.tables) {
            store(p0, y, 0), store(p1, y, 1), store(p2, y, 2);
            continue;
        }
        rgb_to_hsv(w, p0, p1, p2);
        apply_column(hue, p0, w), apply_column(sat, p1, w), apply_column(val, p2, w);
        if (half) {
            int *r = p2 + w, *g = r + w, *b = g + w;
            hsv_to_rgb_rows(p0, p1, p2, w, r, g, b);
            store(r, y, 0), store(g, y, 1), store(b, y, 2);
        } else {
            float* r = (float*)p.dst + at(y, 0);
            hsv_to_rgb_rows(p0, p1, p2, w, r, r + p.dst_plane_stride, r + 2 * p.dst_plane_stride);
        }
    }
}

}  // namespace DARKNET_ISA
}  // namespace dn
