#include "core/problem.hpp"

#include "core/causal_mask.hpp"

namespace hopattn {

double sequence_forward_flops(bool causal, int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim) {
  if (seqlen_q <= 0 || seqlen_k <= 0) return 0.0;
  // Visible keys summed over query rows; the causal count is a closed-form sum of
  // causal_key_end: rows before the first that sees a key contribute nothing, and the
  // visible count grows by one per row until it saturates at seqlen_k.
  double visible_scores = 0;
  if (!causal) {
    visible_scores = static_cast<double>(seqlen_q) * static_cast<double>(seqlen_k);
  } else {
    const int64_t first_row = seqlen_q - seqlen_k > 0 ? seqlen_q - seqlen_k : 0;
    const int64_t first_end = causal_key_end(first_row, seqlen_q, seqlen_k);
    const double rows = static_cast<double>(seqlen_q - first_row);
    const double last_end = static_cast<double>(causal_key_end(seqlen_q - 1, seqlen_q, seqlen_k));
    visible_scores = rows * (static_cast<double>(first_end) + last_end) / 2;
  }
  // Two products (Q K^T and P V), each a multiply-add per score and head_dim element.
  return 4.0 * static_cast<double>(head_dim) * visible_scores;
}

double ForwardProblem::flops() const {
  return static_cast<double>(seqlens.batch) * static_cast<double>(heads_q) *
         sequence_forward_flops(causal, seqlens.seqlen_q, seqlens.seqlen_k, head_dim);
}

double BackwardProblem::flops() const {
  return 2.5 * static_cast<double>(seqlens.batch) * static_cast<double>(heads_q) *
         sequence_forward_flops(causal, seqlens.seqlen_q, seqlens.seqlen_k, head_dim);
}

}  // namespace hopattn
