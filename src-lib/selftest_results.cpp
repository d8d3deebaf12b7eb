#include "selftest_results.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#elif defined(__unix__)
#include <sys/utsname.h>
#endif

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
    // A JSON string as json.dump writes it; \uXXXX escapes are kept as written (a name with them
    // then matches nothing: the safe side).
    bool text(std::string* out) {
        if (!eat('"')) return false;
        out->clear();
        for (; i < s.size(); ++i) {
            char c = s[i];
            if (c == '"') return ++i, true;
            if (c == '\\' && i + 1 < s.size() && s[i + 1] != 'u') c = s[++i];
            out->push_back(c);
        }
        return false;
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

std::string system_version() {
#if defined(__APPLE__)
    auto ctl = [](const char* name) {
        char buf[256] = {};
        size_t n = sizeof buf - 1;
        return sysctlbyname(name, buf, &n, nullptr, 0) == 0 ? std::string(buf) : std::string("?");
    };
    return "macOS " + ctl("kern.osproductversion") + " (" + ctl("kern.osversion") + ")";
#elif defined(__unix__)
    struct utsname u;
    if (uname(&u) != 0) return "unknown";
    return std::string(u.sysname) + " " + u.release + " (" + u.version + ")";
#else
    return "unknown";
#endif
}

std::string engine_version() {
#ifdef DARKNET_PY_VERSION
    return DARKNET_PY_VERSION;
#else
    return "unknown";
#endif
}

SelftestIdentity this_identity(const std::string& device_name) {
    return SelftestIdentity{system_version(), device_name, engine_version()};
}

std::map<std::string, bool> selftest_fast_paths(const std::string& device, const SelftestIdentity& expect,
                                                std::string* why) {
    std::string read_why;
    std::map<std::string, bool> out = selftest_fast_paths(device, &read_why);
    if (!read_why.empty()) {
        if (why) *why = read_why;
        return out;
    }
    std::ifstream f(selftest_results_path(device));
    std::stringstream all;
    all << f.rdbuf();
    std::string s = all.str();
    auto value = [&](const char* key) {  // a top-level string json.dump wrote before any nested one
        size_t at = s.find(std::string("\"") + key + "\"");
        Scanner sc{s, at == std::string::npos ? s.size() : at + std::strlen(key) + 2};
        std::string v;
        return sc.eat(':') && sc.text(&v) ? v : std::string("(none)");
    };
    SelftestIdentity got{value("system"), value("device_name"), value("darknet_py")};
    std::string differs;
    auto compare = [&](const char* what, const std::string& g, const std::string& want) {
        if (g != want) differs += (differs.empty() ? "" : ", ") + std::string(what) + " " + g + " (this one: " + want + ")";
    };
    compare("system", got.system, expect.system);
    compare("GPU", got.device_name, expect.device_name);
    compare("darknet_py", got.darknet_py, expect.darknet_py);
    if (differs.empty()) return out;
    if (why)
        *why = "the selftest results at " + selftest_results_path(device) + " are for another " + differs +
               " (run `darknet_py selftest --device " + device + "` again)";
    return {};
}

bool fast_path_passed(const std::string& device, const std::string& name) {
    auto paths = selftest_fast_paths(device);
    auto it = paths.find(name);
    return it != paths.end() && it->second;
}

}  // namespace dn
