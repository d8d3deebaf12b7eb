#include "metal_fast_paths.h"

#include <cctype>
#include <cstdlib>
#include <map>

#include "errors.h"

namespace dn {

namespace {

const char* const kNames[kMpsPathCount] = {"mps_gemm", "mps_conv2d", "mps_conv2d_backward", "mps_pool",
                                           "mps_pool_backward", "mps_batchnorm", "mps_batchnorm_backward"};

int index_of(const std::string& name) {
    for (int i = 0; i < kMpsPathCount; ++i)
        if (name == kNames[i]) return i;
    return -1;
}

std::string all_names() {
    std::string s;
    for (int i = 0; i < kMpsPathCount; ++i) s += (i ? ", " : "") + std::string(kNames[i]);
    return s;
}

// A reader for the one shape the selftest file has: an object whose "fast_paths" member is an object
// of name: true/false. Other members (timings, versions) are skipped whatever they hold.
class FastPathsReader {
public:
    explicit FastPathsReader(const std::string& text) : s_(text) {}

    // name -> verdict; false with *why on malformed text or a missing "fast_paths" object
    bool read(std::map<std::string, bool>* out, std::string* why) {
        try {
            expect('{');
            bool found = false;
            if (!peek('}')) do {
                std::string key = string();
                expect(':');
                if (key == "fast_paths") found = true, verdicts(out);
                else skip_value();
            } while (accept(','));
            expect('}');
            if (!found) return *why = "it has no \"fast_paths\" object", false;
            return true;
        } catch (const std::string& e) {
            return *why = e, false;
        }
    }

private:
    void space() { while (i_ < s_.size() && std::isspace((unsigned char)s_[i_])) ++i_; }
    bool peek(char c) { space(); return i_ < s_.size() && s_[i_] == c; }
    bool accept(char c) { return peek(c) ? (++i_, true) : false; }
    void expect(char c) {
        if (!accept(c)) throw std::string("expected '") + c + "' at character " + std::to_string(i_);
    }
    std::string string() {
        expect('"');
        std::string r;
        while (i_ < s_.size() && s_[i_] != '"') {
            if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
            r += s_[i_++];
        }
        expect('"');
        return r;
    }
    bool literal(const char* word) {
        space();
        std::string w(word);
        if (s_.compare(i_, w.size(), w) != 0) return false;
        i_ += w.size();
        return true;
    }
    void verdicts(std::map<std::string, bool>* out) {
        expect('{');
        if (accept('}')) return;
        do {
            std::string name = string();
            expect(':');
            if (literal("true")) (*out)[name] = true;
            else if (literal("false")) (*out)[name] = false;
            else throw std::string("\"" + name + "\" is not true or false");
        } while (accept(','));
        expect('}');
    }
    void skip_value() {
        space();
        if (peek('"')) return (void)string();
        if (accept('{') || accept('[')) {
            int depth = 1;
            while (i_ < s_.size() && depth) {
                char c = s_[i_];
                if (c == '"') { string(); continue; }
                if (c == '{' || c == '[') ++depth;
                if (c == '}' || c == ']') --depth;
                ++i_;
            }
            if (depth) throw std::string("unterminated value");
            return;
        }
        size_t start = i_;
        while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}') ++i_;
        if (i_ == start) throw std::string("a value is missing at character " + std::to_string(i_));
    }

    const std::string& s_;
    size_t i_ = 0;
};

}  // namespace

const char* mps_path_name(MpsPath p) { return kNames[(int)p]; }

MpsPathChoice choose_mps_paths(const char* env, const std::string* file, const std::string& file_path) {
    MpsPathChoice c;
    std::string e = env ? env : "";
    if (e == "off" || e == "none" || e == "0") {
        c.note = "metal: MPS fast paths off (DARKNET_PY_MPS=" + e + "): our kernels run every op";
        return c;
    }
    if (e == "all" || e == "on" || e == "1") {
        c.enabled.fill(true);
        return c;
    }
    if (!e.empty() && e != "selftest") {
        size_t start = 0;
        while (start <= e.size()) {
            size_t end = e.find(',', start);
            std::string name = e.substr(start, end == std::string::npos ? std::string::npos : end - start);
            if (!name.empty()) {
                int i = index_of(name);
                if (i < 0)
                    throw DarknetError("DARKNET_PY_MPS: unknown fast path '" + name + "' (use off, all, selftest or " +
                                       "a comma-separated list of: " + all_names() + ")");
                c.enabled[i] = true;
            }
            if (end == std::string::npos) break;
            start = end + 1;
        }
        return c;
    }
    if (!file) {
        c.note = "metal: MPS fast paths off until `darknet_py selftest --device metal` has checked them on this "
                 "machine (no " + file_path + "): our kernels run every op";
        return c;
    }
    std::map<std::string, bool> verdicts;
    std::string why;
    if (!FastPathsReader(*file).read(&verdicts, &why)) {
        c.note = "metal: MPS fast paths off: " + file_path + " could not be read (" + why +
                 "); run `darknet_py selftest --device metal` again";
        return c;
    }
    std::string off;
    for (int i = 0; i < kMpsPathCount; ++i) {
        auto it = verdicts.find(kNames[i]);
        c.enabled[i] = it != verdicts.end() && it->second;
        if (!c.enabled[i])
            off += std::string(off.empty() ? "" : ", ") + kNames[i] + (it == verdicts.end() ? " (not checked)" : " (failed)");
    }
    if (!off.empty()) c.note = "metal: MPS fast paths not used, per the selftest (" + file_path + "): " + off;
    return c;
}

std::string selftest_file_path(const std::string& device_id) {
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.cache/darknet_py/selftest-" + device_id + ".json";
}

}  // namespace dn
