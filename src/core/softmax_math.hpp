// The scalar pieces of the online softmax, shared by the CPU backend and the GPU kernels so
// both compute the same function. Scores are exponentiated in base 2 with the softmax scale
// folded into log2(e): exp(scale * (s - m)) == exp2((s - m) * scale_log2).
#pragma once

#include <cmath>

#include "core/host_device.hpp"

namespace hopattn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The running row max as softmax_exponent takes it: a row that has seen only masked scores
// (max = -inf) maps to 0, so that a masked score's exponent is -inf - 0 = -inf rather than NaN.
HOPATTN_HOST_DEVICE float exponent_row_max(float row_max) {
  return row_max == -INFINITY ? 0.f : row_max;
}

// The exponent of exp(scale * (score - row_max)) in base 2, computed so that it cannot exceed 0:
// the difference first. row_max is exponent_row_max of the max of a set of scores that holds
// this one, so score <= row_max, a rounded difference is <= 0, and so is its product with
// scale_log2 > 0; no clamp is needed. (Folding the max into an FMA, score * scale_log2 - max *
// scale_log2, would round the scaled max, and for |scores| ~ 1e9 the largest score would get an
// exponent of hundreds, overflowing exp2, or every exponent far below 0, zeroing the row.) A
// masked score (-inf) gives -inf and exp2 of it 0; a NaN score or max stays NaN. scale_log2 must
// be finite: see finite_scale_log2.
HOPATTN_HOST_DEVICE float softmax_exponent(float score, float row_max, float scale_log2) {
  return (score - row_max) * scale_log2;
}

// The form FlashAttention uses, one FMA: score * scale_log2 - scaled_max, with scaled_max the
// rounded row_max * scale_log2 (of exponent_row_max). The rounding shifts every exponent of the row
// by the same amount, up to half an ulp of scaled_max: which cancels in O except between key blocks,
// and is at most 2^-14 while |scaled_max| < kFusedExponentLimit (a relative 1e-5 in P, against the
// 2^-9 of rounding P to bf16 for P V). Beyond the limit the shift grows without bound (+128 at 2^32:
// inf), so the SM90 kernels without row offsets (below; FP8 head_dim 128 and 256) take this form
// only where fused_exponent_applies, softmax_exponent elsewhere.
constexpr float kFusedExponentLimit = 1024.f;

HOPATTN_HOST_DEVICE bool fused_exponent_applies(float scaled_max) {
  return scaled_max < kFusedExponentLimit && scaled_max > -kFusedExponentLimit;  // false for NaN and inf
}

HOPATTN_HOST_DEVICE float fused_softmax_exponent(float score, float scale_log2, float scaled_max) {
  return fmaf(score, scale_log2, -scaled_max);
}

// The SM90 kernels' use of the same FMA with no limit inside the key loop (16-bit, FP8 head_dim 64:
// sm90/kernel/config.hpp's kRowOffsets): each row's offset is its max times scale_log2 rounded up
// (scaled_max_rounded_up), so no exponent exceeds 0, and the sums and O are kept relative to
// exp2(offset) itself (the rescale between key blocks is exp2 of two offsets' difference,
// offset_log_sum_exp the LSE). The offset's rounding then shifts nothing between blocks: it only
// puts the largest score's exponent in (-ulp(offset), 0]. While |offset| < kFusedOffsetLimit, that
// is above -2^-4 (P of the max above 0.95), and the FFMA rounds any exponent above -64 by at most
// 2^-18. (FP8: the descales folded into its factor add a relative 2^-22 of the score, far below
// e4m3's rounding, and so can lift the largest exponent by up to 2^-2, which leaves its P, offset
// by 2^8, below e4m3's 448.) A row whose last offset is beyond (scores of ~8e6 at head_dim 128's
// default scale, or huge scales or FP8 descales) is computed again with softmax_exponent
// (sm90/kernel/exact_rows.cuh).
constexpr float kFusedOffsetLimit = 1048576.f;  // 2^20

HOPATTN_HOST_DEVICE bool fused_offset_applies(float offset) {
  return offset < kFusedOffsetLimit && offset > -kFusedOffsetLimit;  // false for NaN and inf
}

// FP8 scores come from the tensor cores' e4m3 products, whose accumulator keeps fewer bits than
// float32: at scaled row maxima of ~4e8 a row's LSE was off by a relative 6e-4 (head_dim 128, H100;
// performance log, nineteenth session), which no exponent form can undo. Past this |scaled max| a
// score's own error outgrows e4m3's rounding of P, so an FP8 row beyond it is computed again in
// float32 from its codes and scales (sm90/kernel/exact_rows.cuh), whichever form its kernel uses.
constexpr float kFp8ScaledMaxLimit = kFusedExponentLimit;

HOPATTN_HOST_DEVICE bool fp8_scores_hold(float scaled_max) {
  return scaled_max < kFp8ScaledMaxLimit && scaled_max > -kFp8ScaledMaxLimit;  // false for NaN and inf
}

HOPATTN_HOST_DEVICE float scaled_max_rounded_up(float row_max, float scale_log2) {
#ifdef __CUDA_ARCH__
  return __fmul_ru(row_max, scale_log2);
#else
  const double exact = double(row_max) * double(scale_log2);  // 48 significant bits: exact
  const float nearest = float(exact);
  return double(nearest) < exact ? std::nextafter(nearest, INFINITY) : nearest;
#endif
}

// row_log_sum_exp for a sum of exp2(s * scale_log2 - offset): the offset's excess over the scaled
// max (exact: below one ulp of the offset) is added to the log of the sum, so that the LSE is as
// precise as row_log_sum_exp's.
HOPATTN_HOST_DEVICE float offset_log_sum_exp(float row_max, float offset, float row_sum, float softmax_scale,
                                             float scale_log2) {
  if (row_sum == 0.f) return -INFINITY;
  const float excess = -fmaf(row_max, scale_log2, -offset);
  return row_max * softmax_scale + (excess * kLn2 + logf(row_sum));
}

// softmax_scale * log2(e), the scale of exponents in base 2, for a scale up to FLT_MAX: the
// product overflows float32 above 2.4e38, and (score - max) * inf would be NaN for the max score
// itself. FLT_MAX changes no exponent that exp2 does not already round to 0 or 1.
HOPATTN_HOST_DEVICE float finite_scale_log2(float softmax_scale) {
  const float scale_log2 = softmax_scale * kLog2e;
  return scale_log2 > 3.402823466e38f ? 3.402823466e38f : scale_log2;
}

// Factor that rescales the running sum and output when the row max grows from old to new (old <=
// new), with softmax_exponent's rules: never above 1, NaN for a NaN max. While the old max is
// -inf the sum and output are still zero, so the factor is 0.
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
