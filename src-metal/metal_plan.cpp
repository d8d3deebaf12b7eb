#include "metal_plan.h"

#include "errors.h"

namespace dn {
namespace metal_plan {

std::vector<MetalBinding> bind_arguments(const char* kernel, const std::vector<KernelArg>& args) {
    std::vector<MetalBinding> out;
    out.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
        const KernelArg& a = args[i];
        MetalBinding b;
        b.index = (uint32_t)i;
        if (a.bytes) {
            if (i + 1 != args.size())
                throw DarknetError(std::string("kernel ") + kernel + ": its argument struct must be the last argument");
            if (a.size > kMaxStructBytes)
                throw DarknetError(std::string("kernel ") + kernel + ": an argument struct of " +
                                   std::to_string(a.size) + " bytes exceeds Metal's 4096-byte setBytes limit");
            b.bytes = a.bytes;
            b.size = a.size;
        } else {
            // DeviceMemory is, on this device, its MetalBuffer (metal_device.cpp)
            b.buffer = reinterpret_cast<MetalBuffer*>(a.buffer);
        }
        out.push_back(b);
    }
    return out;
}

uint32_t group_limit(const MetalPipelineLimits& l) {
    uint32_t max = l.max_threads ? l.max_threads : 1;
    uint32_t width = l.execution_width;
    if (width == 0 || max < width) return max;
    return max / width * width;
}

void check_launch(const char* kernel, LaunchDims dims, uint32_t limit) {
    if (dims.group > limit)
        throw DarknetError(std::string("kernel ") + kernel + " launched with groups of " + std::to_string(dims.group) +
                           " threads, but its Metal pipeline allows at most " + std::to_string(limit) +
                           " (maxTotalThreadsPerThreadgroup)");
    if (dims.group == 0) throw DarknetError(std::string("kernel ") + kernel + " launched with empty groups");
}

bool tensor_fits(const char* name, const int64_t* dims, int rank, std::string* why) {
    if (rank > kMaxTensorDimensions)
        return *why = std::string("tensor ") + name + " has " + std::to_string(rank) +
                      " dimensions, MPSNDArray at most " + std::to_string(kMaxTensorDimensions), false;
    uint64_t elements = 1;
    for (int i = 0; i < rank; ++i) {
        if (dims[i] < 0) return *why = std::string("tensor ") + name + " has a negative dimension", false;
        elements *= (uint64_t)dims[i];
        if (elements >= kMaxTensorElements)  // (checked per factor: no overflow)
            return *why = std::string("tensor ") + name + " has 2^31 elements or more (MPSNDArray's limit)", false;
    }
    if (elements * sizeof(float) >= kMaxTensorBytes)
        return *why = std::string("tensor ") + name + " has " + std::to_string(elements * sizeof(float)) +
                      " bytes, 2^32 or more (MPSNDArray's limit)", false;
    return true;
}

bool should_commit(int commands_encoded) { return commands_encoded >= kCommandsPerCommit; }

bool blit_fits(size_t src_offset, size_t dst_offset, size_t bytes) {
    return bytes > 0 && src_offset % 4 == 0 && dst_offset % 4 == 0 && bytes % 4 == 0;
}

bool upload_in_place(bool gpu_busy) { return !gpu_busy; }

namespace {

// One matrix of rows x columns floats with leading dimension ld at element `offset`.
bool matrix(MetalBuffer* buf, size_t offset, int rows, int columns, int ld, size_t buffer_bytes, const char* name,
            MpsMatrixDesc* out, std::string* why) {
    if (ld < columns) {
        *why = std::string("matrix ") + name + ": leading dimension " + std::to_string(ld) + " < " +
               std::to_string(columns) + " columns";
        return false;
    }
    out->buffer = buf;
    out->offset_bytes = offset * sizeof(float);
    out->rows = (uint32_t)rows;
    out->columns = (uint32_t)columns;
    out->row_bytes = (size_t)ld * sizeof(float);
    // MPSMatrix wants rows * rowBytes bytes from the offset, the last row's padding included.
    uint64_t span = (uint64_t)rows * out->row_bytes;
    if (span >= kMaxTensorBytes) {
        *why = std::string("matrix ") + name + " spans " + std::to_string(span) + " bytes, 2^32 or more (MPS's limit)";
        return false;
    }
    size_t needed = out->offset_bytes + (size_t)rows * out->row_bytes;
    if (needed > buffer_bytes) {
        *why = std::string("matrix ") + name + " with rowBytes " + std::to_string(out->row_bytes) + " needs " +
               std::to_string(needed) + " bytes, its buffer has " + std::to_string(buffer_bytes);
        return false;
    }
    return true;
}

}  // namespace

bool plan_gemm(bool ta, bool tb, int M, int N, int K, float alpha, MetalBuffer* A, size_t a_offset, int lda,
               size_t a_bytes, MetalBuffer* B, size_t b_offset, int ldb, size_t b_bytes, float beta, MetalBuffer* C,
               size_t c_offset, int ldc, size_t c_bytes, MpsGemmPlan* p, std::string* why) {
    if (M <= 0 || N <= 0 || K <= 0) return *why = "an empty matrix", false;
    // op(A) is M x K: A itself is stored K x M when transposed; likewise op(B) K x N
    if (!matrix(A, a_offset, ta ? K : M, ta ? M : K, lda, a_bytes, "A", &p->left, why)) return false;
    if (!matrix(B, b_offset, tb ? N : K, tb ? K : N, ldb, b_bytes, "B", &p->right, why)) return false;
    if (!matrix(C, c_offset, M, N, ldc, c_bytes, "C", &p->result, why)) return false;
    p->transpose_left = ta;
    p->transpose_right = tb;
    p->result_rows = (uint32_t)M;
    p->result_columns = (uint32_t)N;
    p->interior_columns = (uint32_t)K;
    p->alpha = alpha;
    p->beta = beta;
    return true;
}

namespace {

void put(int64_t* dst, const NchwShape& s) { dst[0] = s.n, dst[1] = s.c, dst[2] = s.h, dst[3] = s.w; }

std::string dims(const NchwShape& s) {
    return std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

}  // namespace

bool plan_conv(const ConvParams& p, GraphConvPlan* g, std::string* why) {
    if (p.groups < 1 || p.x.c % p.groups != 0 || p.y.c % p.groups != 0)
        return *why = "channels not divisible by groups", false;
    int ey = (p.kh - 1) * p.dilation + 1, ex = (p.kw - 1) * p.dilation + 1;  // extent of the dilated kernel
    int out_h = (p.x.h + 2 * p.pad - ey) / p.stride_y + 1, out_w = (p.x.w + 2 * p.pad - ex) / p.stride_x + 1;
    if (out_h != p.y.h || out_w != p.y.w)
        return *why = "output " + dims(p.y) + " differs from MPSGraph's " + std::to_string(out_h) + "x" +
                      std::to_string(out_w), false;
    put(g->x, p.x);
    put(g->y, p.y);
    g->w[0] = p.y.c, g->w[1] = p.x.c / p.groups, g->w[2] = p.kh, g->w[3] = p.kw;
    if (!tensor_fits("x", g->x, 4, why) || !tensor_fits("w", g->w, 4, why) || !tensor_fits("y", g->y, 4, why))
        return false;
    g->stride_x = p.stride_x, g->stride_y = p.stride_y;
    g->dilation_x = g->dilation_y = p.dilation;
    g->groups = p.groups;
    g->pad_left = g->pad_right = g->pad_top = g->pad_bottom = p.pad;
    g->key = "conv " + dims(p.x) + " " + dims(p.y) + " k" + std::to_string(p.kh) + "x" + std::to_string(p.kw) + " s" +
             std::to_string(p.stride_y) + "x" + std::to_string(p.stride_x) + " p" + std::to_string(p.pad) + " d" +
             std::to_string(p.dilation) + " g" + std::to_string(p.groups);
    return true;
}

bool plan_pool(const PoolParams& p, GraphPoolPlan* g, std::string* why) {
    int before = p.padding / 2, after = p.padding - p.padding / 2;
    if (before >= p.size || after >= p.size)
        return *why = "padding " + std::to_string(p.padding) + " lets a window lie wholly outside the image", false;
    int out_h = (p.x.h + p.padding - p.size) / p.stride_y + 1, out_w = (p.x.w + p.padding - p.size) / p.stride_x + 1;
    if (out_h != p.y.h || out_w != p.y.w || p.x.n != p.y.n || p.x.c != p.y.c)
        return *why = "output " + dims(p.y) + " differs from MPSGraph's", false;
    put(g->x, p.x);
    put(g->y, p.y);
    if (!tensor_fits("x", g->x, 4, why) || !tensor_fits("y", g->y, 4, why)) return false;
    g->kernel_w = g->kernel_h = p.size;
    g->stride_x = p.stride_x, g->stride_y = p.stride_y;
    g->pad_left = g->pad_top = before;
    g->pad_right = g->pad_bottom = after;
    g->max = p.max;
    g->include_zero_pad = false;  // Darknet averages over the cells inside the image only
    g->key = std::string(p.max ? "maxpool " : "avgpool ") + dims(p.x) + " " + dims(p.y) + " k" +
             std::to_string(p.size) + " s" + std::to_string(p.stride_y) + "x" + std::to_string(p.stride_x) + " p" +
             std::to_string(p.padding);
    return true;
}

bool plan_norm(const NchwShape& s, float eps, GraphNormPlan* g, std::string* why) {
    double count = (double)s.n * s.h * s.w;
    if (count < 2) return *why = "one value per channel (the unbiased variance needs two)", false;
    put(g->shape, s);
    if (!tensor_fits("y", g->shape, 4, why)) return false;
    g->channel_shape[0] = 1, g->channel_shape[1] = s.c, g->channel_shape[2] = 1, g->channel_shape[3] = 1;
    g->eps = eps;
    g->count = (float)count;
    g->unbiased = (float)(count / (count - 1));
    g->grad_divisor = (float)(count - 1);
    g->key = "batchnorm " + dims(s) + " eps" + std::to_string(eps);
    return true;
}

}  // namespace metal_plan
}  // namespace dn
