#include "darknet_options.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace dn {

namespace {

using Keys = std::set<std::string>;

// parser.c's reads per layer type, with Darknet's section aliases mapped to one name.
const std::map<std::string, Keys>& darknet_keys() {
    static const std::map<std::string, Keys> table = {
        {"net",
         {"max_batches", "batch", "learning_rate", "learning_rate_min", "sgdr_cycle", "sgdr_mult", "momentum", "decay",
          "subdivisions", "time_steps", "track", "augment_speed", "sequential_subdivisions", "try_fix_nan",
          "weights_reject_freq", "equidistant_point", "badlabels_rejection_percentage", "num_sigmas_reject_badlabels",
          "ema_alpha", "use_cuda_graph", "loss_scale", "dynamic_minibatch", "optimized_memory",
          "workspace_size_limit_MB", "adam", "B1", "B2", "eps", "height", "width", "channels", "inputs", "max_crop",
          "min_crop", "flip", "blur", "gaussian_noise", "mixup", "cutmix", "mosaic", "letter_box", "mosaic_bound",
          "contrastive", "contrastive_jit_flip", "contrastive_color", "unsupervised", "label_smooth_eps",
          "resize_step", "attention", "adversarial_lr", "max_chart_loss", "angle", "aspect", "saturation",
          "exposure", "hue", "power", "policy", "burn_in", "step", "scale", "steps", "scales", "seq_scales", "gamma",
          "show_receptive_field"}},
        {"convolutional",
         {"filters", "groups", "size", "stride", "stride_x", "stride_y", "dilation", "antialiasing", "pad", "padding",
          "activation", "assisted_excitation", "share_index", "batch_normalize", "cbn", "binary", "xnor",
          "bin_output", "sway", "rotate", "stretch", "stretch_sway", "flipped", "dot", "angle", "grad_centr",
          "reverse", "coordconv", "stream", "wait_stream"}},
        {"connected", {"output", "activation", "batch_normalize"}},
        {"softmax", {"groups", "temperature", "tree", "spatial", "noloss"}},
        {"yolo",
         {"classes", "num", "mask", "max", "show_details", "max_delta", "counters_per_class", "label_smooth_eps",
          "scale_x_y", "objectness_smooth", "new_coords", "iou_normalizer", "obj_normalizer", "cls_normalizer",
          "delta_normalizer", "iou_loss", "iou_thresh_kind", "beta_nms", "nms_kind", "jitter", "resize",
          "focal_loss", "ignore_thresh", "truth_thresh", "iou_thresh", "random", "track_history_size", "sim_thresh",
          "dets_for_track", "dets_for_show", "track_ciou_norm", "embedding_layer", "map", "anchors"}},
        {"cost", {"type", "scale", "ratio"}},
        {"reorg", {"stride", "reverse"}},
        {"maxpool",
         {"stride", "stride_x", "stride_y", "size", "padding", "maxpool_depth", "out_channels", "antialiasing",
          "maxpool_zero_nonmax"}},
        {"local_avgpool", {"stride", "stride_x", "stride_y", "size", "padding"}},
        {"avgpool", {}},
        {"dropout", {"probability", "dropblock", "dropblock_size_rel", "dropblock_size_abs"}},
        {"shortcut", {"activation", "weights_type", "weights_normalization", "from"}},
        {"scale_channels", {"from", "scale_wh", "activation"}},
        {"sam", {"from", "activation"}},
        {"upsample", {"stride", "scale"}},
        {"route", {"layers", "groups", "group_id", "stream", "wait_stream"}},
    };
    return table;
}

// Read for every layer section (parser.c, after the layer's own parse).
const Keys& common_layer_keys() {
    static const Keys keys = {"clip", "onlyforward", "dont_update", "burnin_update", "stopbackward",
                              "train_only_bn", "dontload", "dontloadscales", "learning_rate"};
    return keys;
}

// Options Darknet reads that change nothing darknet_py computes, with what they do there.
const std::map<std::string, std::string>& no_effect() {
    static const std::map<std::string, std::string> m = {
        {"max_chart_loss", "the y range of Darknet's chart window"},
        {"show_receptive_field", "Darknet's console output"},
        {"show_details", "Darknet's console output"},
        {"use_cuda_graph", "how Darknet launches CUDA work"},
        {"optimized_memory", "Darknet's GPU memory use"},
        {"workspace_size_limit_MB", "Darknet's GPU memory use"},
        {"stream", "Darknet's CUDA streams"},
        {"wait_stream", "Darknet's CUDA streams"},
        {"time_steps", "recurrent layers, which detectors do not have"},
    };
    return m;
}

std::string canonical(const std::string& type) {
    static const std::map<std::string, std::string> alias = {
        {"network", "net"}, {"conv", "convolutional"}, {"conn", "connected"}, {"max", "maxpool"},
        {"local_avg", "local_avgpool"}, {"avg", "avgpool"}, {"soft", "softmax"}, {"reorg3d", "reorg"},
        {"Gaussian_yolo", "yolo"}};
    auto it = alias.find(type);
    return it == alias.end() ? type : it->second;
}

}  // namespace

int edit_distance(const std::string& a, const std::string& b) {
    std::vector<int> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = (int)j;
    for (size_t i = 1; i <= a.size(); ++i) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= b.size(); ++j) {
            int up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

std::string explain_unused_option(const std::string& section_type, const std::string& key) {
    std::string type = canonical(section_type);
    const auto& table = darknet_keys();
    auto it = table.find(type);
    Keys known = it == table.end() ? Keys{} : it->second;
    if (type != "net") known.insert(common_layer_keys().begin(), common_layer_keys().end());

    if (known.count(key)) {
        auto ne = no_effect().find(key);
        if (ne != no_effect().end()) return "in Darknet it only affects " + ne->second + "; no effect here";
        return "Darknet uses it but darknet_py does not support it, so results can differ from Darknet's";
    }
    // A known option of another section type: say where it belongs.
    std::vector<std::string> homes;
    for (auto& [t, keys] : table)
        if (keys.count(key)) homes.push_back("[" + t + "]");
    if (type == "net" && common_layer_keys().count(key)) homes.push_back("the layer sections");
    std::string out;
    if (!homes.empty()) {
        out = "Darknet reads it only in ";
        for (size_t i = 0; i < homes.size() && i < 3; ++i) out += (i ? ", " : "") + homes[i];
        out += ", and ignores it here (printing \"Unused field\")";
    } else {
        out = "Darknet does not know it either and ignores it (printing \"Unused field\")";
    }
    // "did you mean": the closest known option of this section, if close enough to be a typo
    std::string best;
    int best_d = 1 << 30;
    for (const std::string& k : known) {
        int d = edit_distance(key, k);
        if (d < best_d) best_d = d, best = k;
    }
    int allowed = std::max(1, (int)std::min(key.size(), best.size()) / 3);
    if (!best.empty() && best_d <= allowed && homes.empty()) out += "; did you mean '" + best + "'?";
    return out;
}

}  // namespace dn
