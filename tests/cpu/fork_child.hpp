// What the thread pool's fork tests share: a job whose every index must run once, and a forked
// child run to its exit with a deadline, since a hang is the failure those tests look for.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cpu/thread_pool.hpp"

namespace hopattn::cpu {

// 0 if parallel_for(count) called the body once per index.
inline int run_job(int64_t count) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
  ThreadPool::instance().parallel_for(count, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  for (const std::atomic<int>& hit : hits)
    if (hit != 1) return 1;
  return 0;
}

// Runs `child` in a forked child, which leaves with _exit(child()) (the test framework's state is
// the parent's business). The child's exit status, 128 + the signal that ended it, -2 if fork()
// failed, or -1 if it had not exited after `deadline`: it is then killed.
template <class Child>
int exit_status_of_child(Child child, std::chrono::seconds deadline = std::chrono::seconds(30)) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(static_cast<unsigned>(deadline.count()) + 5);  // the child ends even if the parent dies
    _exit(child());
  }
  if (pid < 0) return -2;
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace hopattn::cpu
