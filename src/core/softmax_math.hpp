// The scalar pieces of the online softmax, shared by the CPU backend and the GPU kernels so
// both compute the same function. Scores are exponentiated in base 2 with the softmax scale
// folded into log2(e): exp(scale * (s - m)) == exp2(s * scale_log2 - m * scale_log2).
#pragma once

#include <cmath>

#include "core/host_device.hpp"

namespace hopattn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

HOPATTN_HOST_DEVICE float scale_log2_of(float softmax_scale) { return softmax_scale * kLog2e; }

// The running row max times scale_log2, with a row that has seen only masked scores
// (max = -inf) mapped to 0 so that exp2(-inf - 0) = 0 rather than NaN.
HOPATTN_HOST_DEVICE float scaled_row_max(float row_max, float scale_log2) {
  return row_max == -INFINITY ? 0.f : row_max * scale_log2;
}

// exp(scale * (score - row_max)) for a score that is not masked.
HOPATTN_HOST_DEVICE float softmax_numerator(float score, float scale_log2, float scaled_max) {
  return exp2f(score * scale_log2 - scaled_max);
}

// Factor that rescales the running sum and output when the row max grows from old to new.
// While the old max is -inf the sum and output are still zero, so the factor is 0.
HOPATTN_HOST_DEVICE float rescale_factor(float old_max, float new_max, float scale_log2) {
  return old_max == -INFINITY ? 0.f : exp2f(old_max * scale_log2 - new_max * scale_log2);
}

// The final normalisation: a row that saw no key gets O = 0.
HOPATTN_HOST_DEVICE float inverse_row_sum(float row_sum) {
  return (row_sum == 0.f || row_sum != row_sum) ? 0.f : 1.f / row_sum;
}

// log(sum_j exp(scale * s_j)) in natural log; -inf for a row that saw no key.
HOPATTN_HOST_DEVICE float row_log_sum_exp(float row_max, float row_sum, float softmax_scale) {
  return (row_sum == 0.f || row_sum != row_sum) ? -INFINITY
                                                : row_max * softmax_scale + logf(row_sum);
}

}  // namespace hopattn
