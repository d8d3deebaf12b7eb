#include "weights.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

namespace dn {

namespace {

// Darknet writes native little-endian floats and ints; so do we.
struct Reader {
    std::ifstream f;
    std::string path;
    size_t remaining = 0;

    bool read(void* dst, size_t bytes) {
        if (bytes > remaining) return false;
        f.read(static_cast<char*>(dst), (std::streamsize)bytes);
        if ((size_t)f.gcount() != bytes) return false;
        remaining -= bytes;
        return true;
    }
};

void transpose_in_place(std::vector<float>& v, int rows, int cols) {
    std::vector<float> tmp = v;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) v[(size_t)c * rows + r] = tmp[(size_t)r * cols + c];
}

}  // namespace

WeightsHeader load_weights(Network& net, const std::string& path, int max_layers) {
    Reader r;
    r.path = path;
    r.f.open(path, std::ios::binary | std::ios::ate);
    if (!r.f) throw DarknetError(path + ": cannot open weights file");
    net.own_params();  // a clone sharing the old values keeps them
    r.remaining = (size_t)r.f.tellg();
    r.f.seekg(0);

    WeightsHeader h;
    if (!r.read(&h.major, 4) || !r.read(&h.minor, 4) || !r.read(&h.revision, 4))
        throw DarknetError(path + ": too short for a Darknet weights header (" + std::to_string(r.remaining) + " bytes)");
    if (h.seen_is_64bit()) {
        if (!r.read(&h.seen, 8)) throw DarknetError(path + ": truncated header (no 'seen' count)");
    } else {
        uint32_t seen32 = 0;
        if (!r.read(&seen32, 4)) throw DarknetError(path + ": truncated header (no 'seen' count)");
        h.seen = seen32;
    }

    std::vector<float> staging;  // one parameter at a time: read on the host, then copied to its device
    int n = max_layers < 0 ? (int)net.layers.size() : std::min(max_layers, (int)net.layers.size());
    for (int i = 0; i < n; ++i) {
        Layer& l = *net.layers[i];
        for (Param& p : l.params) {
            size_t count = p.value.size();
            staging.resize(count);
            if (!r.read(staging.data(), count * 4)) {
                size_t have = r.remaining / 4;
                throw DarknetError(path + ": file ends inside layer " + std::to_string(i) + " (" + l.type() +
                                   ", cfg line " + std::to_string(l.line) + "): its " + p.name + " need " +
                                   std::to_string(count) + " floats but only " + std::to_string(have) +
                                   " remain (missing " + std::to_string(count - have) +
                                   "). Is the weights file for this cfg?");
            }
            if (h.transpose() && std::strcmp(l.type(), "connected") == 0 && p.name == "weights")
                transpose_in_place(staging, (int)l.in.sample(), l.out.c);
            copy_from_host(staging.data(), p.value);
        }
    }
    if (max_layers < 0 && r.remaining > 0)
        net.warnings.add(path + ": " + std::to_string(r.remaining / 4) + " floats (" + std::to_string(r.remaining) +
                         " bytes) left over after the last layer; the weights file may belong to a different cfg");
    net.seen = h.seen;
    return h;
}

void save_weights(Network& net, const std::string& path, int max_layers) {
    std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) throw DarknetError(path + ": cannot write weights file");
        WeightsHeader h;
        h.seen = net.seen;
        f.write(reinterpret_cast<const char*>(&h.major), 4);
        f.write(reinterpret_cast<const char*>(&h.minor), 4);
        f.write(reinterpret_cast<const char*>(&h.revision), 4);
        f.write(reinterpret_cast<const char*>(&h.seen), 8);
        std::vector<float> staging;
        size_t n = max_layers < 0 ? net.layers.size() : std::min((size_t)max_layers, net.layers.size());
        for (size_t i = 0; i < n; ++i)
            for (const Param& p : net.layers[i]->params) {
                staging.resize(p.value.size());
                copy_to_host(p.value, staging.data());
                f.write(reinterpret_cast<const char*>(staging.data()), (std::streamsize)(staging.size() * 4));
            }
        f.flush();
        if (!f) {
            std::remove(tmp.c_str());
            throw DarknetError(path + ": write failed (disk full?)");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw DarknetError(path + ": cannot rename the temporary file into place");
    }
}

}  // namespace dn
