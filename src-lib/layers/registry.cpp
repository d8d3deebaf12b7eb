// Maps section names (with Darknet's aliases) to layer factories.
#include <cstring>

#include "layer.h"

namespace dn {

namespace {
struct Entry { const char* name; std::unique_ptr<Layer> (*make)(const Section&, const BuildContext&); };
const Entry kLayers[] = {
    {"convolutional", make_convolutional}, {"conv", make_convolutional},
    {"connected", make_connected}, {"conn", make_connected},
    {"maxpool", make_maxpool}, {"max", make_maxpool},
    {"local_avgpool", make_local_avgpool}, {"local_avg", make_local_avgpool},
    {"avgpool", make_avgpool}, {"avg", make_avgpool},
    {"route", make_route}, {"shortcut", make_shortcut}, {"upsample", make_upsample},
    {"reorg", make_reorg}, {"reorg3d", make_reorg3d},
    {"sam", make_sam}, {"scale_channels", make_scale_channels},
    {"dropout", make_dropout}, {"cost", make_cost},
    {"softmax", make_softmax}, {"soft", make_softmax},
    {"yolo", make_yolo},
};
}  // namespace

std::unique_ptr<Layer> make_layer(const Section& s, const BuildContext& ctx) {
    for (auto& e : kLayers)
        if (s.type == e.name) {
            auto layer = e.make(s, ctx);
            layer->index = ctx.index;
            layer->line = s.line;
            layer->training = parse_layer_training(s);
            return layer;
        }
    std::string known;
    for (auto& e : kLayers) known += std::string(known.empty() ? "" : ", ") + e.name;
    throw DarknetError(s.file + ":" + std::to_string(s.line) + ": unknown section [" + s.type +
                       "] (supported: " + known + ")");
}

int BuildContext::resolve(const Section& s, const std::string& key, int ref) const {
    int idx = ref < 0 ? index + ref : ref;
    if (idx < 0 || idx >= index)
        s.fail(key, key + " refers to layer " + std::to_string(ref) + " (absolute " + std::to_string(idx) +
                        "), which does not exist before this layer (index " + std::to_string(index) + ")");
    return idx;
}

Activation parse_activation(const Section& s, const char* def) {
    std::string name = s.get_string("activation", def);
    bool ok;
    Activation a = activation_from_name(name, &ok);
    if (!ok)
        s.fail("activation", "unknown activation '" + name +
                                 "' (known: linear, leaky, relu, relu6, logistic, tanh, swish, mish, hard_mish, elu, "
                                 "selu, gelu, normalize_channels, normalize_channels_softmax)");
    return a;
}

}  // namespace dn
