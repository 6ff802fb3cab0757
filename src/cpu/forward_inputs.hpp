// The CPU forward's algorithm (forward.cpp) over inputs of either kind: q, k and v of the
// problem's dtype (cpu::forward), or e4m3 codes with their scales, V in rows or transposed
// (cpu::forward_fp8), which the tile loads dequantise row by row.
#pragma once

#include <optional>

#include "core/fp8_layout.hpp"
#include "core/problem.hpp"

namespace hopattn::cpu {

// How e4m3 inputs are read: their scales, and V's layout. Defaults for 16- and 32-bit inputs.
struct Fp8Inputs {
  const Fp8Scales* q_scales = nullptr;
  const Fp8Scales* k_scales = nullptr;
  const Fp8Scales* v_scales = nullptr;
  // V in HOPATTN_FP8_LAYOUT_V_TRANSPOSED; none: in rows, at problem.v_stride.
  std::optional<VTransposedLayout> v_transposed;
};

// A validated problem whose q, k and v hold input_dtype: problem.dtype, or kFloat8E4M3 with `fp8`
// set and problem.dtype (o's) bfloat16 or float16.
Status run_forward(const ForwardProblem& problem, DType input_dtype, const Fp8Inputs& fp8);

}  // namespace hopattn::cpu
