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

// exp(scale * (score - row_max)) for a score that is not masked. (The SM90 kernel's form. With the
// product contracted into an FMA, score * scale_log2 is exact but scaled_max rounded, so the
// row's largest score can get an exponent above 0, up to half an ulp of the scaled max: 2^256 for
// a scaled max of 2^33. The CPU backend subtracts first, see softmax_exponent below.)
HOPATTN_HOST_DEVICE float softmax_numerator(float score, float scale_log2, float scaled_max) {
  return exp2f(score * scale_log2 - scaled_max);
}

// The exponent of exp(scale * (score - row_max)) in base 2, computed so that it can never exceed
// 0: the difference first (for score <= row_max, a rounded difference is <= 0, and so is its
// product with scale_log2 > 0), then clamped to <= 0 in case the max came from elsewhere. A NaN
// score or max stays NaN (every comparison with NaN is false). row_max is the max with -inf
// mapped to 0 (an all-masked row), so a masked score gives -inf and exp2 of it 0. scale_log2
// must be finite: see finite_scale_log2.
HOPATTN_HOST_DEVICE float softmax_exponent(float score, float row_max, float scale_log2) {
  const float exponent = (score - row_max) * scale_log2;
  return exponent > 0.f ? 0.f : exponent;
}

// scale_log2_of for a scale up to FLT_MAX: softmax_scale * log2(e) overflows float32 above
// 2.4e38, and (score - max) * inf would be NaN for the max score itself. FLT_MAX changes no
// exponent that exp2 does not already round to 0 or 1.
HOPATTN_HOST_DEVICE float finite_scale_log2(float softmax_scale) {
  const float scale_log2 = scale_log2_of(softmax_scale);
  return scale_log2 > 3.402823466e38f ? 3.402823466e38f : scale_log2;
}

// Factor that rescales the running sum and output when the row max grows from old to new.
// While the old max is -inf the sum and output are still zero, so the factor is 0. (The SM90
// kernel's form: with old_max == new_max the contracted difference can exceed 0, as above.)
HOPATTN_HOST_DEVICE float rescale_factor(float old_max, float new_max, float scale_log2) {
  return old_max == -INFINITY ? 0.f : exp2f(old_max * scale_log2 - new_max * scale_log2);
}

// rescale_factor with softmax_exponent's rules: never above 1, NaN for a NaN max.
HOPATTN_HOST_DEVICE float bounded_rescale_factor(float old_max, float new_max, float scale_log2) {
  return old_max == -INFINITY ? 0.f : exp2f(softmax_exponent(old_max, new_max, scale_log2));
}

// The final normalisation: a row that saw no key gets O = 0. A NaN sum (a NaN score: NaN in the
// row's q or in a key it sees) stays NaN, so that O is NaN rather than 0.
HOPATTN_HOST_DEVICE float inverse_row_sum(float row_sum) {
  return row_sum == 0.f ? 0.f : 1.f / row_sum;
}

// log(sum_j exp(scale * s_j)) in natural log; -inf for a row that saw no key, NaN for a NaN sum
// (logf(NaN)), never -inf for a row that saw a key: -inf means "no key" and nothing else.
HOPATTN_HOST_DEVICE float row_log_sum_exp(float row_max, float row_sum, float softmax_scale) {
  return row_sum == 0.f ? -INFINITY : row_max * softmax_scale + logf(row_sum);
}

}  // namespace hopattn
