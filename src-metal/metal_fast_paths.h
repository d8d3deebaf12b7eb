// Which MPS fast paths a Metal device uses. A vendor library runs only where it passed its parity
// check on this machine: `darknet_py selftest --device metal` writes the verdicts to
// ~/.cache/darknet_py/selftest-metal.json as {"fast_paths": {"mps_gemm": true, ...}}, and the
// device enables exactly the names marked true there. Without that file every op runs on our own
// kernels. DARKNET_PY_MPS overrides: "off", "all" (what selftest itself uses to probe them), or a
// comma-separated list of names.
#pragma once
#include <array>
#include <string>

namespace dn {

enum class MpsPath { gemm, conv2d, conv2d_backward, pool, pool_backward, batchnorm, batchnorm_backward, count };
constexpr int kMpsPathCount = (int)MpsPath::count;

// "mps_gemm", "mps_conv2d", ... (the keys of the selftest file's "fast_paths").
const char* mps_path_name(MpsPath p);

struct MpsPathChoice {
    std::array<bool, kMpsPathCount> enabled{};
    std::string note;  // one line for stderr when some are off and why; empty when all are on
    bool on(MpsPath p) const { return enabled[(int)p]; }
};

// The choice from DARKNET_PY_MPS (`env`, null when unset) and the selftest file's text (`file`,
// null when there is none; `file_path` for the messages). Throws DarknetError for an unknown name
// in DARKNET_PY_MPS; a file that cannot be parsed turns every path off with a note saying so.
MpsPathChoice choose_mps_paths(const char* env, const std::string* file, const std::string& file_path);

// ~/.cache/darknet_py/selftest-<device_id>.json, where `darknet_py selftest` writes it.
std::string selftest_file_path(const std::string& device_id);

}  // namespace dn
