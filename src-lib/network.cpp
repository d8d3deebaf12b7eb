#include "network.h"

#include <chrono>
#include <cstdio>

namespace dn {

Network::Network(const std::string& path, const std::string& backend) : backend_(make_backend(backend)) {
    build(parse_cfg_file(path));
}

Network::Network(const CfgFile& cfg, const std::string& backend) : backend_(make_backend(backend)) { build(cfg); }

void Network::build(const CfgFile& cfg) {
    cfg_path = cfg.path;
    options = parse_net_options(cfg.sections[0]);
    Shape input = chw(options.channels, options.height, options.width);
    for (size_t i = 1; i < cfg.sections.size(); ++i) {
        const Section& s = cfg.sections[i];
        if (s.type == "net" || s.type == "network")
            throw DarknetError(s.file + ":" + std::to_string(s.line) + ": a second [net] section (only the first section may be [net])");
        BuildContext ctx{(int)layers.size(), input, layers};
        layers.push_back(make_layer(s, ctx));
        input = layers.back()->out;
        if (input.size() == 0)
            throw DarknetError(s.file + ":" + std::to_string(s.line) + ": [" + s.type + "] produces an empty output");
    }
    if (layers.empty()) throw DarknetError(cfg.path + ": the cfg has no layers after [net]");
    warn_unused_options(cfg, warnings);
}

void Network::set_backend(const std::string& name) { backend_ = make_backend(name); }

const LayerOutputs& Network::forward(const Tensor& x) {
    const Shape& s = x.shape();
    if (s.c != options.channels || s.h != options.height || s.w != options.width)
        throw DarknetError("input is " + s.str() + " but the network expects Nx" + std::to_string(options.channels) +
                           "x" + std::to_string(options.height) + "x" + std::to_string(options.width));
    outputs_.resize(layers.size());
    layer_ms_.assign(layers.size(), 0.0);
    const Tensor* in = &x;
    for (size_t i = 0; i < layers.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        Layer& l = *layers[i];
        outputs_[i].resize(Shape{s.n, l.out.c, l.out.h, l.out.w});
        l.forward(*backend_, *in, outputs_[i], outputs_);
        in = &outputs_[i];
        layer_ms_[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    return outputs_;
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
