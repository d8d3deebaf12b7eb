// [upsample]: nearest-neighbour by `stride`, times `scale`. A negative stride is Darknet's
// downsampling variant: each stride x stride block summed, times scale.
#include "layer.h"

namespace dn {

namespace {

class Upsample final : public Layer {
public:
    const char* type() const override { return reverse ? "downsample" : "upsample"; }
    bool runs_channels_last() const override { return !reverse; }
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        if (reverse) be.downsample_sum(x, stride, scale, y);
        else be.upsample(x, stride, scale, y);
    }
    void backward(Backend& be, const Tensor&, const Tensor&, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        if (!dx) return;
        if (reverse) be.downsample_sum_backward(dy, stride, scale, *dx);
        else be.upsample_backward(dy, stride, scale, *dx);
    }
    std::string describe() const override { return std::to_string(stride) + "x"; }

    int stride = 2;
    bool reverse = false;
    float scale = 1.0f;
};

}  // namespace

std::unique_ptr<Layer> make_upsample(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Upsample>();
    int stride = s.get_int("stride", 2, -64, 64);
    if (stride == 0) s.fail("stride", "stride=0 is not allowed (positive upsamples, negative downsamples)");
    l->reverse = stride < 0;
    l->stride = stride < 0 ? -stride : stride;
    l->scale = s.get_float("scale", 1.0f);
    const Shape& in = ctx.input;
    l->in = in;
    if (l->reverse) {
        if (in.w / l->stride == 0 || in.h / l->stride == 0)
            s.fail("stride", "cannot downsample " + std::to_string(in.w) + "x" + std::to_string(in.h) + " by " +
                                 std::to_string(l->stride));
        l->out = chw(in.c, in.h / l->stride, in.w / l->stride);
    } else {
        s.check_size("stride", "the output", {(double)in.c, (double)in.h * l->stride, (double)in.w * l->stride});
        l->out = chw(in.c, in.h * l->stride, in.w * l->stride);
    }
    return l;
}

}  // namespace dn
