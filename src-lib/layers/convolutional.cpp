// [convolutional]: y = act(bn(conv(x, W)) or conv(x, W) + b). Darknet conventions: pad=1 means
// padding = size/2; the effective padding is padding * dilation; output size ignores dilation.
#include "layer.h"
#include "norm_activation.h"

namespace dn {

namespace {

class Convolutional final : public Layer {
public:
    const char* type() const override { return "conv"; }
    // the channel-mixing activations (normalize_channels) read a pixel's channels as NCHW
    bool runs_channels_last() const override { return activation_is_elementwise(activation); }

    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        if (!batch_normalize) {
            be.conv2d_affine_act(x, weights(), geom, nullptr, biases(), activation, y);
            return;
        }
        // batchnorm with rolling statistics = per-channel affine, fused into the convolution
        be.resize(fold_scale_, biases().shape());
        be.resize(fold_shift_, biases().shape());
        be.batchnorm_fold(params[norm_.scales].value, biases(), params[norm_.rolling_mean].value,
                          params[norm_.rolling_variance].value, NormActivationTrainer::kEps, fold_scale_, fold_shift_);
        be.conv2d_affine_act(x, weights(), geom, &fold_scale_, fold_shift_, activation, y);
    }

    void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override {
        be.conv2d(x, weights(), geom, y);
        trainer_.forward(be, y, params, norm_, activation);
    }

    void backward(Backend& be, const Tensor& x, const Tensor& y, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        trainer_.backward(be, y, dy, params, norm_, activation);
        be.conv2d_backward_weights(x, dy, geom, params[weights_].grad);
        if (dx) be.conv2d_backward_data(dy, weights(), geom, *dx);
    }

    double bflops() const override { return 2.0 * params[weights_].shape.size() * out.h * out.w / 1e9; }

    std::string describe() const override {
        std::string d = std::to_string(out.c) + " " + std::to_string(geom.kw) + "x" + std::to_string(geom.kh) + "/" +
                        std::to_string(geom.stride_x);
        if (geom.stride_y != geom.stride_x) d += "x" + std::to_string(geom.stride_y);
        if (geom.groups > 1) d += " g" + std::to_string(geom.groups);
        if (geom.dilation > 1) d += " d" + std::to_string(geom.dilation);
        return d + " " + activation_name(activation) + (batch_normalize ? " bn" : "");
    }

    // Darknet's file order: biases, [scales, rolling_mean, rolling_variance,] weights.
    void declare_params(Shape weight_shape, int filters) {
        Shape per_channel = chw(filters, 1, 1);
        norm_.biases = add_param("biases", per_channel, 0.0f, true, false);
        if (batch_normalize) {
            norm_.scales = add_param("scales", per_channel, 1.0f, true, false);
            norm_.rolling_mean = add_param("rolling_mean", per_channel, 0.0f, false, false);
            norm_.rolling_variance = add_param("rolling_variance", per_channel, 1.0f, false, false);
        }
        weights_ = add_param("weights", weight_shape, 0.0f, true, true);
    }
    const Tensor& weights() const { return params[weights_].value; }
    const Tensor& biases() const { return params[norm_.biases].value; }

    ConvGeom geom;
    bool batch_normalize = false;
    Activation activation = Activation::logistic;

private:
    int weights_ = -1;
    NormParams norm_;
    Tensor fold_scale_, fold_shift_;  // batchnorm folded into a per-channel affine (inference)
    NormActivationTrainer trainer_;   // training state kept from forward_train for backward
};

}  // namespace

std::unique_ptr<Layer> make_convolutional(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Convolutional>();
    int filters = s.get_int("filters", 1, 1, 1 << 20);
    int size = s.get_int("size", 1, 1, 1024);
    int stride = s.get_int("stride", 1, 1, 1024);
    int stride_x = s.get_int("stride_x", stride, 1, 1024);
    int stride_y = s.get_int("stride_y", stride, 1, 1024);
    int dilation = s.get_int("dilation", 1, 1, 1024);
    if (size == 1) dilation = 1;
    int pad = s.get_int("pad", 0, 0, 1);
    int padding = s.get_int("padding", 0, 0, 1024);
    if (pad) padding = size / 2;
    int groups = s.get_int("groups", 1, 1, 1 << 20);
    l->batch_normalize = s.get_int("batch_normalize", 0, 0, 1) != 0;
    l->activation = parse_activation(s, "logistic");

    const Shape& in = ctx.input;
    if (in.c % groups != 0)
        s.fail("groups", "groups=" + std::to_string(groups) + " does not divide the " + std::to_string(in.c) +
                             " input channels");
    if (filters % groups != 0)
        s.fail("groups", "groups=" + std::to_string(groups) + " does not divide filters=" + std::to_string(filters));
    int out_h = (in.h + 2 * padding - size) / stride_y + 1;
    int out_w = (in.w + 2 * padding - size) / stride_x + 1;
    if (in.h + 2 * padding < size || in.w + 2 * padding < size || out_h <= 0 || out_w <= 0)
        s.fail("size", "a " + std::to_string(size) + "x" + std::to_string(size) + " kernel does not fit the " +
                           std::to_string(in.w) + "x" + std::to_string(in.h) + " input");
    s.check_size("filters", "the weights", {(double)filters, (double)(in.c / groups), (double)size, (double)size});

    l->geom = ConvGeom{size, size, stride_y, stride_x, padding * dilation, dilation, groups};
    l->in = in;
    l->out = chw(filters, out_h, out_w);
    l->declare_params(Shape{filters, in.c / groups, size, size}, filters);
    return l;
}

}  // namespace dn
