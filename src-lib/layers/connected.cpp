// [connected]: fully connected, y = act(bn(W x) or W x + b). W is [outputs, inputs], as Darknet stores it.
#include "layer.h"

namespace dn {

namespace {

class Connected final : public Layer {
public:
    const char* type() const override { return "connected"; }

    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        int batch = x.shape().n, inputs = (int)in.sample(), outputs = out.c;
        be.gemm(false, true, batch, outputs, inputs, 1.0f, x.data(), inputs, weights.data(), inputs, 0.0f, y.data(),
                outputs);
        if (batch_normalize)
            be.batchnorm_inference(y, rolling_mean.data(), rolling_variance.data(), scales.data(), biases.data(), 1e-5f);
        else
            be.add_bias(y, biases.data());
        be.activate(y, activation);
    }
    // Darknet's file order for connected: biases, weights, then the batchnorm triple.
    std::vector<ParamBlock> params() override {
        if (batch_normalize)
            return {{"biases", &biases}, {"weights", &weights}, {"scales", &scales}, {"rolling_mean", &rolling_mean},
                    {"rolling_variance", &rolling_variance}};
        return {{"biases", &biases}, {"weights", &weights}};
    }
    double bflops() const override { return 2.0 * weights.size() / 1e9; }
    std::string describe() const override {
        return std::to_string(in.sample()) + " -> " + std::to_string(out.c) + " " + activation_name(activation);
    }

    bool batch_normalize = false;
    Activation activation = Activation::logistic;
    Tensor weights, biases, scales, rolling_mean, rolling_variance;
};

}  // namespace

std::unique_ptr<Layer> make_connected(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Connected>();
    int outputs = s.get_int("output", 1, 1, 1 << 24);
    l->batch_normalize = s.get_int("batch_normalize", 0, 0, 1) != 0;
    l->activation = parse_activation(s, "logistic");
    l->in = ctx.input;
    l->out = chw(outputs, 1, 1);
    l->weights = Tensor(Shape{1, 1, outputs, (int)ctx.input.sample()});
    l->biases = Tensor(chw(outputs, 1, 1));
    if (l->batch_normalize) {
        l->scales = Tensor(chw(outputs, 1, 1));
        l->rolling_mean = Tensor(chw(outputs, 1, 1));
        l->rolling_variance = Tensor(chw(outputs, 1, 1));
        for (int i = 0; i < outputs; ++i) l->scales[i] = 1.0f, l->rolling_variance[i] = 1.0f;
    }
    return l;
}

}  // namespace dn
