// The problems every backend sees after validation, one struct per operation (forward, backward;
// FP8 and KV-cache later): shapes, the sequence layout, strides, pointers and the
// resolved options. Built by api/ from the C arguments; core/ knows nothing of the C ABI.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/fp8_layout.hpp"
#include "core/seqlen.hpp"
#include "core/types.hpp"

namespace hopattn {

struct ForwardProblem {
  DType dtype = DType::kFloat32;
  SeqlenLayout seqlens;
  int64_t heads_q = 0, heads_kv = 0;
  int64_t head_dim = 0;

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // lse_index() addresses it, or null
  Strides q_stride, k_stride, v_stride, o_stride;

  bool causal = false;
  float softmax_scale = 0.f;  // resolved: never the "0 = default" sentinel
  void* cuda_stream = nullptr;
  void* workspace = nullptr;  // the caller's, or null: the backend allocates what it needs
  size_t workspace_bytes = 0;

  int64_t heads_per_kv_head() const { return heads_q / heads_kv; }
  // Forward FLOPs of a fixed-length problem (see sequence_forward_flops).
  double flops() const;
};

// The gradients of a forward pass: from q, k, v, the forward's o and lse and the output gradient
// d_o, the gradients dq, dk, dv (GQA: dk and dv summed over the query heads of each kv head).
// lse is required: the backward recomputes P = exp(scale * QK^T - lse) from it.
struct BackwardProblem {
  DType dtype = DType::kFloat32;
  SeqlenLayout seqlens;
  int64_t heads_q = 0, heads_kv = 0;
  int64_t head_dim = 0;

  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const float* lse = nullptr;  // lse_index() addresses it
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  Strides q_stride, k_stride, v_stride, o_stride, d_o_stride, dq_stride, dk_stride, dv_stride;

  bool causal = false;
  float softmax_scale = 0.f;   // resolved: never the "0 = default" sentinel
  bool deterministic = false;  // bitwise-identical gradients run to run
  void* cuda_stream = nullptr;
  void* workspace = nullptr;  // the caller's, or null: the backend allocates what it needs
  size_t workspace_bytes = 0;

  int64_t heads_per_kv_head() const { return heads_q / heads_kv; }
  // Backward FLOPs of a fixed-length problem: 2.5 times the forward's (five matrix products
  // against the forward's two), the convention of FlashAttention's benchmarks.
  double flops() const;
};

// FP8 quantisation (hopattn_quantize_fp8): x (any attention dtype) rotated if `hadamard`, then
// divided by one scale per block and rounded to e4m3 into out. Blocks are `block_rows` rows of one
// (batch, head) (for kTensor and kHead: all seqlen rows), and scales holds
// scale_count() floats in the layout of `scaling`.
struct QuantizeProblem {
  DType dtype = DType::kFloat32;  // x's
  int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  const void* x = nullptr;
  void* out = nullptr;  // float8_e4m3
  float* scales = nullptr;
  Strides x_stride, out_stride;

  Fp8Scaling scaling = Fp8Scaling::kBlock;
  int64_t block_rows = 0;  // rows of one scale block: options->block_rows, or seqlen
  // kVTransposed: out is VTransposedLayout::of(seqlen, heads, head_dim) (out_stride unused), its
  // positions past seqlen written as zero codes.
  Fp8Layout out_layout = Fp8Layout::kRows;
  bool hadamard = false;
  uint64_t seed = 0;
  void* cuda_stream = nullptr;

  // ceil(seqlen / block_rows), written so that no block_rows up to INT64_MAX overflows.
  int64_t blocks_per_head() const { return seqlen <= 0 ? 0 : (seqlen - 1) / block_rows + 1; }
  int64_t scale_count() const {
    return scaling == Fp8Scaling::kTensor ? 1
           : scaling == Fp8Scaling::kHead ? batch * heads
                                          : batch * heads * blocks_per_head();
  }
};

// The scales of one e4m3 tensor of `heads` heads (hopattn_fp8_scales): element (b, row, h, i) of
// the tensor stands for e4m3(code) * data[index(b, h, row)]. `row` counts the tensor's rows (for
// a packed varlen tensor, rows of the one batch entry), the layout hopattn_quantize_fp8 writes.
struct Fp8Scales {
  const float* data = nullptr;
  Fp8Scaling scaling = Fp8Scaling::kTensor;
  int64_t block_rows = 0;       // kBlock: rows per scale
  int64_t heads = 0;            // of the tensor
  int64_t blocks_per_head = 0;  // kBlock: ceil(rows / block_rows); 1 otherwise

  // The one definition of a scale's address, read by both backends and the tests: the first scale
  // of (b, head) plus the block of the row, block_of(row) = row / block_rows for kBlock, else 0
  // (the SM90 kernel computes that division with a precomputed reciprocal: rows_per_scale()).
  HOPATTN_HOST_DEVICE int64_t index(int64_t b, int64_t head, int64_t row) const {
    return head_first(b, head) + (scaling == Fp8Scaling::kBlock ? row / block_rows : 0);
  }
  HOPATTN_HOST_DEVICE int64_t head_first(int64_t b, int64_t head) const {
    if (scaling == Fp8Scaling::kTensor) return 0;
    const int64_t head_index = b * heads + head;
    return scaling == Fp8Scaling::kHead ? head_index : head_index * blocks_per_head;
  }
  // The divisor of block_of: block_rows for kBlock; for the others INT32_MAX, which no 32-bit row
  // index (the SM90 kernel's) reaches, so that the quotient is always 0.
  HOPATTN_HOST_DEVICE int64_t rows_per_scale() const {
    return scaling == Fp8Scaling::kBlock ? block_rows : int64_t(2147483647);
  }
};

// Attention on e4m3 inputs (hopattn_forward_fp8): q, k and v of the ForwardProblem hold e4m3
// codes, dequantised by their scales; `dtype` is o's (bfloat16 or float16), and the problem's
// softmax_scale that of the dequantised (and, for q and k, possibly rotated) inputs.
struct Fp8ForwardProblem : ForwardProblem {
  Fp8Scales q_scales, k_scales, v_scales;
  // kVTransposed: v is VTransposedLayout::of(seqlens.total_k, heads_kv, head_dim) (v_stride unused).
  Fp8Layout v_layout = Fp8Layout::kRows;
};

// FLOPs of the two matrix products of one sequence of one head, counting only unmasked scores.
double sequence_forward_flops(bool causal, int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim);

}  // namespace hopattn
