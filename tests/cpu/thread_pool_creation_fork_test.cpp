// fork() while another thread creates the thread pool (a process's first CPU call). The pool
// used to be a function-local static: a child forked during its initialisation inherited the
// static's guard taken by a thread it does not have, and its first call waited on it for ever
// (one CI run of 325d7e9). Each trial is a fresh process without a pool, in which a second
// thread creates it while the first forks after a delay swept across the creation; the child
// runs a job. A child still running at the deadline is a hang. Before the fix 4-6 trials of 256
// hung on a 2-core machine (about 1 in 50, hence this many trials); the run stops at the third
// failure, so that a regression reports well inside ctest's limit.
//
// Not a gtest binary: every trial needs a process that has never created the pool, which a
// gtest process that ran other tests first cannot promise.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "fork_child.hpp"

namespace {

using hopattn::cpu::exit_status_of_child;
using hopattn::cpu::run_job;

constexpr int kTrials = 256;
constexpr int kFailuresToStop = 3;
constexpr int kDelaySteps = 64;  // delays swept, in units of kSpinsPerStep busy iterations
constexpr int kSpinsPerStep = 20;
constexpr auto kChildDeadline = std::chrono::seconds(10);
constexpr auto kTrialDeadline = std::chrono::seconds(20);  // longer: a trial waits for its child

// Runs in a fresh process: forks while the second thread is creating the pool, `delay_steps`
// after it started to.
int fork_during_creation(int delay_steps) {
  std::atomic<bool> creating{false};
  int creator_job = -1;
  std::thread creator([&] {
    creating = true;
    creator_job = run_job(64);
  });
  while (!creating) {
  }
  for (volatile int spin = 0; spin < delay_steps * kSpinsPerStep; spin = spin + 1) {
  }
  const int child = exit_status_of_child([] { return run_job(64); }, kChildDeadline);
  creator.join();
  if (child == -1) return 100;  // the child hung
  return child != 0 ? 101 : creator_job != 0 ? 102 : 0;
}

}  // namespace

int main() {
  int failures = 0;
  for (int trial = 0; trial < kTrials && failures < kFailuresToStop; ++trial) {
    const int delay_steps = trial % kDelaySteps;
    const int status = exit_status_of_child([=] { return fork_during_creation(delay_steps); }, kTrialDeadline);
    if (status != 0) {
      ++failures;
      std::fprintf(stderr, "FAILED: trial %d (delay %d): %s (status %d)\n", trial, delay_steps,
                   status == 100   ? "the child forked during the pool's creation hung"
                   : status == 102 ? "the creating thread's job was wrong"
                                   : "a process failed",
                   status);
    }
  }
  if (failures == 0) std::printf("%d of %d forks during the pool's creation passed\n", kTrials, kTrials);
  return failures == 0 ? 0 : 1;
}
