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

template <int kRows>
struct OnlineSoftmax {
  // Per-thread row statistics. row_sum holds this thread's partial sum; the quad's partials are
  // combined once at the end since every step rescales them by the same factor.
  RowVector<kRows> row_max, row_sum;
  float scale_log2;

  // The running max moves only when a block's max exceeds it by more than kStaleMaxLog2 in the
  // base-2 exponent. Below that P = exp2(s - stale max) is at most 2^8, which bf16, fp16 and the
  // float32 sums and accumulators hold without loss, and the output needs no rescale: after the
  // first few key blocks almost no step rescales. The result is the same function (the sum, the
  // output and the LSE all use the stale max). FlashAttention-3 rescales at every step.
  static constexpr float kStaleMaxLog2 = 8.f;

  __device__ explicit OnlineSoftmax(float softmax_scale) : scale_log2(scale_log2_of(softmax_scale)) {
    fill(row_max, -INFINITY);
    fill(row_sum, 0.f);
  }

  // Turns the scores into P = exp(scale * (S - max)) in place and returns, per row, the factor by
  // which the output accumulated so far must be rescaled for the new row maxima.
  template <class TensorS>
  __device__ __forceinline__ RowVector<kRows> step(TensorS& scores) {
    Tensor s = make_tensor(scores.data(), accumulator_rows_cols(scores.layout()));
    static_assert(decltype(size<0>(s))::value == kRows);
    RowVector<kRows> rescale;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float block_max = -INFINITY;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) block_max = fmaxf(block_max, s(r, c));
      block_max = quad_allreduce(block_max, [](float a, float b) { return fmaxf(a, b); });
      const bool keep_max =
          row_max(r) != -INFINITY && (block_max - row_max(r)) * scale_log2 <= kStaleMaxLog2;
      const float new_max = keep_max ? row_max(r) : fmaxf(row_max(r), block_max);
      rescale(r) = keep_max ? 1.f : rescale_factor(row_max(r), new_max, scale_log2);
      row_max(r) = new_max;
      const float scaled_max = scaled_row_max(new_max, scale_log2);
      float block_sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s); ++c) {
        s(r, c) = softmax_numerator(s(r, c), scale_log2, scaled_max);
        block_sum += s(r, c);
      }
      row_sum(r) = row_sum(r) * rescale(r) + block_sum;
    }
    return rescale;
  }

  template <class TensorO>
  __device__ __forceinline__ static void rescale_output(TensorO& output, RowVector<kRows> const& rescale) {
    bool needed = false;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) needed |= rescale(r) != 1.f;
    if (!__any_sync(0xffffffff, needed)) return;  // the common case with a stale max
    Tensor o = make_tensor(output.data(), accumulator_rows_cols(output.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= rescale(r);
    }
  }

  // Divides the output by the row sums and returns, per row, the log-sum-exp (natural log).
  template <class TensorO>
  __device__ __forceinline__ RowVector<kRows> finalize(TensorO& output, float softmax_scale) {
    Tensor o = make_tensor(output.data(), accumulator_rows_cols(output.layout()));
    RowVector<kRows> lse;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_allreduce(row_sum(r), [](float a, float b) { return a + b; });
      const float inverse = inverse_row_sum(sum);
      lse(r) = row_log_sum_exp(row_max(r), sum, softmax_scale);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= inverse;
    }
    return lse;
  }
};

}  // namespace hopattn::sm90
