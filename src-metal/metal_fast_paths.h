// Which MPS fast paths a Metal device uses. A vendor library runs only where it passed its parity
// check on this machine: `darknet_py selftest --device metal` records the verdicts in the selftest
// results file (src-lib/selftest_results.h: where it lives, how it is read), and the device enables
// exactly the names marked true there. Without that file every op runs on our own kernels.
// The switches, in order:
//   DARKNET_PY_SELFTEST=1  every path on, judged: a failure fails the op (it wins over DARKNET_PY_MPS, or
//                          a verdict would be recorded for a path that never ran);
//   DARKNET_PY_SELFTEST=mps_conv2d,...  only the paths named, judged: the selftest judges each path in a
//                          child process of its own with this (diagnostics/selftest.py);
//   DARKNET_PY_MPS         "off", "all" (unchecked), a comma-separated list of names, or "selftest"
//                          (the default: the results file decides).
#pragma once
#include <array>
#include <string>

namespace dn {

enum class MpsPath { gemm, conv2d, conv2d_backward, pool, pool_backward, batchnorm, batchnorm_backward, count };
constexpr int kMpsPathCount = (int)MpsPath::count;

// "mps_gemm", "mps_conv2d", ... (the keys of the selftest file's "fast_paths"; selftest.FAST_PATHS
// in Python lists the same names with the ops each one serves).
const char* mps_path_name(MpsPath p);

// Whether DARKNET_PY_SELFTEST's value (null when unset) puts the device in judging mode: "1" or a list.
bool judging_mps_paths(const char* selftest_env);

struct MpsPathChoice {
    std::array<bool, kMpsPathCount> enabled{};
    std::string note;  // one line for stderr when some are off and why; empty when all are on
    bool on(MpsPath p) const { return enabled[(int)p]; }
};

// The choice from DARKNET_PY_SELFTEST's value (`selftest_env`) and DARKNET_PY_MPS's (`mps_env`),
// each null when unset, and the selftest results of device "metal", trusted only when they were
// recorded on this macOS version and build, GPU `gpu_name` and darknet_py version (selftest_results.h
// this_identity). Throws DarknetError for an unknown name in DARKNET_PY_MPS; a results file that
// cannot be read, or one of another system, GPU or version, turns every path off, with a note saying
// why and what to run.
MpsPathChoice choose_mps_paths(const char* selftest_env, const char* mps_env, const std::string& gpu_name);

}  // namespace dn
