// [maxpool], [local_avgpool] and [avgpool] (global average).
// Darknet: stride defaults to 1, size to stride, padding to size-1; windows start at -padding/2.
#include "layer.h"

namespace dn {

namespace {

class Pool final : public Layer {
public:
    enum Kind { max, local_avg, max_depth };
    explicit Pool(Kind k) : kind(k) {}
    const char* type() const override { return kind == local_avg ? "local_avg" : "max"; }
    bool runs_channels_last() const override { return kind != max_depth; }

    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        if (kind == max_depth) be.maxpool_depth(x, y);
        else if (kind == max) be.maxpool(x, geom, y);
        else be.avgpool_local(x, geom, y);
    }
    void backward(Backend& be, const Tensor& x, const Tensor&, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        if (!dx) return;
        if (kind == max_depth) be.maxpool_depth_backward(x, dy, *dx);
        else if (kind == max) be.maxpool_backward(x, dy, geom, *dx);
        else be.avgpool_local_backward(x, dy, geom, *dx);
    }
    double bflops() const override {
        return kind == max_depth ? (double)in.size() / 1e9 : (double)geom.size * geom.size * out.size() / 1e9;
    }
    std::string describe() const override {
        if (kind == max_depth) return "depth -> " + std::to_string(out.c);
        std::string d = std::to_string(geom.size) + "x" + std::to_string(geom.size) + "/" + std::to_string(geom.stride_x);
        if (geom.stride_y != geom.stride_x) d += "x" + std::to_string(geom.stride_y);
        return d;
    }

    Kind kind;
    PoolGeom geom;
};

std::unique_ptr<Layer> make_pool(const Section& s, const BuildContext& ctx, bool average) {
    int stride = s.get_int("stride", 1, 1, 1024);
    int stride_x = s.get_int("stride_x", stride, 1, 1024);
    int stride_y = s.get_int("stride_y", stride, 1, 1024);
    int size = s.get_int("size", stride, 1, 1024);
    int padding = s.get_int("padding", size - 1, 0, 1024);
    bool depth = !average && s.get_int("maxpool_depth", 0, 0, 1) != 0;
    int out_channels = depth ? s.get_int("out_channels", 1, 1, 1 << 20) : 0;
    const Shape& in = ctx.input;

    auto l = std::make_unique<Pool>(depth ? Pool::max_depth : (average ? Pool::local_avg : Pool::max));
    l->geom = PoolGeom{size, stride_y, stride_x, padding};
    l->in = in;
    if (depth) {
        l->out = chw(out_channels, in.h, in.w);
        return l;
    }
    int out_h = (in.h + padding - size) / stride_y + 1;
    int out_w = (in.w + padding - size) / stride_x + 1;
    if (in.h + padding < size || in.w + padding < size)
        s.fail("size", "a " + std::to_string(size) + "x" + std::to_string(size) + " window does not fit the " +
                           std::to_string(in.w) + "x" + std::to_string(in.h) + " input");
    l->out = chw(in.c, out_h, out_w);
    return l;
}

class GlobalAvgPool final : public Layer {
public:
    const char* type() const override { return "avg"; }
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override { be.avgpool_global(x, y); }
    void backward(Backend& be, const Tensor&, const Tensor&, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        if (dx) be.avgpool_global_backward(dy, *dx);
    }
    double bflops() const override { return (double)in.size() / 1e9; }
};

}  // namespace

std::unique_ptr<Layer> make_maxpool(const Section& s, const BuildContext& ctx) { return make_pool(s, ctx, false); }
std::unique_ptr<Layer> make_local_avgpool(const Section& s, const BuildContext& ctx) { return make_pool(s, ctx, true); }

std::unique_ptr<Layer> make_avgpool(const Section&, const BuildContext& ctx) {
    auto l = std::make_unique<GlobalAvgPool>();
    l->in = ctx.input;
    l->out = chw(ctx.input.c, 1, 1);
    return l;
}

}  // namespace dn
