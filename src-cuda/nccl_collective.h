// The collective layer on NVIDIA GPUs: NCCL's all-reduce on the gradients where they are (device
// memory), queued on a stream of its own after the backward's work so far, so it runs beside the
// rest of the backward; the update's kernels wait for it on the device, not on the host.
#pragma once
#include <memory>
#include <string>

#include "distributed/collective.h"

namespace dn {

// Whether NCCL can be opened; *version = "2.x.y (path)" or *why.
bool nccl_available(std::string* why, std::string* version);
// ncclGetUniqueId's 128 bytes (rank 0 makes it; the rendezvous hands it to the others).
std::string nccl_unique_id();
// Joins the communicator of `size` ranks on device "cuda:N". timeout_s bounds every host wait
// (a rank that died or hangs: CollectiveError naming this rank, and the communicator is aborted).
std::shared_ptr<Collective> make_nccl_collective(int rank, int size, const std::string& unique_id,
                                                 const std::string& device, double timeout_s);

}  // namespace dn
