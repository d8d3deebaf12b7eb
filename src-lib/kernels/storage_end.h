// Ends one instantiation of storage_kernels.h (see storage_f32.h).
#pragma once
#undef S_T
#undef S_LD
#undef S_ST
#undef S_ROUND
#undef S_NAME
#undef S_FAST_MATH
