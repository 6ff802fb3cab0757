// Every argument rule that only the SM90 backend has (TMA alignment, no broadcast views, 32-bit
// kernel indices, varlen metadata alignment), in one place. Plain C++ with no CUDA, so that the
// validation tests run them on any machine; api/validate.cpp calls it once the backend is SM90.
#pragma once

#include "core/problem.hpp"

namespace hopattn::sm90 {

// Status::kOk, or the status after set_error with a message naming the argument (C names: q, k,
// v, o, lse, varlen->cu_seqlens_q, ...).
Status check_forward_rules(const ForwardProblem& problem);

}  // namespace hopattn::sm90
