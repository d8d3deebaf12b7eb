// The kernel text compiled for CUDA by nvcc (cmake/cuda.cmake), as a byte array from bin2c.
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_device.h"
#include "gpu_kernels_cuda_fatbin.inc"

namespace dn {

// bin2c's array is byte-aligned and the loader wants the fatbin's 8-byte header fields aligned:
// one copy into 8-byte words, made once.
const void* cuda_kernels_fatbin() {
    static const std::vector<uint64_t> aligned = [] {
        std::vector<uint64_t> words((sizeof dn_cuda_kernels_fatbin + 7) / 8);
        std::memcpy(words.data(), dn_cuda_kernels_fatbin, sizeof dn_cuda_kernels_fatbin);
        return words;
    }();
    return aligned.data();
}

}  // namespace dn
