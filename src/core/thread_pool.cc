#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOWBIT_PAUSE() _mm_pause()
#else
#define LOWBIT_PAUSE() std::this_thread::yield()
#endif

namespace lowbit {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
// Spins until `ready()` or about a millisecond has passed; returns whether it became ready. A
// decode step is dozens of parallel loops of a few hundred microseconds; a worker that fell
// asleep costs a futex wake-up (tens of microseconds in a VM) and starts its half late, which
// then puts the caller to sleep too (measured: int4 decode 27 ms/step with 50 us, 19 ms with 1 ms).
template <class Ready>
bool SpinUntil(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(1000);
  for (int i = 1;; ++i) {
    if (ready()) return true;
    LOWBIT_PAUSE();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

std::pair<size_t, size_t> Chunk(size_t n, size_t parts, size_t index) {
  const size_t base = n / parts, extra = n % parts;
  const size_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}
}  // namespace

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  pending_.store(workers_.size(), std::memory_order_relaxed);
  generation_.fetch_add(1);  // publishes the job
  if (sleeping_workers_.load() > 0) {
    { std::lock_guard lock(mutex_); }  // a worker between its check and its wait holds the mutex
    wake_.notify_all();
  }
  const auto [begin, end] = Chunk(n, size(), 0);
  if (begin < end) fn(begin, end);
  const auto finished = [this] { return pending_.load() == 0; };
  if (!SpinUntil(finished)) {
    std::unique_lock lock(mutex_);
    caller_sleeping_ = true;
    done_.wait(lock, finished);
    caller_sleeping_ = false;
  }
}

void ThreadPool::WorkerLoop(size_t index) {
  uint64_t seen = 0;
  const auto woken = [&] { return stop_.load() || generation_.load() != seen; };
  while (true) {
    if (!SpinUntil(woken)) {
      std::unique_lock lock(mutex_);
      ++sleeping_workers_;
      wake_.wait(lock, woken);
      --sleeping_workers_;
    }
    if (stop_.load()) return;
    seen = generation_.load();
    const auto [begin, end] = Chunk(job_n_, size(), index);
    if (begin < end) (*job_)(begin, end);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      { std::lock_guard lock(mutex_); }  // the caller between its check and its wait holds the mutex
      done_.notify_one();
    }
  }
}

void ParallelFor(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn) {
  if (pool) pool->ParallelFor(n, fn);
  else fn(0, n);
}

}  // namespace lowbit
