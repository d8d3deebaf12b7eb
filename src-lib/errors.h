// Exceptions thrown by the engine. Python sees them as ValueError (DarknetError)
// with the message unchanged, so every message must say which file/line/layer is wrong.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace dn {

struct DarknetError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Collects non-fatal messages (ignored options, extra bytes in a weights file).
// The Python layer turns them into warnings.
struct Warnings {
    std::vector<std::string> items;
    void add(std::string s) { items.push_back(std::move(s)); }
};

}  // namespace dn
