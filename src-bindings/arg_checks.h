// Argument checks for the bindings: every array, shape, index and count that crosses from Python is
// checked here before the engine sees it, because the engine's ops trust their shapes (the fast
// loops index raw pointers). A bad argument raises DarknetError naming the call, the argument, what
// was expected and what came; never an out-of-bounds access.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "bindings.h"
#include "errors.h"

namespace dn_py {

// The most elements one argument or result may have (8 GiB of floats): beyond it a shape is a mistake,
// and an allocation that size would take the machine down rather than raise.
constexpr int64_t MAX_ELEMENTS = int64_t(1) << 31;

[[noreturn]] inline void bad_arg(const std::string& call, const std::string& arg, const std::string& expected,
                                 const std::string& got) {
    throw dn::DarknetError(call + ": " + arg + " must be " + expected + ", got " + got);
}

inline std::string dims_str(const py::array& a) {
    std::string s = "an array of shape (";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

inline void check_ndim(const std::string& call, const std::string& arg, const py::array& a, int ndim) {
    if (a.ndim() != ndim) bad_arg(call, arg, "a " + std::to_string(ndim) + "-D float32 array", dims_str(a));
}

// An NCHW argument: 4-D, every dimension at least `min_dim` (1: no empty tensors).
inline Shape nchw(const std::string& call, const std::string& arg, const py::array& a, int min_dim = 1) {
    check_ndim(call, arg, a, 4);
    for (int i = 0; i < 4; ++i)
        if (a.shape(i) < min_dim || a.shape(i) > (py::ssize_t)(1 << 30))  // Shape holds ints
            bad_arg(call, arg, "an NxCxHxW array with every dimension in " + std::to_string(min_dim) + "..2^30",
                    dims_str(a));
    return Shape{(int)a.shape(0), (int)a.shape(1), (int)a.shape(2), (int)a.shape(3)};
}

inline void check_shape(const std::string& call, const std::string& arg, const Shape& got, const Shape& want) {
    if (got != want) bad_arg(call, arg, "of shape " + want.str() + " (NxCxHxW)", got.str());
}

inline void check_size(const std::string& call, const std::string& arg, size_t got, size_t want) {
    if (got != want) bad_arg(call, arg, std::to_string(want) + " values", std::to_string(got));
}

inline void check_range(const std::string& call, const std::string& arg, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        bad_arg(call, arg, "in " + std::to_string(lo) + ".." + std::to_string(hi), std::to_string(v));
}

inline void check_min(const std::string& call, const std::string& arg, int64_t v, int64_t lo) {
    if (v < lo) bad_arg(call, arg, ">= " + std::to_string(lo), std::to_string(v));
}

// A result shape computed from arguments (in 64 bits, so that no int overflows first): every entry
// at least 1 and the whole within MAX_ELEMENTS.
inline Shape result_shape(const std::string& call, const std::string& what, int64_t n, int64_t c, int64_t h,
                          int64_t w) {
    std::string got = std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
    if (n < 1 || c < 1 || h < 1 || w < 1) bad_arg(call, what, "non-empty (every dimension >= 1)", got);
    if (n > MAX_ELEMENTS || c > MAX_ELEMENTS || h > MAX_ELEMENTS || w > MAX_ELEMENTS ||
        n * c > MAX_ELEMENTS || n * c * h > MAX_ELEMENTS || n * c * h * w > MAX_ELEMENTS)
        bad_arg(call, what, "at most " + std::to_string(MAX_ELEMENTS) + " elements", got);
    return Shape{(int)n, (int)c, (int)h, (int)w};
}

// A shape given as a list (n, c, h, w).
inline Shape shape_arg(const std::string& call, const std::string& arg, const std::vector<int>& v) {
    if (v.size() != 4) bad_arg(call, arg, "4 entries (n, c, h, w)", std::to_string(v.size()) + " entries");
    return result_shape(call, arg, v[0], v[1], v[2], v[3]);
}

// The convolution output (x.n, w.n, oh, ow) after checking the geometry against x and w (w: [out_c,
// in_c/groups, kh, kw]). Two output sizes are valid: backend.h's rule, which counts the dilated kernel
// extent, and Darknet's layer rule, which ignores dilation (taps outside the input then read zeros).
inline Shape conv_output(const std::string& call, const Shape& x, const Shape& w, const dn::ConvGeom& g, int64_t oh,
                         int64_t ow, const std::string& out_arg = "(out_h, out_w)") {
    check_min(call, "stride_y", g.stride_y, 1);
    check_min(call, "stride_x", g.stride_x, 1);
    check_range(call, "dilation", g.dilation, 1, 1 << 20);
    check_range(call, "pad", g.pad, 0, 1 << 20);
    check_min(call, "groups", g.groups, 1);
    if (x.c % g.groups || w.n % g.groups)
        bad_arg(call, "groups", "a divisor of x's channels (" + std::to_string(x.c) + ") and w's filters (" +
                                    std::to_string(w.n) + ")", std::to_string(g.groups));
    if (w.c != x.c / g.groups)
        bad_arg(call, "w", "of shape Fx" + std::to_string(x.c / g.groups) + "xKHxKW (x's channels / groups)",
                w.str());
    auto rule = [&](int64_t in, int64_t k, int64_t stride, bool dilated) {
        int64_t extent = dilated ? (int64_t)g.dilation * (k - 1) + 1 : k;
        int64_t span = in + 2 * (int64_t)g.pad - extent;
        return span < 0 ? 0 : span / stride + 1;
    };
    int64_t h1 = rule(x.h, w.h, g.stride_y, true), w1 = rule(x.w, w.w, g.stride_x, true);
    int64_t h2 = rule(x.h, w.h, g.stride_y, false), w2 = rule(x.w, w.w, g.stride_x, false);
    if (!((oh == h1 && ow == w1) || (oh == h2 && ow == w2)))
        bad_arg(call, out_arg,
                std::to_string(h1) + "x" + std::to_string(w1) + " (backend.h's rule) or " + std::to_string(h2) + "x" +
                    std::to_string(w2) + " (Darknet's layer rule, dilation ignored) for x " + x.str() + " and w " +
                    w.str(), std::to_string(oh) + "x" + std::to_string(ow));
    return result_shape(call, "the output", x.n, w.n, oh, ow);
}

// Pooling output size, as backend.h defines it: (in + padding - size) / stride + 1.
inline Shape pool_output(const std::string& call, const Shape& x, const dn::PoolGeom& g) {
    check_min(call, "size", g.size, 1);
    check_min(call, "stride_y", g.stride_y, 1);
    check_min(call, "stride_x", g.stride_x, 1);
    check_min(call, "padding", g.padding, 0);
    int64_t oh = ((int64_t)x.h + g.padding - g.size) / g.stride_y + 1;
    int64_t ow = ((int64_t)x.w + g.padding - g.size) / g.stride_x + 1;
    if ((int64_t)x.h + g.padding < g.size || (int64_t)x.w + g.padding < g.size)
        bad_arg(call, "size", "at most the padded input (" + std::to_string(x.h + (int64_t)g.padding) + "x" +
                                  std::to_string(x.w + (int64_t)g.padding) + ")", std::to_string(g.size));
    return result_shape(call, "the output (from x, size, stride, padding)", x.n, x.c, oh, ow);
}

// A channel range [c0, c0 + count) inside a tensor of `channels`.
inline void check_channels(const std::string& call, const std::string& arg, int c0, int count, int channels) {
    if (count < 0 || c0 < 0 || (int64_t)c0 + count > channels)
        bad_arg(call, arg, "a channel range inside 0.." + std::to_string(channels),
                "[" + std::to_string(c0) + ", " + std::to_string((int64_t)c0 + count) + ")");
}

// The output shape of Ops.pool / the dy of Ops.pool_backward for `kind`; `given` supplies the channel
// count that max_depth leaves open (its output keeps h and w and takes any channel count: a channel with
// no input channel k % out_c == c holds -FLT_MAX).
inline Shape pool_shape(const std::string& call, const std::string& kind, const Shape& x, const dn::PoolGeom& g,
                        const Shape& given) {
    if (kind == "max" || kind == "local_avg") return pool_output(call, x, g);
    if (kind == "global_avg") return Shape{x.n, x.c, 1, 1};
    if (kind == "max_depth") {
        return result_shape(call, "the output", x.n, given.c, x.h, x.w);
    }
    throw dn::DarknetError(call + ": kind must be 'max', 'local_avg', 'global_avg' or 'max_depth', got '" + kind + "'");
}

// copy_channels / add_channels: x and y share n, h, w; both channel ranges inside their tensors.
inline void check_channel_copy(const std::string& call, const FloatArray& x, int src_c0, const FloatArray& y,
                               int dst_c0, int count) {
    Shape xs = nchw(call, "x", x), ys = nchw(call, "y", y);
    check_shape(call, "y", ys, Shape{xs.n, ys.c, xs.h, xs.w});
    check_channels(call, "[src_c0, src_c0 + count)", src_c0, count, xs.c);
    check_channels(call, "[dst_c0, dst_c0 + count)", dst_c0, count, ys.c);
}

// shortcut: every `from` has x's batch (Darknet adds them by flat per-sample index where they
// overlap, so c, h, w may differ); weights: one per input (per_feature) or per input and channel
// (per_channel). Returns x's shape (the output's and dy's).
inline Shape check_shortcut(const std::string& call, const FloatArray& x, const std::vector<FloatArray>& from,
                            const FloatArray& weights, int weights_type, int norm) {
    Shape xs = nchw(call, "x", x);
    for (size_t k = 0; k < from.size(); ++k) {
        Shape fs = nchw(call, "from[" + std::to_string(k) + "]", from[k]);
        if (fs.n != xs.n) bad_arg(call, "from[" + std::to_string(k) + "]", "of x's batch " + std::to_string(xs.n), fs.str());
    }
    check_range(call, "weights_type (0 none, 1 per_feature, 2 per_channel)", weights_type, 0, 2);
    check_range(call, "norm (0 none, 1 relu, 2 softmax)", norm, 0, 2);
    size_t inputs = from.size() + 1;
    size_t want = weights_type == 0 ? 0 : weights_type == 1 ? inputs : inputs * xs.c;
    if (weights_type != 0 || weights.size() != 0) check_size(call, "weights", weights.size(), want);
    return xs;
}

// Darknet's reorg_cpu(x, w, h, c, stride): the w x h x c loop must tile x exactly, c must split into
// stride^2 groups, and the result keeps the element count.
inline void check_reorg(const std::string& call, const Shape& x, const Shape& y, int w, int h, int c, int stride) {
    check_min(call, "w", w, 1), check_min(call, "h", h, 1), check_min(call, "c", c, 1);
    check_min(call, "stride", stride, 1);
    int64_t per = (int64_t)w * h * c, total = (int64_t)x.size();
    if (total % per) bad_arg(call, "w * h * c", "a divisor of the input's " + std::to_string(total) + " elements", std::to_string(per));
    if (c % ((int64_t)stride * stride))
        bad_arg(call, "c", "a multiple of stride^2 (" + std::to_string((int64_t)stride * stride) + ")", std::to_string(c));
    check_size(call, "the result shape's element count", y.size(), x.size());
}

// scale_channels: s is [n, c, 1, 1] (per channel) or, with scale_wh, [n, 1, h, w]. Returns from's shape.
inline Shape check_scale_channels(const std::string& call, const FloatArray& s, const FloatArray& from, bool scale_wh) {
    Shape fs = nchw(call, "from", from), ss = nchw(call, "s", s);
    check_shape(call, "s", ss, scale_wh ? Shape{fs.n, 1, fs.h, fs.w} : Shape{fs.n, fs.c, 1, 1});
    return fs;
}

inline void check_groups(const std::string& call, const Shape& x, int groups) {
    check_min(call, "groups", groups, 1);
    if (x.sample() % groups)
        bad_arg(call, "groups", "a divisor of the " + std::to_string(x.sample()) + " values per sample", std::to_string(groups));
}

}  // namespace dn_py
