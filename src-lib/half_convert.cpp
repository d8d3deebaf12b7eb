#include "half_convert.h"

#include <cstring>

namespace dn {

namespace {
uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
}  // namespace

uint16_t f32_to_f16(float f) {
    uint32_t u = bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN stays a (quiet) NaN
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: infinity
    if (abs < 0x38800000u) {  // below fp16's smallest normal (2^-14): a subnormal or zero
        if (abs < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
        // value = mantissa * 2^(e - 150) with the implicit bit; fp16 subnormal unit = 2^-24
        uint32_t e = abs >> 23, mant = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;  // 150 - 24 - e: bits dropped to reach units of 2^-24
        uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) ++q;
        return (uint16_t)(sign | q);
    }
    return f16_bits_normal(u);
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (e == 0x1f) return from_bits(sign | 0x7f800000u | (mant << 13));  // inf, NaN
    if (e == 0) {  // zero, subnormal: mant * 2^-24
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return from_bits(sign | ((e + 112) << 23) | (mant << 13));
}

uint16_t f32_to_bf16(float f) {
    uint32_t u = bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
    return bf16_bits_not_nan(u);
}

float bf16_to_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

void f32_to_half(const float* src, uint16_t* dst, size_t n, bool bf16) {
    if (bf16)
        for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void half_to_f32(const uint16_t* src, float* dst, size_t n, bool bf16) {
    if (bf16)
        for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
    else
        for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

}  // namespace dn
