#include "cpu/reference.hpp"

#include <algorithm>
#include <cmath>

#include "core/causal_mask.hpp"
#include "core/dtype.hpp"
#include "core/seqlen.hpp"

namespace hopattn {
namespace {

template <class Element>
const Element* row_pointer(const void* base, const Strides& s, int64_t tensor_batch, int64_t row,
                           int64_t head) {
  return static_cast<const Element*>(base) + row_offset(s, tensor_batch, row, head);
}

template <class Element>
void attend_row(const ForwardProblem& p, const RowIndex& at, int64_t key_end, double* out,
                double& lse) {
  const Sequence seq = sequence_of(p.seqlens, at.sequence);
  const int64_t d = p.head_dim;
  const int64_t kv_head = at.head / p.heads_per_kv_head();
  const double scale = p.softmax_scale;
  std::fill(out, out + d, 0.0);
  if (key_end <= 0) {
    lse = -INFINITY;
    return;
  }
  const Element* q =
      row_pointer<Element>(p.q, p.q_stride, seq.tensor_batch, seq.q_begin + at.row, at.head);
  std::vector<double> scores(static_cast<size_t>(key_end));
  for (int64_t j = 0; j < key_end; ++j) {
    const Element* k =
        row_pointer<Element>(p.k, p.k_stride, seq.tensor_batch, seq.k_begin + j, kv_head);
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(to_float(q[c])) * to_float(k[c]);
    scores[j] = scale * dot;
  }
  const double max = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (int64_t j = 0; j < key_end; ++j) {
    const double weight = std::exp(scores[j] - max);
    sum += weight;
    const Element* v =
        row_pointer<Element>(p.v, p.v_stride, seq.tensor_batch, seq.k_begin + j, kv_head);
    for (int64_t c = 0; c < d; ++c) out[c] += weight * to_float(v[c]);
  }
  for (int64_t c = 0; c < d; ++c) out[c] /= sum;
  lse = max + std::log(sum);
}

int64_t visible_keys(const ForwardProblem& p, const RowIndex& at) {
  const Sequence seq = sequence_of(p.seqlens, at.sequence);
  return visible_key_end(p.causal, at.row, seq.seqlen_q, seq.seqlen_k);
}

// One query row's contribution to the gradients (see reference_backward).
template <class Element>
void backward_row(const BackwardProblem& p, const Sequence& seq, int64_t head, int64_t row,
                  double* dq, std::vector<double>& dk, std::vector<double>& dv) {
  const int64_t d = p.head_dim;
  const int64_t kv_head = head / p.heads_per_kv_head();
  const int64_t key_end = visible_key_end(p.causal, row, seq.seqlen_q, seq.seqlen_k);
  if (key_end <= 0) return;
  const double scale = p.softmax_scale;
  const int64_t q_row = seq.q_begin + row;
  const Element* q = row_pointer<Element>(p.q, p.q_stride, seq.tensor_batch, q_row, head);
  const Element* d_o = row_pointer<Element>(p.d_o, p.d_o_stride, seq.tensor_batch, q_row, head);
  const auto key_row = [&](const void* base, const Strides& s, int64_t j) {
    return row_pointer<Element>(base, s, seq.tensor_batch, seq.k_begin + j, kv_head);
  };
  std::vector<double> probability(static_cast<size_t>(key_end));
  for (int64_t j = 0; j < key_end; ++j) {
    const Element* k = key_row(p.k, p.k_stride, j);
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(to_float(q[c])) * to_float(k[c]);
    probability[j] = scale * dot;
  }
  const double max = *std::max_element(probability.begin(), probability.end());
  double sum = 0;
  for (double& x : probability) sum += (x = std::exp(x - max));
  for (double& x : probability) x /= sum;
  // dP_ij = dO_i . V_j, and D_i = sum_j P_ij dP_ij.
  std::vector<double> d_probability(static_cast<size_t>(key_end));
  double delta = 0;
  for (int64_t j = 0; j < key_end; ++j) {
    const Element* v = key_row(p.v, p.v_stride, j);
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(to_float(d_o[c])) * to_float(v[c]);
    d_probability[j] = dot;
    delta += probability[j] * dot;
  }
  const int64_t kv_row_base = (seq.tensor_batch * p.seqlens.total_k + seq.k_begin) * p.heads_kv;
  for (int64_t j = 0; j < key_end; ++j) {
    const double d_score = probability[j] * (d_probability[j] - delta);
    const Element* k = key_row(p.k, p.k_stride, j);
    const size_t kv_at = static_cast<size_t>(((kv_row_base + j * p.heads_kv) + kv_head) * d);
    for (int64_t c = 0; c < d; ++c) {
      dq[c] += scale * d_score * to_float(k[c]);
      dk[kv_at + c] += scale * d_score * to_float(q[c]);
      dv[kv_at + c] += probability[j] * to_float(d_o[c]);
    }
  }
}

}  // namespace

void reference_row(const ForwardProblem& problem, const RowIndex& at, int64_t key_end, double* out,
                   double& lse) {
  visit_dtype(problem.dtype,
              [&](auto element) { attend_row<decltype(element)>(problem, at, key_end, out, lse); });
}

void reference_forward(const ForwardProblem& p, std::vector<double>& out,
                       std::vector<double>& lse) {
  const SeqlenLayout& layout = p.seqlens;
  const int64_t d = p.head_dim;
  const int64_t tensor_batches = layout.varlen() ? 1 : layout.batch;
  out.assign(static_cast<size_t>(tensor_batches * layout.total_q * p.heads_q * d), 0.0);
  lse.assign(static_cast<size_t>(tensor_batches * p.heads_q * layout.total_q), 0.0);
  for (int64_t b = 0; b < layout.batch; ++b) {
    const Sequence seq = sequence_of(layout, b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      for (int64_t i = 0; i < seq.seqlen_q; ++i) {
        const RowIndex at{b, h, i};
        const int64_t out_row = seq.tensor_batch * layout.total_q + seq.q_begin + i;
        reference_row(p, at, visible_keys(p, at), out.data() + (out_row * p.heads_q + h) * d,
                      lse[lse_index(layout, seq, p.heads_q, h, i)]);
      }
    }
  }
}

void reference_rows(const ForwardProblem& p, const std::vector<RowIndex>& rows,
                    std::vector<double>& out, std::vector<double>& lse) {
  out.assign(rows.size() * static_cast<size_t>(p.head_dim), 0.0);
  lse.assign(rows.size(), 0.0);
  for (size_t r = 0; r < rows.size(); ++r) {
    reference_row(p, rows[r], visible_keys(p, rows[r]), out.data() + r * p.head_dim, lse[r]);
  }
}

}  // namespace hopattn

namespace hopattn {

void reference_backward(const BackwardProblem& p, std::vector<double>& dq, std::vector<double>& dk,
                        std::vector<double>& dv) {
  const SeqlenLayout& layout = p.seqlens;
  const int64_t d = p.head_dim;
  const int64_t tensor_batches = layout.varlen() ? 1 : layout.batch;
  dq.assign(static_cast<size_t>(tensor_batches * layout.total_q * p.heads_q * d), 0.0);
  dk.assign(static_cast<size_t>(tensor_batches * layout.total_k * p.heads_kv * d), 0.0);
  dv.assign(dk.size(), 0.0);
  for (int64_t b = 0; b < layout.batch; ++b) {
    const Sequence seq = sequence_of(layout, b);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      for (int64_t i = 0; i < seq.seqlen_q; ++i) {
        const int64_t q_row = seq.tensor_batch * layout.total_q + seq.q_begin + i;
        double* dq_row = dq.data() + (q_row * p.heads_q + h) * d;
        visit_dtype(p.dtype, [&](auto element) {
          backward_row<decltype(element)>(p, seq, h, i, dq_row, dk, dv);
        });
      }
    }
  }
}

}  // namespace hopattn
