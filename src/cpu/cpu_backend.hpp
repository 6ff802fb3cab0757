// The CPU backend: the tiled online-softmax algorithm of the GPU kernels, multithreaded over
// (batch, head, query block), float32 accumulation.
#pragma once

#include <cstdint>

#include "core/problem.hpp"

namespace hopattn::cpu {

bool supports(hopattn_dtype dtype, int64_t head_dim);
hopattn_status forward(const AttentionProblem& problem);

}  // namespace hopattn::cpu
