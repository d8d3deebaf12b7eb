// [route]: concatenates the outputs of earlier layers along channels; with groups/group_id it
// takes only slice group_id of each (CSP blocks).
#include "layer.h"

namespace dn {

namespace {

class Route final : public Layer {
public:
    const char* type() const override { return "route"; }
    bool runs_channels_last() const override { return true; }

    void forward(Backend& be, const Tensor&, Tensor& y, const LayerOutputs& outputs) override {
        int dst = 0;
        for (int src : layers) {
            const Tensor& t = outputs[src];
            int part = t.shape().c / groups;
            be.copy_channels(t, group_id * part, y, dst, part);
            dst += part;
        }
    }
    void backward(Backend& be, const Tensor&, const Tensor&, Tensor& dy, Tensor*, const LayerOutputs& outputs,
                  std::vector<Tensor>& deltas) override {
        int src_c0 = 0;
        for (int src : layers) {
            int part = outputs[src].shape().c / groups;
            be.add_channels(dy, src_c0, deltas[src], group_id * part, part);
            src_c0 += part;
        }
    }
    std::vector<int> sources() const override { return layers; }
    std::string describe() const override {
        std::string d;
        for (int i : layers) d += (d.empty() ? "" : " ") + std::to_string(i);
        if (groups > 1) d += " (" + std::to_string(group_id) + "/" + std::to_string(groups) + ")";
        return d;
    }

    std::vector<int> layers;
    int groups = 1, group_id = 0;
};

}  // namespace

std::unique_ptr<Layer> make_route(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<Route>();
    if (!s.has("layers")) s.fail("", "route needs layers= (indices of the layers to concatenate)");
    std::vector<int> refs = s.get_ints("layers");
    l->groups = s.get_int("groups", 1, 1, 1 << 20);
    l->group_id = s.get_int("group_id", 0, 0, l->groups - 1);
    long long c = 0;  // many large inputs must not overflow before the size check below
    int h = -1, w = -1;
    for (int ref : refs) {
        int idx = ctx.resolve(s, "layers", ref);
        const Shape& o = ctx.built[idx]->out;
        if (o.c % l->groups != 0)
            s.fail("groups", "groups=" + std::to_string(l->groups) + " does not divide the " + std::to_string(o.c) +
                                 " channels of layer " + std::to_string(idx));
        if (h >= 0 && (o.h != h || o.w != w))
            s.fail("layers", "layer " + std::to_string(idx) + " is " + std::to_string(o.w) + "x" + std::to_string(o.h) +
                                 " but the previous route input is " + std::to_string(w) + "x" + std::to_string(h) +
                                 " (route needs equal width and height)");
        h = o.h, w = o.w;
        c += o.c / l->groups;
        l->layers.push_back(idx);
    }
    l->in = ctx.input;
    s.check_size("layers", "the output", {(double)c, (double)h, (double)w});
    l->out = chw((int)c, h, w);
    return l;
}

}  // namespace dn
