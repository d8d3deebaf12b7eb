// The colour pass's HSV round trip (loader_pixels.cpp) in AVX2 intrinsics, 8 pixels in 32-bit lanes:
// the same integer and float operations, in the same order, as rgb_to_hsv, apply_column (its affine
// form) and hsv_to_rgb_rows there, so the same bits (src-test/test_loader_pixels.py runs every colour
// through each copy of the CPU kernels). Included by loader_pixels.cpp inside its instruction-set
// namespace (it uses that file's <immintrin.h> and deinterleave16), in the copies built with AVX2 and
// FMA (the AVX2 and AVX-512 ones).
//
// Why by hand, and in two stages: GCC vectorises those loops one by one (five passes over a row's int
// planes) or, written as one loop, keeps a pixel's whole chain in flight (two divisions, five
// multiplies, a dozen conversions: some 90 cycles from load to store), more than the core's scheduler
// holds for two blocks of 8. Two stages over a row, each a short chain, overlap their blocks: bytes ->
// jittered H, S, V planes, then H, S, V -> the R, G, B row. A 416x416 image on the 2-core AMD EPYC
// (one random image, output in cache): 0.45-0.47 ms in five loops, 0.43-0.45 as one, 0.33-0.39 here.
// What differs from the scalar form, each the same result for every input: the hue's sector is
// pre_sector - 6 when pre_sector > 5 (pre_sector <= 8 for a hue <= 255), the largest channel's level
// (int)(v * 255) is V itself, of the four candidate tabs only three are computed (the channel that is
// neither the largest, v, nor the smallest, v (1 - s), takes tab2 in odd sectors and tab3 in even
// ones, as OpenCV's table of sectors has it), and level / 255 is unit8's product and correction step.
#pragma once

namespace hsv_avx2 {

struct Jitter {  // the three affine columns, broadcast
    __m256i mul[3], add[3];
};

inline __m256i affine8(__m256i x, __m256i mul, __m256i add) {  // affine_level
    __m256i y = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(x, mul), add), 16);
    return _mm256_min_epi32(_mm256_max_epi32(y, _mm256_setzero_si256()), _mm256_set1_epi32(255));
}

// r, g, b levels -> OpenCV's 8-bit H, S, V (rgb_to_hsv), then each through its jitter column
inline void jittered_hsv8(__m256i r, __m256i g, __m256i b, const Jitter& j, int* h_out, int* s_out, int* v_out) {
    const __m256i one = _mm256_set1_epi32(1), round = _mm256_set1_epi32(1 << 11);
    const __m256 half = _mm256_set1_ps(0.5f);
    __m256i v = _mm256_max_epi32(_mm256_max_epi32(r, g), b);
    __m256i diff = _mm256_sub_epi32(v, _mm256_min_epi32(_mm256_min_epi32(r, g), b));
    __m256i sdiv = _mm256_cvttps_epi32(_mm256_add_ps(
        _mm256_div_ps(_mm256_set1_ps(1044480.f), _mm256_cvtepi32_ps(_mm256_max_epi32(v, one))), half));
    __m256i hdiv = _mm256_cvttps_epi32(_mm256_add_ps(
        _mm256_div_ps(_mm256_set1_ps(122880.f), _mm256_cvtepi32_ps(_mm256_max_epi32(diff, one))), half));
    __m256i s = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(diff, sdiv), round), 12);
    // hn: v == r ? g - b : (v == g ? b - r + 2 diff : r - g + 4 diff)
    __m256i d2 = _mm256_add_epi32(diff, diff);
    __m256i hn = _mm256_add_epi32(_mm256_sub_epi32(r, g), _mm256_add_epi32(d2, d2));
    hn = _mm256_blendv_epi8(hn, _mm256_add_epi32(_mm256_sub_epi32(b, r), d2), _mm256_cmpeq_epi32(v, g));
    hn = _mm256_blendv_epi8(hn, _mm256_sub_epi32(g, b), _mm256_cmpeq_epi32(v, r));
    __m256i h = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(hn, hdiv), round), 12);
    h = _mm256_add_epi32(h, _mm256_and_si256(_mm256_srai_epi32(h, 31), _mm256_set1_epi32(180)));
    _mm256_storeu_si256((__m256i*)h_out, affine8(h, j.mul[0], j.add[0]));
    _mm256_storeu_si256((__m256i*)s_out, affine8(s, j.mul[1], j.add[1]));
    _mm256_storeu_si256((__m256i*)v_out, affine8(v, j.mul[2], j.add[2]));
}

// x where bit `sector` of `set` is 1, else y (vblendvps reads each lane's sign bit: `set` shifted left
// by 31 - sector puts that bit there)
inline __m256i pick(int set, __m256i shift, __m256i x, __m256i y) {
    __m256 mask = _mm256_castsi256_ps(_mm256_sllv_epi32(_mm256_set1_epi32(set), shift));
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(y), _mm256_castsi256_ps(x), mask));
}

// H, S, V -> R, G, B levels (hsv_to_rgb_rows)
inline void rgb_levels8(const int* hue, const int* sat, const int* val, __m256i& r, __m256i& g, __m256i& b) {
    const __m256 one = _mm256_set1_ps(1.0f), inv255 = _mm256_set1_ps(1.0f / 255.0f), c255 = _mm256_set1_ps(255.0f);
    __m256i vi = _mm256_loadu_si256((const __m256i*)val);
    __m256 h = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i*)hue)), _mm256_set1_ps(6.0f / 180));
    __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i*)sat)), inv255);
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(vi), inv255);
    __m256i pre_sector = _mm256_cvttps_epi32(h);
    h = _mm256_sub_ps(h, _mm256_cvtepi32_ps(pre_sector));
    __m256i sector = _mm256_sub_epi32(
        pre_sector, _mm256_and_si256(_mm256_cmpgt_epi32(pre_sector, _mm256_set1_epi32(5)), _mm256_set1_epi32(6)));
    // tab2 = v (1 - s h) in odd sectors, tab3 = v (1 - s (1 - h)) in even ones
    __m256 f = _mm256_blendv_ps(_mm256_sub_ps(one, h), h, _mm256_castsi256_ps(_mm256_slli_epi32(sector, 31)));
    __m256i mid = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, f))), c255));
    __m256i lo = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(v, _mm256_sub_ps(one, s)), c255));
    // (int)(v * 255) is the level itself for every level: the largest channel is vi
    __m256i shift = _mm256_sub_epi32(_mm256_set1_epi32(31), sector);
    // per channel, the sectors (bit k: sector k) where it is the middle one, and where the smallest
    r = pick(0x0C, shift, lo, pick(0x12, shift, mid, vi));
    g = pick(0x30, shift, lo, pick(0x09, shift, mid, vi));
    b = pick(0x03, shift, lo, pick(0x24, shift, mid, vi));
}

// The first n - n % 16 pixels of a row of 3-channel bytes (BGR with bgr, read right to left with flip:
// split_row's order) -> their jittered H, S, V; returns how many were done.
inline int jittered_hsv_row(const uint8_t* src, int n, bool bgr, bool flip, const Jitter& j, int* h, int* s, int* v) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i c0, c1, c2;
        deinterleave16(src + 3 * (flip ? n - 16 - i : i), c0, c1, c2);
        if (flip) {
            const __m128i reverse = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            c0 = _mm_shuffle_epi8(c0, reverse), c1 = _mm_shuffle_epi8(c1, reverse), c2 = _mm_shuffle_epi8(c2, reverse);
        }
        const __m128i red = bgr ? c2 : c0, blue = bgr ? c0 : c2;
        jittered_hsv8(_mm256_cvtepu8_epi32(red), _mm256_cvtepu8_epi32(c1), _mm256_cvtepu8_epi32(blue), j, h + i, s + i,
                      v + i);
        jittered_hsv8(_mm256_cvtepu8_epi32(_mm_srli_si128(red, 8)), _mm256_cvtepu8_epi32(_mm_srli_si128(c1, 8)),
                      _mm256_cvtepu8_epi32(_mm_srli_si128(blue, 8)), j, h + i + 8, s + i + 8, v + i + 8);
    }
    return i;
}

// level / 255.0f, correctly rounded as the division is, without a division: the product by the float
// nearest 1 / 255, then one correction step whose remainder a fused multiply-add computes exactly
// (Markstein's; it gives the division's float for each of the 256 levels, test_loader_pixels.py). Three
// divisions per 8 pixels held the divider longer than the rest of this stage took.
inline __m256 unit8(__m256i level) {
    const __m256 x = _mm256_cvtepi32_ps(level), inv255 = _mm256_set1_ps(1.0f / 255.0f);
    const __m256 q = _mm256_mul_ps(x, inv255);
    return _mm256_fmadd_ps(_mm256_fnmadd_ps(q, _mm256_set1_ps(255.0f), x), inv255, q);
}

// The first n - n % 8 pixels' H, S, V -> R, G, B levels (int rows: a half row's levels, which
// levels_to_half_row rounds in a loop of its own) or those levels / 255 (float rows, as level_value
// divides); returns how many were done.
inline int rgb_row(const int* h, const int* s, const int* v, int n, int* r, int* g, int* b) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i R, G, B;
        rgb_levels8(h + i, s + i, v + i, R, G, B);
        _mm256_storeu_si256((__m256i*)(r + i), R), _mm256_storeu_si256((__m256i*)(g + i), G);
        _mm256_storeu_si256((__m256i*)(b + i), B);
    }
    return i;
}
inline int rgb_row(const int* h, const int* s, const int* v, int n, float* r, float* g, float* b) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i R, G, B;
        rgb_levels8(h + i, s + i, v + i, R, G, B);
        _mm256_storeu_ps(r + i, unit8(R)), _mm256_storeu_ps(g + i, unit8(G)), _mm256_storeu_ps(b + i, unit8(B));
    }
    return i;
}

}  // namespace hsv_avx2
