// A persistent pool of worker threads for data-parallel loops. ParallelFor splits [0, n) into
// one contiguous chunk per thread (the caller runs the first), so per-call overhead is one
// wake-up, not one task per item. Workers and the caller spin briefly before sleeping: a decode
// step issues dozens of short parallel loops back to back, and a futex wake-up per loop (tens
// of microseconds in a VM) would cost more than the loop. While everyone spins, a call takes no
// lock: the job is published by one atomic increment, and the mutex and condition variables are
// touched only when a thread has gone to sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lowbit {

class ThreadPool {
 public:
  explicit ThreadPool(size_t threads);  // 0 = hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done. One caller
  // at a time.
  void ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn);

 private:
  void WorkerLoop(size_t index);
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  // Written by the caller before generation_ is incremented, read by workers after they see it; a
  // cache line of their own, apart from pending_, which the workers write.
  alignas(64) const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<size_t> pending_{0};
  // Threads that are (about to be) asleep on wake_ / done_: the other side locks and notifies only
  // then. Sequentially consistent with generation_ and pending_, so that either the sleeper sees
  // the new value or the waker sees the sleeper.
  alignas(64) std::atomic<size_t> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

// fn(begin, end) over [0, n): on the pool when there is one, else in the caller as one chunk.
void ParallelFor(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn);

}  // namespace lowbit
