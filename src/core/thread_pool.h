// A persistent pool of worker threads for data-parallel loops. ParallelFor splits [0, n) into
// one contiguous chunk per thread (the caller runs the first), so per-call overhead is one
// wake-up, not one task per item. Workers and the caller spin briefly before sleeping: a decode
// step issues dozens of short parallel loops back to back, and a futex wake-up per loop (tens
// of microseconds in a VM) would cost more than the loop.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
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
  // Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done.
  void ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn);

 private:
  void WorkerLoop(size_t index);
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> pending_{0};
  bool stop_ = false;
};

// fn(begin, end) over [0, n): on the pool when there is one, else in the caller as one chunk.
void ParallelFor(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn);

}  // namespace lowbit
