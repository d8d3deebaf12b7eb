#include "thread_pool.h"

#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dn {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// How long an idle worker (or the caller waiting for the last chunk) spins before it sleeps or
// yields: longer than the gaps between the parallel loops of a forward pass, short enough that
// an idle pool stops using the CPU at once on a human scale.
constexpr auto kSpin = std::chrono::microseconds(100);

}  // namespace

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
    for (int i = 0; i < n - 1; ++i) workers_.emplace_back([this] { worker(); });
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

void ThreadPool::run_chunks(const Fn& fn, size_t n, size_t chunks) {
    for (size_t c; (c = next_chunk_.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
        fn(n * c / chunks, n * (c + 1) / chunks);
        finished_.fetch_add(1, std::memory_order_release);
    }
}

void ThreadPool::worker() {
    unsigned seen = generation_.load();
    for (;;) {
        auto t0 = std::chrono::steady_clock::now();
        for (unsigned spins = 0; generation_.load(std::memory_order_acquire) == seen && !quit_.load(); ++spins) {
            cpu_relax();
            if ((spins & 255) == 255 && std::chrono::steady_clock::now() - t0 > kSpin) {
                std::unique_lock<std::mutex> lk(mu_);
                ++sleepers_;
                cv_.wait(lk, [&] { return quit_.load() || generation_.load() != seen; });
                --sleepers_;
                break;
            }
        }
        if (quit_) return;
        const Fn* fn;
        size_t n, chunks;
        {
            // read the job under the lock: parallel_for writes it under the same lock, and only
            // once no worker is inside run_chunks (active_ == 0)
            std::lock_guard<std::mutex> lk(mu_);
            seen = generation_.load();
            fn = job_, n = job_n_, chunks = chunks_;
            if (!fn) continue;  // that job is already over
            active_.fetch_add(1);
        }
        run_chunks(*fn, n, chunks);
        active_.fetch_sub(1, std::memory_order_release);
    }
}

void ThreadPool::parallel_for(size_t n, const Fn& fn, size_t min_chunk) {
    parallel_for(n, fn, min_chunk, false);
}

void ThreadPool::parallel_for(size_t n, const Fn& fn, size_t min_chunk, bool one_chunk_per_thread) {
    if (n == 0) return;
    // One caller at a time uses the workers. Another caller (a second network forwarding on another
    // thread) runs its loop itself instead of waiting: two networks on two threads then run in
    // parallel rather than taking turns loop by loop.
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    size_t max_chunks = (n + min_chunk - 1) / (min_chunk ? min_chunk : 1);
    // a few chunks per thread, so that a thread that starts late (woken, or preempted by another
    // process) leaves its share to the others instead of holding everyone up
    size_t chunks = run.owns_lock() ? std::min<size_t>((size_t)threads() * (one_chunk_per_thread ? 1 : 4), max_chunks) : 1;
    if (chunks <= 1 || workers_.empty()) {
        fn(0, n);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        job_ = &fn, job_n_ = n, chunks_ = chunks;
        next_chunk_.store(0), finished_.store(0);
        generation_.fetch_add(1, std::memory_order_release);
        if (sleepers_) cv_.notify_all();
    }
    run_chunks(fn, n, chunks);  // the calling thread works too
    auto t0 = std::chrono::steady_clock::now();
    for (unsigned spins = 0; finished_.load(std::memory_order_acquire) != chunks; ++spins) {
        cpu_relax();
        if ((spins & 255) == 255 && std::chrono::steady_clock::now() - t0 > kSpin) std::this_thread::yield();
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        job_ = nullptr;  // workers that wake up now find nothing to do
    }
    // a worker may still be between its last chunk and leaving run_chunks
    while (active_.load(std::memory_order_acquire) != 0) cpu_relax();
}

}  // namespace dn
