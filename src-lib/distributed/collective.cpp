#include "collective.h"

#include "backend.h"

namespace dn {

void Collective::all_reduce_sum(const std::vector<Tensor>& tensors) {
    size_t total = 0;
    for (const Tensor& t : tensors) total += t.size();
    std::vector<float> flat(total);
    size_t at = 0;
    for (const Tensor& t : tensors) {
        copy_to_host(t, flat.data() + at);
        at += t.size();
    }
    all_reduce_sum(flat.data(), total);
    at = 0;
    for (Tensor t : tensors) {  // a copy of the handle: the same buffer
        copy_from_host(flat.data() + at, t);
        at += t.size();
    }
}

void Collective::broadcast(const std::vector<Tensor>& tensors, int root) {
    if (size() == 1) return;
    if (rank() != root) {
        for (Tensor t : tensors) {
            std::vector<float> zeros(t.size(), 0.0f);
            copy_from_host(zeros.data(), t);
        }
    }
    all_reduce_sum(tensors);
    wait();
}

}  // namespace dn
