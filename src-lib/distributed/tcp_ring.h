// The CPU implementation of the collective layer: a ring all-reduce over TCP sockets (loopback on
// one host, the network across hosts), as Gloo and NCCL's ring do it: a reduce-scatter then an
// all-gather, each of size - 1 steps in which every rank sends one chunk to the next rank while it
// receives one from the previous. Every rank ends with the same bits (the all-gather copies each
// chunk's one sum). The sockets are connected by the caller (darknet_py.distributed's rendezvous).
#pragma once
#include <atomic>
#include <string>

#include "collective.h"
#include "errors.h"

namespace dn {

// A peer died, closed its end, or sent nothing within the timeout. The message names both ranks.
struct CollectiveError : DarknetError {
    using DarknetError::DarknetError;
};

class TcpRingCollective final : public Collective {
public:
    // send_fd: connected to rank (rank + 1) % size; recv_fd: to rank (rank - 1 + size) % size. Takes
    // ownership of both (closed on destruction). timeout_ms: the longest wait for a peer's bytes.
    TcpRingCollective(int rank, int size, int send_fd, int recv_fd, int timeout_ms);
    ~TcpRingCollective() override;
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "tcp-ring"; }
    void all_reduce_sum(float* data, size_t n) override;
    using Collective::all_reduce_sum;

private:
    // Sends send_bytes from send while it receives recv_bytes into recv (both at once: neither
    // side blocks the other when the socket buffers fill).
    void exchange(const char* send, size_t send_bytes, char* recv, size_t recv_bytes);
    [[noreturn]] void fail(const std::string& what, int peer) const;
    int rank_, size_, send_fd_, recv_fd_, timeout_ms_;
    std::atomic<bool> busy_{false};  // one operation at a time: the ranks must run them in one order
    std::vector<float> scratch_;
};

}  // namespace dn
