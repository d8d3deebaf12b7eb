// The [net] section: input geometry and all training options (the trainer uses the latter).
#pragma once
#include <string>
#include <vector>

#include "cfg.h"

namespace dn {

struct NetOptions {
    int width = 416, height = 416, channels = 3;
    int batch = 1, subdivisions = 1;
    // optimisation
    float learning_rate = 0.001f, momentum = 0.9f, decay = 0.0001f;
    int burn_in = 0, max_batches = 0;
    float power = 4.0f, gamma = 1.0f;
    std::string policy = "constant";
    int step = 1;
    float scale = 1.0f;                 // policy=step: rate = learning_rate * scale^(iteration / step)
    float learning_rate_min = 0.00001f;  // policy=sgdr: the cosine's floor
    int sgdr_cycle = 0, sgdr_mult = 2;   // policy=sgdr: first cycle length (default max_batches), growth
    std::vector<int> steps;
    std::vector<float> scales;
    bool adam = false;
    float B1 = 0.9f, B2 = 0.999f, eps = 1e-7f;
    float ema_alpha = 0.0f;
    // augmentation
    float angle = 0, saturation = 1, exposure = 1, hue = 0, aspect = 1;
    int min_crop = 0, max_crop = 0;
    bool mosaic = false, cutmix = false, mixup = false, letter_box = false, flip = true;
    int blur = 0, gaussian_noise = 0;  // applied by the Python loader (data/augment.py)
    float label_smooth_eps = 0.0f;
};

NetOptions parse_net_options(const Section& s);

}  // namespace dn
