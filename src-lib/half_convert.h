// fp32 <-> fp16 (IEEE binary16) and fp32 <-> bf16 (the top half of an fp32) on the host, round to
// nearest even, as the devices' own conversions (CUDA __float2half_rn / __float2bfloat16_rn, OpenCL
// vstore_half_rte, Metal's half casts) and NumPy's float16. Used where a half device tensor crosses to
// or from the host (tensor.cpp); src-test/test_half_precision.py checks them against NumPy bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dn {

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// n elements; `half` is fp16 when bf16 is false.
void f32_to_half(const float* src, uint16_t* dst, size_t n, bool bf16);
void half_to_f32(const uint16_t* src, float* dst, size_t n, bool bf16);

}  // namespace dn
