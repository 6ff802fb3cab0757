// The forward's rare path: the rows of a warp for which the key loop's result does not hold
// (OnlineSoftmax::rows_in_range: a last row offset beyond core/softmax_math.hpp's
// kFusedOffsetLimit, scores of ~8e6 at the default scale or huge scales; FP8, a last scaled max
// past kFp8ScaledMaxLimit, where the tensor cores' scores are too coarse) are computed again here
// from global memory, one key at a time, dequantised and in float32 throughout with
// softmax_exponent, as the CPU backend computes them. No tensor cores and no shared memory: slow,
// and it leaves the key loop with no second form of the exponent to carry.
#pragma once

#include <cute/tensor.hpp>

#include "core/causal_mask.hpp"
#include "core/fp8_layout.hpp"
#include "core/fp8_scale.hpp"
#include "core/problem.hpp"
#include "core/seqlen.hpp"
#include "core/softmax_math.hpp"
#include "sm90/kernel/softmax.cuh"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

// One row of q, k or v as float values: `step` elements apart, times `scale`.
template <class Element>
struct ValueRow {
  Element const* first;
  int64_t step;
  float scale;
  __device__ float operator[](int d) const { return float(first[d * step]) * scale; }
};

// Where the exact rows read q, k and v: 16-bit tensors as they are (no scales: null data); FP8 codes
// times their scales (usable_scale's), V in rows or given transposed (v_transposed.heads > 0).
template <class Element>
struct ExactRowsInputs {
  Element const *q, *k, *v;
  Strides q_stride, k_stride, v_stride;
  VTransposedLayout v_transposed;
  Fp8Scales q_scales, k_scales, v_scales;

  // Rows of the tensors: a sequence's q_begin or k_begin plus the row within it.
  __device__ ValueRow<Element> q_row(int64_t batch, int head, int64_t row) const {
    return {q + row_offset(q_stride, batch, row, head), 1, scale(q_scales, batch, head, row)};
  }
  __device__ ValueRow<Element> k_row(int64_t batch, int head, int64_t row) const {
    return {k + row_offset(k_stride, batch, row, head), 1, scale(k_scales, batch, head, row)};
  }
  __device__ ValueRow<Element> v_row(int64_t batch, int head, int64_t row) const {
    const float v_scale = scale(v_scales, batch, head, row);
    if (v_transposed.heads > 0) return {v + v_transposed.offset(batch, row, head, 0), v_transposed.pitch, v_scale};
    return {v + row_offset(v_stride, batch, row, head), 1, v_scale};
  }
  __device__ static float scale(Fp8Scales const& scales, int64_t batch, int head, int64_t row) {
    return scales.data == nullptr ? 1.f : usable_scale(__ldg(scales.data + scales.index(batch, head, row)));
  }
};

// The normalised output of the rows of a P V accumulator fragment (layout OutputLayout; `coords`
// its (row, column) coordinates within the tile of query block from `first_row`), into
// `output_values` in that layout, and their log-sum-exp into `lse_values`. Run by a whole warp: the
// four threads of a quad hold the columns of the same rows and sum a score's partial products with
// shuffles. Rows past the sequence read its last row of q (the epilogue stores no such row).
// Out of line: the key loop's register allocation does not make room for it.
template <class Element, class OutputLayout, class TensorC>
__device__ __noinline__ void exact_rows(ExactRowsInputs<Element> const in, Sequence const seq, int head,
                                        int head_kv, int first_row, bool causal, float softmax_scale,
                                        TensorC const coords, float* output_values, float* lse_values) {
  Tensor c = make_tensor(coords.data(), accumulator_rows_cols(coords.layout()));
  constexpr int kRows = decltype(size<0>(c))::value;
  constexpr int kColumns = decltype(size<1>(c))::value;
  const float scale_log2 = finite_scale_log2(softmax_scale);

  // q is read again for every key (from L1) rather than held: at head_dim 256 it would not fit
  // beside the output in the kernel's registers.
  ValueRow<Element> q_rows[kRows];
  float o[kRows][kColumns], row_max[kRows], row_sum[kRows];
  int key_end[kRows];
  int warp_key_end = 0;
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const int row = first_row + int(get<0>(c(r, 0)));
    key_end[r] = int(visible_key_end(causal, row, seq.seqlen_q, seq.seqlen_k));
    warp_key_end = max(warp_key_end, key_end[r]);
    const int64_t q_row = seq.q_begin + min(row, int(seq.seqlen_q) - 1);
    q_rows[r] = in.q_row(seq.tensor_batch, head, q_row);
    CUTE_UNROLL
    for (int col = 0; col < kColumns; ++col) o[r][col] = 0.f;
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
  }
  warp_key_end = __reduce_max_sync(0xffffffff, warp_key_end);

  for (int key = 0; key < warp_key_end; ++key) {
    const int64_t k_row = seq.k_begin + key;
    const ValueRow<Element> k_values = in.k_row(seq.tensor_batch, head_kv, k_row);
    const ValueRow<Element> v_values = in.v_row(seq.tensor_batch, head_kv, k_row);
    float score[kRows];
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) score[r] = 0.f;
    CUTE_UNROLL
    for (int col = 0; col < kColumns; ++col) {
      const float k_value = k_values[get<1>(c(0, col))];
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) score[r] = fmaf(q_rows[r][get<1>(c(r, col))], k_value, score[r]);
    }
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) score[r] = quad_allreduce(score[r], [](float a, float b) { return a + b; });
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      if (key >= key_end[r]) continue;  // the quad's rows alike: no shuffle follows
      const float new_max = fmaxf(row_max[r], score[r]);
      const float rescale = bounded_rescale_factor(row_max[r], new_max, scale_log2);
      const float p = exp2f(softmax_exponent(score[r], exponent_row_max(new_max), scale_log2));
      row_max[r] = new_max;
      row_sum[r] = row_sum[r] * rescale + p;
      CUTE_UNROLL
      for (int col = 0; col < kColumns; ++col) o[r][col] = fmaf(o[r][col], rescale, p * v_values[get<1>(c(r, col))]);
    }
  }

  Tensor out = make_tensor(output_values, accumulator_rows_cols(OutputLayout{}));
  CUTE_UNROLL
  for (int r = 0; r < kRows; ++r) {
    const float inverse = inverse_row_sum(row_sum[r]);
    lse_values[r] = row_log_sum_exp(row_max[r], row_sum[r], softmax_scale);
    CUTE_UNROLL
    for (int col = 0; col < kColumns; ++col) out(r, col) = o[r][col] * inverse;
  }
}

}  // namespace hopattn::sm90
