#include "cfg.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "darknet_options.h"

namespace dn {

namespace {

std::string trim(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && (unsigned char)s[a] <= ' ') ++a;
    while (b > a && (unsigned char)s[b - 1] <= ' ') --b;
    return s.substr(a, b - a);
}

// Darknet strips all whitespace inside a line before splitting at '='.
std::string strip_spaces(const std::string& s) {
    std::string r;
    for (char c : s)
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') r += c;
    return r;
}

bool parse_long(const std::string& s, long& out) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(s.c_str(), &end, 10);
    if (errno || *end != '\0') return false;
    out = v;
    return true;
}

bool parse_double(const std::string& s, double& out) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(s.c_str(), &end);
    if (errno || *end != '\0' || !std::isfinite(v)) return false;
    out = v;
    return true;
}

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> parts;
    std::string cur;
    for (char c : s) {
        if (c == ',') { parts.push_back(cur); cur.clear(); }
        else cur += c;
    }
    parts.push_back(cur);
    // a trailing comma ("1,2,") is accepted as Darknet does
    if (parts.size() > 1 && parts.back().empty()) parts.pop_back();
    return parts;
}

}  // namespace

std::string Section::where(const std::string& key) const {
    int l = line;
    auto it = options.find(key);
    if (!key.empty() && it != options.end()) l = it->second.line;
    return file + ":" + std::to_string(l) + ": [" + type + "]";
}

void Section::fail(const std::string& key, const std::string& msg) const {
    throw DarknetError(where(key) + " " + msg);
}

void Section::check_size(const std::string& key, const std::string& what, std::initializer_list<double> dims) const {
    double n = 1;
    std::string shape;
    for (double d : dims) {
        n *= d;
        shape += (shape.empty() ? "" : " x ") + std::to_string((long long)d);
    }
    if (n > kMaxTensorFloats)
        fail(key, what + " would be " + shape + " = " + std::to_string((long long)std::min(n, 9e18)) +
                      " floats, over the engine's limit of " + std::to_string((long long)kMaxTensorFloats) +
                      " (1 GiB) per tensor; check " + (key.empty() ? std::string("the sizes in this section") : key) +
                      " and the layers before it");
}

int Section::get_int(const std::string& key, int def) const {
    auto it = options.find(key);
    if (it == options.end()) return def;
    it->second.used = true;
    long v;
    if (!parse_long(it->second.value, v)) {
        double d;  // Darknet uses atoi: "1.0" would read as 1; we accept integral floats only
        // ... written in decimal: atoi reads "0x10" as 0 and "1e3" as 1, so those are refused, not read as 16, 1000
        bool decimal = it->second.value.find_first_of("xXeEpP") == std::string::npos;
        if (decimal && parse_double(it->second.value, d) && d == std::floor(d) && std::fabs(d) < 1e9) return (int)d;
        fail(key, key + "=" + it->second.value + " is not an integer");
    }
    if (v < -1000000000L || v > 1000000000L) fail(key, key + "=" + it->second.value + " is out of range");
    return (int)v;
}

int Section::get_int(const std::string& key, int def, int lo, int hi) const {
    int v = get_int(key, def);
    if (has(key) && (v < lo || v > hi))
        fail(key, key + "=" + std::to_string(v) + " is out of range (expected " + std::to_string(lo) +
                      ".." + std::to_string(hi) + ")");
    return v;
}

float Section::get_float(const std::string& key, float def) const {
    auto it = options.find(key);
    if (it == options.end()) return def;
    it->second.used = true;
    double d;
    if (!parse_double(it->second.value, d)) fail(key, key + "=" + it->second.value + " is not a number");
    return (float)d;
}

std::string Section::get_string(const std::string& key, const std::string& def) const {
    auto it = options.find(key);
    if (it == options.end()) return def;
    it->second.used = true;
    return it->second.value;
}

std::vector<int> Section::get_ints(const std::string& key) const {
    std::vector<int> out;
    auto it = options.find(key);
    if (it == options.end()) return out;
    it->second.used = true;
    for (auto& p : split_commas(it->second.value)) {
        long v;
        if (!parse_long(p, v) || v < -1000000000L || v > 1000000000L)
            fail(key, key + "=" + it->second.value + ": '" + p + "' is not an integer (expected a comma-separated list)");
        out.push_back((int)v);
    }
    return out;
}

std::vector<float> Section::get_floats(const std::string& key) const {
    std::vector<float> out;
    auto it = options.find(key);
    if (it == options.end()) return out;
    it->second.used = true;
    for (auto& p : split_commas(it->second.value)) {
        double d;
        if (!parse_double(p, d))
            fail(key, key + "=" + it->second.value + ": '" + p + "' is not a number (expected a comma-separated list)");
        out.push_back((float)d);
    }
    return out;
}

CfgFile parse_cfg_text(const std::string& text, const std::string& path) {
    CfgFile cfg;
    cfg.path = path;
    std::istringstream in(text);
    std::string raw;
    int lineno = 0;
    while (std::getline(in, raw)) {
        ++lineno;
        if (raw.find('\0') != std::string::npos)
            throw DarknetError(path + ":" + std::to_string(lineno) + ": binary data in a .cfg file (is this a .weights file?)");
        std::string line = trim(raw);
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line[0] == '[') {
            if (line.back() != ']')
                throw DarknetError(path + ":" + std::to_string(lineno) + ": malformed section header '" + line +
                                   "' (expected [name])");
            Section s;
            s.type = trim(line.substr(1, line.size() - 2));
            s.file = path;
            s.line = lineno;
            cfg.sections.push_back(std::move(s));
            continue;
        }
        std::string kv = strip_spaces(line);
        size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
            throw DarknetError(path + ":" + std::to_string(lineno) + ": malformed line '" + line +
                               "' (expected key=value)");
        if (cfg.sections.empty())
            throw DarknetError(path + ":" + std::to_string(lineno) + ": option '" + line +
                               "' before the first [section] (the file must start with [net])");
        std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
        auto& opts = cfg.sections.back().options;
        // Darknet takes the first occurrence; a repeat is kept out but reported at build time.
        if (!opts.count(key)) opts[key] = CfgOption{value, lineno, false};
        else cfg.sections.back().repeated.emplace_back(key, lineno);
    }
    if (cfg.sections.empty()) throw DarknetError(path + ": no sections found (is this a Darknet .cfg file?)");
    const std::string& first = cfg.sections[0].type;
    if (first != "net" && first != "network")
        throw DarknetError(path + ":" + std::to_string(cfg.sections[0].line) + ": first section is [" + first +
                           "], expected [net]");
    return cfg;
}

CfgFile parse_cfg_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw DarknetError(path + ": cannot open cfg file");
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_cfg_text(ss.str(), path);
}

void warn_unused_options(const CfgFile& cfg, Warnings& w) {
    for (auto& s : cfg.sections) {
        for (auto& kv : s.options)
            if (!kv.second.used)
                w.add(s.file + ":" + std::to_string(kv.second.line) + ": [" + s.type + "] option '" + kv.first +
                      "' is not used: " + explain_unused_option(s.type, kv.first));
        for (auto& r : s.repeated)
            w.add(s.file + ":" + std::to_string(r.second) + ": [" + s.type + "] option '" + r.first +
                  "' repeats line " + std::to_string(s.options.at(r.first).line) +
                  "; ignored, the first value is used (as in Darknet)");
    }
}

}  // namespace dn
