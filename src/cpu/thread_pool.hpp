// The CPU backend's workers: threads started once and reused by every forward call, since
// starting threads per call would cost more than a small attention problem.
//
// Fork safety: fork() copies only the calling thread, so a child inherits a pool whose workers
// do not exist there. The pool is therefore (1) never destroyed, so exit() never joins workers
// or destroys condition variables that threads of the parent were waiting on, and (2) reset by
// a pthread_atfork child handler to a pool without workers, which parallel_for starts again
// when it next needs them. The prepare handler holds the pool's creation lock and its job locks
// across fork(), so the child never inherits a pool half-created, a job half-published or a
// mutex held by a thread it does not have.
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

namespace hopattn::cpu {

// Threads a pool started now would have: HOPATTN_NUM_THREADS when it holds an integer from 1 to
// kMaxThreads, else one per hardware thread. `env` is the variable's value or null.
constexpr int kMaxThreads = 4096;
int thread_count_from(const char* env, unsigned hardware_threads);

class ThreadPool {
 public:
  // thread_count_from(getenv("HOPATTN_NUM_THREADS"), hardware) threads, the count read when the
  // pool is created (the first CPU call); the thread that calls parallel_for is one of them.
  // Lives until the process exits.
  static ThreadPool& instance();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() = delete;  // see the fork-safety note above

  int thread_count() const { return thread_count_; }
  // Workers running now: 0 until the first parallel_for that needs them, and in a forked child
  // until its first such call; thread_count() - 1 after it (fewer if the system refused threads).
  int started_workers();

  // Calls body(i) for every i in [0, count), each once, handing out indices in increasing
  // order to whichever thread is free. Returns when all calls have returned; rethrows the
  // first exception a call threw (the indices not yet started are then skipped). Calls from
  // several threads run one after another.
  void parallel_for(int64_t count, const std::function<void(int64_t)>& body);

 private:
  explicit ThreadPool(int thread_count);
  static void* worker_main(void* start);
  void worker_loop(uint64_t seen);
  void start_missing_workers();
  void run_indices();

  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();
  static const int fork_handlers_registered_;  // pthread_atfork's result, at library load

  const int thread_count_;
  std::mutex job_mutex_;  // one parallel_for at a time; also held across fork()
  std::mutex mutex_;      // guards the job fields below and the wake-up protocol
  std::condition_variable job_ready_, job_done_;
  const std::function<void(int64_t)>* body_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_index_{0};
  uint64_t generation_ = 0;  // bumped per job, so a worker never runs one job twice
  int workers_busy_ = 0;
  std::exception_ptr error_;
  // Plain pthread_t rather than std::thread: a forked child forgets its copies without calling
  // anything on threads it does not have (destroying a joinable std::thread would terminate).
  std::vector<pthread_t> workers_;  // guarded by job_mutex_
};

}  // namespace hopattn::cpu
