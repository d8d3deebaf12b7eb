// Bucketed gradient all-reduce, as PyTorch DDP does it: the parameters' gradients are grouped in
// backward order into buckets of about bucket_bytes; a bucket is reduced as soon as the backward has
// finished all its layers, on a thread of its own, while the backward goes on with the earlier layers.
// update() then waits for the last buckets (finish). Every rank sums the same gradients in the same
// order, so every rank takes the same optimizer step. Batchnorm's rolling statistics are not
// gradients: they stay per rank, as in Darknet.
#pragma once
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collective.h"
#include "gradient_hook.h"

namespace dn {

class Network;

class GradientReducer final : public GradientHook {
public:
    GradientReducer(Network& net, std::shared_ptr<Collective> collective, size_t bucket_bytes);
    ~GradientReducer() override;
    void backward_begins() override;
    void layer_done(int layer) override;
    void backward_ends() override;
    void finish() override;
    std::function<void(float*, size_t)> sum_over_ranks() override {
        return [c = collective_](float* data, size_t n) { c->all_reduce_sum(data, n); };
    }

    // Figures of the last finish(): buckets, bytes reduced, seconds spent reducing, and the seconds
    // the caller waited in finish() (the part of the reduction that did not hide under the backward).
    struct Stats {
        int buckets = 0;
        int launched_early = 0;  // buckets launched while layers before theirs still had their backward to run
        size_t bytes = 0;
        double reduce_seconds = 0, exposed_seconds = 0;
    };
    const Stats& last_stats() const { return stats_; }

private:
    struct Bucket {
        int lowest_layer = 0;  // the bucket is complete once the backward finished this layer
        std::vector<Tensor> grads;
        size_t bytes = 0;
    };
    void plan();         // the buckets, from the network's current gradient tensors
    void launch(size_t b);
    void worker();
    Network& net_;
    std::shared_ptr<Collective> collective_;
    size_t bucket_bytes_;
    std::vector<Bucket> buckets_;
    size_t next_ = 0;  // the next bucket to launch (buckets are in backward order)
    bool active_ = false;
    int launched_early_ = 0;
    bool threaded_ = false;  // host tensors and a collective that may run beside the backward
    // the worker thread's queue
    std::mutex m_;
    std::condition_variable cv_;
    std::vector<size_t> queue_;
    size_t done_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
    double reduce_seconds_ = 0;
    std::thread thread_;
    Stats stats_;
};

}  // namespace dn
