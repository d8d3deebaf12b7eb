// Instantiates storage_kernels.h for fp32 (kernels named *_f32). The embedded text is
// storage_f32.h, storage_kernels.h, storage_end.h, then the same for fp16 and bf16 (CMakeLists.txt).
#pragma once
#define S_T float
#define S_LD(p, i) ((p)[i])
#define S_ST(p, i, v) ((p)[i] = (v))
#define S_ROUND(v) (v)
#define S_NAME(name) name##_f32
#define S_FAST_MATH 0  // the activations' exp and division as written (activation_math.h)
