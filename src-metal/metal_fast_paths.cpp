#include "metal_fast_paths.h"

#include <map>

#include "errors.h"
#include "selftest_results.h"

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

// The names of a comma-separated list as enabled paths; throws for an unknown one (`what` names the switch).
void enable_listed(const std::string& e, const char* what, MpsPathChoice* c) {
    size_t start = 0;
    while (start <= e.size()) {
        size_t end = e.find(',', start);
        std::string name = e.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!name.empty()) {
            int i = index_of(name);
            if (i < 0)
                throw DarknetError(std::string(what) + ": unknown fast path '" + name + "' (use " +
                                   (std::string(what) == "DARKNET_PY_MPS" ? "off, all, selftest or " : "1 or ") +
                                   "a comma-separated list of: " + all_names() + ")");
            c->enabled[i] = true;
        }
        if (end == std::string::npos) break;
        start = end + 1;
    }
}

}  // namespace

const char* mps_path_name(MpsPath p) { return kNames[(int)p]; }

bool judging_mps_paths(const char* selftest_env) {
    return selftest_env && *selftest_env && std::string(selftest_env) != "0";
}

MpsPathChoice choose_mps_paths(const char* selftest_env, const char* mps_env, const std::string& gpu_name) {
    MpsPathChoice c;
    if (judging_mps_paths(selftest_env)) {  // the selftest judging them: all, or the ones it names
        if (std::string(selftest_env) == "1") c.enabled.fill(true);
        else enable_listed(selftest_env, "DARKNET_PY_SELFTEST", &c);
        return c;
    }
    std::string e = mps_env ? mps_env : "";
    if (e == "off" || e == "none" || e == "0") {
        c.note = "metal: MPS fast paths off (DARKNET_PY_MPS=" + e + "): our kernels run every op";
        return c;
    }
    if (e == "all" || e == "on" || e == "1") {
        c.enabled.fill(true);
        return c;
    }
    if (!e.empty() && e != "selftest") {
        enable_listed(e, "DARKNET_PY_MPS", &c);
        return c;
    }
    std::string why;
    std::map<std::string, bool> verdicts = selftest_fast_paths("metal", this_identity(gpu_name), &why);
    if (!why.empty()) {  // no file, one without a readable "fast_paths", or another machine's
        c.note = "metal: MPS fast paths off: " + why + "; our kernels run every op";
        return c;
    }
    std::string off;
    for (int i = 0; i < kMpsPathCount; ++i) {
        auto it = verdicts.find(kNames[i]);
        c.enabled[i] = it != verdicts.end() && it->second;
        if (!c.enabled[i])
            off += std::string(off.empty() ? "" : ", ") + kNames[i] + (it == verdicts.end() ? " (not checked)" : " (failed)");
    }
    if (!off.empty())
        c.note = "metal: MPS fast paths not used, per the selftest (" + selftest_results_path("metal") + "): " + off;
    return c;
}

}  // namespace dn
