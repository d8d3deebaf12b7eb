// [softmax]: softmax over each sample's features (split in `groups`), with temperature.
#include "layer.h"

namespace dn {

namespace {

class Softmax final : public Layer {
public:
    const char* type() const override { return "softmax"; }
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        be.softmax(x, groups, temperature, y);
    }
    void backward(Backend& be, const Tensor&, const Tensor& y, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        if (dx) be.softmax_backward(y, dy, groups, temperature, *dx);
    }
    std::string describe() const override { return groups > 1 ? std::to_string(groups) + " groups" : ""; }
    int groups = 1;
    float temperature = 1.0f;
};

}  // namespace

std::unique_ptr<Layer> make_softmax(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Softmax>();
    l->groups = s.get_int("groups", 1, 1, 1 << 20);
    l->temperature = s.get_float("temperature", 1.0f);
    if (l->temperature <= 0) s.fail("temperature", "temperature must be > 0");
    if (ctx.input.sample() % l->groups != 0) s.fail("groups", "groups does not divide the number of inputs");
    l->in = l->out = ctx.input;
    return l;
}

}  // namespace dn
