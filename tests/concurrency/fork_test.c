/* fork() and libhopattn.so (issue 10): a child of a process that has made CPU calls can make
 * them too, and can exit without making any. Each case runs in a forked child; the parent waits
 * with a deadline and kills a child that hangs, which is how the defect showed: the child's
 * call waited for thread-pool workers that fork() had not copied, and exit() waited in the
 * pool's destructor for them. The children leave through exit(), so the exit handlers run.
 * Run with HOPATTN_NUM_THREADS=4 (ctest sets it) so that the pool has workers on any machine. */
#include <hopattn/hopattn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Enough query blocks for many pool tasks. */
enum { kSeqlen = 300, kHeads = 4, kHeadDim = 32, kElements = kSeqlen * kHeads * kHeadDim };
enum { kDeadlineSeconds = 30 };

static pid_t parent_pid;

/* LeakSanitizer, when built in, asks this at exit. A forked child holds the memory of the
 * parent's threads (their thread-local workspaces) without the threads, so in a child it is
 * unreachable by construction; the parent's own exit is still checked. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return getpid() != parent_pid; }

static float q[kElements], k[kElements], v[kElements], parent_o[kElements];

static hopattn_tensor tensor(float* data) {
  hopattn_tensor t;
  t.data = data;
  t.dtype = HOPATTN_DTYPE_FLOAT32;
  t.batch = 1;
  t.seqlen = kSeqlen;
  t.heads = kHeads;
  t.head_dim = kHeadDim;
  t.batch_stride = kElements;
  t.seq_stride = kHeads * kHeadDim;
  t.head_stride = kHeadDim;
  return t;
}

/* 0 when the call succeeds and gives the parent's output bit for bit (the CPU backend's tasks
 * do not depend on which thread runs them). */
static int call_and_compare(void) {
  static float o[kElements];
  hopattn_tensor tq = tensor(q), tk = tensor(k), tv = tensor(v), to = tensor(o);
  hopattn_forward_options options = hopattn_default_forward_options();
  options.backend = HOPATTN_BACKEND_CPU;
  options.causal = 1;
  if (hopattn_forward(&tq, &tk, &tv, &to, NULL, &options) != HOPATTN_OK) {
    fprintf(stderr, "child: %s\n", hopattn_last_error());
    return 2;
  }
  return memcmp(o, parent_o, sizeof o) == 0 ? 0 : 3;
}

static int child_calls(void) { return call_and_compare(); }
static int child_calls_twice(void) { return call_and_compare() || call_and_compare() ? 4 : 0; }
static int child_makes_no_call(void) { return 0; }

static int run_child(const char* name, int (*body)(void));

static int grandchild(void) { return call_and_compare() ? 5 : run_child("grandchild", child_calls); }

static int failures = 0;

/* The child's exit status; a child alive at the deadline is killed and counts as a failure. */
static int run_child(const char* name, int (*body)(void)) {
  pid_t pid;
  int status = 0;
  time_t give_up = time(NULL) + kDeadlineSeconds;
  fflush(NULL); /* or the child's exit() prints the parent's buffered lines again */
  pid = fork();
  if (pid == 0) {
    alarm(kDeadlineSeconds + 5); /* ends the child even if the parent is gone */
    exit(body());                /* exit(), not _exit(): the exit handlers are under test */
  }
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (time(NULL) > give_up) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fprintf(stderr, "FAILED: %s: still running after %d s (hung), killed\n", name,
              kDeadlineSeconds);
      return 1;
    }
    usleep(2000);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (WIFEXITED(status))
    fprintf(stderr, "FAILED: %s: exit status %d\n", name, WEXITSTATUS(status));
  else
    fprintf(stderr, "FAILED: %s: killed by signal %d\n", name, WTERMSIG(status));
  return 1;
}

static void expect_child(const char* name, int (*body)(void)) {
  if (run_child(name, body) != 0) ++failures;
  else printf("ok: %s\n", name);
}

int main(void) {
  size_t i;
  parent_pid = getpid();
  for (i = 0; i < kElements; ++i) {
    q[i] = sinf(0.37f * (float)i);
    k[i] = cosf(0.11f * (float)i);
    v[i] = sinf(0.05f * (float)i + 1.f);
  }
  /* Before any call the pool does not exist; a child creates its own. */
  expect_child("child of a process that made no call", child_makes_no_call);

  {
    hopattn_tensor tq = tensor(q), tk = tensor(k), tv = tensor(v), to = tensor(parent_o);
    hopattn_forward_options options = hopattn_default_forward_options();
    options.backend = HOPATTN_BACKEND_CPU;
    options.causal = 1;
    if (hopattn_forward(&tq, &tk, &tv, &to, NULL, &options) != HOPATTN_OK) {
      fprintf(stderr, "FAILED: parent's call: %s\n", hopattn_last_error());
      return 1;
    }
  }
  expect_child("child making no call exits", child_makes_no_call);
  expect_child("child makes a multi-task call", child_calls);
  expect_child("child makes two calls", child_calls_twice);
  expect_child("grandchild calls", grandchild);
  /* The parent's pool still works. */
  if (call_and_compare() != 0) {
    fprintf(stderr, "FAILED: parent's second call\n");
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}
