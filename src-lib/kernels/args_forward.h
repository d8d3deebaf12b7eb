// Argument structs of the forward and elementwise kernels (forward_*.h), shared by host and kernels.
#pragma once
#include "compat_cpu.h"
KNAMESPACE_BEGIN
// Every struct starts with n = the number of threads that do work (the kernel's `i < n` guard),
// except GlobalPoolArgs (one group per plane). 4-byte fields only, so that host, OpenCL, CUDA and
// Metal agree on the layout. Activation codes are the values of enum class Activation.

typedef struct { int32_t n; float value; } FillArgs;
KSTATIC_ASSERT(sizeof(FillArgs) == 8, "FillArgs layout");

typedef struct { int32_t n; int32_t act; } ActivateArgs;
KSTATIC_ASSERT(sizeof(ActivateArgs) == 8, "ActivateArgs layout");

// n = batch * plane (one thread per pixel); act = normalize_channels or normalize_channels_softmax
typedef struct { int32_t n; int32_t channels; int32_t plane; int32_t act; } NormalizeChannelsArgs;
KSTATIC_ASSERT(sizeof(NormalizeChannelsArgs) == 16, "NormalizeChannelsArgs layout");

// per-channel ops on an NCHW tensor of n elements: channel = (i / plane) % channels
typedef struct { int32_t n; int32_t channels; int32_t plane; } ChannelArgs;
KSTATIC_ASSERT(sizeof(ChannelArgs) == 12, "ChannelArgs layout");

typedef struct { int32_t n; int32_t channels; int32_t plane; float eps; } BatchnormArgs;
KSTATIC_ASSERT(sizeof(BatchnormArgs) == 16, "BatchnormArgs layout");

// n = channels
typedef struct { int32_t n; float eps; } BatchnormFoldArgs;
KSTATIC_ASSERT(sizeof(BatchnormFoldArgs) == 8, "BatchnormFoldArgs layout");

typedef struct { int32_t n; float keep; } RollingArgs;
KSTATIC_ASSERT(sizeof(RollingArgs) == 8, "RollingArgs layout");

// has_scale = 0: the scale buffer is not read (bind any buffer); act must be elementwise
typedef struct { int32_t n; int32_t channels; int32_t plane; int32_t has_scale; int32_t act; } AffineActArgs;
KSTATIC_ASSERT(sizeof(AffineActArgs) == 20, "AffineActArgs layout");

typedef struct { int32_t n; } CountArgs;
KSTATIC_ASSERT(sizeof(CountArgs) == 4, "CountArgs layout");

// scale_wh = 0: s is [N,C,1,1]; 1: s is [N,1,H,W]
typedef struct { int32_t n; int32_t channels; int32_t plane; int32_t scale_wh; } ScaleChannelsArgs;
KSTATIC_ASSERT(sizeof(ScaleChannelsArgs) == 16, "ScaleChannelsArgs layout");

// entries = 5 + classes
typedef struct { int32_t n; int32_t plane; int32_t entries; int32_t new_coords; float scale_x_y; } YoloActivateArgs;
KSTATIC_ASSERT(sizeof(YoloActivateArgs) == 20, "YoloActivateArgs layout");

// the 64-bit seed split in two halves
typedef struct { int32_t n; uint32_t seed_lo; uint32_t seed_hi; float probability; } DropoutArgs;
KSTATIC_ASSERT(sizeof(DropoutArgs) == 16, "DropoutArgs layout");

typedef struct { int32_t n; int32_t batch; float lr; float momentum; float decay; } SgdArgs;
KSTATIC_ASSERT(sizeof(SgdArgs) == 20, "SgdArgs layout");

typedef struct { int32_t n; int32_t batch; int32_t t; float lr; float b1; float b2; float eps; float decay; } AdamArgs;
KSTATIC_ASSERT(sizeof(AdamArgs) == 32, "AdamArgs layout");

// unscale_check (loss scaling): grad *= factor, n = elements
typedef struct { int32_t n; float factor; } UnscaleArgs;
KSTATIC_ASSERT(sizeof(UnscaleArgs) == 8, "UnscaleArgs layout");

// n = batch * count * plane; x has src_channels channels, y dst_channels; accumulate: += instead of =
// The rows a thread of a channels-last elementwise pass takes (NHWC_PASS, layout_index.h).
#define NHWC_PASS_ELEMENTS 8
typedef struct {
    int32_t n; int32_t plane; int32_t count;
    int32_t src_channels; int32_t src_c0; int32_t dst_channels; int32_t dst_c0; int32_t accumulate;
} CopyChannelsArgs;
KSTATIC_ASSERT(sizeof(CopyChannelsArgs) == 32, "CopyChannelsArgs layout");

// upsample and downsample_sum: n = elements of y; in_* is x's plane, out_* is y's
// channels and nhwc: layout_index.h (nhwc 0: NCHW, where channels is not read)
typedef struct {
    int32_t n; int32_t in_w; int32_t in_h; int32_t out_w; int32_t out_h; int32_t stride; float scale;
    int32_t channels; int32_t nhwc;
} ResampleArgs;
KSTATIC_ASSERT(sizeof(ResampleArgs) == 36, "ResampleArgs layout");

// reorg_cpu's loop dimensions w, h, c; n = elements of x; forward = 1: y[out] = x[in], 0: y[in] = x[out]
typedef struct { int32_t n; int32_t w; int32_t h; int32_t c; int32_t stride; int32_t forward; } ReorgArgs;
KSTATIC_ASSERT(sizeof(ReorgArgs) == 24, "ReorgArgs layout");

// One launch per input of the shortcut (see shortcut_f32): input = 0 writes y = w_0 * x, input = k >= 1
// adds w_k * from[k-1]. n = elements of y; sample = per-sample size of y (and x); from_sample = that of
// this launch's input; inputs = 1 + number of `from`; weights_mode = ShortcutWeights (none 0,
// per_feature 1, per_channel 2); norm = ShortcutNorm (none 0, relu 1, softmax 2).
typedef struct {
    int32_t n; int32_t sample; int32_t from_sample; int32_t input; int32_t inputs;
    int32_t weights_mode; int32_t norm; int32_t channels; int32_t plane;
} ShortcutArgs;
KSTATIC_ASSERT(sizeof(ShortcutArgs) == 36, "ShortcutArgs layout");

// maxpool and avgpool_local: n = elements of y; the window starts at -padding/2; channels and nhwc:
// layout_index.h
typedef struct {
    int32_t n; int32_t in_h; int32_t in_w; int32_t out_h; int32_t out_w;
    int32_t size; int32_t stride_y; int32_t stride_x; int32_t padding; int32_t channels; int32_t nhwc;
} PoolArgs;
KSTATIC_ASSERT(sizeof(PoolArgs) == 44, "PoolArgs layout");

// relayout: n = elements; to_nhwc 1: x NCHW -> y NHWC, 0: the reverse
typedef struct { int32_t n; int32_t channels; int32_t plane; int32_t to_nhwc; } RelayoutArgs;
KSTATIC_ASSERT(sizeof(RelayoutArgs) == 16, "RelayoutArgs layout");
// add_relayout_into_f32: RelayoutArgs's and the factor the added values are multiplied by
typedef struct { int32_t n; int32_t channels; int32_t plane; int32_t to_nhwc; float alpha; } RelayoutAddArgs;
KSTATIC_ASSERT(sizeof(RelayoutAddArgs) == 20, "RelayoutAddArgs layout");

// one group per (n, c) plane: no n, the grid is exactly N*C groups
typedef struct { int32_t plane; } GlobalPoolArgs;
KSTATIC_ASSERT(sizeof(GlobalPoolArgs) == 4, "GlobalPoolArgs layout");

// n = elements of y; y has out_c channels, x in_c
typedef struct { int32_t n; int32_t in_c; int32_t out_c; int32_t plane; } MaxpoolDepthArgs;
KSTATIC_ASSERT(sizeof(MaxpoolDepthArgs) == 16, "MaxpoolDepthArgs layout");

// n = batch * groups (one thread per group); group_size = sample / groups
typedef struct { int32_t n; int32_t groups; int32_t group_size; int32_t sample; float temperature; } SoftmaxArgs;
KSTATIC_ASSERT(sizeof(SoftmaxArgs) == 20, "SoftmaxArgs layout");

// im2col of a run of `images` images (or one channel group of each): n = channels * images *
// out_h*out_w (one thread per channel and output pixel). The first image starts at element im_offset of the input buffer, the next ones
// image_stride further each; the column matrix [channels*kh*kw, images * out_h*out_w] (one GEMM
// convolves the whole run) at col_offset of the output.
typedef struct {
    int32_t n; int32_t im_offset; int32_t col_offset;
    int32_t channels; int32_t height; int32_t width;
    int32_t kh; int32_t kw; int32_t pad; int32_t stride_y; int32_t stride_x; int32_t dilation;
    int32_t out_h; int32_t out_w; int32_t images; int32_t image_stride;
} Im2colImageArgs;
KSTATIC_ASSERT(sizeof(Im2colImageArgs) == 64, "Im2colImageArgs layout");

// [A][B][plane] at x_offset -> [B][A][plane] at y_offset (n = A*B*plane threads); y += when
// accumulate. Moves a run of images between [image][channel][pixel] and the GEMM's
// [channel][image][pixel].
typedef struct {
    int32_t n; int32_t a; int32_t b; int32_t plane; int32_t x_offset; int32_t y_offset; int32_t accumulate;
} SwapAxesArgs;
KSTATIC_ASSERT(sizeof(SwapAxesArgs) == 28, "SwapAxesArgs layout");

KNAMESPACE_END
