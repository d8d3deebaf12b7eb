// Darknet's per-layer training options, which any section may carry (parser.c reads them for every
// layer): what backward and update do with the layer. Network::backward / Network::update apply them.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../cfg.h"

namespace dn {

class Layer;

struct LayerTraining {
    float learning_rate_scale = 1.0f;  // learning_rate=: this layer's rate is the network's times this
    // stopbackward=1: backward stops at this layer (it and the layers before get no gradient) and the
    // layers before it are never updated (Darknet's train=0); stopbackward=N > 1: backward stops here
    // only during the first N iterations (Darknet's GPU path; the layers before still take their
    // momentum and weight decay steps, as there).
    int stopbackward = 0;
    bool onlyforward = false;    // this layer's backward is skipped (nothing flows through it)
    int dont_update = 0;         // not updated until the iteration exceeds this
    int burnin_update = 0;       // not updated while the iteration is below burnin_update * burn_in
    bool train_only_bn = false;  // only batchnorm scales and biases update (also every earlier layer)
    bool frozen = false;         // derived: before a stopbackward=1 layer, never updated
};

// Reads the options above from any section (marking them used).
LayerTraining parse_layer_training(const Section& s);

// Darknet's whole-network consequences, once every layer is built: the layers before the last
// stopbackward=1 layer are frozen and only-forward; train_only_bn extends to every earlier layer.
void resolve_layer_training(std::vector<std::unique_ptr<Layer>>& layers);

// Whether `iteration` (1-based, the one being completed) updates this layer at all.
bool layer_updates_at(const LayerTraining& t, int iteration, int burn_in);

}  // namespace dn
