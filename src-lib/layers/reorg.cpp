// [reorg3d] (space-to-depth) and [reorg] (YOLOv2's original reorg with its index quirk).
// Both are Darknet's reorg_cpu; they differ only in which dimensions Darknet passes to it:
// [reorg3d] the output's, [reorg] the input's (see Darknet's reorg_layer.c / reorg_old_layer.c).
#include "layer.h"

namespace dn {

namespace {

class Reorg final : public Layer {
public:
    explicit Reorg(bool old) : old_layout(old) {}
    const char* type() const override { return old_layout ? "reorg" : "reorg3d"; }
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        const Shape& d = old_layout ? in : out;
        be.reorg(x, d.w, d.h, d.c, stride, reverse, y);
    }
    void backward(Backend& be, const Tensor&, const Tensor&, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        const Shape& d = old_layout ? in : out;
        if (dx) be.reorg_backward(dy, d.w, d.h, d.c, stride, reverse, *dx);
    }
    std::string describe() const override { return "/" + std::to_string(stride) + (reverse ? " reverse" : ""); }
    bool old_layout;
    int stride = 1;
    bool reverse = false;
};

std::unique_ptr<Layer> make(const Section& s, const BuildContext& ctx, bool old) {
    auto l = std::make_unique<Reorg>(old);
    l->stride = s.get_int("stride", 1, 1, 64);
    l->reverse = s.get_int("reverse", 0, 0, 1) != 0;
    const Shape& in = ctx.input;
    int st = l->stride, s2 = st * st;
    if (l->reverse) {
        if (in.c % s2 != 0)
            s.fail("stride", "reverse reorg needs channels (" + std::to_string(in.c) + ") divisible by stride^2");
        // Darknet's [reorg3d] reverse passes the output dims to reorg_cpu, which divides them by stride^2 again
        if (!old && (in.c / s2) % s2 != 0)
            s.fail("reverse", "[reorg3d] reverse needs channels (" + std::to_string(in.c) + ") divisible by stride^4");
        s.check_size("stride", "the output", {(double)(in.c / s2), (double)in.h * st, (double)in.w * st});
        l->out = chw(in.c / s2, in.h * st, in.w * st);
    } else {
        if (in.w % st != 0 || in.h % st != 0)
            s.fail("stride", "input " + std::to_string(in.w) + "x" + std::to_string(in.h) +
                                 " is not divisible by stride=" + std::to_string(st));
        if (old && in.c % s2 != 0)
            s.fail("stride", "[reorg] needs channels (" + std::to_string(in.c) + ") divisible by stride^2");
        l->out = chw(in.c * s2, in.h / st, in.w / st);
    }
    l->in = in;
    return l;
}

}  // namespace

std::unique_ptr<Layer> make_reorg(const Section& s, const BuildContext& ctx) { return make(s, ctx, true); }
std::unique_ptr<Layer> make_reorg3d(const Section& s, const BuildContext& ctx) { return make(s, ctx, false); }

}  // namespace dn
