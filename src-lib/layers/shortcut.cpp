// [shortcut]: adds the outputs of the `from` layers to the input (residual connection),
// optionally with learned weights per input (per_feature) or per input and channel (per_channel).
#include "layer.h"

namespace dn {

namespace {

class Shortcut final : public Layer {
public:
    const char* type() const override { return "shortcut"; }
    // Channels last where the sum is elementwise in any layout: every input shaped like x, and no
    // per-channel weights (their index is NCHW's). GpuBackend::shortcut then takes the flat buffers.
    bool runs_channels_last() const override {
        return same_shapes && weights_type != ShortcutWeights::per_channel && activation_is_elementwise(activation);
    }

    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) override {
        std::vector<const Tensor*> inputs;
        for (int i : from) inputs.push_back(&outputs[i]);
        be.shortcut(x, inputs, weights(), weights_type, weights_norm, y);
        be.activate(y, activation);
    }
    void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) override {
        std::vector<const Tensor*> inputs;
        for (int i : from) inputs.push_back(&outputs[i]);
        be.shortcut(x, inputs, weights(), weights_type, weights_norm, y);
        activation_.forward(be, y, activation);
    }
    void backward(Backend& be, const Tensor& x, const Tensor& y, Tensor& dy, Tensor* dx, const LayerOutputs& outputs,
                  std::vector<Tensor>& deltas) override {
        activation_.backward(be, y, dy, activation);
        std::vector<const Tensor*> inputs;
        std::vector<Tensor*> dfrom;
        for (int i : from) inputs.push_back(&outputs[i]), dfrom.push_back(&deltas[i]);
        if (!dx) be.resize(scratch_, x.shape(), x.dtype(), x.layout());
        be.shortcut_backward(x, inputs, weights(), weights_type, weights_norm, dy, dx ? *dx : scratch_, dfrom,
                             params.empty() ? nullptr : &params[0].grad);
    }
    const Tensor* weights() const { return params.empty() ? nullptr : &params[0].value; }
    // Darknet's update_shortcut_layer applies weight decay to these weights.
    void declare_params(Shape weight_shape) { add_param("weights", weight_shape, 1.0f, true, true); }
    std::vector<int> sources() const override { return from; }
    std::string describe() const override {
        std::string d;
        for (int i : from) d += (d.empty() ? "" : " ") + std::to_string(i);
        return d + " " + activation_name(activation);
    }
    double bflops() const override { return (double)out.size() * from.size() / 1e9; }

    std::vector<int> from;
    Activation activation = Activation::linear;
    ShortcutWeights weights_type = ShortcutWeights::none;
    ShortcutNorm weights_norm = ShortcutNorm::none;
    bool same_shapes = true;  // every `from` layer's output shaped like the input

private:
    TrainingActivation activation_;
    Tensor scratch_;
};

}  // namespace

std::unique_ptr<Layer> make_shortcut(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Shortcut>();
    if (!s.has("from")) s.fail("", "shortcut needs from= (the layer to add)");
    for (int ref : s.get_ints("from")) {
        l->from.push_back(ctx.resolve(s, "from", ref));
        if (!(ctx.built[l->from.back()]->out == ctx.input)) l->same_shapes = false;
    }
    l->activation = parse_activation(s, "linear");
    std::string wt = s.get_string("weights_type", "none");
    if (wt == "per_feature" || wt == "per_layer") l->weights_type = ShortcutWeights::per_feature;
    else if (wt == "per_channel") l->weights_type = ShortcutWeights::per_channel;
    else if (wt != "none") s.fail("weights_type", "unknown weights_type '" + wt + "' (none, per_feature, per_channel)");
    std::string wn = s.get_string("weights_normalization", "none");
    if (wn == "relu" || wn == "avg_relu") l->weights_norm = ShortcutNorm::relu;  // Darknet accepts both
    else if (wn == "softmax") l->weights_norm = ShortcutNorm::softmax;
    else if (wn != "none") s.fail("weights_normalization", "unknown weights_normalization '" + wn + "' (none, relu, softmax)");

    l->in = ctx.input;
    l->out = ctx.input;
    int nin = (int)l->from.size() + 1;
    if (l->weights_type == ShortcutWeights::per_feature) l->declare_params(chw(nin, 1, 1));
    if (l->weights_type == ShortcutWeights::per_channel) l->declare_params(chw(nin * l->in.c, 1, 1));
    return l;
}

}  // namespace dn
