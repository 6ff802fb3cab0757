// The SM90 argument rules (sm90/sm90_rules.hpp: TMA alignment and strides, 32-bit sizes, no
// broadcast views) over the backward's tensors. sm90_rules.hpp speaks ForwardProblem, whose
// tensors are q, k, v and o; this applies it to q, k, v, o as they are, then to d_o and dq in q's
// place and dk and dv in k's, renaming the argument in the message. Plain C++, tested without a GPU.
#pragma once

#include "core/problem.hpp"

namespace hopattn {

// Status::kOk, or the status after set_error with a message naming the C argument (d_o.seq_stride,
// dk.data, ...). The workspace query's problem has null o, d_o and gradients: they are skipped.
Status check_sm90_backward_rules(const BackwardProblem& problem);

}  // namespace hopattn
