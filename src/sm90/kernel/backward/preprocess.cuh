// The backward's first kernel, one CTA per (query block, head, sequence): D = rowsum(dO * O) and
// the LSE in base 2 into the workspace, and the float32 dQ accumulator and the semaphores of the
// block cleared. Padding rows (past the sequence) get D = 0 and LSE = +inf, so that P = 0 there;
// so does a row that saw no key in the forward (LSE = -inf, O = 0): its gradients are 0.
#pragma once

#include <cute/tensor.hpp>

#include "core/seqlen.hpp"
#include "core/softmax_math.hpp"
#include "sm90/kernel/backward/workspace.hpp"

namespace hopattn::sm90 {

template <class Element, int kHeadDim, int kBlockM>
struct BackwardPreprocess {
  static constexpr int kThreads = 256;
  static constexpr int kChunk = 16 / sizeof(Element);  // elements per 16-byte load
  static constexpr int kChunksPerRow = kHeadDim / kChunk;
  static_assert(kChunksPerRow <= 32, "a warp reduces one row");

  struct Params {
    Element const* o;
    Element const* d_o;
    float const* lse;
    Strides o_stride, d_o_stride;
    SeqlenLayout seqlens;
    int heads_q, num_m_blocks;
    BackwardWorkspace workspace;
  };

  __device__ static void run(Params const& p) {
    const int linear = int(blockIdx.x);
    const int m_block = linear % p.num_m_blocks;
    const int head = linear / p.num_m_blocks % p.heads_q;
    const int batch = linear / p.num_m_blocks / p.heads_q;
    const Sequence seq = backward_sequence_of(p.seqlens, batch);
    const int first_row = m_block * kBlockM;
    if (first_row >= seq.seqlen_q) return;
    BackwardWorkspace const& ws = p.workspace;
    const int64_t first = ws.row_index(seq, batch, head, first_row);

    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    for (int r = warp; r < kBlockM; r += kThreads / 32) {
      const int row = first_row + r;
      const bool valid = row < seq.seqlen_q;
      float sum = 0.f;
      if (valid && lane < kChunksPerRow) {
        const int64_t o_offset = row_offset(p.o_stride, seq.tensor_batch, seq.q_begin + row, head) + lane * kChunk;
        const int64_t d_o_offset = row_offset(p.d_o_stride, seq.tensor_batch, seq.q_begin + row, head) + lane * kChunk;
        const uint4 o_bits = *reinterpret_cast<uint4 const*>(p.o + o_offset);
        const uint4 d_o_bits = *reinterpret_cast<uint4 const*>(p.d_o + d_o_offset);
        Element const* o = reinterpret_cast<Element const*>(&o_bits);
        Element const* d_o = reinterpret_cast<Element const*>(&d_o_bits);
        CUTE_UNROLL
        for (int i = 0; i < kChunk; ++i) sum += float(o[i]) * float(d_o[i]);
      }
      CUTE_UNROLL
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
      if (lane == 0) {
        ws.dpsum[first + r] = valid ? sum : 0.f;
        float lse_log2 = INFINITY;
        if (valid) {
          const float lse = p.lse[lse_index(p.seqlens, seq, p.heads_q, head, row)];
          lse_log2 = lse == -INFINITY ? INFINITY : lse * kLog2e;
        }
        ws.lse_log2[first + r] = lse_log2;
      }
    }
    float4* accum = reinterpret_cast<float4*>(ws.dq_accum + first * kHeadDim);
    for (int i = int(threadIdx.x); i < kBlockM * kHeadDim / 4; i += kThreads) accum[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (ws.semaphores != nullptr && threadIdx.x == 0) ws.semaphores[first / kBlockM] = 0;
  }
};

// The launch of either row kernel (this one or BackwardPostprocess).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads) backward_rows_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  Kernel::run(params);
}

}  // namespace hopattn::sm90
