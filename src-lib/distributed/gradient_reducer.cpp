#include "gradient_reducer.h"

#include <chrono>

#include "network.h"

namespace dn {

namespace {
double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}
}  // namespace

GradientReducer::GradientReducer(Network& net, std::shared_ptr<Collective> collective, size_t bucket_bytes)
    : net_(net), collective_(std::move(collective)), bucket_bytes_(bucket_bytes ? bucket_bytes : 1) {}

GradientReducer::~GradientReducer() {
    {
        std::lock_guard<std::mutex> lk(m_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void GradientReducer::plan() {
    net_.allocate_grads();
    buckets_.clear();
    bool host = true;
    for (int i = (int)net_.layers.size() - 1; i >= 0; --i) {
        for (const Param& p : net_.layers[i]->params) {
            if (!p.has_grad) continue;
            if (buckets_.empty() || buckets_.back().bytes >= bucket_bytes_) buckets_.emplace_back();
            Bucket& b = buckets_.back();
            b.grads.push_back(p.grad);
            b.bytes += p.grad.size() * sizeof(float);
            b.lowest_layer = i;
            host = host && p.grad.on_host();
        }
    }
    // A device's memory is touched from the thread that drives the device only; NCCL queues its
    // reductions on a stream of its own instead (it needs no thread).
    threaded_ = host && collective_->reduces_on_own_thread();
    if (threaded_ && !thread_.joinable()) thread_ = std::thread([this] { worker(); });
}

void GradientReducer::backward_begins() {
    finish();  // a previous reduction still running would race with this backward's accumulation
    plan();
    next_ = 0;
    done_ = 0;
    reduce_seconds_ = 0;
    launched_early_ = 0;
    active_ = true;
}

void GradientReducer::launch(size_t b) {
    if (!threaded_) {
        double t0 = now_s();
        collective_->all_reduce_sum(buckets_[b].grads);
        reduce_seconds_ += now_s() - t0;
        ++done_;
        return;
    }
    {
        std::lock_guard<std::mutex> lk(m_);
        queue_.push_back(b);
    }
    cv_.notify_all();
}

void GradientReducer::layer_done(int layer) {
    if (!active_) return;
    // Darknet-style layers write only their own gradients, so once the backward passed a bucket's
    // lowest layer, the bucket's gradients are final.
    while (next_ < buckets_.size() && buckets_[next_].lowest_layer >= layer) {
        if (layer > 0) ++launched_early_;
        launch(next_++);
    }
}

void GradientReducer::backward_ends() {
    if (!active_) return;
    while (next_ < buckets_.size()) launch(next_++);
}

void GradientReducer::worker() {
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        size_t b = queue_.front();
        queue_.erase(queue_.begin());
        lk.unlock();
        double t0 = now_s();
        std::exception_ptr err;
        if (!error_) {  // after a failure the rest are skipped: finish() rethrows the first
            try {
                collective_->all_reduce_sum(buckets_[b].grads);
            } catch (...) {
                err = std::current_exception();
            }
        }
        lk.lock();
        if (err && !error_) error_ = err;
        reduce_seconds_ += now_s() - t0;
        ++done_;
        cv_.notify_all();
    }
}

void GradientReducer::finish() {
    if (!active_) return;
    backward_ends();  // a backward that threw part way: the launched buckets must still complete
    double t0 = now_s();
    std::exception_ptr err;
    {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return done_ == buckets_.size(); });
        err = error_;
        error_ = nullptr;
    }
    collective_->wait();
    active_ = false;
    stats_.buckets = (int)buckets_.size();
    stats_.launched_early = launched_early_;
    stats_.bytes = 0;
    for (const Bucket& b : buckets_) stats_.bytes += b.bytes;
    stats_.reduce_seconds = reduce_seconds_;
    stats_.exposed_seconds = now_s() - t0;
    if (err) std::rethrow_exception(err);
}

}  // namespace dn
