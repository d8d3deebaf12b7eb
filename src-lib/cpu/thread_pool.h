// A persistent pool of worker threads with a blocking parallel_for. Threads are started once
// (creating threads per op costs more than small ops take). Between jobs the workers spin for a
// short while before sleeping: a forward pass runs hundreds of parallel loops back to back, and
// waking a sleeping thread costs tens of microseconds each time.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dn {

class ThreadPool {
public:
    static ThreadPool& instance();
    // Calls fn(begin, end) on disjoint chunks covering [0, n) (a few per thread, handed out to
    // whichever thread is free); returns when all are done. Chunks hold at least min_chunk items.
    void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);
    // Calls fn(j) for every job j in [0, n), handed out one at a time to whichever thread is free
    // (dynamic: jobs of uneven cost still balance).
    template <class F>
    void run_jobs(size_t n, F&& fn) {
        if (n == 0) return;
        std::atomic<size_t> next{0};
        parallel_for(std::min(n, (size_t)threads()), [&](size_t, size_t) {
            for (size_t j; (j = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(j);
        }, 1, true);
    }
    int threads() const { return (int)workers_.size() + 1; }
    void set_threads(int n);  // n >= 1; restarts the workers

    ~ThreadPool();

private:
    using Fn = std::function<void(size_t, size_t)>;
    ThreadPool();
    void start(int n);
    void stop();
    void worker();
    void parallel_for(size_t n, const Fn& fn, size_t min_chunk, bool one_chunk_per_thread);
    void run_chunks(const Fn& fn, size_t n, size_t chunks);

    std::vector<std::thread> workers_;
    std::mutex mu_;  // guards the job fields below, sleepers_ and the condition variable
    std::condition_variable cv_;
    const Fn* job_ = nullptr;
    size_t job_n_ = 0, chunks_ = 0;
    int sleepers_ = 0;
    std::atomic<unsigned> generation_{0};
    std::atomic<size_t> next_chunk_{0}, finished_{0};
    std::atomic<int> active_{0};  // workers inside run_chunks
    std::atomic<bool> quit_{false};
    std::mutex run_mu_;  // one parallel_for at a time
};

int default_thread_count();

// Runs fn(i) for every i in [0, n) on the pool; `grain` = minimum items per chunk.
template <class F>
void parallel_for_each(size_t n, F&& fn, size_t grain = 1) {
    ThreadPool::instance().parallel_for(n, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) fn(i);
    }, grain);
}

}  // namespace dn
