#include "api/problem_of.hpp"

#include <cmath>

#include "api/abi.hpp"

namespace hopattn {
namespace {

Strides strides_of(const hopattn_tensor& t) {
  return {t.batch_stride, t.seq_stride, t.head_stride};
}

SeqlenLayout fixed_layout(const hopattn_tensor& q, const hopattn_tensor& k) {
  SeqlenLayout layout;
  layout.batch = q.batch;
  layout.seqlen_q = layout.total_q = q.seqlen;
  layout.seqlen_k = layout.total_k = k.seqlen;
  return layout;
}

void set_varlen(const hopattn_varlen& varlen, SeqlenLayout& layout) {
  layout.batch = varlen.batch;
  layout.seqlen_q = varlen.max_seqlen_q;
  layout.seqlen_k = varlen.max_seqlen_k;
  layout.cu_seqlens_q = varlen.cu_seqlens_q;
  layout.cu_seqlens_k = varlen.cu_seqlens_k;
  layout.seqused_k = varlen.seqused_k;
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
  p.seqlens = fixed_layout(q, k);
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
  set_varlen(varlen, p.seqlens);
  return p;
}

BackwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k,
                           const hopattn_tensor& v, const hopattn_tensor& o,
                           const hopattn_tensor& d_o, const float* lse, const hopattn_tensor& dq,
                           const hopattn_tensor& dk, const hopattn_tensor& dv,
                           const hopattn_backward_options& options) {
  BackwardProblem p;
  p.dtype = dtype_of(q.dtype);
  p.seqlens = fixed_layout(q, k);
  p.heads_q = q.heads;
  p.heads_kv = k.heads;
  p.head_dim = q.head_dim;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.d_o = d_o.data;
  p.lse = lse;
  p.dq = dq.data;
  p.dk = dk.data;
  p.dv = dv.data;
  p.q_stride = strides_of(q);
  p.k_stride = strides_of(k);
  p.v_stride = strides_of(v);
  p.o_stride = strides_of(o);
  p.d_o_stride = strides_of(d_o);
  p.dq_stride = strides_of(dq);
  p.dk_stride = strides_of(dk);
  p.dv_stride = strides_of(dv);
  p.causal = options.causal != 0;
  p.softmax_scale = resolved_softmax_scale(options.softmax_scale, q.head_dim);
  p.deterministic = options.deterministic != 0;
  p.cuda_stream = options.cuda_stream;
  p.workspace = options.workspace;
  p.workspace_bytes = options.workspace != nullptr ? options.workspace_bytes : 0;
  return p;
}

BackwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k,
                           const hopattn_tensor& v, const hopattn_tensor& o,
                           const hopattn_tensor& d_o, const float* lse, const hopattn_tensor& dq,
                           const hopattn_tensor& dk, const hopattn_tensor& dv,
                           const hopattn_varlen& varlen, const hopattn_backward_options& options) {
  BackwardProblem p = problem_of(q, k, v, o, d_o, lse, dq, dk, dv, options);
  set_varlen(varlen, p.seqlens);
  return p;
}

Fp8Scales fp8_scales_of(const hopattn_fp8_scales& scales, const hopattn_tensor& t) {
  Fp8Scales s;
  s.data = scales.data;
  s.scaling = static_cast<Fp8Scaling>(enum_value(scales.scaling));
  s.heads = t.heads;
  const bool block = s.scaling == Fp8Scaling::kBlock;
  s.block_rows = block ? scales.block_rows : t.seqlen;
  s.blocks_per_head = block ? (t.seqlen - 1) / scales.block_rows + 1 : 1;
  return s;
}

Fp8ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_fp8_scales& q_scales,
                             const hopattn_tensor& k, const hopattn_fp8_scales& k_scales,
                             const hopattn_tensor& v, const hopattn_fp8_scales& v_scales,
                             const hopattn_tensor& o, float* lse,
                             const hopattn_forward_options& options) {
  Fp8ForwardProblem p;
  static_cast<ForwardProblem&>(p) = problem_of(q, k, v, o, lse, options);
  p.dtype = dtype_of(o.dtype);
  p.q_scales = fp8_scales_of(q_scales, q);
  p.k_scales = fp8_scales_of(k_scales, k);
  p.v_scales = fp8_scales_of(v_scales, v);
  p.v_layout = static_cast<Fp8Layout>(enum_value(options.fp8_v_layout));
  return p;
}

Fp8ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_fp8_scales& q_scales,
                             const hopattn_tensor& k, const hopattn_fp8_scales& k_scales,
                             const hopattn_tensor& v, const hopattn_fp8_scales& v_scales,
                             const hopattn_tensor& o, float* lse, const hopattn_varlen& varlen,
                             const hopattn_forward_options& options) {
  Fp8ForwardProblem p = problem_of(q, q_scales, k, k_scales, v, v_scales, o, lse, options);
  set_varlen(varlen, p.seqlens);
  return p;
}

}  // namespace hopattn
