// A persistent pool of worker threads with a blocking parallel_for. Threads are started once
// (creating threads per op costs more than small ops take).
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dn {

class ThreadPool {
public:
    static ThreadPool& instance();
    // Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done.
    void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);
    int threads() const { return (int)workers_.size() + 1; }
    void set_threads(int n);  // n >= 1; restarts the workers

    ~ThreadPool();

private:
    ThreadPool();
    void start(int n);
    void stop();
    void worker(int id);

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_, done_cv_;
    const std::function<void(size_t, size_t)>* job_ = nullptr;
    size_t job_n_ = 0, chunks_ = 0, next_chunk_ = 0, finished_ = 0;
    unsigned generation_ = 0;
    bool quit_ = false;
    std::mutex run_mu_;  // one parallel_for at a time
};

int default_thread_count();

}  // namespace dn
