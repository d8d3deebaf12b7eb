#include "training_options.h"

#include "layer.h"

namespace dn {

LayerTraining parse_layer_training(const Section& s) {
    LayerTraining t;
    t.learning_rate_scale = s.get_float("learning_rate", 1.0f);
    if (t.learning_rate_scale < 0.0f)
        s.fail("learning_rate", "learning_rate=" + s.get_string("learning_rate", "") +
                                    " is negative (a layer's learning_rate scales the network's rate: 0 freezes it)");
    t.stopbackward = s.get_int("stopbackward", 0, 0, 1 << 30);
    t.onlyforward = s.get_int("onlyforward", 0) != 0;
    t.dont_update = s.get_int("dont_update", 0, 0, 1 << 30);
    t.burnin_update = s.get_int("burnin_update", 0, 0, 1 << 20);
    t.train_only_bn = s.get_int("train_only_bn", 0) != 0;
    return t;
}

void resolve_layer_training(std::vector<std::unique_ptr<Layer>>& layers) {
    int last_stop = -1;
    for (size_t i = 0; i < layers.size(); ++i)
        if (layers[i]->training.stopbackward == 1) last_stop = (int)i;
    for (int i = 0; i < last_stop; ++i) {
        layers[i]->training.frozen = true;
        layers[i]->training.onlyforward = true;
    }
    bool only_bn = false;  // Darknet's set_train_only_bn: from the last such layer down to layer 0
    for (int i = (int)layers.size() - 1; i >= 0; --i) {
        only_bn = only_bn || layers[i]->training.train_only_bn;
        layers[i]->training.train_only_bn = only_bn;
    }
}

bool layer_updates_at(const LayerTraining& t, int iteration, int burn_in) {
    if (t.frozen) return false;
    if (t.burnin_update && (long long)t.burnin_update * burn_in > iteration) return false;
    return t.dont_update < iteration;
}

}  // namespace dn
