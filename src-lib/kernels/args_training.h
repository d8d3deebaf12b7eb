// Argument structs of the training kernels (gemm and col2im of storage_kernels.h, reduce.h, backward*.h), shared by host and kernels.
#pragma once
#include "compat_cpu.h"
KNAMESPACE_BEGIN
// 4-byte fields only, so that host, OpenCL, CUDA and Metal agree on the layout. As in args_forward.h,
// n is the number of threads that do work (the kernel's `i < n` guard) in one-thread-per-element
// kernels; reduction kernels run exactly one group per reduced value and have no n.
// Element offsets (`*_offset`) address a sub-array of a whole buffer (kernels get no pointer offsets).
// The backward passes of pooling, upsample/downsample and reorg take their forward's structs
// (args_forward.h), with n = the elements of dx (one thread per gradient element, a gather).

// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C; op(X) = X^T when trans_x. One group of 256
// threads per 16x16 tile of C: tiles_n = ceil(N / 16), groups = ceil(M / 16) * tiles_n. c_f32: C is
// fp32 whatever the storage type of A and B (storage_kernels.h).
typedef struct {
    int32_t M; int32_t N; int32_t K; int32_t lda; int32_t ldb; int32_t ldc;
    int32_t trans_a; int32_t trans_b; int32_t a_offset; int32_t b_offset; int32_t c_offset;
    int32_t tiles_n; float alpha; float beta; int32_t c_f32;
} GemmArgs;
KSTATIC_ASSERT(sizeof(GemmArgs) == 60, "GemmArgs layout");

// col2im of a run of `images` images (or one channel group of each), the adjoint of im2col with
// Im2colImageArgs: n = images * channels * height * width (one thread per image element); the first
// image's dx starts at im_offset, the next ones image_stride further each; the column matrix
// [channels*kh*kw, images * out_h*out_w] at col_offset.
typedef struct {
    int32_t n; int32_t im_offset; int32_t col_offset;
    int32_t channels; int32_t height; int32_t width;
    int32_t kh; int32_t kw; int32_t pad; int32_t stride_y; int32_t stride_x; int32_t dilation;
    int32_t out_h; int32_t out_w; int32_t images; int32_t image_stride;
} Col2imArgs;
KSTATIC_ASSERT(sizeof(Col2imArgs) == 64, "Col2imArgs layout");

// One group per channel: batch = N, channels = C, plane = H*W.
typedef struct { int32_t batch; int32_t channels; int32_t plane; } BiasBackwardArgs;
KSTATIC_ASSERT(sizeof(BiasBackwardArgs) == 12, "BiasBackwardArgs layout");

// The elementwise batchnorm training kernels (normalize, backward_data): `chunks` groups over each
// (sample, channel) plane (GpuBackend::launch_planes). act: the activation batchnorm_normalize applies
// to its output (an Activation's enum value; ACT_LINEAR = 0 for plain batchnorm); backward_data
// ignores it.
// The NHWC twins are NHWC_PASSes (layout_index.h) and ignore chunks.
typedef struct { int32_t batch; int32_t channels; int32_t plane; float eps; int32_t act; int32_t chunks; } BatchnormTrainArgs;
KSTATIC_ASSERT(sizeof(BatchnormTrainArgs) == 24, "BatchnormTrainArgs layout");

// A per-channel reduction split over the batch (reduce.h): `splits` groups per channel. act: the
// activation whose gradient batchnorm_activate_backward_partial applies where it reads dy; the other
// reductions ignore it (left 0). lanes: the channels of one group of the NHWC kernels
// (storage_training.h); the NCHW ones ignore it.
typedef struct { int32_t batch; int32_t channels; int32_t plane; int32_t splits; int32_t act; int32_t lanes; } ChannelSplitArgs;
KSTATIC_ASSERT(sizeof(ChannelSplitArgs) == 24, "ChannelSplitArgs layout");

// n = elements; act = an elementwise Activation's enum value
typedef struct { int32_t n; int32_t act; } ActivateBackwardArgs;
KSTATIC_ASSERT(sizeof(ActivateBackwardArgs) == 8, "ActivateBackwardArgs layout");

// n = batch * plane (one thread per pixel); softmax = 1 for normalize_channels_softmax
typedef struct { int32_t n; int32_t channels; int32_t plane; int32_t softmax; } NormalizeChannelsBackwardArgs;
KSTATIC_ASSERT(sizeof(NormalizeChannelsBackwardArgs) == 16, "NormalizeChannelsBackwardArgs layout");

// n = elements of dx; plane = H*W of dx (dy is [N,C,1,1])
typedef struct { int32_t n; int32_t plane; } AvgpoolGlobalBackwardArgs;
KSTATIC_ASSERT(sizeof(AvgpoolGlobalBackwardArgs) == 8, "AvgpoolGlobalBackwardArgs layout");



// One group per element of s (and ds): batch*channels groups, or batch*plane with scale_wh = 1.
typedef struct { int32_t batch; int32_t channels; int32_t plane; int32_t scale_wh; } ScaleChannelsBackwardArgs;
KSTATIC_ASSERT(sizeof(ScaleChannelsBackwardArgs) == 16, "ScaleChannelsBackwardArgs layout");

// n = elements
typedef struct { int32_t n; } MulBackwardArgs;
KSTATIC_ASSERT(sizeof(MulBackwardArgs) == 4, "MulBackwardArgs layout");

// One group per softmax group (batch * groups groups); group_size = sample / groups
typedef struct { int32_t groups; int32_t group_size; int32_t sample; float temperature; } SoftmaxBackwardArgs;
KSTATIC_ASSERT(sizeof(SoftmaxBackwardArgs) == 16, "SoftmaxBackwardArgs layout");

// Shortcut backward, one launch per input (input 0 = x, input k >= 1 = from[k-1]) for its data
// gradient and, when weighted, one per input for the weight gradient. sample = per-sample size of x
// (and dy); from_sample = that of this launch's input (= sample for x); inputs = 1 + number of
// `from`; weights_mode = ShortcutWeights (none 0, per_feature 1, per_channel 2); norm = ShortcutNorm
// (none 0, relu 1, softmax 2); channels, plane = x's. n = batch * min(sample, from_sample) for the
// data gradient; the weight gradient runs one group per weight group (1 per_feature, channels
// per_channel) and ignores n.
typedef struct {
    int32_t n; int32_t batch; int32_t sample; int32_t from_sample; int32_t input; int32_t inputs;
    int32_t weights_mode; int32_t norm; int32_t channels; int32_t plane;
} ShortcutBackwardArgs;
KSTATIC_ASSERT(sizeof(ShortcutBackwardArgs) == 40, "ShortcutBackwardArgs layout");

// add_scaled: y += alpha * x, n = elements
typedef struct { int32_t n; float alpha; } ScaledArgs;
KSTATIC_ASSERT(sizeof(ScaledArgs) == 8, "ScaledArgs layout");

KNAMESPACE_END
