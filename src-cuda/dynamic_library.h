// Opening an optional NVIDIA library at run time (cuBLAS, cuDNN): the first of several candidate
// paths that loads, and its entry points bound by name.
#pragma once
#include <dlfcn.h>

#include <string>
#include <vector>

namespace dn {

// The first candidate that dlopen loads (*path = which), or null with *tried listing them all.
inline void* open_first_library(const std::vector<std::string>& candidates, std::string* path, std::string* tried) {
    for (const std::string& p : candidates) {
        if (void* lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) {
            *path = p;
            return lib;
        }
        *tried += (tried->empty() ? "" : ", ") + p;
    }
    return nullptr;
}

template <class F>
bool bind_symbol(void* lib, const char* name, F* fn) {
    *fn = reinterpret_cast<F>(dlsym(lib, name));
    return *fn != nullptr;
}

}  // namespace dn
