// The CPU backend's workers: threads started once and reused by every forward call, since
// starting threads per call would cost more than a small attention problem.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hopattn::cpu {

// Threads a pool started now would have: HOPATTN_NUM_THREADS when it holds an integer from 1 to
// kMaxThreads, else one per hardware thread. `env` is the variable's value or null.
constexpr int kMaxThreads = 4096;
int thread_count_from(const char* env, unsigned hardware_threads);

class ThreadPool {
 public:
  // thread_count_from(getenv("HOPATTN_NUM_THREADS"), hardware) - 1 workers, read when the pool
  // starts (the first CPU call); the thread that calls parallel_for is the last one.
  static ThreadPool& instance();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int thread_count() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls body(i) for every i in [0, count), each once, handing out indices in increasing
  // order to whichever thread is free. Returns when all calls have returned; rethrows the
  // first exception a call threw (the indices not yet started are then skipped). Calls from
  // several threads run one after another.
  void parallel_for(int64_t count, const std::function<void(int64_t)>& body);

 private:
  explicit ThreadPool(int worker_count);
  void worker_loop();
  void run_indices();

  std::mutex job_mutex_;  // one parallel_for at a time
  std::mutex mutex_;      // guards the job fields below and the wake-up protocol
  std::condition_variable job_ready_, job_done_;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_index_{0};
  uint64_t generation_ = 0;  // bumped per job, so a worker never runs one job twice
  int workers_busy_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace hopattn::cpu
