#include "network.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "devices.h"

namespace dn {

Network::Network(const std::string& path, const std::string& backend) : backend_(make_backend(backend)) {
    build(parse_cfg_file(path));
}

Network::Network(const CfgFile& cfg, const std::string& backend) : backend_(make_backend(backend)) { build(cfg); }

void Network::build(const CfgFile& cfg) {
    cfg_ = cfg;
    cfg_path = cfg.path;
    options = parse_net_options(cfg.sections[0]);
    Shape input = chw(options.channels, options.height, options.width);
    cfg.sections[0].check_size("", "the input", {(double)input.c, (double)input.h, (double)input.w});
    for (size_t i = 1; i < cfg.sections.size(); ++i) {
        const Section& s = cfg.sections[i];
        if (s.type == "net" || s.type == "network")
            throw DarknetError(s.file + ":" + std::to_string(s.line) + ": a second [net] section (only the first section may be [net])");
        BuildContext ctx{(int)layers.size(), input, layers};
        layers.push_back(make_layer(s, ctx));
        input = layers.back()->out;
        if (input.c <= 0 || input.h <= 0 || input.w <= 0)
            throw DarknetError(s.file + ":" + std::to_string(s.line) + ": [" + s.type + "] produces an empty output (" +
                               std::to_string(input.w) + "x" + std::to_string(input.h) + "x" + std::to_string(input.c) + ")");
        s.check_size("", "the output", {(double)input.c, (double)input.h, (double)input.w});
    }
    if (layers.empty()) throw DarknetError(cfg.path + ": the cfg has no layers after [net]");
    warn_unused_options(cfg, warnings);
    allocate_params();
}

void Network::allocate_params() {
    for (auto& l : layers)
        for (Param& p : l->params) {
            p.value = backend_->alloc(p.shape);
            backend_->fill(p.value, p.init);
            if (!p.has_grad) continue;
            p.grad = backend_->alloc(p.shape);
            backend_->fill(p.grad, 0.0f);
        }
}

void Network::set_backend(const std::string& name) { set_backend(make_backend(name)); }

void Network::set_backend(std::unique_ptr<Backend> backend) {
    // Parameters and optimizer state move to the new backend's memory; activations are rebuilt.
    backend_ = std::move(backend);
    for (auto& l : layers)
        for (Param& p : l->params) {
            p.value = backend_->adopt(p.value);
            if (p.has_grad) p.grad = backend_->adopt(p.grad);
        }
    for (auto* state : {&momentum_, &adam_v_})
        for (auto& per_layer : *state)
            for (Tensor& t : per_layer)
                if (!t.empty()) t = backend_->adopt(t);
    outputs_.clear();
    deltas_.clear();
    input_ = Tensor();
    drop_training_state("set_backend() moved the network");
}

void Network::resize_input(int width, int height) {
    if (width == options.width && height == options.height) return;
    CfgFile cfg = cfg_;
    cfg.sections[0].options["width"] = CfgOption{std::to_string(width), cfg.sections[0].line, false};
    cfg.sections[0].options["height"] = CfgOption{std::to_string(height), cfg.sections[0].line, false};
    std::vector<std::unique_ptr<Layer>> old = std::move(layers);
    NetOptions old_options = options;
    Warnings old_warnings = warnings;
    layers.clear();
    try {
        build(cfg);
        for (size_t i = 0; i < layers.size(); ++i) {
            auto &from = old[i]->params, &to = layers[i]->params;
            for (size_t k = 0; k < from.size(); ++k) {
                if (from[k].shape != to[k].shape)
                    throw DarknetError("layer " + std::to_string(i) + " (" + old[i]->type() + ") has parameters that depend on the input size; cannot resize to " + std::to_string(width) + "x" + std::to_string(height));
                to[k].value = from[k].value;  // the same buffers: values and pending gradients carry over
                to[k].grad = from[k].grad;
            }
        }
    } catch (...) {
        layers = std::move(old);
        options = old_options;
        warnings = old_warnings;
        throw;
    }
    warnings = old_warnings;  // the rebuild repeats the cfg's warnings
    outputs_.clear();
    deltas_.clear();
    input_ = Tensor();
    drop_training_state("resize_input() rebuilt the layers");
}

void Network::drop_training_state(const char* by) {
    train_batch_ = 0;
    dropped_by_ = by;
}

void Network::require_training_state(const std::string& what) const {
    if (train_batch_ > 0 && deltas_.size() == layers.size() && outputs_.size() == layers.size()) return;
    throw DarknetError(what + " needs the training state of a forward_train(): call forward_train(x) first (" +
                       dropped_by_ + ")");
}

template <class F>
void Network::run_layer(size_t i, F&& f) {
    const std::map<std::string, int>* counts = backend_->fallback_counts();
    if (!counts) return f();
    std::map<std::string, int> before = *counts;
    f();
    if (fallback_ops_.size() < layers.size()) fallback_ops_.resize(layers.size());
    for (auto& [op, n] : *counts)
        if (n != before[op]) fallback_ops_[i].insert(op);
}

void Network::check_input(const Shape& s) const {
    if (s.n < 1) throw DarknetError("input batch is " + std::to_string(s.n) + ": give at least one image (Nx" +
                                    std::to_string(options.channels) + "x" + std::to_string(options.height) + "x" +
                                    std::to_string(options.width) + " with N >= 1)");
    if (s.c != options.channels || s.h != options.height || s.w != options.width)
        throw DarknetError("input is " + s.str() + " but the network expects Nx" + std::to_string(options.channels) +
                           "x" + std::to_string(options.height) + "x" + std::to_string(options.width));
}

const LayerOutputs& Network::forward(const Tensor& x) {
    const Shape& s = x.shape();
    check_input(s);
    outputs_.resize(layers.size());
    layer_ms_.assign(layers.size(), 0.0);
    // A plain forward overwrites the outputs that forward_train's deltas and backward() refer to.
    deltas_.clear();
    input_ = Tensor();
    drop_training_state("forward() or detect() since replaced its outputs");
    Tensor input = backend_->adopt(x);
    const Tensor* in = &input;
    for (size_t i = 0; i < layers.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        Layer& l = *layers[i];
        backend_->resize(outputs_[i], Shape{s.n, l.out.c, l.out.h, l.out.w});
        run_layer(i, [&] { l.forward(*backend_, *in, outputs_[i], outputs_); });
        in = &outputs_[i];
        layer_ms_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    return outputs_;
}

const LayerOutputs& Network::forward_train(const Tensor& x) {
    const Shape& s = x.shape();
    check_input(s);
    drop_training_state("the last forward_train() failed");  // until every layer has run
    input_ = backend_->adopt(x);
    outputs_.resize(layers.size());
    deltas_.resize(layers.size());
    const Tensor* in = &input_;
    for (size_t i = 0; i < layers.size(); ++i) {
        Layer& l = *layers[i];
        Shape os{s.n, l.out.c, l.out.h, l.out.w};
        backend_->resize(outputs_[i], os);
        backend_->resize(deltas_[i], os);
        backend_->fill(deltas_[i], 0.0f);
        run_layer(i, [&] { l.forward_train(*backend_, *in, outputs_[i], outputs_); });
        in = &outputs_[i];
    }
    train_batch_ = s.n;
    return outputs_;
}

void Network::backward() {
    require_training_state("backward()");
    for (int i = (int)layers.size() - 1; i >= 0; --i) {
        const Tensor& x = i == 0 ? input_ : outputs_[i - 1];
        Tensor* dx = i == 0 ? nullptr : &deltas_[i - 1];
        run_layer(i, [&] { layers[i]->backward(*backend_, x, outputs_[i], deltas_[i], dx, outputs_, deltas_); });
    }
}

void Network::update(float lr, int batch, int t) {
    int step = t > 0 ? t : ++updates_;
    momentum_.resize(layers.size());
    adam_v_.resize(layers.size());
    // Optimizer state (Darknet's *_updates, Adam's second moment) lives beside each parameter.
    auto state = [&](Tensor& t, const Shape& s) {
        if (t.size() == s.size()) return;
        t = backend_->alloc(s);
        backend_->fill(t, 0.0f);
    };
    for (size_t i = 0; i < layers.size(); ++i) {
        auto& params = layers[i]->params;
        momentum_[i].resize(params.size());
        adam_v_[i].resize(params.size());
        for (size_t k = 0; k < params.size(); ++k) {
            Param& p = params[k];
            if (!p.has_grad) continue;
            Tensor& m = momentum_[i][k];
            state(m, p.shape);
            float decay = p.decay ? options.decay : 0.0f;
            if (options.adam) {
                Tensor& v = adam_v_[i][k];
                state(v, p.shape);
                backend_->adam_update(p.value, p.grad, m, v, lr, options.B1, options.B2, options.eps, decay, batch, step);
            } else {
                backend_->sgd_update(p.value, p.grad, m, lr, options.momentum, decay, batch);
            }
        }
    }
}

std::vector<int> Network::yolo_layers() const {
    std::vector<int> out;
    for (auto& l : layers)
        if (dynamic_cast<const YoloLayer*>(l.get())) out.push_back(l->index);
    return out;
}

const YoloLayer& Network::yolo(int i) const {
    auto* y = dynamic_cast<const YoloLayer*>(layers.at(i).get());
    if (!y) throw DarknetError("layer " + std::to_string(i) + " is not a yolo layer");
    return *y;
}

double Network::total_bflops() const {
    double t = 0;
    for (auto& l : layers) t += l->bflops();
    return t;
}

std::string Network::layer_table() const {
    std::string out;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%5s %-14s %-28s %-18s    %-18s %9s\n", "layer", "type", "params", "input", "output",
                  "BFLOPs");
    out += buf;
    auto dims = [](const Shape& s) {
        return std::to_string(s.w) + " x " + std::to_string(s.h) + " x " + std::to_string(s.c);
    };
    for (auto& l : layers) {
        std::snprintf(buf, sizeof buf, "%5d %-14s %-28s %-18s -> %-18s %9.3f\n", l->index, l->type(),
                      l->describe().c_str(), dims(l->in).c_str(), dims(l->out).c_str(), l->bflops());
        out += buf;
    }
    std::snprintf(buf, sizeof buf, "Total BFLOPS %.3f\n", total_bflops());
    out += buf;
    return out;
}

}  // namespace dn
