// Where a case's forward calls run and how they are timed: host memory with steady_clock
// for the CPU backend, device memory with CUDA events for SM90 (bench_cuda.cpp, built only
// with HOPATTN_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hopattn/hopattn.h"

namespace hopattn::bench {

// An FP8 case's inputs (--dtype e4m3): q, k and v quantised on the host (hopattn_quantize_fp8) to
// e4m3 codes with their float32 scales, described as the C ABI sees them.
struct Fp8Inputs {
  std::vector<unsigned char> q, k, v;
  std::vector<float> q_scales, k_scales, v_scales;
  hopattn_tensor tq{}, tk{}, tv{};  // data points into the vectors above
  hopattn_fp8_scales sq{}, sk{}, sv{};
};

// One case's tensors in host memory, described as the C ABI sees them. For an FP8 case q, k and v
// are the bfloat16 inputs before quantisation (what the reference reads), o its bfloat16 output.
struct HostTensors {
  std::vector<unsigned char> q, k, v, o;
  std::vector<float> lse;                 // (batch, heads_q, seqlen_q) or (heads_q, total_q)
  hopattn_tensor tq{}, tk{}, tv{}, to{};  // data points into the vectors above
  // A variable-length case: the prefix sums (the same for queries and keys) and the varlen
  // struct pointing at them; is_varlen false for a fixed-length case.
  bool is_varlen = false;
  std::vector<int32_t> cu_seqlens;
  hopattn_varlen varlen{};
  bool is_fp8 = false;  // the call is hopattn_forward_fp8 on `fp8`
  Fp8Inputs fp8;
};

// The arguments of one forward call: the host tensors' own pointers, or their device copies.
// q, k and v are the e4m3 codes (with their scales) for an FP8 case.
struct CallArguments {
  hopattn_tensor q{}, k{}, v{}, o{};
  float* lse = nullptr;
  hopattn_varlen varlen{};
  hopattn_fp8_scales q_scales{}, k_scales{}, v_scales{};
};

// The host pointers of `tensors`.
CallArguments host_arguments(HostTensors& tensors);

// hopattn_forward, hopattn_forward_varlen or hopattn_forward_fp8, as the tensors say.
hopattn_status run_forward(const HostTensors& tensors, CallArguments& arguments,
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
