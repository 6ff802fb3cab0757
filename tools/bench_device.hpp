// Where a case's forward calls run and how they are timed: host memory with steady_clock
// for the CPU backend, device memory with CUDA events for SM90 (bench_cuda.cpp, built only
// with HOPATTN_HAVE_CUDA).
#pragma once

#include <string>
#include <vector>

#include "hopattn/hopattn.h"

namespace hopattn::bench {

// One case's tensors in host memory, described as the C ABI sees them.
struct HostTensors {
  std::vector<unsigned char> q, k, v, o;
  std::vector<float> lse;                 // (batch, heads_q, seqlen_q)
  hopattn_tensor tq{}, tk{}, tv{}, to{};  // data points into the vectors above
};

struct TimedRun {
  hopattn_status status = HOPATTN_OK;
  std::string error;
  std::vector<double> times_ms;  // one per timed run, warm-up runs excluded
};

// Each leaves the last run's o and lse in `tensors`.
TimedRun time_on_host(HostTensors& tensors, const hopattn_forward_options& options, int warmup,
                      int iters);
#ifdef HOPATTN_HAVE_CUDA
TimedRun time_on_sm90(HostTensors& tensors, const hopattn_forward_options& options, int warmup,
                      int iters);
std::string cuda_device_name();
#endif

}  // namespace hopattn::bench
