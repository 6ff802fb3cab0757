#include "cpu/reference.hpp"

#include <algorithm>
#include <cmath>

#include "core/causal_mask.hpp"
#include "core/dtype.hpp"

namespace hopattn {
namespace {

template <class Element>
const Element* row_pointer(const void* base, const Strides& s, int64_t batch, int64_t row,
                           int64_t head) {
  return static_cast<const Element*>(base) + batch * s.batch + row * s.seq + head * s.head;
}

template <class Element>
void attend_row(const AttentionProblem& p, int64_t batch, int64_t head, int64_t row,
                int64_t key_end, double* out, double& lse) {
  const int64_t d = p.head_dim;
  const int64_t kv_head = head / p.heads_per_kv_head();
  const double scale = p.softmax_scale;
  std::fill(out, out + d, 0.0);
  if (key_end <= 0) {
    lse = -INFINITY;
    return;
  }
  const Element* q = row_pointer<Element>(p.q, p.q_stride, batch, row, head);
  std::vector<double> scores(static_cast<size_t>(key_end));
  for (int64_t j = 0; j < key_end; ++j) {
    const Element* k = row_pointer<Element>(p.k, p.k_stride, batch, j, kv_head);
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(to_float(q[c])) * to_float(k[c]);
    scores[j] = scale * dot;
  }
  const double max = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (int64_t j = 0; j < key_end; ++j) {
    const double weight = std::exp(scores[j] - max);
    sum += weight;
    const Element* v = row_pointer<Element>(p.v, p.v_stride, batch, j, kv_head);
    for (int64_t c = 0; c < d; ++c) out[c] += weight * to_float(v[c]);
  }
  for (int64_t c = 0; c < d; ++c) out[c] /= sum;
  lse = max + std::log(sum);
}

}  // namespace

void reference_row(const AttentionProblem& problem, int64_t batch, int64_t head, int64_t row,
                   int64_t key_end, double* out, double& lse) {
  visit_dtype(problem.dtype, [&](auto element) {
    attend_row<decltype(element)>(problem, batch, head, row, key_end, out, lse);
  });
}

void reference_forward(const AttentionProblem& p, std::vector<double>& out,
                       std::vector<double>& lse) {
  const int64_t d = p.head_dim;
  out.assign(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * d), 0.0);
  lse.assign(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads_q; ++h) {
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const int64_t key_end = visible_key_end(p.causal, i, p.seqlen_q, p.seqlen_k);
        double* out_row = out.data() + ((b * p.seqlen_q + i) * p.heads_q + h) * d;
        reference_row(p, b, h, i, key_end, out_row, lse[lse_offset(p, b, h, i)]);
      }
    }
  }
}

void reference_rows(const AttentionProblem& p, const std::vector<RowIndex>& rows,
                    std::vector<double>& out, std::vector<double>& lse) {
  out.assign(rows.size() * static_cast<size_t>(p.head_dim), 0.0);
  lse.assign(rows.size(), 0.0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowIndex& at = rows[r];
    const int64_t key_end = visible_key_end(p.causal, at.row, p.seqlen_q, p.seqlen_k);
    reference_row(p, at.batch, at.head, at.row, key_end, out.data() + r * p.head_dim, lse[r]);
  }
}

}  // namespace hopattn
