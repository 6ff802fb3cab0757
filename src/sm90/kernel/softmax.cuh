// The online softmax over register fragments: a running max and sum per query row, updated once per
// key block, and the final normalisation. The scalar rules are core/softmax_math.hpp's, shared with
// the CPU backend.
#pragma once

#include <cute/tensor.hpp>

#include "core/softmax_math.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

// The four threads of a quad hold the columns of the same rows of a WGMMA accumulator.
template <class Op>
__device__ __forceinline__ float quad_allreduce(float value, Op op) {
  value = op(value, __shfl_xor_sync(0xffffffff, value, 1));
  return op(value, __shfl_xor_sync(0xffffffff, value, 2));
}

template <int kRows>
using RowVector = decltype(make_tensor<float>(Shape<Int<kRows>>{}));

// kFp8: the scores are those of e4m3 codes, so a score's true value is the score times the Q
// scale of its row and the K scale of its column's chunk (kScaleChunks equal column chunks: a chunk
// never spans two K scale blocks), handed to every step; and P is to be rounded to e4m3, so it is
// computed as exp2(exponent + kPLog2Offset), in [0, 256] rather than [0, 1]: e4m3 is normal from
// 2^-6, which then holds P down to 2^-14 of the row's max with its full 3-bit mantissa instead of
// 2^-6. The row sum carries the same factor, which cancels in O and is taken out of the LSE.
//
// The exponent is FlashAttention's one FFMA per score (fused_softmax_exponent) in two schemes,
// which config.hpp's kRowOffsets chooses per kernel:
//  - kRowOffsets: always, against each row's offset, the scaled max rounded up, with the sums and O
//    kept relative to the offset itself (core/softmax_math.hpp); no vote and no second form in the
//    key loop. After the last step, a warp with a row whose offset is out of fused_offset_applies'
//    range computes its rows again (rows_in_range, exact_rows.cuh).
//  - otherwise: per step, while every row of the warp has |max * scale_log2| < kFusedExponentLimit,
//    with the sums relative to the max; otherwise softmax_exponent's FADD and FMUL, exact at any
//    magnitude.
// FP8 folds its descales into the FFMA's factor in both; in both, an FP8 row whose scaled max
// leaves fp8_scores_hold's range is computed again too (rows_in_range).
template <int kRows, bool kFp8 = false, int kScaleChunks = 1, bool kRowOffsets = !kFp8>
struct OnlineSoftmax {
  static constexpr float kPLog2Offset = kFp8 ? 8.f : 0.f;
  static constexpr float kPOffsetInverse = kFp8 ? 1.f / 256.f : 1.f;  // 2^-kPLog2Offset
  using ChunkScales = cute::array<float, kScaleChunks>;

  // Per-thread row statistics, the max in true (descaled) score units. row_sum holds this thread's
  // partial sum; the quad's partials are combined once at the end since every step rescales them
  // by the same factor.
  RowVector<kRows> row_max, row_sum;
  RowVector<kRows> row_offset;  // kRowOffsets: scaled_max_rounded_up of the max (0 while it is -inf)
  float scale_log2;

  __device__ explicit OnlineSoftmax(float softmax_scale) : scale_log2(finite_scale_log2(softmax_scale)) {
    fill(row_max, -INFINITY);
    fill(row_sum, 0.f);
    fill(row_offset, 0.f);
  }

  // Turns the scores into P = exp(scale * (S - max)) (kRowOffsets: exp2(S * scale_log2 - offset);
  // FP8 times 2^kPLog2Offset) in place and returns, per row, the factor by which the output
  // accumulated so far must be rescaled for the new row maxima. The maxima of all rows first, then
  // the exponentials, so the max shuffles of every row are in flight together.
  // `row_descale`, `chunk_descale` (kFp8 only): the positive factors from the scores to true
  // scores; a NaN makes its scores NaN. The quad's lanes hold the same columns' chunks.
  // `maxima_done` runs between the two phases (a timeline build's stamp; nothing otherwise).
  template <class TensorS, class MaximaDone>
  __device__ __forceinline__ RowVector<kRows> step(TensorS& scores, RowVector<kRows> const& row_descale,
                                                   ChunkScales const& chunk_descale, MaximaDone&& maxima_done) {
    Tensor s = make_tensor(scores.data(), accumulator_rows_cols(scores.layout()));
    static_assert(decltype(size<0>(s))::value == kRows);
    // The thread's columns run through the tile's 8-column groups in order (one WGMMA atom spans
    // the key block), so each chunk's are consecutive.
    static_assert(decltype(size<2>(scores))::value == 1);
    constexpr int kColumns = decltype(size<1>(s))::value;
    static_assert(kColumns % kScaleChunks == 0);
    constexpr int kChunkColumns = kColumns / kScaleChunks;
    // A NaN descale (of a scale that was NaN, zero or negative) makes NaN of the scores it scales,
    // but a masked score (-inf) stays masked: only the rows that see its keys come out NaN.
    RowVector<kRows> row_scales;
    ChunkScales chunk_scales;
    if constexpr (kFp8) {
      bool any_nan = false;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) row_scales(r) = row_descale(r), any_nan |= isnan(row_descale(r));
      CUTE_UNROLL
      for (int j = 0; j < kScaleChunks; ++j) chunk_scales[j] = chunk_descale[j], any_nan |= isnan(chunk_descale[j]);
      if (__any_sync(0xffffffff, any_nan)) {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
          CUTE_UNROLL
          for (int c = 0; c < kColumns; ++c) {
            const bool nan = isnan(row_scales(r)) || isnan(chunk_scales[c / kChunkColumns]);
            if (nan && s(r, c) != -INFINITY) s(r, c) = __int_as_float(0x7fffffff);
          }
          if (isnan(row_scales(r))) row_scales(r) = 1.f;
        }
        CUTE_UNROLL
        for (int j = 0; j < kScaleChunks; ++j) {
          if (isnan(chunk_scales[j])) chunk_scales[j] = 1.f;
        }
      }
    }
    // Maxima and sums in kChains independent chains per row, so that each dependent FMNMX / FADD
    // waits on one kChains places back rather than on the last (their latency, not their count,
    // bounded the loop: ncu's "stall wait").
    constexpr int kChains = kChunkColumns % 4 == 0 ? 4 : (kChunkColumns % 2 == 0 ? 2 : 1);
    RowVector<kRows> rescale, max_or_zero;
    bool fused = true;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float block_max = -INFINITY;
      CUTE_UNROLL
      for (int j = 0; j < kScaleChunks; ++j) {
        // Each chain starts at its first score, not at -inf: fmaxf(-inf, x) is not x for a NaN x,
        // so ptxas keeps it (an FMNMX per chain, 24 of a 192-key FP8 step's). The max still skips
        // NaN scores as fmaxf does: an all-NaN chunk's NaN max loses to block_max's -inf below.
        float chain_max[kChains];
        CUTE_UNROLL
        for (int k = 0; k < kChains; ++k) chain_max[k] = s(r, j * kChunkColumns + k);
        CUTE_UNROLL
        for (int c = kChains; c < kChunkColumns; ++c) {
          chain_max[c % kChains] = fmaxf(chain_max[c % kChains], s(r, j * kChunkColumns + c));
        }
        float chunk_max = chain_max[0];
        CUTE_UNROLL
        for (int k = 1; k < kChains; ++k) chunk_max = fmaxf(chunk_max, chain_max[k]);
        // The max of the products: descales are > 0.
        block_max = fmaxf(block_max, kFp8 ? chunk_max * chunk_scales[j] : chunk_max);
      }
      block_max = quad_allreduce(block_max, [](float a, float b) { return fmaxf(a, b); });
      if constexpr (kFp8) block_max *= row_scales(r);
      const float new_max = fmaxf(row_max(r), block_max);
      if constexpr (kRowOffsets) {
        const float offset = scaled_max_rounded_up(exponent_row_max(new_max), scale_log2);
        rescale(r) = row_max(r) == -INFINITY ? 0.f : exp2f(row_offset(r) - offset);
        row_offset(r) = offset;
      } else {
        rescale(r) = bounded_rescale_factor(row_max(r), new_max, scale_log2);
        max_or_zero(r) = exponent_row_max(new_max);
        fused &= fused_exponent_applies(max_or_zero(r) * scale_log2);
      }
      row_max(r) = new_max;
    }
    maxima_done();
    // FP8 folds the descales into the FFMA's factor, and the exact form multiplies them in first.
    auto exponentiate = [&](auto exponent_of) CUTLASS_LAMBDA_FUNC_INLINE {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const float shifted_max = (kRowOffsets ? row_offset(r) : max_or_zero(r) * scale_log2) - kPLog2Offset;
        float chain_sum[kChains];
        CUTE_UNROLL
        for (int k = 0; k < kChains; ++k) chain_sum[k] = 0.f;
        CUTE_UNROLL
        for (int j = 0; j < kScaleChunks; ++j) {
          const float descale = kFp8 ? row_scales(r) * chunk_scales[j] : 1.f;
          CUTE_UNROLL
          for (int c = 0; c < kChunkColumns; ++c) {
            float& score = s(r, j * kChunkColumns + c);
            score = exp2f(exponent_of(score, r, descale, shifted_max));
            chain_sum[c % kChains] += score;
          }
        }
        float block_sum = chain_sum[0];
        CUTE_UNROLL
        for (int k = 1; k < kChains; ++k) block_sum += chain_sum[k];
        row_sum(r) = row_sum(r) * rescale(r) + block_sum;
      }
    };
    const float c = scale_log2;
    auto fused_form = [c](float score, int, float descale, float shifted_max) {
      return fused_softmax_exponent(score, kFp8 ? c * descale : c, shifted_max);
    };
    if constexpr (kRowOffsets) {  // no vote
      exponentiate(fused_form);
    } else if (__all_sync(0xffffffff, fused)) {
      exponentiate(fused_form);
    } else {
      exponentiate([&, c](float score, int r, float descale, float) {
        const float true_score = kFp8 ? score * descale : score;
        return softmax_exponent(true_score, max_or_zero(r), c) + kPLog2Offset;
      });
    }
    return rescale;
  }

  // 16-bit scores are true scores.
  template <class TensorS, class MaximaDone>
  __device__ __forceinline__ RowVector<kRows> step(TensorS& scores, MaximaDone&& maxima_done) {
    static_assert(!kFp8, "FP8 scores need their descales");
    RowVector<kRows> unused_rows;
    ChunkScales unused_chunks;
    return step(scores, unused_rows, unused_chunks, maxima_done);
  }

  template <class TensorO>
  __device__ __forceinline__ static void rescale_output(TensorO& output, RowVector<kRows> const& rescale) {
    // FP8: the factor is exactly 1 when a row's max (and so its offset) did not grow, and the warp
    // skips the multiplies when none of its 16 rows grew: about half the steps on N(0, 1) inputs at
    // 8k and a fifth on the outlier inputs (bench/softmax_numerics.py). 16-bit multiplies always:
    // without the exponent's vote, the rescale's vote cost more than it saved (performance log,
    // seventeenth session).
    if constexpr (kFp8) {
      bool needed = false;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) needed |= rescale(r) != 1.f;
      if (!__any_sync(0xffffffff, needed)) return;
    }
    Tensor o = make_tensor(output.data(), accumulator_rows_cols(output.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= rescale(r);
    }
  }

  // Whether the key loop's result holds for every row, read after the last step: kRowOffsets, the
  // last offset passes fused_offset_applies; FP8, the last scaled max passes fp8_scores_hold. The
  // earlier steps need no check: the max only grows, so a step that weighs more than 2^-64 against
  // the last had a max within 64 of it (log2 units), as precise as the last.
  __device__ __forceinline__ bool rows_in_range() const {
    bool in_range = true;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float scaled_max = kRowOffsets ? row_offset(r) : exponent_row_max(row_max(r)) * scale_log2;
      in_range &= (!kRowOffsets || fused_offset_applies(scaled_max)) && (!kFp8 || fp8_scores_hold(scaled_max));
    }
    return in_range;
  }

  // Divides the output by the row sums, times `output_scale` (FP8: V's scale), and returns, per
  // row, the log-sum-exp (natural log). A row that saw no key stays 0 whatever output_scale is.
  template <class TensorO>
  __device__ __forceinline__ RowVector<kRows> finalize(TensorO& output, float softmax_scale, float output_scale = 1.f) {
    Tensor o = make_tensor(output.data(), accumulator_rows_cols(output.layout()));
    RowVector<kRows> lse;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_allreduce(row_sum(r), [](float a, float b) { return a + b; });
      const float inverse = inverse_row_sum(sum);
      const float factor = kFp8 && inverse != 0.f ? inverse * output_scale : inverse;
      const float unshifted_sum = sum * kPOffsetInverse;
      lse(r) = kRowOffsets ? offset_log_sum_exp(row_max(r), row_offset(r), unshifted_sum, softmax_scale, scale_log2)
                           : row_log_sum_exp(row_max(r), unshifted_sum, softmax_scale);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= factor;
    }
    return lse;
  }
};

}  // namespace hopattn::sm90
