// From the C arguments of a forward, backward or FP8 forward call to the ForwardProblem /
// BackwardProblem / Fp8ForwardProblem the backends read: the one place that maps hopattn_tensor / hopattn_varlen / the options onto core/
// and resolves the default softmax scale. It checks nothing: the API validates first (validate.hpp); the tests and
// tools build their own well-formed calls. Compiled into the library and, for them, into the
// hopattn_reference library.
#pragma once

#include <cstdint>

#include "core/problem.hpp"
#include "hopattn/hopattn.h"

namespace hopattn {

// The scale of a call: `requested`, or 1/sqrt(head_dim) for the sentinel 0.
float resolved_softmax_scale(float requested, int64_t head_dim);

// hopattn_forward(q, k, v, o, lse, &options). `options` is complete (struct_size is not read).
ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                          const hopattn_tensor& o, float* lse,
                          const hopattn_forward_options& options);

// hopattn_forward_varlen(q, k, v, o, lse, &varlen, &options): tensor batch 1, the sequences as
// varlen describes them.
ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                          const hopattn_tensor& o, float* lse, const hopattn_varlen& varlen,
                          const hopattn_forward_options& options);

// hopattn_backward(q, k, v, o, d_o, lse, dq, dk, dv, &options). `options` is complete.
BackwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k,
                           const hopattn_tensor& v, const hopattn_tensor& o,
                           const hopattn_tensor& d_o, const float* lse, const hopattn_tensor& dq,
                           const hopattn_tensor& dk, const hopattn_tensor& dv,
                           const hopattn_backward_options& options);

// hopattn_backward_varlen(..., &varlen, &options).
BackwardProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k,
                           const hopattn_tensor& v, const hopattn_tensor& o,
                           const hopattn_tensor& d_o, const float* lse, const hopattn_tensor& dq,
                           const hopattn_tensor& dk, const hopattn_tensor& dv,
                           const hopattn_varlen& varlen, const hopattn_backward_options& options);

// The scales of tensor t (hopattn_fp8_scales) as core/ reads them: heads of t, blocks_per_head
// ceil(t.seqlen / block_rows) for HOPATTN_FP8_SCALE_BLOCK (without overflow), 1 otherwise, and
// block_rows t.seqlen for the layouts that cover whole heads (as QuantizeProblem's).
Fp8Scales fp8_scales_of(const hopattn_fp8_scales& scales, const hopattn_tensor& t);

// hopattn_forward_fp8(q, &q_scales, k, &k_scales, v, &v_scales, o, lse, &options): the forward's
// problem with dtype o's, each tensor's scales and v's layout (options.fp8_v_layout).
Fp8ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_fp8_scales& q_scales,
                             const hopattn_tensor& k, const hopattn_fp8_scales& k_scales,
                             const hopattn_tensor& v, const hopattn_fp8_scales& v_scales,
                             const hopattn_tensor& o, float* lse,
                             const hopattn_forward_options& options);

// hopattn_forward_fp8_varlen(..., o, lse, &varlen, &options): the same, the sequences as varlen
// describes them in the packed tensors, whose rows the scales count.
Fp8ForwardProblem problem_of(const hopattn_tensor& q, const hopattn_fp8_scales& q_scales,
                             const hopattn_tensor& k, const hopattn_fp8_scales& k_scales,
                             const hopattn_tensor& v, const hopattn_fp8_scales& v_scales,
                             const hopattn_tensor& o, float* lse, const hopattn_varlen& varlen,
                             const hopattn_forward_options& options);

}  // namespace hopattn
