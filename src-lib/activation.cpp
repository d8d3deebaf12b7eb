#include "activation.h"

namespace dn {

namespace {
struct NameEntry { const char* name; Activation a; };
const NameEntry kNames[] = {
    {"linear", Activation::linear}, {"leaky", Activation::leaky}, {"relu", Activation::relu},
    {"relu6", Activation::relu6}, {"logistic", Activation::logistic}, {"tanh", Activation::tanh},
    {"swish", Activation::swish}, {"mish", Activation::mish}, {"hard_mish", Activation::hard_mish},
    {"elu", Activation::elu}, {"selu", Activation::selu}, {"gelu", Activation::gelu},
    {"normalize_channels", Activation::normalize_channels},
    {"normalize_channels_softmax", Activation::normalize_channels_softmax},
};
}  // namespace

Activation activation_from_name(const std::string& name, bool* ok) {
    for (auto& e : kNames)
        if (name == e.name) { *ok = true; return e.a; }
    *ok = false;
    return Activation::linear;
}

const char* activation_name(Activation a) {
    for (auto& e : kNames)
        if (e.a == a) return e.name;
    return "?";
}

}  // namespace dn
