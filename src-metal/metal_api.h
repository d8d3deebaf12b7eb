// MetalApi: the narrow interface between MetalDevice (plain C++, metal_device.cpp) and the one
// Objective-C++ file that talks to Metal and MPS (metal_objc.mm). Every decision (argument
// indices, group sizes, MPS descriptor values, which path runs, fallbacks) is taken in C++ and
// arrives here as plain values, so that it is unit-tested on Linux against FakeMetalApi
// (fake_metal_api.h). An implementation only translates these calls into Metal calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/device.h"

namespace dn {

// An MTLBuffer (shared storage mode), opaque to C++.
struct MetalBuffer;

// What Metal says about a compute pipeline (MTLComputePipelineState).
struct MetalPipelineLimits {
    uint32_t max_threads = 0;      // maxTotalThreadsPerThreadgroup
    uint32_t execution_width = 0;  // threadExecutionWidth (the SIMD group)
};

// One argument of a dispatch at [[buffer(index)]]: a buffer (setBuffer:offset:atIndex:) or the
// argument struct's bytes (setBytes:length:atIndex:).
struct MetalBinding {
    uint32_t index = 0;
    MetalBuffer* buffer = nullptr;  // a buffer argument when bytes is null (may itself be null)
    size_t offset = 0;
    const void* bytes = nullptr;
    size_t size = 0;
};

// An MPSMatrix: matrixWithBuffer at `offset_bytes`, MPSMatrixDescriptor(rows, columns, rowBytes, float32).
struct MpsMatrixDesc {
    MetalBuffer* buffer = nullptr;
    size_t offset_bytes = 0;
    uint32_t rows = 0, columns = 0;
    size_t row_bytes = 0;
};

// One MPSMatrixMultiplication: C = alpha * op(left) * op(right) + beta * C.
struct MpsGemmPlan {
    bool transpose_left = false, transpose_right = false;
    uint32_t result_rows = 0, result_columns = 0, interior_columns = 0;
    double alpha = 1.0, beta = 0.0;
    MpsMatrixDesc left, right, result;
};

// The MPSGraph operations of the fast paths. Buffers handed to MetalApi::graph_* come in this order:
//   conv2d:                  x, w -> y
//   conv2d_backward_data:    dy, w, dx (accumulator in) -> dx_sum
//   conv2d_backward_weights: x, dy, dw (accumulator in) -> dw_sum
//   pool:                    x -> y
//   pool_backward:           x, dy, dx (accumulator in) -> dx_sum
//   batchnorm_train:         y, scale, bias -> y_out, mean, var, x_norm
//   batchnorm_backward:      dy, x_norm, scale, var, dscale, dbias (accumulators in) -> dy_out, dscale_sum, dbias_sum
// Outputs never alias inputs (MPSGraph gives no guarantee for that): MetalDevice passes scratch
// buffers for the *_sum / *_out results and copies them back after.
enum class GraphOp { conv2d, conv2d_backward_data, conv2d_backward_weights, pool, pool_backward, batchnorm_train,
                     batchnorm_backward };

// "conv2d", "conv2d_backward_data", ... (in errors and in FakeMetalApi's log).
inline const char* graph_op_name(GraphOp op) {
    switch (op) {
        case GraphOp::conv2d: return "conv2d";
        case GraphOp::conv2d_backward_data: return "conv2d_backward_data";
        case GraphOp::conv2d_backward_weights: return "conv2d_backward_weights";
        case GraphOp::pool: return "pool";
        case GraphOp::pool_backward: return "pool_backward";
        case GraphOp::batchnorm_train: return "batchnorm_train";
        case GraphOp::batchnorm_backward: return "batchnorm_backward";
    }
    return "?";
}

// MPSGraphConvolution2DOpDescriptor values (NCHW data, OIHW weights, explicit padding).
struct GraphConvPlan {
    int64_t x[4] = {}, w[4] = {}, y[4] = {};
    uint32_t stride_x = 1, stride_y = 1, dilation_x = 1, dilation_y = 1, groups = 1;
    uint32_t pad_left = 0, pad_right = 0, pad_top = 0, pad_bottom = 0;
    std::string key;  // one compiled graph per key
};

// MPSGraphPooling2DOpDescriptor values (NCHW, explicit padding).
struct GraphPoolPlan {
    int64_t x[4] = {}, y[4] = {};
    uint32_t kernel_w = 1, kernel_h = 1, stride_x = 1, stride_y = 1;
    uint32_t pad_left = 0, pad_right = 0, pad_top = 0, pad_bottom = 0;
    bool max = true;
    bool include_zero_pad = false;  // includeZeroPadToAverage
    std::string key;
};

// Training batchnorm as MPSGraph arithmetic: statistics over axes 0, 2, 3 of an NCHW tensor.
struct GraphNormPlan {
    int64_t shape[4] = {}, channel_shape[4] = {};  // [n,c,h,w] and [1,c,1,1]
    float eps = 1e-5f;
    float count = 1.0f;        // n*h*w values per channel
    float unbiased = 1.0f;     // count / (count - 1): MPSGraph's variance is the biased one
    float grad_divisor = 1.0f; // count - 1, the backward's divisor for sum(g * x_norm)
    std::string key;
};

// Failures. A call that returns bool reports false with the message in *error: Metal's own, or
// "<what> raised <NSException name>: <reason>" for an Objective-C exception, none of which may cross
// this interface. alloc reports null. dispatch, copy and upload_staged throw DarknetError (the op
// cannot be encoded). A command buffer that could not be committed, or that failed on the GPU
// (MTLCommandBufferStatusError), makes the next wait return false with its error.
class MetalApi {
public:
    virtual ~MetalApi() = default;
    virtual DeviceInfo describe() = 0;

    // ---- compiling ----
    // newLibraryWithSource with fast math off; false with Metal's message in *error.
    virtual bool compile(const std::string& msl, std::string* error) = 0;
    // The pipeline of kernel `name` of the compiled library (made once, cached by the implementation).
    virtual bool pipeline(const std::string& name, MetalPipelineLimits* limits, std::string* error) = 0;

    // ---- memory (MTLResourceStorageModeShared) ----
    virtual MetalBuffer* alloc(size_t bytes) = 0;  // null when Metal refuses
    virtual void release(MetalBuffer* b) = 0;
    virtual size_t length(const MetalBuffer* b) = 0;
    virtual void* contents(MetalBuffer* b) = 0;     // the CPU view of the shared storage

    // ---- encoding into the open command buffer (opened on first use) ----
    virtual void dispatch(const std::string& pipeline, uint32_t groups, uint32_t group,
                          const std::vector<MetalBinding>& bindings) = 0;
    virtual void copy(const MetalBuffer* src, size_t src_offset, MetalBuffer* dst, size_t dst_offset, size_t bytes) = 0;
    // Copies `bytes` into a fresh staging buffer now and encodes a blit from it into dst, in order
    // with the queued work (the host may not write dst itself while queued work still uses it).
    virtual void upload_staged(MetalBuffer* dst, size_t offset, const void* src, size_t bytes) = 0;
    virtual bool mps_gemm(const MpsGemmPlan& plan, std::string* error) = 0;
    virtual bool graph_conv(GraphOp op, const GraphConvPlan& plan, const std::vector<MetalBuffer*>& buffers,
                            std::string* error) = 0;
    virtual bool graph_pool(GraphOp op, const GraphPoolPlan& plan, const std::vector<MetalBuffer*>& buffers,
                            std::string* error) = 0;
    virtual bool graph_norm(GraphOp op, const GraphNormPlan& plan, const std::vector<MetalBuffer*>& buffers,
                            std::string* error) = 0;

    // ---- ordering ----
    virtual void commit() = 0;                  // commits the open command buffer, does not wait
    virtual bool wait(std::string* error) = 0;  // commits, waits for every committed buffer; false with the first error
    virtual bool busy() = 0;                    // whether encoded or committed work may still be running
};

}  // namespace dn
