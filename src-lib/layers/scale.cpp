// [scale_channels] (squeeze-and-excitation: from-layer output times a per-channel or per-pixel
// scale from the input) and [sam] (spatial attention: elementwise product with the from-layer).
#include "layer.h"

namespace dn {

namespace {

class ScaleChannels final : public Layer {
public:
    const char* type() const override { return "scale_channels"; }
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) override {
        be.scale_channels(x, outputs[from], scale_wh, y);
        be.activate(y, activation);
    }
    void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) override {
        be.scale_channels(x, outputs[from], scale_wh, y);
        activation_.forward(be, y, activation);
    }
    void backward(Backend& be, const Tensor& x, const Tensor& y, Tensor& dy, Tensor* dx, const LayerOutputs& outputs,
                  std::vector<Tensor>& deltas) override {
        activation_.backward(be, y, dy, activation);
        if (!dx) be.resize(scratch_, x.shape());
        be.scale_channels_backward(x, outputs[from], scale_wh, dy, dx ? *dx : scratch_, deltas[from]);
    }
    std::vector<int> sources() const override { return {from}; }
    std::string describe() const override { return std::to_string(from); }
    int from = 0;
    bool scale_wh = false;
    Activation activation = Activation::linear;

private:
    TrainingActivation activation_;
    Tensor scratch_;
};

class Sam final : public Layer {
public:
    const char* type() const override { return "sam"; }
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) override {
        be.mul(x, outputs[from], y);
        be.activate(y, activation);
    }
    void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) override {
        be.mul(x, outputs[from], y);
        activation_.forward(be, y, activation);
    }
    void backward(Backend& be, const Tensor& x, const Tensor& y, Tensor& dy, Tensor* dx, const LayerOutputs& outputs,
                  std::vector<Tensor>& deltas) override {
        activation_.backward(be, y, dy, activation);
        if (!dx) be.resize(scratch_, x.shape());
        be.mul_backward(x, outputs[from], dy, dx ? *dx : scratch_, deltas[from]);
    }
    std::vector<int> sources() const override { return {from}; }
    std::string describe() const override { return std::to_string(from); }
    int from = 0;
    Activation activation = Activation::linear;

private:
    TrainingActivation activation_;
    Tensor scratch_;
};

}  // namespace

std::unique_ptr<Layer> make_scale_channels(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<ScaleChannels>();
    if (!s.has("from")) s.fail("", "scale_channels needs from=");
    l->from = ctx.resolve(s, "from", s.get_int("from", 0));
    l->scale_wh = s.get_int("scale_wh", 0, 0, 1) != 0;
    l->activation = parse_activation(s, "linear");
    const Shape& f = ctx.built[l->from]->out;
    const Shape& in = ctx.input;
    bool ok = l->scale_wh ? (in.c == 1 && in.h == f.h && in.w == f.w) : (in.c == f.c && in.h == 1 && in.w == 1);
    if (!ok)
        s.fail("from", "input " + std::to_string(in.c) + "x" + std::to_string(in.h) + "x" + std::to_string(in.w) +
                           " does not match layer " + std::to_string(l->from) + " (" + std::to_string(f.c) + "x" +
                           std::to_string(f.h) + "x" + std::to_string(f.w) + "): expected " +
                           (l->scale_wh ? "1 x H x W" : "C x 1 x 1"));
    l->in = in;
    l->out = f;
    return l;
}

std::unique_ptr<Layer> make_sam(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Sam>();
    if (!s.has("from")) s.fail("", "sam needs from=");
    l->from = ctx.resolve(s, "from", s.get_int("from", 0));
    l->activation = parse_activation(s, "linear");
    const Shape& f = ctx.built[l->from]->out;
    if (f != ctx.input)
        s.fail("from", "layer " + std::to_string(l->from) + " output " + f.str() + " differs from the input " +
                           ctx.input.str() + " (sam multiplies them elementwise)");
    l->in = ctx.input;
    l->out = ctx.input;
    return l;
}

}  // namespace dn
