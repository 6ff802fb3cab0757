#include "core/problem.hpp"

#include <cmath>

#include "core/causal_mask.hpp"

namespace hopattn {

namespace {

Strides strides_of(const hopattn_tensor& t) { return {t.batch_stride, t.seq_stride, t.head_stride}; }

}  // namespace

AttentionProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                            const hopattn_tensor& o, float* lse,
                            const hopattn_forward_options& options) {
  AttentionProblem p;
  p.dtype = q.dtype;
  p.batch = q.batch;
  p.seqlen_q = q.seqlen;
  p.seqlen_k = k.seqlen;
  p.heads_q = q.heads;
  p.heads_kv = k.heads;
  p.head_dim = q.head_dim;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.lse = lse;
  p.q_stride = strides_of(q);
  p.k_stride = strides_of(k);
  p.v_stride = strides_of(v);
  p.o_stride = strides_of(o);
  p.causal = options.causal != 0;
  p.softmax_scale = options.softmax_scale != 0.f
                        ? options.softmax_scale
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.head_dim)));
  p.cuda_stream = options.cuda_stream;
  return p;
}

double AttentionProblem::flops() const {
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
  return 4.0 * static_cast<double>(batch) * static_cast<double>(heads_q) *
         static_cast<double>(head_dim) * visible_scores;
}

}  // namespace hopattn
