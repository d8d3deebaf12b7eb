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
        be.gemm(false, true, batch, outputs, inputs, 1.0f, x.data(), inputs, weights.data(), inputs, 0.0f, y.data(),
                outputs);
        if (batch_normalize)
            be.batchnorm_inference(y, rolling_mean.data(), rolling_variance.data(), scales.data(), biases.data(),
                                   NormActivationTrainer::kEps);
        else
            be.add_bias(y, biases.data());
        be.activate(y, activation);
    }
    void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        int batch = x.shape().n, inputs = (int)in.sample(), outputs = out.c;
        be.gemm(false, true, batch, outputs, inputs, 1.0f, x.data(), inputs, weights.data(), inputs, 0.0f, y.data(),
                outputs);
        trainer_.forward(be, y, batch_normalize, activation, scales, biases, rolling_mean, rolling_variance);
    }
    void backward(Backend& be, const Tensor& x, const Tensor&, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        int batch = x.shape().n, inputs = (int)in.sample(), outputs = out.c;
        trainer_.backward(be, dy, batch_normalize, activation, scales, bias_grad, scale_grad);
        // dW[outputs, inputs] += dY^T X ; dX[batch, inputs] += dY W
        be.gemm(true, false, outputs, inputs, batch, 1.0f, dy.data(), outputs, x.data(), inputs, 1.0f,
                weight_grad.data(), inputs);
        if (dx) be.gemm(false, false, batch, inputs, outputs, 1.0f, dy.data(), outputs, weights.data(), inputs, 1.0f,
                        dx->data(), inputs);
    }
    std::vector<Trainable> trainables() override {
        std::vector<Trainable> t{{"weights", &weights, &weight_grad, true}, {"biases", &biases, &bias_grad, false}};
        if (batch_normalize) t.push_back({"scales", &scales, &scale_grad, false});
        return t;
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
    Tensor weight_grad, bias_grad, scale_grad;

private:
    NormActivationTrainer trainer_;  // training state kept from forward_train for backward
};

}  // namespace

std::unique_ptr<Layer> make_connected(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Connected>();
    int outputs = s.get_int("output", 1, 1, 1 << 24);
    l->batch_normalize = s.get_int("batch_normalize", 0, 0, 1) != 0;
    l->activation = parse_activation(s, "logistic");
    s.check_size("output", "the weights", {(double)outputs, (double)ctx.input.sample()});
    l->in = ctx.input;
    l->out = chw(outputs, 1, 1);
    l->weights = Tensor(Shape{1, 1, outputs, (int)ctx.input.sample()});
    l->biases = Tensor(chw(outputs, 1, 1));
    l->weight_grad = Tensor(l->weights.shape());
    l->bias_grad = Tensor(l->biases.shape());
    if (l->batch_normalize) {
        l->scale_grad = Tensor(chw(outputs, 1, 1));
        l->scales = Tensor(chw(outputs, 1, 1));
        l->rolling_mean = Tensor(chw(outputs, 1, 1));
        l->rolling_variance = Tensor(chw(outputs, 1, 1));
        for (int i = 0; i < outputs; ++i) l->scales[i] = 1.0f, l->rolling_variance[i] = 1.0f;
    }
    return l;
}

}  // namespace dn
