#include "cpu/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fork_child.hpp"

namespace hopattn::cpu {
namespace {

TEST(ThreadPool, RunsEveryIndexOnce) {
  ThreadPool& pool = ThreadPool::instance();
  EXPECT_EQ(pool.thread_count(), thread_count_from(std::getenv("HOPATTN_NUM_THREADS"),
                                                  std::thread::hardware_concurrency()));
  for (int64_t count : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    pool.parallel_for(count, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << i;
  }
}

TEST(ThreadPool, RethrowsTheFirstExceptionAndStaysUsable) {
  ThreadPool& pool = ThreadPool::instance();
  const auto throw_at_17 = [](int64_t i) {
    if (i == 17) throw std::runtime_error("task 17");
  };
  EXPECT_THROW(pool.parallel_for(100, throw_at_17), std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum, 4950);
}

TEST(ThreadPool, CallsFromSeveralThreadsAllComplete) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        ThreadPool::instance().parallel_for(10, [&](int64_t) { total++; });
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(total, 4 * 50 * 10);
}

// Issue 10: the workers are not copied by fork(); the child's job used to wait for them forever.
TEST(ThreadPoolFork, ChildOfAParentThatRanJobsRunsJobsOnNewWorkers) {
  ASSERT_EQ(run_job(1000), 0);  // the parent's workers exist
  const int workers = ThreadPool::instance().thread_count() - 1;
  EXPECT_EQ(ThreadPool::instance().started_workers(), workers);
  EXPECT_EQ(exit_status_of_child([&] {
              if (ThreadPool::instance().started_workers() != 0) return 10;
              for (int rep = 0; rep < 20; ++rep)
                if (run_job(1000) != 0) return 11;
              return ThreadPool::instance().started_workers() == workers ? 0 : 12;
            }),
            0);
  EXPECT_EQ(run_job(1000), 0);  // the parent's pool is untouched
  EXPECT_EQ(ThreadPool::instance().started_workers(), workers);
}

TEST(ThreadPoolFork, GrandchildRunsJobsToo) {
  ASSERT_EQ(run_job(100), 0);
  EXPECT_EQ(exit_status_of_child([] {
              if (run_job(100) != 0) return 20;
              return exit_status_of_child([] { return run_job(100); });
            }),
            0);
}

// fork() from one thread while another is inside parallel_for: the fork waits for the job to
// end, so the child never inherits a job half done or a lock held by a thread it lacks.
TEST(ThreadPoolFork, ForkWhileAnotherThreadRunsJobs) {
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread caller([&] {
    while (!stop) failures += run_job(64);
  });
  for (int rep = 0; rep < 20; ++rep)
    EXPECT_EQ(exit_status_of_child([] { return run_job(64); }), 0) << "fork " << rep;
  stop = true;
  caller.join();
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace hopattn::cpu

namespace hopattn::cpu {
namespace {

TEST(ThreadCount, HopattnNumThreadsOverridesTheHardwareCount) {
  EXPECT_EQ(thread_count_from(nullptr, 16), 16);
  EXPECT_EQ(thread_count_from("", 16), 16);
  EXPECT_EQ(thread_count_from("3", 16), 3);
  EXPECT_EQ(thread_count_from("64", 16), 64);  // more threads than CPUs is the caller's choice
  EXPECT_EQ(thread_count_from("0", 16), 16);   // not a thread count: the default
  EXPECT_EQ(thread_count_from("-2", 16), 16);
  EXPECT_EQ(thread_count_from("4x", 16), 16);
  EXPECT_EQ(thread_count_from("99999", 16), 16);
  EXPECT_EQ(thread_count_from(nullptr, 0), 1);  // hardware_concurrency() may not know
}

}  // namespace
}  // namespace hopattn::cpu
