// Instantiates storage_kernels.h for fp16 storage (kernels named *_f16; KF16_* in compat_<device>.h).
#pragma once
#define S_T KF16_T
#define S_LD(p, i) KF16_LOAD(p, i)
#define S_ST(p, i, v) KF16_STORE(p, i, v)
#define S_ROUND(v) KF16_ROUND(v)
#define S_NAME(name) name##_f16
#define S_FAST_MATH 1  // the activations' fast exp and division: results rounded to 11 bits
