// A network built from a .cfg: its layers, their outputs, and a forward pass on one backend.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "cfg.h"
#include "layers/layer.h"
#include "layers/yolo.h"
#include "net_options.h"

namespace dn {

class Network {
public:
    // Parses and builds; throws DarknetError with file:line on any problem.
    Network(const std::string& cfg_path, const std::string& backend = "cpu");
    Network(const CfgFile& cfg, const std::string& backend = "cpu");

    // x: [n, channels, height, width]. Returns the output of every layer (index = layer).
    const LayerOutputs& forward(const Tensor& x);

    // Indices of the [yolo] layers; empty for a classifier.
    std::vector<int> yolo_layers() const;
    const YoloLayer& yolo(int layer_index) const;

    void set_backend(const std::string& name);
    const Backend& backend() const { return *backend_; }

    // Darknet's layer table ("cfglayers"): index, type, filters/size, input -> output, BFLOPs.
    std::string layer_table() const;
    double total_bflops() const;

    // Wall-clock milliseconds each layer took in the last forward pass (for profiling).
    const std::vector<double>& layer_ms() const { return layer_ms_; }

    std::string cfg_path;
    NetOptions options;
    std::vector<std::unique_ptr<Layer>> layers;
    Warnings warnings;        // unused options etc., collected while building
    uint64_t seen = 0;        // images seen in training, stored in .weights

private:
    void build(const CfgFile& cfg);
    std::unique_ptr<Backend> backend_;
    LayerOutputs outputs_;
    std::vector<double> layer_ms_;
};

}  // namespace dn
