// The CPU backend: the tiled online-softmax algorithm of the GPU kernels, multithreaded over
// (sequence, head, query block), float32 accumulation; and its backward pass, deterministic.
// Fixed-length and variable-length batches alike, through core/seqlen.hpp.
#pragma once

#include <cstdint>

#include "core/problem.hpp"

namespace hopattn::cpu {

// Any dtype; head_dim up to kMaxHeadDim, a bound that keeps a query block's float32 tiles
// (Q, O, and a K and V block) within a core's L2 cache.
constexpr int64_t kMaxHeadDim = 512;

bool supports(DType dtype, int64_t head_dim);
// Threads a forward call runs on: the caller plus a pool sized to the hardware.
int worker_count();
// Needs no workspace (each thread keeps its own tiles). Varlen metadata must be host memory,
// checked by the API.
Status forward(const ForwardProblem& problem);
// dq, dk and dv from the forward's o and lse (FlashAttention's backward: P recomputed from the
// LSE, D = rowsum(dO * O)). Two passes over the thread pool, dk/dv per (sequence, kv head, key
// block) and then dq per (sequence, query head, query block), so that every output row is
// written by one task in a fixed order: bitwise-identical results run to run, whatever the
// thread count's scheduling. Needs no workspace; varlen metadata host memory, checked by the API.
Status backward(const BackwardProblem& problem);
// FP8 quantisation (hopattn_quantize_fp8) of a validated problem, multithreaded over
// (batch, head); deterministic. Needs no workspace beyond one float32 amax per scale block.
Status quantize_fp8(const QuantizeProblem& problem);

// FP8 attention (hopattn_forward_fp8) of a validated problem: q, k and v dequantised to float32
// (code * scale) and run through forward()'s algorithm; any head_dim up to kMaxHeadDim, any scale
// layout; no rounding of P (the SM90 kernel's one difference in numerics).
Status forward_fp8(const Fp8ForwardProblem& problem);

}  // namespace hopattn::cpu
