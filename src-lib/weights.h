// Darknet .weights files: a header (major, minor, revision, images seen) followed by each
// layer's parameter blocks in layer order (see Layer::params for the per-layer order).
#pragma once
#include <cstdint>
#include <string>

#include "network.h"

namespace dn {

struct WeightsHeader {
    int32_t major = 0, minor = 2, revision = 5;
    uint64_t seen = 0;
    // Darknet stores `seen` as 64 bits from version 0.2 on, as 32 bits before (AlexeyAB's and
    // OpenCV's rule; pjreddie's also required major, minor < 1000). 64-bit arithmetic: a corrupt
    // header with a huge major must not overflow.
    bool seen_is_64bit() const { return ((int64_t)major * 10 + minor) >= 2; }
    // Files written by very old Darknet store connected-layer weights transposed.
    bool transpose() const { return major > 1000 || minor > 1000; }
};

// Loads the first `max_layers` layers (all when < 0), Darknet's `partial`. Returns the header.
// A short file throws, naming the layer; extra bytes add a warning to net.warnings.
WeightsHeader load_weights(Network& net, const std::string& path, int max_layers = -1);

// Writes version 0.2.5 atomically (temporary file, then rename): the first `max_layers` layers' parameters
// (all when < 0; Darknet's `partial` writes a network's first layers, a backbone to train from).
void save_weights(Network& net, const std::string& path, int max_layers = -1);

}  // namespace dn
