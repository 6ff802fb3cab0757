#include "api/problem_of.hpp"

#include <cmath>

#include "api/abi.hpp"

namespace hopattn {
namespace {

Strides strides_of(const hopattn_tensor& t) {
  return {t.batch_stride, t.seq_stride, t.head_stride};
}

}  // namespace

float resolved_softmax_scale(float requested, int64_t head_dim) {
  return requested != 0.f ? requested
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                          const hopattn_tensor& o, float* lse,
                          const hopattn_forward_options& options) {
  ForwardProblem p;
  p.dtype = dtype_of(q.dtype);
  p.seqlens.batch = q.batch;
  p.seqlens.seqlen_q = p.seqlens.total_q = q.seqlen;
  p.seqlens.seqlen_k = p.seqlens.total_k = k.seqlen;
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
  p.softmax_scale = resolved_softmax_scale(options.softmax_scale, q.head_dim);
  p.cuda_stream = options.cuda_stream;
  p.workspace = options.workspace;
  p.workspace_bytes = options.workspace != nullptr ? options.workspace_bytes : 0;
  return p;
}

ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                          const hopattn_tensor& o, float* lse, const hopattn_varlen& varlen,
                          const hopattn_forward_options& options) {
  ForwardProblem p = problem_of(q, k, v, o, lse, options);
  p.seqlens.batch = varlen.batch;
  p.seqlens.seqlen_q = varlen.max_seqlen_q;
  p.seqlens.seqlen_k = varlen.max_seqlen_k;
  p.seqlens.cu_seqlens_q = varlen.cu_seqlens_q;
  p.seqlens.cu_seqlens_k = varlen.cu_seqlens_k;
  p.seqlens.seqused_k = varlen.seqused_k;
  return p;
}

}  // namespace hopattn
