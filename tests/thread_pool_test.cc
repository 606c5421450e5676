// The pool's contract: every index of [0, n) exactly once per call, whatever the call rate, and
// after its threads have gone to sleep (more than a millisecond between calls).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace lowbit {
namespace {

// Runs `calls` loops over n, each marking its indices; true when every index was marked once each time.
bool EveryIndexOnce(ThreadPool& pool, size_t n, size_t calls, std::chrono::microseconds pause) {
  std::vector<std::atomic<int>> seen(n);
  for (size_t call = 1; call <= calls; ++call) {
    pool.ParallelFor(n, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) seen[i].fetch_add(1);
    });
    for (size_t i = 0; i < n; ++i)
      if (seen[i].load() != static_cast<int>(call)) return false;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  return true;
}

TEST(ThreadPool, EveryIndexOnceInBackToBackCalls) {
  // More threads than this machine's cores spin against each other: few calls there.
  for (const size_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (const size_t n : {1, 2, 3, 7, 64, 1000})
      EXPECT_TRUE(EveryIndexOnce(pool, n, threads <= 2 ? 2000 : 50, {})) << threads << " " << n;
  }
}

TEST(ThreadPool, EveryIndexOnceWhenItsThreadsHaveSlept) {
  ThreadPool pool(3);
  EXPECT_TRUE(EveryIndexOnce(pool, 10, 20, std::chrono::microseconds(3000)));
  EXPECT_TRUE(EveryIndexOnce(pool, 10, 200, std::chrono::microseconds(900)));  // around the spin's end
}

TEST(ThreadPool, ALongChunkOutlastsTheCallersSpin) {
  // The caller's own chunk is short, a worker's takes 5 ms: the caller sleeps and is woken.
  ThreadPool pool(2);
  std::atomic<int> done{0};
  for (int call = 0; call < 5; ++call)
    pool.ParallelFor(2, [&](size_t begin, size_t) {
      if (begin == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      done.fetch_add(1);
    });
  EXPECT_EQ(done.load(), 10);
}

TEST(ThreadPool, StopsWithSleepingAndSpinningWorkers) {
  for (const int pause_us : {0, 3000}) {
    ThreadPool pool(4);
    std::atomic<int> calls{0};
    pool.ParallelFor(4, [&](size_t, size_t) { calls.fetch_add(1); });
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    EXPECT_EQ(calls.load(), 4);
  }  // destroyed: must return
}

}  // namespace
}  // namespace lowbit
