// The Metal device's decisions, as pure functions of plain values (no Metal, no state): how kernel
// arguments map to [[buffer(i)]] indices, which group sizes a pipeline allows, when a command
// buffer is committed, how a row-major GEMM becomes an MPSMatrixMultiplication, and how Darknet's
// convolution, pooling and batchnorm become MPSGraph descriptors, or why one cannot. Unit-tested on
// Linux (src-test/test_metal_device.py).
#pragma once
#include <string>
#include <vector>

#include "metal_api.h"

namespace dn {
namespace metal_plan {

// setBytes takes at most 4 KB (Metal's limit for inline constant data).
constexpr size_t kMaxStructBytes = 4096;
// Commands encoded per command buffer before it is committed without waiting: about one layer's
// kernels (GpuBackend launches 2-6 per layer), so the GPU starts on a layer while the next is encoded.
constexpr int kCommandsPerCommit = 8;

// Kernel arguments in order at indices 0..n-1 (the kernel text numbers its buffers that way and the
// argument struct comes last: kernels/compat_opencl.h). Throws DarknetError for a struct that is
// not last or is larger than kMaxStructBytes.
std::vector<MetalBinding> bind_arguments(const char* kernel, const std::vector<KernelArg>& args);

// The largest group size to use with a pipeline: maxTotalThreadsPerThreadgroup rounded down to a
// multiple of the SIMD width (a partial SIMD group wastes lanes), never 0.
uint32_t group_limit(const MetalPipelineLimits& limits);
// Throws DarknetError when a launch asks for more threads per group than the pipeline allows
// (GpuBackend clamps its group sizes to max_group_size; this catches a kernel with fixed tiles).
void check_launch(const char* kernel, LaunchDims dims, uint32_t limit);

// MPSNDArray's limits, which MPS and MPSGraph enforce with a C assertion (abort(), not an exception:
// "product of dimension sizes > 2**31", "total bytes of NDArray > 2**32"): every tensor an MPSGraph
// plan hands over, and every MPSMatrix of a GEMM (the same storage, kept under the same bounds), stays
// below both; MPSNDArrayDescriptor's documented "may not exceed 16" dimensions (ours have 4) too.
constexpr uint64_t kMaxTensorElements = 1ull << 31;
constexpr uint64_t kMaxTensorBytes = 1ull << 32;
constexpr int kMaxTensorDimensions = 16;
// Whether a float32 tensor of `rank` dimensions `dims` is within those limits; false with the reason.
bool tensor_fits(const char* name, const int64_t* dims, int rank, std::string* why);

// Whether the open command buffer is committed after this many encoded commands.
bool should_commit(int commands_encoded);
// Whether a blit (copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:) may copy these bytes:
// on macOS its offsets and size must be multiples of 4 (MTLBlitCommandEncoder), and 0 bytes are
// nothing to encode. MetalDevice copies other sizes on the host after a wait (shared storage).
bool blit_fits(size_t src_offset, size_t dst_offset, size_t bytes);
// An upload goes straight into the shared storage only while no queued work may still use it.
bool upload_in_place(bool gpu_busy);

// Row-major C[M,N] = alpha op(A) op(B) + beta C with element offsets and leading dimensions, as an
// MPSMatrixMultiplication; `*_bytes` = the buffers' lengths. False with the reason when MPS cannot
// take it (a matrix that, with its full last row of rowBytes, would pass the buffer's end, one past
// kMaxTensorBytes, ...).
bool plan_gemm(bool ta, bool tb, int M, int N, int K, float alpha, MetalBuffer* A, size_t a_offset, int lda,
               size_t a_bytes, MetalBuffer* B, size_t b_offset, int ldb, size_t b_bytes, float beta, MetalBuffer* C,
               size_t c_offset, int ldc, size_t c_bytes, MpsGemmPlan* plan, std::string* why);

// Darknet's convolution as an MPSGraph convolution; false with the reason when MPSGraph's output
// size would differ from Darknet's or a tensor is past MPSNDArray's limits (tensor_fits), as for the
// pooling and batchnorm plans below.
bool plan_conv(const ConvParams& p, GraphConvPlan* plan, std::string* why);
// Darknet's local pooling (window at -padding/2) as MPSGraph pooling with left/top = padding/2 and
// right/bottom = the rest; false when a window can lie wholly in the padding (Darknet: -FLT_MAX or
// 0, MPSGraph: undefined) or the output sizes differ.
bool plan_pool(const PoolParams& p, GraphPoolPlan* plan, std::string* why);
// Training batchnorm; false for a channel of one value (the unbiased variance divides by count - 1).
bool plan_norm(const NchwShape& s, float eps, GraphNormPlan* plan, std::string* why);

}  // namespace metal_plan
}  // namespace dn
