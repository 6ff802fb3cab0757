#include "cpu/thread_pool.hpp"

#include <cstdlib>

namespace hopattn::cpu {

int thread_count_from(const char* env, unsigned hardware_threads) {
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long requested = std::strtol(env, &end, 10);
    if (*end == '\0' && requested >= 1 && requested <= kMaxThreads) return static_cast<int>(requested);
  }
  return hardware_threads == 0 ? 1 : static_cast<int>(hardware_threads);
}

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(
      thread_count_from(std::getenv("HOPATTN_NUM_THREADS"), std::thread::hardware_concurrency()) - 1);
  return pool;
}

ThreadPool::ThreadPool(int worker_count) {
  for (int i = 0; i < worker_count; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  job_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::run_indices() {
  for (int64_t i = next_index_.fetch_add(1); i < count_; i = next_index_.fetch_add(1)) {
    try {
      (*body_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_index_.store(count_);
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    job_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    lock.unlock();
    run_indices();
    lock.lock();
    if (--workers_busy_ == 0) job_done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::lock_guard<std::mutex> job(job_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    count_ = count;
    next_index_.store(0);
    error_ = nullptr;
    workers_busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  job_ready_.notify_all();
  run_indices();
  std::unique_lock<std::mutex> lock(mutex_);
  job_done_.wait(lock, [&] { return workers_busy_ == 0; });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace hopattn::cpu
