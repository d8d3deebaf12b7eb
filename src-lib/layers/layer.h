// A network layer: built from its [section], it knows its shapes and expresses its forward pass
// as Backend ops. One file per Darknet layer type.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../activation.h"
#include "../backend.h"
#include "../cfg.h"
#include "../tensor.h"
#include "training_options.h"

namespace dn {

class Layer;

// Per-sample shape (n = 1) of a layer's input or output.
inline Shape chw(int c, int h, int w) { return Shape{1, c, h, w}; }

// One parameter of a layer. The layer's factory declares it (name, shape, initial value, whether
// it has a gradient and takes weight decay) in .weights file order; the network allocates value
// and gradient on its backend (Network::allocate_params) and the optimizer state beside them.
struct Param {
    std::string name;
    Shape shape;
    float init = 0.0f;      // every element starts here (weights get theirs from a file or init_weights)
    bool has_grad = true;   // false for batchnorm's rolling statistics
    bool decay = false;     // weight decay applies (Darknet: convolution, connected and shortcut weights)
    Tensor value, grad;     // grad: dL/dvalue summed over the batch, until the optimizer step
};

// What a layer being built may look at: the previous layers and the input shape.
struct BuildContext {
    int index;                                        // this layer's index (0 = first after [net])
    Shape input;                                      // per-sample input shape (previous layer's output)
    const std::vector<std::unique_ptr<Layer>>& built;  // layers 0 .. index-1
    // Resolves a route/shortcut reference (negative = relative) or fails with file:line.
    int resolve(const Section& s, const std::string& key, int ref) const;
};

// Outputs of all layers so far, for layers that read other layers (route, shortcut, sam...).
using LayerOutputs = std::vector<Tensor>;

class Layer {
public:
    virtual ~Layer() = default;
    virtual const char* type() const = 0;

    // y has shape {batch, out.c, out.h, out.w}, allocated by the network.
    virtual void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) = 0;

    // ---- training ----
    // Forward with training behaviour (batch statistics, dropout) keeping what backward needs.
    virtual void forward_train(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs& outputs) {
        forward(be, x, y, outputs);
    }
    // dy = dL/d(this layer's output), which the layer may overwrite; dx = dL/d(its input), accumulated
    // into (null for the first layer); deltas = every layer's dL/d(output), for layers that read others.
    virtual void backward(Backend& be, const Tensor& x, const Tensor& y, Tensor& dy, Tensor* dx,
                          const LayerOutputs& outputs, std::vector<Tensor>& deltas) = 0;
    virtual double bflops() const { return 0.0; }
    // Short description for the layer table, e.g. "32  3 x 3/ 1".
    virtual std::string describe() const { return ""; }
    // Layer indices this layer reads besides its input (route, shortcut...), for the table.
    virtual std::vector<int> sources() const { return {}; }
    // Whether every op the layer runs takes channels-last (NHWC) activations on a GPU device
    // (Network::layout): a layer without that path keeps its whole network NCHW.
    virtual bool runs_channels_last() const { return false; }

    int index = 0;
    int line = 0;
    Shape in, out;  // per sample
    std::vector<Param> params;  // in .weights file order; most layers have none
    LayerTraining training;     // Darknet's per-layer training options (stopbackward, learning_rate...)

protected:
    // Declares a parameter (factories only) and returns its index in `params`.
    int add_param(std::string name, Shape shape, float init, bool has_grad, bool decay) {
        params.push_back(Param{std::move(name), shape, init, has_grad, decay, Tensor(), Tensor()});
        return (int)params.size() - 1;
    }
};

// The activation of a layer in training: forward activates y in place, keeping what backward needs.
// For leaky and relu that is nothing: their output has the sign of their input, so the derivative read
// off the output is the same (as Darknet's gradient_array computes it), and backward reads the layer's
// output. Other activations keep a copy of the pre-activation: one activation-sized tensor per layer
// and a copy per forward that leaky layers do without.
class TrainingActivation {
public:
    void forward(Backend& be, Tensor& y, Activation a) {
        if (a == Activation::linear) return;
        if (!activation_gradient_from_output(a)) {
            be.resize(pre_, y.shape(), y.dtype(), y.layout());
            be.copy_channels(y, 0, pre_, 0, y.shape().c);
        }
        be.activate(y, a);
    }
    // dy: dL/d(output) in, dL/d(pre-activation) out; y: the layer's output from forward.
    void backward(Backend& be, const Tensor& y, Tensor& dy, Activation a) {
        if (a != Activation::linear) be.activate_backward(activation_gradient_from_output(a) ? y : pre_, dy, a);
    }

private:
    Tensor pre_;
};

// Builds the layer for section `s`, or throws DarknetError naming file and line.
std::unique_ptr<Layer> make_layer(const Section& s, const BuildContext& ctx);

// One factory per layer file.
std::unique_ptr<Layer> make_convolutional(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_connected(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_maxpool(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_local_avgpool(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_avgpool(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_route(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_shortcut(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_upsample(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_reorg(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_reorg3d(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_sam(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_scale_channels(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_dropout(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_cost(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_softmax(const Section&, const BuildContext&);
std::unique_ptr<Layer> make_yolo(const Section&, const BuildContext&);

// Reads `activation=` (default given) or fails with the list of known names.
Activation parse_activation(const Section& s, const char* def);

}  // namespace dn
