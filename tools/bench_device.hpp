// Where a case's forward calls run and how they are timed: host memory with steady_clock
// for the CPU backend, device memory with CUDA events for SM90 (bench_cuda.cpp, built only
// with HOPATTN_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hopattn/hopattn.h"

namespace hopattn::bench {

// One case's tensors in host memory, described as the C ABI sees them.
struct HostTensors {
  std::vector<unsigned char> q, k, v, o;
  std::vector<float> lse;                 // (batch, heads_q, seqlen_q) or (heads_q, total_q)
  hopattn_tensor tq{}, tk{}, tv{}, to{};  // data points into the vectors above
  // A variable-length case: the prefix sums (the same for queries and keys) and the varlen
  // struct pointing at them; is_varlen false for a fixed-length case.
  bool is_varlen = false;
  std::vector<int32_t> cu_seqlens;
  hopattn_varlen varlen{};
};

// hopattn_forward or hopattn_forward_varlen, as the tensors say, with these pointers.
hopattn_status run_forward(const HostTensors& tensors, const hopattn_tensor& q,
                           const hopattn_tensor& k, const hopattn_tensor& v, hopattn_tensor& o,
                           float* lse, const hopattn_varlen& varlen,
                           const hopattn_forward_options& options);

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
// What the CUDA runtime sees: "CUDA sees NVIDIA A100-SXM4-80GB, compute capability 8.0", or
// its error, e.g. "CUDA: no CUDA-capable device is detected".
std::string cuda_device_summary();
#endif

}  // namespace hopattn::bench
