// Layers that do nothing at inference: [dropout] (identity at inference; in training it zeroes
// inputs with `probability` and scales the rest by 1/(1-p), as Darknet) and [cost] (a classifier's
// loss; its output is its input and its gradient passes straight through).
#include "layer.h"

namespace dn {

namespace {

class Passthrough final : public Layer {
public:
    explicit Passthrough(const char* t) : name(t) {}
    const char* type() const override { return name; }
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        be.copy_channels(x, 0, y, 0, x.shape().c);
    }
    void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) override {
        if (probability <= 0) return forward(be, x, y, outputs);
        if (x.dtype() != DType::f32)  // (its mask multiply is fp32 only: src-lib/gpu/PRECISION.md)
            throw DarknetError("layer " + std::to_string(index) + " [dropout] trains in fp32 only so far, not in " +
                               dtype_name(x.dtype()) + " (probability=" + std::to_string(probability) + ")");
        be.resize(mask_, x.shape());
        // a new mask per call: the seed counts this layer's draws (same masks on every backend)
        be.dropout_mask(mask_, probability, ((uint64_t)index << 32) | draws_++);
        be.mul(x, mask_, y);
    }
    void backward(Backend& be, const Tensor&, const Tensor&, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        if (!dx) return;
        if (probability <= 0 || mask_.empty()) return be.add_channels(dy, 0, *dx, 0, dy.shape().c);
        be.mul(dy, mask_, dy);
        be.add_channels(dy, 0, *dx, 0, dy.shape().c);
    }
    const char* name;
    float probability = 0.0f;  // 0 for [cost]

private:
    Tensor mask_;
    uint32_t draws_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_dropout(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Passthrough>("dropout");
    l->probability = s.get_float("probability", 0.5f);
    if (l->probability < 0 || l->probability >= 1) s.fail("probability", "probability must be in [0, 1)");
    // DropBlock options: training only.
    s.get_int("dropblock", 0);
    s.get_float("dropblock_size_rel", 0);
    s.get_int("dropblock_size_abs", 0);
    l->in = l->out = ctx.input;
    return l;
}

std::unique_ptr<Layer> make_cost(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Passthrough>("cost");
    std::string t = s.get_string("type", "sse");
    if (t != "sse" && t != "masked" && t != "smooth" && t != "L1" && t != "seg" && t != "wgan")
        s.fail("type", "unknown cost type '" + t + "'");
    s.get_float("scale", 1.0f);
    s.get_float("ratio", 0.0f);
    l->in = l->out = ctx.input;
    return l;
}

}  // namespace dn
