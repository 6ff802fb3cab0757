// The Hopper (sm_90a) backend as the dispatcher sees it. Built from src/sm90/ when CUDA is
// found; otherwise src/sm90/sm90_unavailable.cpp answers that it is not in this build.
#pragma once

#include <cstdint>

#include "core/problem.hpp"

namespace hopattn::sm90 {

// The kernels this build contains, whether or not a device is present.
bool built();
bool supports(hopattn_dtype dtype, int64_t head_dim);
// A compute-capability 9.0 device is current on this thread.
bool device_available();
// Runs on problem.cuda_stream. The problem is validated; failures are reported through
// hopattn::set_error and returned.
hopattn_status forward(const AttentionProblem& problem);

}  // namespace hopattn::sm90
