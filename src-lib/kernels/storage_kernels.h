// Kernel text written once for every storage type (src-lib/gpu/PRECISION.md): the kernels that
// detection runs on activations, convolution's im2col, col2im and GEMM included. Each is compiled three times, for fp32, fp16 and bf16 storage
// (storage_f32.h etc. define the macros; the kernel names end in _f32, _f16, _bf16):
//   S_T            the element type of activation buffers (float, half, bf16 bits)
//   S_LD(p, i)     element i of p as a float
//   S_ST(p, i, v)  stores float v into element i of p, rounded to nearest even
//   S_ROUND(v)     float v rounded as S_ST stores it: what S_LD of the stored v returns
// Math is fp32 throughout; parameters (scale, shift, shortcut weights) stay fp32 buffers. Launch
// geometry of every kernel here: one thread per element, threads = args.n rounded up to whole
// groups of any size (each thread guards i < n), except shortcut (one launch per input) and gemm
// (16x16 tiles), see there.
#pragma once
#include "activation_math.h"
#include "args_forward.h"
#include "args_training.h"
#include "layout_index.h"

// y = x converted to storage S (pack) and back to fp32 (unpack): the input upload and fp32
// parameters used by a half op (GpuBackend::convert).
KERNEL(S_NAME(pack))(KBUF(S_T, y, 0), KCBUF(float, x, 1), KARGS(CountArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, x[i]);
}

KERNEL(S_NAME(unpack))(KBUF(float, y, 0), KCBUF(S_T, x, 1), KARGS(CountArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    y[i] = S_LD(x, i);
}

// y = act(y) in place, elementwise activations only (the channel-mixing ones: normalize_channels_f32)
KERNEL(S_NAME(activate))(KBUF(S_T, y, 0), KARGS(ActivateArgs, a, 1) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, act_forward(S_LD(y, i), a.act, S_FAST_MATH));
}

// Convolution's epilogue in place: y = act(y * scale[c] + shift[c]), scale only when has_scale
// (otherwise bind any buffer to `scale`). Elementwise act only: for the channel-mixing ones launch
// this with ACT_LINEAR, then normalize_channels_f32.
KERNEL(S_NAME(affine_act))(KBUF(S_T, y, 0), KCBUF(float, scale, 1), KCBUF(float, shift, 2),
                           KARGS(AffineActArgs, a, 3) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int c = (i / a.plane) % a.channels;
    float v = S_LD(y, i);
    v = (a.has_scale ? v * scale[c] : v) + shift[c];
    S_ST(y, i, act_forward(v, a.act, S_FAST_MATH));
}

// The same on NHWC y seen as rows of pixels (channel_view: plane 1, a.n = rows * channels): an
// NHWC_PASS (layout_index.h), the same arithmetic.
KERNEL(S_NAME(affine_act_nhwc))(KBUF(S_T, y, 0), KCBUF(float, scale, 1), KCBUF(float, shift, 2),
                                KARGS(AffineActArgs, a, 3) KTHREAD_IDS) {
    NHWC_PASS(a.channels, a.n / a.channels, c)
    float k = a.has_scale ? scale[c] : 1.0f, b = shift[c];
    float v[NHWC_PASS_ELEMENTS] = {0};
    FOR_NHWC_ROW(e) v[e] = S_LD(y, NHWC_ROW(e) * (uint)a.channels + c);
    ACT_SPECIALIZED(a.act, FOR_NHWC_ELEMENT(e) v[e] = act_forward((a.has_scale ? v[e] * k : v[e]) + b, act_, S_FAST_MATH);)
    FOR_NHWC_ROW(e) S_ST(y, NHWC_ROW(e) * (uint)a.channels + c, v[e]);
}

// y[:, dst_c0 + c] = (or += with accumulate) x[:, src_c0 + c] for c < count: copy_channels and
// add_channels. threads = batch * count * plane.
KERNEL(S_NAME(copy_channels))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(CopyChannelsArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    // per image b, the channels copied are one run of count * plane elements in x and in y
    int run = a.count * a.plane, b = i / run, j = i - b * run;
    float v = S_LD(x, (b * a.src_channels + a.src_c0) * a.plane + j);
    int o = (b * a.dst_channels + a.dst_c0) * a.plane + j;
    if (a.accumulate) v += S_LD(y, o);
    S_ST(y, o, v);
}

// The same on NHWC tensors seen as rows of pixels (channel_view: plane 1, a.n = rows * count): an
// NHWC_PASS (layout_index.h) over the run's count channels.
KERNEL(S_NAME(copy_channels_nhwc))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(CopyChannelsArgs, a, 2) KTHREAD_IDS) {
    NHWC_PASS(a.count, a.n / a.count, j)
    float v[NHWC_PASS_ELEMENTS];
    FOR_NHWC_ROW(k) {
        v[k] = S_LD(x, NHWC_ROW(k) * (uint)a.src_channels + (uint)a.src_c0 + j);
        if (a.accumulate) v[k] += S_LD(y, NHWC_ROW(k) * (uint)a.dst_channels + (uint)a.dst_c0 + j);
    }
    FOR_NHWC_ROW(k) S_ST(y, NHWC_ROW(k) * (uint)a.dst_channels + (uint)a.dst_c0 + j, v[k]);
}

// nearest-neighbour upsample: y[n,c,i,j] = scale * x[n,c,i/stride,j/stride]; threads = elements of y;
// either layout (layout_index.h)
KERNEL(S_NAME(upsample))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(ResampleArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int out_plane = a.out_w * a.out_h, pix = layout_pixel(i, a.channels, out_plane, a.nhwc);
    int ox = pix % a.out_w, oy = pix / a.out_w;
    int from = layout_base(i, a.channels, out_plane, a.in_h * a.in_w, a.nhwc) +
               ((oy / a.stride) * a.in_w + ox / a.stride) * layout_step(a.channels, a.nhwc);
    S_ST(y, i, a.scale * S_LD(x, from));
}

// Shortcut, one launch per input (so any number of `from` inputs), in order, each with threads =
// elements of y (a.n) and `in` bound to that input:
//   input 0:      y = w_0 * x                     (in = x, from_sample = sample)
//   input k >= 1: y += w_k * from[k-1] where it exists, by flat per-sample index i < from_sample
// Weights (fp32) are normalised per thread from the raw `weights` (bind any buffer when weights_mode
// = 0; shortcut_weight is in forward_layout.h).
KERNEL(S_NAME(shortcut))(KBUF(S_T, y, 0), KCBUF(S_T, in, 1), KCBUF(float, weights, 2),
                         KARGS(ShortcutArgs, a, 3) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int b = i / a.sample, j = i % a.sample;
    if (j >= a.from_sample) return;
    float w = 1.0f;
    if (a.weights_mode == 1) w = shortcut_weight(weights, 0, 1, a.inputs, a.input, a.norm);
    if (a.weights_mode == 2) w = shortcut_weight(weights, j / a.plane, a.channels, a.inputs, a.input, a.norm);
    float v = S_LD(in, b * a.from_sample + j) * w;
    if (a.input != 0) v += S_LD(y, i);
    S_ST(y, i, v);
}

// y = x + from, the common [shortcut] (one input beside x, unweighted, of x's shape: the sum is
// elementwise in either layout) in one pass, where shortcut's two launches write y twice; the same bits.
// Thread t takes the NHWC_PASS_ELEMENTS elements t + k * chunks (chunks = ceil(n / NHWC_PASS_ELEMENTS),
// threads = chunks), all loaded before any is stored.
KERNEL(S_NAME(shortcut_add))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KCBUF(S_T, from, 2),
                             KARGS(CountArgs, a, 3) KTHREAD_IDS) {
    uint chunks = ((uint)a.n + NHWC_PASS_ELEMENTS - 1) / NHWC_PASS_ELEMENTS, t = KGID;
    if (t >= chunks) return;
    float v[NHWC_PASS_ELEMENTS];
    for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k)
        if (t + (uint)k * chunks < (uint)a.n) v[k] = S_LD(x, t + (uint)k * chunks) + S_LD(from, t + (uint)k * chunks);
    for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k)
        if (t + (uint)k * chunks < (uint)a.n) S_ST(y, t + (uint)k * chunks, v[k]);
}

// maxpool (is_max = 1) and avgpool_local (0): window of size x size from (oy*stride_y - padding/2,
// ox*stride_x - padding/2), cells outside x skipped; average over the cells inside (0 if none). Either
// layout (layout_index.h), though maxpool runs NCHW tensors only: NHWC ones take maxpool_nhwc.
KFN float S_NAME(pool_window)(KGLOBAL const S_T* x, int i, KARGS_PARAM(PoolArgs) a, int is_max) {
    int out_plane = a.out_w * a.out_h, pix = layout_pixel(i, a.channels, out_plane, a.nhwc);
    int ox = pix % a.out_w, oy = pix / a.out_w;
    int base = layout_base(i, a.channels, out_plane, a.in_h * a.in_w, a.nhwc), step = layout_step(a.channels, a.nhwc);
    int off = -a.padding / 2;
    float best = -FLT_MAX_K, sum = 0.0f;
    int count = 0;
    for (int ky = 0; ky < a.size; ++ky)
        for (int kx = 0; kx < a.size; ++kx) {
            int iy = oy * a.stride_y + off + ky, ix = ox * a.stride_x + off + kx;
            if (iy < 0 || iy >= a.in_h || ix < 0 || ix >= a.in_w) continue;
            float v = S_LD(x, base + (iy * a.in_w + ix) * step);
            best = v > best ? v : best;
            sum += v;
            ++count;
        }
    return is_max ? best : (count ? sum / (float)count : 0.0f);
}

KERNEL(S_NAME(maxpool))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, S_NAME(pool_window)(x, i, a, 1));
}

// The NHWC_RUN (layout_index.h) of max pooling windows over output row `row` (= n * out_h + oy) of
// NHWC x: best[k], the max of window (oy, x0 + k), -FLT_MAX_K if no input is inside it, found as
// pool_window finds it (the first strictly greatest in (ky, kx) order); `won` runs when tap (iy, ix0 +
// k * stride_x) becomes window k's best (MAXPOOL_NHWC_ARGMAX). n (the image) is declared too. The taps
// are the outer loops and the run the inner one: a tap loads its value of every window of the run into
// v[] before comparing any, so those loads are in flight together (a compare between them would wait
// for each). A tap outside x (or past the row's end) reads as -FLT_MAX_K, which is never greater than
// best[k]: skipped, as pool_window skips it.
#define MAXPOOL_NHWC_WINDOWS(x, a, c, row, x0, n, best, won)                                                \
    float best[NHWC_PASS_ELEMENTS];                                                                        \
    for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k) best[k] = -FLT_MAX_K;                                     \
    int n = row / a.out_h;                                                                                 \
    for (int ky = 0; ky < a.size; ++ky) {                                                                  \
        int iy = (row - n * a.out_h) * a.stride_y - a.padding / 2 + ky;                                    \
        if (iy < 0 || iy >= a.in_h) continue;                                                              \
        for (int kx = 0; kx < a.size; ++kx) {                                                              \
            int ix0 = x0 * a.stride_x - a.padding / 2 + kx; /* the tap's column in window x0 */            \
            float v[NHWC_PASS_ELEMENTS];                                                                   \
            for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k) {                                                 \
                int ix = ix0 + k * a.stride_x;                                                             \
                v[k] = x0 + k < a.out_w && ix >= 0 && ix < a.in_w                                          \
                           ? S_LD(x, ((n * a.in_h + iy) * a.in_w + ix) * a.channels + c) : -FLT_MAX_K;    \
            }                                                                                              \
            for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k)                                                   \
                if (v[k] > best[k]) {                                                                      \
                    best[k] = v[k];                                                                        \
                    won;                                                                                   \
                }                                                                                          \
        }                                                                                                  \
    }
// The same with at[k], window k's argmax as pool_argmax (storage_training.h) gives it: the pixel
// iy * in_w + ix of image n, -1 if no input is inside the window.
#define MAXPOOL_NHWC_ARGMAX(x, a, c, row, x0, n, best, at)                                                  \
    int at[NHWC_PASS_ELEMENTS];                                                                            \
    for (int k = 0; k < NHWC_PASS_ELEMENTS; ++k) at[k] = -1;                                               \
    MAXPOOL_NHWC_WINDOWS(x, a, c, row, x0, n, best, at[k] = iy * a.in_w + ix0 + k * a.stride_x)

// maxpool on NHWC tensors: an NHWC_RUN over y's N * out_h rows (a.n = elements of y). Same windows,
// same comparisons, same bits as maxpool.
KERNEL(S_NAME(maxpool_nhwc))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    NHWC_RUN(a.channels, a.n / (a.channels * a.out_w), a.out_w, c, row, x0)
    MAXPOOL_NHWC_WINDOWS(x, a, c, row, x0, n, best, (void)0)
    FOR_NHWC_RUN(k, x0, a.out_w) S_ST(y, (row * a.out_w + x0 + k) * a.channels + c, best[k]);
}

KERNEL(S_NAME(avgpool_local))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, S_NAME(pool_window)(x, i, a, 0));
}

// Yolo head: logistic on every entry but w, h (entries 2, 3) unless new_coords, then x, y (entries
// 0, 1) scaled around 0.5 by scale_x_y. The sample's channels are anchors * entries, so the entry is
// (i / plane) % entries for the flat index over the whole batch. x in storage S, y always fp32 (the
// heads are read back, decoded and given to the loss in fp32); y may be x (in place) for fp32.
KERNEL(S_NAME(yolo_activate))(KBUF(float, y, 0), KCBUF(S_T, x, 1), KARGS(YoloActivateArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int entry = (i / a.plane) % a.entries;
    float v = S_LD(x, i);
    if (!a.new_coords && entry != 2 && entry != 3) v = 1.0f / (1.0f + exp(-v));
    if (entry < 2) v = v * a.scale_x_y - 0.5f * (a.scale_x_y - 1.0f);
    y[i] = v;
}

// im2col of a run of images: col[row, image * pixels + pixel] with row = (c * kh + ky) * kw + kx,
// pixel = oy * out_w + ox; zero where the kernel tap falls in the padding. One thread per (channel,
// image, output pixel) writes that pixel's kh * kw rows: the index arithmetic (integer divisions are
// slow on GPUs) is paid once per channel instead of once per element, and for each tap consecutive
// threads still write consecutive addresses. threads = channels * images * out_h * out_w. For
// grouped convolution pass the group's first channel in im_offset and its channel count in channels.
KERNEL(S_NAME(im2col))(KBUF(S_T, col, 0), KCBUF(S_T, im, 1), KARGS(Im2colImageArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int pixels = a.out_h * a.out_w;
    int pix = i % pixels, rest = i / pixels;
    int image = rest % a.images, c = rest / a.images;
    int ox = pix % a.out_w, oy = pix / a.out_w;
    int in_base = a.im_offset + image * a.image_stride + c * a.height * a.width;
    int out = a.col_offset + (c * a.kh * a.kw * a.images + image) * pixels + pix;  // row (c, 0, 0)
    int row_stride = a.images * pixels;
    for (int ky = 0; ky < a.kh; ++ky) {
        int iy = oy * a.stride_y - a.pad + ky * a.dilation;
        for (int kx = 0; kx < a.kw; ++kx) {
            int ix = ox * a.stride_x - a.pad + kx * a.dilation;
            int inside = iy >= 0 && iy < a.height && ix >= 0 && ix < a.width;
            S_ST(col, out, inside ? S_LD(im, in_base + iy * a.width + ix) : 0.0f);
            out += row_stride;
        }
    }
}

// The relayout kernels, one thread per element i of x, which is element relayout_at(i, ...) of y
// (layout_index.h). y = x reordered, in one storage type:
KERNEL(S_NAME(relayout))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(RelayoutArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, relayout_at(i, a.channels, a.plane, a.to_nhwc), S_LD(x, i));
}

// y = x reordered and stored in S, x fp32 (a half NHWC copy of fp32 weights or input in one pass)
KERNEL(S_NAME(pack_relayout))(KBUF(S_T, y, 0), KCBUF(float, x, 1), KARGS(RelayoutArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, relayout_at(i, a.channels, a.plane, a.to_nhwc), x[i]);
}

// y += alpha x reordered, y fp32 (a KRSC weight gradient added into the fp32 KCRS one; alpha puts back
// the loss scale an fp16 one was formed without)
KERNEL(S_NAME(add_relayout_into_f32))(KBUF(float, y, 0), KCBUF(S_T, x, 1), KARGS(RelayoutAddArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    y[relayout_at(i, a.channels, a.plane, a.to_nhwc)] += a.alpha * S_LD(x, i);
}

// y[b][a][p] (+)= x[a][b][p]: one thread per element of x.
KERNEL(S_NAME(swap_axes))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(SwapAxesArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int p = i % a.plane, r = i / a.plane;
    int bi = r % a.b, ai = r / a.b;
    int o = a.y_offset + (bi * a.a + ai) * a.plane + p;
    float v = S_LD(x, a.x_offset + i);
    S_ST(y, o, a.accumulate ? S_LD(y, o) + v : v);
}

// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, with element offsets so that one
// buffer can hold a batch of matrices. One group of 256 threads per 16x16 tile of C (a 1-D grid of
// ceil(M/16) * tiles_n groups), one thread per C element; 16x16 slices of op(A) and op(B) are staged
// in threadgroup memory. Every thread loads and reaches every barrier, also outside C (it loads
// zeros there), and only the write is guarded. The tiles and the sum are fp32 in every storage type.
// C is in storage S, or fp32 when a.c_f32 (then C32 is C and `C` is any buffer; half training's
// weight gradient and column matrix: fp32 results of half operands, never rounded to half).
KERNEL(S_NAME(gemm))(KCBUF(S_T, A, 0), KCBUF(S_T, B, 1), KBUF(S_T, C, 2), KBUF(float, C32, 3),
                     KARGS(GemmArgs, a, 4) KTHREAD_IDS) {
    // Rows padded to 17 floats: the transposed loads store a column per thread row, and 16 would
    // put all 16 of them in one bank.
    KSHARED float as[16 * 17];  // as[r * 17 + k] = op(A)[row0 + r, k0 + k]
    KSHARED float bs[16 * 17];  // bs[k * 17 + c] = op(B)[k0 + k, col0 + c]
    int ty = (int)(KLID / 16), tx = (int)(KLID % 16);
    int row0 = (int)(KGROUP / (uint)a.tiles_n) * 16, col0 = (int)(KGROUP % (uint)a.tiles_n) * 16;
    float sum = 0.0f;
    for (int k0 = 0; k0 < a.K; k0 += 16) {
        // Consecutive tx read consecutive addresses in both layouts (coalesced): for a transposed
        // operand the thread's (ty, tx) roles swap and it stores the element transposed.
        if (!a.trans_a) {  // op(A)[r, k] = A[r * lda + k]
            int r = row0 + ty, k = k0 + tx;
            as[ty * 17 + tx] = (r < a.M && k < a.K) ? S_LD(A, a.a_offset + r * a.lda + k) : 0.0f;
        } else {  // op(A)[r, k] = A[k * lda + r]
            int r = row0 + tx, k = k0 + ty;
            as[tx * 17 + ty] = (r < a.M && k < a.K) ? S_LD(A, a.a_offset + k * a.lda + r) : 0.0f;
        }
        if (!a.trans_b) {  // op(B)[k, c] = B[k * ldb + c]
            int k = k0 + ty, c = col0 + tx;
            bs[ty * 17 + tx] = (k < a.K && c < a.N) ? S_LD(B, a.b_offset + k * a.ldb + c) : 0.0f;
        } else {  // op(B)[k, c] = B[c * ldb + k]
            int k = k0 + tx, c = col0 + ty;
            bs[tx * 17 + ty] = (k < a.K && c < a.N) ? S_LD(B, a.b_offset + c * a.ldb + k) : 0.0f;
        }
        KBARRIER();
        for (int k = 0; k < 16; ++k) sum += as[ty * 17 + k] * bs[k * 17 + tx];
        KBARRIER();  // the next slice overwrites the tiles
    }
    int r = row0 + ty, c = col0 + tx;
    if (r < a.M && c < a.N) {
        int i = a.c_offset + r * a.ldc + c;
        // beta == 0 must not read C: it may hold garbage (NaN * 0 is NaN).
        if (a.c_f32)
            C32[i] = (a.beta == 0.0f ? 0.0f : a.beta * C32[i]) + a.alpha * sum;
        else
            S_ST(C, i, (a.beta == 0.0f ? 0.0f : a.beta * S_LD(C, i)) + a.alpha * sum);
    }
}

// dx += col2im(col) for a run of images: the adjoint of im2col as a gather. One thread per image
// element (image, c, iy, ix) sums every column-matrix entry that im2col copied from it: the (ky, kx)
// taps with oy * stride_y - pad + ky * dilation == iy (and likewise for x) at an output position
// inside the output. Each dx element has one writer, so no atomics. The column matrix is fp32 in
// every storage type (the GEMM that makes it writes fp32: see gemm), so dx in half is rounded once,
// at its store. n = images * channels * height * width threads.
KERNEL(S_NAME(col2im))(KCBUF(float, col, 0), KBUF(S_T, dx, 1), KARGS(Col2imArgs, a, 2) KTHREAD_IDS) {
    uint t = KGID;
    if (t >= (uint)a.n) return;
    uint per_image = (uint)(a.channels * a.height * a.width);
    int image = (int)(t / per_image);
    uint i = t % per_image;
    int ix = (int)(i % (uint)a.width), iy = (int)((i / (uint)a.width) % (uint)a.height);
    int c = (int)(i / (uint)(a.width * a.height));
    int out_plane = a.out_h * a.out_w;
    int span = out_plane * a.images;  // one row of the column matrix
    float sum = 0.0f;
    for (int ky = 0; ky < a.kh; ++ky) {
        // ty = oy * stride_y for the output row that reads iy (stride 1, the common case, needs no
        // division: integer divisions dominated this kernel on the H100)
        int ty = iy + a.pad - ky * a.dilation;
        if (ty < 0) continue;
        int oy = a.stride_y == 1 ? ty : ty / a.stride_y;
        if (oy * a.stride_y != ty || oy >= a.out_h) continue;
        for (int kx = 0; kx < a.kw; ++kx) {
            int tx = ix + a.pad - kx * a.dilation;
            if (tx < 0) continue;
            int ox = a.stride_x == 1 ? tx : tx / a.stride_x;
            if (ox * a.stride_x != tx || ox >= a.out_w) continue;
            int row = (c * a.kh + ky) * a.kw + kx;
            sum += col[a.col_offset + row * span + image * out_plane + oy * a.out_w + ox];
        }
    }
    int o = a.im_offset + image * a.image_stride + (int)i;
    S_ST(dx, o, S_LD(dx, o) + sum);
}

// y[i] += alpha x[i] with x in storage S and y fp32: a half result added into an fp32 accumulator (cuDNN's
// half weight gradient into the fp32 gradient, alpha the loss scale it was formed without: PRECISION.md).
KERNEL(S_NAME(add_into_f32))(KBUF(float, y, 0), KCBUF(S_T, x, 1), KARGS(ScaledArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    y[i] += a.alpha * S_LD(x, i);
}
