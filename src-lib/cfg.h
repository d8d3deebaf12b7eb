// .cfg parsing: sections of key=value options with their line numbers, and typed
// getters that report malformed or out-of-range values as "file:line: message (hint)".
#pragma once
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "errors.h"

namespace dn {

// The largest tensor (weights, or one image's layer output) a cfg may ask for: 2^28 floats = 1 GiB.
// Real networks stay far below (yolov4-p6 at 1280x1280: ~1.3e8); a typo such as filters=1000000
// must fail with its line instead of making the engine allocate terabytes.
constexpr double kMaxTensorFloats = double(1 << 28);

struct CfgOption {
    std::string value;
    int line = 0;
    mutable bool used = false;
};

struct Section {
    std::string type;   // without brackets, e.g. "convolutional"
    std::string file;
    int line = 0;       // line of the [header]
    std::map<std::string, CfgOption> options;
    std::vector<std::pair<std::string, int>> repeated;  // later occurrences of a key (ignored), with their lines

    bool has(const std::string& key) const { return options.count(key) > 0; }
    int get_int(const std::string& key, int def) const;
    int get_int(const std::string& key, int def, int lo, int hi) const;  // inclusive range
    float get_float(const std::string& key, float def) const;
    std::string get_string(const std::string& key, const std::string& def) const;
    std::vector<int> get_ints(const std::string& key) const;     // "1, 2,3" ; empty if absent
    std::vector<float> get_floats(const std::string& key) const;

    // "file:line: [type] message" pointing at the option's line (or the header if absent).
    [[noreturn]] void fail(const std::string& key, const std::string& msg) const;
    // Fails at `key`'s line when a tensor with these dimensions would exceed kMaxTensorFloats.
    // Dimensions are doubles so that the product cannot overflow before it is checked.
    void check_size(const std::string& key, const std::string& what, std::initializer_list<double> dims) const;
    std::string where(const std::string& key = "") const;
};

struct CfgFile {
    std::string path;
    std::vector<Section> sections;  // sections[0] is [net] (or [network])
};

CfgFile parse_cfg_text(const std::string& text, const std::string& path);
CfgFile parse_cfg_file(const std::string& path);

// Options present in the file that no layer read, as warnings saying why (darknet_options.h): not
// supported here, no effect, belongs in another section, or unknown to Darknet (with "did you mean").
void warn_unused_options(const CfgFile& cfg, Warnings& w);

}  // namespace dn
