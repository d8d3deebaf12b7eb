// Vector types and helpers of the CPU backend, written with GCC/Clang vector extensions so one
// source compiles to AVX-512, AVX2/FMA or NEON (the build uses -march=native / -mcpu=native).
// Also the vectorised activations that the GEMM epilogue applies to a register tile.
#pragma once
#include "isa.h"
#include <cstring>
#include <utility>

#include "../activation.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace simd {

// VW floats per vector register. MR x NR is the GEMM register tile: MR rows of C (broadcast from
// packed A) by NV vectors of columns (loaded from packed B), MR*NV accumulators kept in registers:
// AVX-512 has 32 registers (8 x 3 = 24 accumulators + 3 B vectors + 1 broadcast), AVX2 16
// (6 x 2 = 12 + 2 + 1). 8 rows match the channel counts of conv layers (multiples of 8) exactly.
#if defined(__AVX512F__)
constexpr int VW = 16, MR = 8, NV = 3;
#elif defined(__AVX__) || defined(__ARM_NEON) || defined(__aarch64__)
constexpr int VW = 8, MR = 6, NV = 2;
#else
constexpr int VW = 8, MR = 6, NV = 2;
#endif
constexpr int NR = VW * NV;

// aligned(4): a vec may sit at any float address (loads and stores through vec* are unaligned
// moves); may_alias: it may be read from and written to float arrays. Loads are not written as
// memcpy: for 32-byte vectors GCC splits such a memcpy into 16-byte halves through the stack
// (a store-forwarding stall every iteration of the GEMM loop, 7x slower with AVX2).
typedef float vec __attribute__((vector_size(VW * 4), aligned(4), may_alias));
typedef int ivec __attribute__((vector_size(VW * 4), aligned(4), may_alias));

inline vec splat(float x) { return vec{} + x; }
inline vec load(const float* p) { return *reinterpret_cast<const vec*>(p); }
inline void store(float* p, vec v) { *reinterpret_cast<vec*>(p) = v; }
// First n (0 < n <= VW) lanes; the rest are zero.
inline vec load_n(const float* p, int n) {
    if (n == VW) return load(p);
    vec v{};
    std::memcpy(&v, p, (size_t)n * 4);
    return v;
}
inline void store_n(float* p, vec v, int n) {
    if (n == VW) return store(p, v);
    std::memcpy(p, &v, (size_t)n * 4);
}

// Lane permutations of two vectors, a's lanes numbered 0..VW-1 and b's VW..2VW-1: lane l of the
// result is lane Pick::lane(l). The indices are compile-time constants because that is what the
// portable builtin takes: __builtin_shufflevector is clang's and GCC's (12+); older GCC has only
// __builtin_shuffle, which takes the indices as a vector.
template <class Pick, size_t... L>
inline vec shuffle_lanes(vec a, vec b, std::index_sequence<L...>) {
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
    return __builtin_shufflevector(a, b, Pick::lane(L)...);
#else
    return __builtin_shuffle(a, b, ivec{Pick::lane(L)...});
#endif
}
template <class Pick>
inline vec shuffle(vec a, vec b) { return shuffle_lanes<Pick>(a, b, std::make_index_sequence<VW>{}); }

// The even lanes of a then b: a0 a2 ... b0 b2 ... (every second float of 2 VW consecutive ones).
struct EvenLanes {
    static constexpr int lane(int l) { return 2 * l; }
};
inline vec even_lanes(vec a, vec b) { return shuffle<EvenLanes>(a, b); }

// v[l] = base[idx[l]]
inline vec gather(const float* base, const int* idx) {
#if defined(__AVX512F__)
    return (vec)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), (__mmask16)0xFFFF, _mm512_loadu_si512(idx), base, 4);
#elif defined(__AVX2__)
    return (vec)_mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, _mm256_loadu_si256((const __m256i*)idx),
                                         _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4);
#else
    vec v;
    for (int l = 0; l < VW; ++l) v[l] = base[idx[l]];
    return v;
#endif
}

// Stores lanes [lo, hi) of v to p[lo..hi) (0 <= lo < hi <= VW); the other floats are untouched.
inline void store_lanes(float* p, vec v, int lo, int hi) {
    if (lo == 0 && hi == VW) return store(p, v);
#if defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1)), (__m512)v);
#else
    for (int l = lo; l < hi; ++l) p[l] = v[l];
#endif
}

inline ivec iota() {
    ivec v;
    for (int l = 0; l < VW; ++l) v[l] = l;
    return v;
}

// max(a, lo) and min(a, hi) that keep a NaN in `a` (a NaN must come out of every activation
// as it does from the scalar formulas: training detects divergence by it)
inline vec at_least(vec a, float lo) { return a < lo ? splat(lo) : a; }
inline vec at_most(vec a, float hi) { return a > hi ? splat(hi) : a; }

// e^x with Cephes' single-precision polynomial (about 1 ulp), inputs clamped to the finite range;
// e^NaN = NaN.
inline vec vexp(vec x) {
    x = at_most(at_least(x, -87.3365f), 88.3762f);
    // n = round(x / ln 2): adding 1.5 * 2^23 rounds to an integer in the low mantissa bits
    vec t = x * 1.44269504088896341f + 12582912.0f;
    vec n = t - 12582912.0f;
    vec r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vec p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // 2^n built in the exponent field; n in [-126, 127] after the clamp (the lowest lanes lose a
    // little: e^-87.3 is the smallest normal float)
    ivec e = (__builtin_convertvector(n, ivec) + 127) << 23;
    vec s;
    std::memcpy(&s, &e, sizeof s);
    return p * s;
}

// Darknet's elementwise activations (activation.h), vectorised where the models use them;
// `ok` is false for the ones left to the scalar formula.
inline bool activation_vectorised(Activation a) {
    switch (a) {
        case Activation::linear: case Activation::leaky: case Activation::relu: case Activation::relu6:
        case Activation::logistic: case Activation::tanh: case Activation::swish: case Activation::mish:
        case Activation::hard_mish:
            return true;
        default:
            return false;
    }
}

inline vec activate(vec x, Activation a) {
    switch (a) {
        case Activation::linear: return x;
        case Activation::leaky: return x > 0 ? x : x * 0.1f;
        case Activation::relu: return x > 0 ? x : vec{};
        case Activation::relu6: return x < 0 ? vec{} : (x > 6.0f ? splat(6.0f) : x);
        case Activation::logistic: return 1.0f / (1.0f + vexp(-x));
        case Activation::tanh: return 2.0f / (1.0f + vexp(-2.0f * x)) - 1.0f;
        case Activation::swish: return x / (1.0f + vexp(-x));
        case Activation::mish: {
            // x * tanh(softplus(x)) with tanh(log(1 + e)) = n / (n + 2), n = e (e + 2): one exp.
            // Darknet's softplus is x above 20, where tanh is 1 in float.
            vec e = vexp(at_most(x, 20.0f));
            vec n = e * (e + 2.0f);
            return x > 20.0f ? x : x * n / (n + 2.0f);
        }
        case Activation::hard_mish: return x > 0 ? x : (x > -2.0f ? x * x * 0.5f + x : vec{});
        default:
            for (int l = 0; l < VW; ++l) x[l] = activate_scalar(x[l], a);
            return x;
    }
}

}  // namespace simd
}  // namespace DARKNET_ISA
}  // namespace dn
