// The attention problem as every backend sees it: shapes, strides, pointers and the
// resolved softmax scale, after validation. One definition for the CPU and GPU paths.
#pragma once

#include <cstdint>

#include "hopattn/hopattn.h"

namespace hopattn {

// Strides in elements of a (batch, seqlen, heads, head_dim) tensor; head_dim is unit-stride.
struct Strides {
  int64_t batch = 0, seq = 0, head = 0;
};

struct AttentionProblem {
  hopattn_dtype dtype = HOPATTN_DTYPE_FLOAT32;
  int64_t batch = 0;
  int64_t seqlen_q = 0, seqlen_k = 0;
  int64_t heads_q = 0, heads_kv = 0;
  int64_t head_dim = 0;

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // (batch, heads_q, seqlen_q) contiguous, or null
  Strides q_stride, k_stride, v_stride, o_stride;

  bool causal = false;
  float softmax_scale = 0.f;  // resolved: never the "0 = default" sentinel
  void* cuda_stream = nullptr;

  int64_t heads_per_kv_head() const { return heads_q / heads_kv; }
  // Forward FLOPs of the two matrix products, counting only unmasked scores.
  double flops() const;
};

// The problem the C API call (q, k, v, o, lse, options) describes, with the softmax scale resolved
// (0 means 1/sqrt(head_dim)). It checks nothing: the API validates first; tests and tools build
// their own well-formed calls.
AttentionProblem problem_of(const hopattn_tensor& q, const hopattn_tensor& k, const hopattn_tensor& v,
                            const hopattn_tensor& o, float* lse,
                            const hopattn_forward_options& options);

inline int64_t lse_offset(const AttentionProblem& p, int64_t b, int64_t h, int64_t row) {
  return (b * p.heads_q + h) * p.seqlen_q + row;
}

}  // namespace hopattn
