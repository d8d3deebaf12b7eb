// The collective layer of data-parallel training: every rank (one process per device) calls the
// same operations in the same order, and each returns the same bits on every rank.
// Implementations: TcpRingCollective (any machine, host memory: CI and CPU training) and
// NcclCollective (src-cuda, NVIDIA GPUs, device memory). See DESIGN.md "Precision and many GPUs".
#pragma once
#include <cstddef>
#include <vector>

#include "tensor.h"

namespace dn {

class Collective {
public:
    virtual ~Collective() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const char* name() const = 0;

    // In place, the element-wise sum over the ranks of n host floats.
    virtual void all_reduce_sum(float* data, size_t n) = 0;
    // In place, the sum over the ranks of each tensor (any memory space; the same shapes on every rank).
    // The default stages them through one host buffer; NCCL reduces device memory where it is.
    virtual void all_reduce_sum(const std::vector<Tensor>& tensors);
    // Whether all_reduce_sum(tensors) of host tensors may run on a thread of its own while the caller
    // keeps computing (the gradient buckets overlap the backward that way).
    virtual bool reduces_on_own_thread() const { return true; }
    // Completes the reductions this rank queued without waiting for them (NCCL's stream); no-op here.
    virtual void wait() {}

    // Rank root's values on every rank: a sum where the other ranks contribute zeros (exact).
    void broadcast(const std::vector<Tensor>& tensors, int root);
};

}  // namespace dn
