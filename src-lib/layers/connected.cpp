// [connected]: fully connected, y = act(bn(W x) or W x + b). W is [outputs, inputs], as Darknet stores it.
#include "layer.h"
#include "norm_activation.h"

namespace dn {

namespace {

class Connected final : public Layer {
public:
    const char* type() const override { return "connected"; }

    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        int batch = x.shape().n, inputs = (int)in.sample(), outputs = out.c;
        be.gemm(false, true, batch, outputs, inputs, 1.0f, x, inputs, weights(), inputs, 0.0f, y, outputs);
        if (norm_.batch_normalize())
            be.batchnorm_inference(y, params[norm_.rolling_mean].value, params[norm_.rolling_variance].value,
                                   params[norm_.scales].value, params[norm_.biases].value, NormActivationTrainer::kEps);
        else
            be.add_bias(y, params[norm_.biases].value);
        be.activate(y, activation);
    }
    void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        int batch = x.shape().n, inputs = (int)in.sample(), outputs = out.c;
        be.gemm(false, true, batch, outputs, inputs, 1.0f, x, inputs, weights(), inputs, 0.0f, y, outputs);
        trainer_.forward(be, y, params, norm_, activation);
    }
    void backward(Backend& be, const Tensor& x, const Tensor& y, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        int batch = x.shape().n, inputs = (int)in.sample(), outputs = out.c;
        trainer_.backward(be, y, dy, params, norm_, activation);
        // dW[outputs, inputs] += dY^T X ; dX[batch, inputs] += dY W
        be.gemm(true, false, outputs, inputs, batch, 1.0f, dy, outputs, x, inputs, 1.0f, params[weights_].grad, inputs);
        if (dx) be.gemm(false, false, batch, inputs, outputs, 1.0f, dy, outputs, weights(), inputs, 1.0f, *dx, inputs);
    }
    double bflops() const override { return 2.0 * params[weights_].shape.size() / 1e9; }
    std::string describe() const override {
        return std::to_string(in.sample()) + " -> " + std::to_string(out.c) + " " + activation_name(activation);
    }

    // Darknet's file order for connected: biases, weights, then the batchnorm triple.
    void declare_params(int inputs, int outputs, bool batch_normalize) {
        Shape per_output = chw(outputs, 1, 1);
        norm_.biases = add_param("biases", per_output, 0.0f, true, false);
        weights_ = add_param("weights", Shape{1, 1, outputs, inputs}, 0.0f, true, true);
        if (batch_normalize) {
            norm_.scales = add_param("scales", per_output, 1.0f, true, false);
            norm_.rolling_mean = add_param("rolling_mean", per_output, 0.0f, false, false);
            norm_.rolling_variance = add_param("rolling_variance", per_output, 1.0f, false, false);
        }
    }
    const Tensor& weights() const { return params[weights_].value; }

    Activation activation = Activation::logistic;

private:
    int weights_ = -1;
    NormParams norm_;
    NormActivationTrainer trainer_;  // training state kept from forward_train for backward
};

}  // namespace

std::unique_ptr<Layer> make_connected(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Connected>();
    int outputs = s.get_int("output", 1, 1, 1 << 24);
    bool batch_normalize = s.get_int("batch_normalize", 0, 0, 1) != 0;
    l->activation = parse_activation(s, "logistic");
    s.check_size("output", "the weights", {(double)outputs, (double)ctx.input.sample()});
    l->in = ctx.input;
    l->out = chw(outputs, 1, 1);
    l->declare_params((int)ctx.input.sample(), outputs, batch_normalize);
    return l;
}

}  // namespace dn
