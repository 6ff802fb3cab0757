// The one place where a hopattn_forward call is checked: it turns the C arguments into a
// resolved AttentionProblem and a concrete backend, or into a status and a message that names
// the argument at fault and what is allowed. Validation never reads or writes tensor memory.
#pragma once

#include <cstdint>
#include <functional>

#include "core/memory_space.hpp"
#include "core/problem.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

// What validation needs to know about the machine. The C API passes the real queries
// (dispatch.cpp); the tests pass fakes, so that the SM90 rules are exercised without a GPU.
struct SystemQueries {
  std::function<MemorySpace(const void*)> memory_space_of;
  std::function<bool()> sm90_built;
  std::function<bool()> sm90_device_available;
  std::function<bool(hopattn_dtype, int64_t)> sm90_supports;
};

struct ForwardCall {
  hopattn_backend backend = HOPATTN_BACKEND_CPU;  // CPU or SM90: AUTO is resolved
  AttentionProblem problem;
};

// causal off, default scale, backend AUTO, legacy default stream: what a NULL options means.
hopattn_forward_options default_forward_options();

// On failure returns the status after hopattn::set_error; `call` is then unspecified.
hopattn_status validate_forward(const hopattn_tensor* q, const hopattn_tensor* k,
                                const hopattn_tensor* v, const hopattn_tensor* o, float* lse,
                                const hopattn_forward_options* options, const SystemQueries& system,
                                ForwardCall& call);

}  // namespace hopattn
