// The CPU forward's algorithm (forward.cpp) over inputs of either kind: q, k and v of the
// problem's dtype (cpu::forward), or e4m3 codes with their scales (cpu::forward_fp8), which the
// tile loads dequantise row by row.
#pragma once

#include "core/problem.hpp"

namespace hopattn::cpu {

// The scales of e4m3 inputs; all null for 16- and 32-bit ones.
struct InputScales {
  const Fp8Scales* q = nullptr;
  const Fp8Scales* k = nullptr;
  const Fp8Scales* v = nullptr;
};

// A validated problem whose q, k and v hold input_dtype: problem.dtype, or kFloat8E4M3 with
// `scales` set and problem.dtype (o's) bfloat16 or float16.
Status run_forward(const ForwardProblem& problem, DType input_dtype, const InputScales& scales);

}  // namespace hopattn::cpu
