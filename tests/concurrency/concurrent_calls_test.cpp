// Several threads calling libhopattn.so at once, as a server's request threads would: each call
// gives what it gives alone (bit for bit), each thread's hopattn_last_error() is its own, and
// first calls of hopattn_build_info() agree.
// Run under ThreadSanitizer by scripts/sanitize.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hopattn/hopattn.h"

namespace {

struct Problem {
  int64_t seqlen, heads, head_dim;
  bool causal;
  std::vector<float> q, k, v, o, lse;

  Problem(int64_t seqlen_, int64_t heads_, int64_t head_dim_, bool causal_, float phase)
      : seqlen(seqlen_), heads(heads_), head_dim(head_dim_), causal(causal_) {
    const size_t n = static_cast<size_t>(seqlen * heads * head_dim);
    q.resize(n), k.resize(n), v.resize(n), o.assign(n, NAN);
    lse.assign(static_cast<size_t>(heads * seqlen), NAN);
    for (size_t i = 0; i < n; ++i) {
      q[i] = std::sin(0.3f * static_cast<float>(i) + phase);
      k[i] = std::cos(0.7f * static_cast<float>(i) + phase);
      v[i] = std::sin(0.1f * static_cast<float>(i) - phase);
    }
  }

  hopattn_tensor tensor(float* data) const {
    return {data, HOPATTN_DTYPE_FLOAT32, 1, seqlen, heads, head_dim,
            seqlen * heads * head_dim, heads * head_dim, head_dim};
  }

  hopattn_status run() {
    const hopattn_tensor tq = tensor(q.data()), tk = tensor(k.data()), tv = tensor(v.data());
    hopattn_tensor to = tensor(o.data());
    hopattn_forward_options options = hopattn_default_forward_options();
    options.backend = HOPATTN_BACKEND_CPU;
    options.causal = causal;
    return hopattn_forward(&tq, &tk, &tv, &to, lse.data(), &options);
  }
};

std::vector<Problem> problems() {
  std::vector<Problem> list;
  for (int i = 0; i < 6; ++i)
    list.emplace_back(17 + 40 * i, 1 + i % 3, i % 2 ? 64 : 40, i % 2 == 0, 0.1f * i);
  return list;
}

TEST(ConcurrentCalls, EachThreadGetsWhatItGetsAlone) {
  std::vector<Problem> alone = problems();
  for (Problem& p : alone) ASSERT_EQ(p.run(), HOPATTN_OK) << hopattn_last_error();

  constexpr int kThreads = 4, kRepeats = 5;
  std::vector<std::vector<Problem>> per_thread(kThreads, problems());
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < kRepeats; ++rep) {
        for (size_t i = 0; i < per_thread[t].size(); ++i) {
          // Each thread starts at another problem, so different shapes overlap in time.
          Problem& p = per_thread[t][(i + static_cast<size_t>(t)) % per_thread[t].size()];
          if (p.run() != HOPATTN_OK) errors[t] += std::string(hopattn_last_error()) + "; ";
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    for (size_t i = 0; i < alone.size(); ++i) {
      EXPECT_EQ(std::memcmp(per_thread[t][i].o.data(), alone[i].o.data(), alone[i].o.size() * 4), 0)
          << "thread " << t << ", problem " << i;
      EXPECT_EQ(std::memcmp(per_thread[t][i].lse.data(), alone[i].lse.data(), alone[i].lse.size() * 4),
                0)
          << "thread " << t << ", problem " << i;
    }
  }
}

TEST(ConcurrentCalls, ErrorMessagesArePerThread) {
  constexpr int kThreads = 4;
  std::vector<std::string> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Problem p(8, 1, 16, false, 0.f);
      for (int rep = 0; rep < 50; ++rep) {
        hopattn_tensor q = p.tensor(p.q.data()), k = p.tensor(p.k.data()), v = p.tensor(p.v.data());
        hopattn_tensor o = p.tensor(p.o.data());
        if (t % 2 == 0) {
          q.head_dim = 8;  // the odd threads succeed, the even ones fail on q
          k.head_dim = 8, v.head_dim = 8, o.head_dim = 8;
          q.seqlen = -1;
        }
        hopattn_forward_options options = hopattn_default_forward_options();
        options.backend = HOPATTN_BACKEND_CPU;
        const hopattn_status status = hopattn_forward(&q, &k, &v, &o, nullptr, &options);
        const std::string message = hopattn_last_error();
        if ((status == HOPATTN_OK) != (t % 2 == 1) || (t % 2 == 1 && !message.empty()) ||
            (t % 2 == 0 && message.find("q") == std::string::npos)) {
          seen[t] = "call " + std::to_string(rep) + ": status " + std::to_string(status) +
                    ", message '" + message + "'";
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(seen[t], "") << "thread " << t;
}

// The build information is built on the first call; threads that make it at once all get the
// one published text, and it stays valid.
TEST(ConcurrentCalls, FirstBuildInfoCallsAgree) {
  constexpr int kThreads = 8;
  std::vector<const char*> seen(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&seen, t] { seen[t] = hopattn_build_info(); });
  for (std::thread& thread : threads) thread.join();
  ASSERT_NE(seen[0], nullptr);
  EXPECT_NE(std::strstr(seen[0], "cpu:"), nullptr) << seen[0];
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t], seen[0]) << "thread " << t;
  EXPECT_EQ(hopattn_build_info(), seen[0]);
}

}  // namespace
