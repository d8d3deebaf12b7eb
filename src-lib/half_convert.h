// fp32 <-> fp16 (IEEE binary16) and fp32 <-> bf16 (the top half of an fp32) on the host, round to
// nearest even, as the devices' own conversions (CUDA __float2half_rn / __float2bfloat16_rn, OpenCL
// vstore_half_rte, Metal's half casts) and NumPy's float16. Used where a half device tensor crosses to
// or from the host (tensor.cpp); src-test/test_half_precision.py checks them against NumPy bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dn {

// The rounding steps of f32_to_bf16 and f32_to_f16 on a float's bits, inline so that a loop over many
// values vectorises (the loader's colour pass, cpu/loader_pixels.cpp): bf16 of any float but a NaN; fp16
// of a float whose magnitude is in fp16's normal range (2^-14 up to 65520, which rounds to infinity). Round to
// nearest even.
inline uint16_t bf16_bits_not_nan(uint32_t u) { return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
inline uint16_t f16_bits_normal(uint32_t u) {
    // rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even
    uint32_t r = (u & 0x7fffffffu) - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(((u >> 16) & 0x8000u) | (r >> 13));
}

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// n elements; `half` is fp16 when bf16 is false.
void f32_to_half(const float* src, uint16_t* dst, size_t n, bool bf16);
void half_to_f32(const uint16_t* src, float* dst, size_t n, bool bf16);

}  // namespace dn
