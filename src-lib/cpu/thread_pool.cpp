#include "thread_pool.h"

#include <cstdlib>

namespace dn {

int default_thread_count() {
    if (const char* env = std::getenv("DARKNET_PY_THREADS")) {
        int n = std::atoi(env);
        if (n >= 1) return n;
    }
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? (int)hc : 1;
}

ThreadPool& ThreadPool::instance() {
    static ThreadPool pool;
    return pool;
}

ThreadPool::ThreadPool() { start(default_thread_count()); }
ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::start(int n) {
    quit_ = false;
    for (int i = 0; i < n - 1; ++i) workers_.emplace_back([this, i] { worker(i); });
}

void ThreadPool::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
}

void ThreadPool::set_threads(int n) {
    std::lock_guard<std::mutex> run(run_mu_);
    if (n < 1) n = 1;
    stop();
    start(n);
}

void ThreadPool::worker(int) {
    unsigned seen = 0;
    for (;;) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
        while (next_chunk_ < chunks_) {
            size_t c = next_chunk_++;
            size_t b = job_n_ * c / chunks_, e = job_n_ * (c + 1) / chunks_;
            auto* job = job_;
            lk.unlock();
            (*job)(b, e);
            lk.lock();
            if (++finished_ == chunks_) done_cv_.notify_one();
        }
    }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk) {
    if (n == 0) return;
    size_t max_chunks = (n + min_chunk - 1) / (min_chunk ? min_chunk : 1);
    size_t chunks = std::min<size_t>((size_t)threads(), max_chunks);
    if (chunks <= 1 || workers_.empty()) {
        fn(0, n);
        return;
    }
    std::lock_guard<std::mutex> run(run_mu_);
    std::unique_lock<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    chunks_ = chunks;
    next_chunk_ = 0;
    finished_ = 0;
    ++generation_;
    cv_.notify_all();
    // the calling thread works too
    while (next_chunk_ < chunks_) {
        size_t c = next_chunk_++;
        size_t b = n * c / chunks, e = n * (c + 1) / chunks;
        lk.unlock();
        fn(b, e);
        lk.lock();
        ++finished_;
    }
    done_cv_.wait(lk, [&] { return finished_ == chunks_; });
    job_ = nullptr;
}

}  // namespace dn
