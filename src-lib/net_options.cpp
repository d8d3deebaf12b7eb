#include "net_options.h"

namespace dn {

NetOptions parse_net_options(const Section& s) {
    NetOptions o;
    o.width = s.get_int("width", 416, 1, 1 << 16);
    o.height = s.get_int("height", 416, 1, 1 << 16);
    o.channels = s.get_int("channels", 3, 1, 1 << 16);
    o.batch = s.get_int("batch", 1, 1, 1 << 16);
    o.subdivisions = s.get_int("subdivisions", 1, 1, 1 << 16);
    if (o.batch % o.subdivisions != 0)
        s.fail("subdivisions", "subdivisions=" + std::to_string(o.subdivisions) + " does not divide batch=" +
                                   std::to_string(o.batch));
    o.learning_rate = s.get_float("learning_rate", o.learning_rate);
    o.momentum = s.get_float("momentum", o.momentum);
    o.decay = s.get_float("decay", o.decay);
    o.burn_in = s.get_int("burn_in", 0, 0, 1 << 30);
    o.max_batches = s.get_int("max_batches", 0, 0, 1 << 30);
    o.power = s.get_float("power", o.power);
    o.gamma = s.get_float("gamma", o.gamma);
    o.policy = s.get_string("policy", o.policy);
    static const char* policies[] = {"constant", "steps", "step", "exp", "poly", "sigmoid", "random", "sgdr"};
    bool known = false;
    for (auto p : policies) known |= o.policy == p;
    if (!known) s.fail("policy", "unknown policy '" + o.policy + "' (constant, steps, step, exp, poly, sigmoid, random, sgdr)");
    o.step = s.get_int("step", 1, 1, 1 << 30);
    o.scale = s.get_float("scale", o.scale);
    o.learning_rate_min = s.get_float("learning_rate_min", o.learning_rate_min);
    o.sgdr_cycle = s.get_int("sgdr_cycle", o.max_batches, 1, 1 << 30);
    o.sgdr_mult = s.get_int("sgdr_mult", 2, 1, 1 << 16);
    o.steps = s.get_ints("steps");
    o.scales = s.get_floats("scales");
    if (o.policy == "steps" && o.steps.size() != o.scales.size())
        s.fail("scales", "policy=steps needs as many scales (" + std::to_string(o.scales.size()) + ") as steps (" +
                             std::to_string(o.steps.size()) + ")");
    o.adam = s.get_int("adam", 0, 0, 1) != 0;
    o.B1 = s.get_float("B1", o.B1);
    o.B2 = s.get_float("B2", o.B2);
    o.eps = s.get_float("eps", o.eps);
    o.ema_alpha = s.get_float("ema_alpha", 0.0f);
    o.angle = s.get_float("angle", 0);
    o.saturation = s.get_float("saturation", 1);
    o.exposure = s.get_float("exposure", 1);
    o.hue = s.get_float("hue", 0);
    o.aspect = s.get_float("aspect", 1);
    o.min_crop = s.get_int("min_crop", 0);
    o.max_crop = s.get_int("max_crop", 0);
    o.mosaic = s.get_int("mosaic", 0, 0, 1) != 0;
    o.cutmix = s.get_int("cutmix", 0, 0, 1) != 0;
    o.mixup = s.get_int("mixup", 0, 0, 1) != 0;
    o.letter_box = s.get_int("letter_box", 0, 0, 1) != 0;
    o.flip = s.get_int("flip", 1, 0, 1) != 0;
    o.blur = s.get_int("blur", 0, 0, 1 << 16);
    o.gaussian_noise = s.get_int("gaussian_noise", 0, 0, 1 << 16);
    o.label_smooth_eps = s.get_float("label_smooth_eps", 0.0f);
    // Read so they do not warn as unused: Darknet options we accept but do not act on at inference.
    for (const char* k : {"max_chart_loss", "track", "time_steps", "augment_speed", "sequential_subdivisions",
                          "try_fix_nan", "dynamic_minibatch", "contrastive", "unsupervised", "resize_step",
                          "mosaic_bound", "adversarial_lr", "attention", "loss_scale",
                          "init_sequential_subdivisions", "inputs"})
        s.get_string(k, "");
    return o;
}

}  // namespace dn
