// This copy's entry points (isa.h), for cpu_isa.cpp to choose from.
#include "cpu_isa.h"
#include "gemm.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

std::unique_ptr<Backend> new_cpu_backend();  // cpu_backend.cpp
void cpu_pixels_into_batch(const PixelsIntoBatch& p);  // loader_pixels.cpp

const CpuIsaKernels& cpu_isa_kernels() {
    static const CpuIsaKernels k = {DARKNET_ISA_NAME, cpu_sgemm_kernel(), new_cpu_backend, cpu_sgemm,
                                    cpu_pixels_into_batch};
    return k;
}

}  // namespace DARKNET_ISA
}  // namespace dn
