// Where an element of an NCHW-shaped tensor lives in either layout (Layout in tensor.h): NCHW, or NHWC
// where a device keeps its activations channels last (src-lib/gpu/PRECISION.md, "Layout"). The spatial
// kernels (local average pooling, upsample, their backward passes) run in both through these helpers,
// from a flat index i in the tensor's own order and a 0/1 `nhwc` flag; max pooling has NHWC twins
// (NHWC_RUN below). Channel-wise kernels need none of this: an NHWC tensor is an NCHW one of N*H*W
// images of C channels of 1x1 (GpuBackend::channel_view).
#pragma once
#include "args_forward.h"  // NHWC_PASS_ELEMENTS
#include "compat_cpu.h"

// The pixel (y * width + x, within its plane of `plane` pixels) of element i.
KFN int layout_pixel(int i, int channels, int plane, int nhwc) { return nhwc ? (i / channels) % plane : i % plane; }

// Where pixel 0 of element i's image and channel lies in another tensor of the same images and
// channels with `other_plane` pixels a plane (the input of a pooling window, the output of an upsample).
// Pixel p of it is then at that + p * layout_step(channels, nhwc).
KFN int layout_base(int i, int channels, int plane, int other_plane, int nhwc) {
    return nhwc ? (i / (channels * plane)) * channels * other_plane + i % channels : (i / plane) * other_plane;
}

// The distance between neighbouring pixels of one channel.
KFN int layout_step(int channels, int nhwc) { return nhwc ? channels : 1; }

// Element i of an NCHW-shaped tensor in one layout is element relayout_at(...) of it in the other
// (to_nhwc 1: from NCHW to NHWC; 0: the reverse).
KFN int relayout_at(int i, int channels, int plane, int to_nhwc) {
    int sample = channels * plane, n = i / sample, r = i - n * sample;
    int c = to_nhwc ? r / plane : r % channels, p = to_nhwc ? r % plane : r / channels;
    return n * sample + (to_nhwc ? p * channels + c : c * plane + p);
}

// The channels-last elementwise passes (batchnorm's, copy_channels_nhwc, affine_act_nhwc) over `rows`
// pixels of `channels` channels: this thread takes channel c = KGID % channels, reads its constants
// once, and the rows NHWC_ROW(k) = KGID / channels + k * chunks for the k < NHWC_PASS_ELEMENTS that
// FOR_NHWC_ROW visits (chunks = ceil(rows / NHWC_PASS_ELEMENTS); threads = channels * chunks,
// GpuBackend::nhwc_pass_threads). Consecutive threads touch consecutive elements, and a kernel loads
// all its rows before it stores any: their loads in flight together, no index division per element.
#define NHWC_PASS(channels, rows, c)                                                                        \
    uint nhwc_rows_ = (uint)(rows), nhwc_chunks_ = (nhwc_rows_ + NHWC_PASS_ELEMENTS - 1) / NHWC_PASS_ELEMENTS; \
    if (KGID >= (uint)(channels) * nhwc_chunks_) return;                                                    \
    uint c = KGID % (uint)(channels), nhwc_r0_ = KGID / (uint)(channels);
#define NHWC_ROW(k) (nhwc_r0_ + (uint)(k) * nhwc_chunks_)
#define FOR_NHWC_ROW(k)                                                                                   \
    for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k) /* a constant count: unrolled, arrays in registers */ \
        if (NHWC_ROW(k) < nhwc_rows_)
// Every k, rows past the end included: the arithmetic between a pass's loads and its stores runs on all
// its elements unguarded (the missing rows' are computed and not stored), in one block the compiler
// can interleave, where a guard per element made a branch per element.
#define FOR_NHWC_ELEMENT(k) for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k)

// The channels-last max pooling kernels (storage_kernels.h, storage_training.h) over NHWC tensors of
// `rows` rows (images * height) of `width` pixels of `channels` channels: this thread takes channel
// c = KGID % channels of the NHWC_PASS_ELEMENTS consecutive pixels x0 + k of row `row` that
// FOR_NHWC_RUN visits (runs = ceil(width / NHWC_PASS_ELEMENTS) a row; threads = channels * rows * runs,
// GpuBackend::nhwc_run_threads). Consecutive threads take consecutive channels of one pixel, and a
// pooling window's coordinates are worked out once per thread: the run's pixels are one step apart.
#define NHWC_RUN(channels, rows, width, c, row, x0)                                                        \
    uint nhwc_runs_ = ((uint)(width) + NHWC_PASS_ELEMENTS - 1) / NHWC_PASS_ELEMENTS;                       \
    if (KGID >= (uint)(channels) * (uint)(rows) * nhwc_runs_) return;                                      \
    int c = (int)(KGID % (uint)(channels)), row = (int)(KGID / (uint)(channels) / nhwc_runs_);            \
    int x0 = (int)(KGID / (uint)(channels) % nhwc_runs_) * NHWC_PASS_ELEMENTS;
#define FOR_NHWC_RUN(k, x0, width)                                                                        \
    for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k) /* a constant count: unrolled, arrays in registers */ \
        if ((x0) + k < (width))
