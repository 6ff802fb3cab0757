#include "cpu/thread_pool.hpp"

#include <cstdlib>
#include <new>
#include <thread>

namespace hopattn::cpu {

int thread_count_from(const char* env, unsigned hardware_threads) {
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long requested = std::strtol(env, &end, 10);
    if (*end == '\0' && requested >= 1 && requested <= kMaxThreads) return static_cast<int>(requested);
  }
  return hardware_threads == 0 ? 1 : static_cast<int>(hardware_threads);
}

namespace {
// Created on the first instance() call, never freed: exit handlers must not destroy a pool whose
// workers may be gone. Not a function-local static: a child forked while another thread ran
// that static's initialiser would wait on its guard for ever (the initialising thread is not
// copied). creation_mutex instead is held across fork() by the prepare handler, so a child
// inherits either no pool or a whole one, and the mutex unlocked.
std::atomic<ThreadPool*> the_pool{nullptr};
std::mutex creation_mutex;
}  // namespace

// Registered when the library is loaded, before any thread can be creating the pool. Its only
// failure is ENOMEM at load: the pool then still works, but a child forked during a call may hang.
const int ThreadPool::fork_handlers_registered_ = pthread_atfork(
    &ThreadPool::before_fork, &ThreadPool::after_fork_in_parent, &ThreadPool::after_fork_in_child);

ThreadPool& ThreadPool::instance() {
  if (ThreadPool* pool = the_pool.load(std::memory_order_acquire)) return *pool;
  std::lock_guard<std::mutex> creation(creation_mutex);
  ThreadPool* pool = the_pool.load(std::memory_order_relaxed);
  if (pool == nullptr) {
    pool = new ThreadPool(
        thread_count_from(std::getenv("HOPATTN_NUM_THREADS"), std::thread::hardware_concurrency()));
    the_pool.store(pool, std::memory_order_release);
  }
  return *pool;
}

ThreadPool::ThreadPool(int thread_count) : thread_count_(thread_count) {}

void ThreadPool::before_fork() {
  creation_mutex.lock();  // waits for a pool being created; none starts until after fork()
  if (ThreadPool* pool = the_pool.load(std::memory_order_relaxed)) {
    // Waits for a parallel_for in flight to end; afterwards every worker is idle in job_ready_.
    pool->job_mutex_.lock();
    pool->mutex_.lock();
  }
}

void ThreadPool::after_fork_in_parent() {
  if (ThreadPool* pool = the_pool.load(std::memory_order_relaxed)) {
    pool->mutex_.unlock();
    pool->job_mutex_.unlock();
  }
  creation_mutex.unlock();
}

void ThreadPool::after_fork_in_child() {
  if (ThreadPool* pool = the_pool.load(std::memory_order_relaxed)) {
    // The workers were not copied. Their condition variable still counts them as waiters, so it
    // is replaced, not destroyed (destroying it would wait for them); job_done_ likewise.
    pool->workers_.clear();
    pool->workers_busy_ = 0;
    new (&pool->job_ready_) std::condition_variable();
    new (&pool->job_done_) std::condition_variable();
    // The locks were taken by before_fork on this (the forking, now the only) thread.
    pool->mutex_.unlock();
    pool->job_mutex_.unlock();
  }
  creation_mutex.unlock();
}

int ThreadPool::started_workers() {
  std::lock_guard<std::mutex> job(job_mutex_);
  return static_cast<int>(workers_.size());
}

namespace {
struct WorkerStart {
  ThreadPool* pool;
  uint64_t generation;  // the last job published before the worker started: not its to run
};
}  // namespace

void* ThreadPool::worker_main(void* start) {
  const WorkerStart s = *static_cast<WorkerStart*>(start);
  delete static_cast<WorkerStart*>(start);
  s.pool->worker_loop(s.generation);
  return nullptr;
}

// Called with job_mutex_ held and no job in flight.
void ThreadPool::start_missing_workers() {
  const auto wanted = static_cast<size_t>(thread_count_ - 1);
  if (workers_.size() >= wanted) return;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = generation_;
  }
  workers_.reserve(wanted);
  while (workers_.size() < wanted) {
    auto* start = new WorkerStart{this, generation};
    pthread_t thread;
    if (pthread_create(&thread, nullptr, &ThreadPool::worker_main, start) != 0) {
      delete start;  // the system refuses more threads: run with those there are
      return;
    }
    workers_.push_back(thread);
  }
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

void ThreadPool::worker_loop(uint64_t seen) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    job_ready_.wait(lock, [&] { return generation_ != seen; });
    seen = generation_;
    lock.unlock();
    run_indices();
    lock.lock();
    if (--workers_busy_ == 0) job_done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  if (thread_count_ == 1 || count == 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::lock_guard<std::mutex> job(job_mutex_);
  start_missing_workers();
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
