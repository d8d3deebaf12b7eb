#include "selftest_results.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace dn {

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// A reader for exactly what selftest.py writes under "fast_paths" (json.dump of a dict of names to
// booleans), not a JSON parser: names are plain identifiers, so no escapes.
struct Scanner {
    const std::string& s;
    size_t i = 0;
    void space() {
        while (i < s.size() && std::isspace((unsigned char)s[i])) ++i;
    }
    bool eat(char c) {
        space();
        if (i < s.size() && s[i] == c) return ++i, true;
        return false;
    }
    bool word(const char* w) {
        space();
        std::string t(w);
        if (s.compare(i, t.size(), t) != 0) return false;
        i += t.size();
        return true;
    }
    bool name(std::string* out) {
        if (!eat('"')) return false;
        size_t end = s.find('"', i);
        if (end == std::string::npos) return false;
        *out = s.substr(i, end - i);
        for (char c : *out)
            if (!std::isalnum((unsigned char)c) && c != '_' && c != '-' && c != '.') return false;
        i = end + 1;
        return !out->empty();
    }
};

}  // namespace

std::string cache_dir() {
    std::string dir = env("DARKNET_PY_CACHE_DIR");
    if (!dir.empty()) return dir;
    std::string xdg = env("XDG_CACHE_HOME");
    if (!xdg.empty()) return xdg + "/darknet_py";
    std::string home = env("HOME");
    if (home.empty()) home = env("USERPROFILE");
    if (home.empty()) home = ".";
#if defined(__APPLE__)
    return home + "/Library/Caches/darknet_py";
#else
    return home + "/.cache/darknet_py";
#endif
}

std::string selftest_results_path(const std::string& device) {
    std::string name = device;
    for (char& c : name)
        if (!std::isalnum((unsigned char)c) && c != '_' && c != '-' && c != '.') c = '-';
    return cache_dir() + "/selftest-" + name + ".json";
}

std::map<std::string, bool> selftest_fast_paths(const std::string& device, std::string* why) {
    std::map<std::string, bool> out;
    std::string path = selftest_results_path(device);
    std::ifstream f(path);
    if (!f) {
        if (why) *why = "no selftest results at " + path + " (run `darknet_py selftest --device " + device + "`)";
        return out;
    }
    std::stringstream text;
    text << f.rdbuf();
    std::string s = text.str();
    size_t key = s.find("\"fast_paths\"");
    Scanner sc{s, key == std::string::npos ? s.size() : key + 12};
    bool ok = key != std::string::npos && sc.eat(':') && sc.eat('{');
    if (ok && !sc.eat('}')) {
        do {
            std::string name;
            if (!sc.name(&name) || !sc.eat(':')) { ok = false; break; }
            if (sc.word("true")) out[name] = true;
            else if (sc.word("false")) out[name] = false;
            else { ok = false; break; }
        } while (sc.eat(','));
        ok = ok && sc.eat('}');
    }
    if (!ok) {
        out.clear();
        if (why) *why = path + ": no readable \"fast_paths\" object (run the selftest again)";
    }
    return out;
}

bool fast_path_passed(const std::string& device, const std::string& name) {
    auto paths = selftest_fast_paths(device);
    auto it = paths.find(name);
    return it != paths.end() && it->second;
}

}  // namespace dn
