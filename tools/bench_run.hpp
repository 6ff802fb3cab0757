// Running one benchmark case: random inputs, timed forward calls, and the check of sampled
// output rows against the float64 reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "hopattn/hopattn.h"

namespace hopattn::bench {

struct CaseResult {
  CaseSpec spec;
  hopattn_status status = HOPATTN_OK;
  std::string error;  // the library's or CUDA's message when status is not OK
  std::vector<double> times_ms;
  double median_ms = 0.0;
  double flops = 0.0;  // of one forward call, unmasked scores only
  int64_t sampled_rows = 0;
  double rel_error = 0.0;          // ||out - ref|| / ||ref|| over the sampled rows
  double rmse = 0.0;               // over the sampled rows' elements
  double lse_max_abs_error = 0.0;  // over the sampled rows with at least one key
  bool output_has_nan = false;     // anywhere in O, not only in the sampled rows
  bool pass = false;

  double flops_per_second() const { return median_ms > 0 ? flops / (median_ms * 1e-3) : 0.0; }
};

// Largest relative error that passes, by input dtype: float32 accumulation for fp32; the
// half types add their rounding of P and O (8 and 11 significant bits); e4m3 (the FP8 forward on
// quantised bfloat16 inputs, checked against those inputs) the rounding of Q, K and V to 4 bits.
double rel_error_tolerance(hopattn_dtype dtype);
// Largest |lse - reference| that passes, by input dtype.
double lse_tolerance(hopattn_dtype dtype);

CaseResult run_case(const CaseSpec& spec);

// Whether this tool can drive the SM90 backend: built with the CUDA runtime, and the
// library reports the backend and a Hopper GPU.
bool sm90_runnable();
// `requested` (AUTO: sm90 when runnable, else cpu), without its reason: the backend's
// defaults shape the cases, and the reason is asked of the library only after
// set_cpu_threads, since asking starts the CPU backend's threads.
BackendChoice choose_backend(hopattn_backend requested);
// Why `choice` runs, or why a requested sm90 cannot: "cpu: no Hopper GPU visible (sm90
// backend: ...)".
std::string backend_reason(const BackendChoice& choice);
// The visible GPU's name on sm90, else the CPU model.
std::string device_name(hopattn_backend backend);

// The CPUs this process may run on (its affinity mask).
int usable_cpu_count();
// Sets HOPATTN_NUM_THREADS, from which the CPU backend sizes its thread pool when it starts.
// Returns "" or what went wrong. Call before anything asks the library about the CPU backend.
std::string set_cpu_threads(int threads);

}  // namespace hopattn::bench
