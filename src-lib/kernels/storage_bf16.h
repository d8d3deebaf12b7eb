// Instantiates storage_kernels.h for bf16 storage (kernels named *_bf16; KBF16_* in compat_<device>.h).
#pragma once
#define S_T KBF16_T
#define S_LD(p, i) KBF16_LOAD(p, i)
#define S_ST(p, i, v) KBF16_STORE(p, i, v)
#define S_ROUND(v) KBF16_ROUND(v)
#define S_NAME(name) name##_bf16
#define S_FAST_MATH 1  // the activations' fast exp and division: results rounded to 8 bits
