// The backward's last kernel: dQ from the float32 accumulator the mainloop adds into.
#pragma once

#include <cute/tensor.hpp>

#include "core/seqlen.hpp"
#include "sm90/kernel/backward/workspace.hpp"

namespace hopattn::sm90 {

// One CTA per (query block, head, sequence): dQ = scale * the float32 accumulator, converted to
// the element type and stored with dq's strides, rows of the sequence only.
template <class Element, int kHeadDim, int kBlockM>
struct BackwardPostprocess {
  static constexpr int kThreads = 256;
  static constexpr int kChunk = 16 / sizeof(Element);
  static constexpr int kChunksPerRow = kHeadDim / kChunk;

  struct Params {
    Element* dq;
    Strides dq_stride;
    SeqlenLayout seqlens;
    int heads_q, num_m_blocks;
    float softmax_scale;
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
    const int rows = min(kBlockM, int(seq.seqlen_q) - first_row);
    float const* accum = p.workspace.dq_accum + p.workspace.row_index(seq, batch, head, first_row) * kHeadDim;
    for (int chunk = int(threadIdx.x); chunk < rows * kChunksPerRow; chunk += kThreads) {
      const int row = chunk / kChunksPerRow, column = chunk % kChunksPerRow * kChunk;
      float values[kChunk];
      CUTE_UNROLL
      for (int i = 0; i < kChunk; i += 4) {
        const float4 v = *reinterpret_cast<float4 const*>(accum + row * kHeadDim + column + i);
        values[i] = v.x, values[i + 1] = v.y, values[i + 2] = v.z, values[i + 3] = v.w;
      }
      uint4 bits;
      Element* out = reinterpret_cast<Element*>(&bits);
      CUTE_UNROLL
      for (int i = 0; i < kChunk; ++i) out[i] = Element(values[i] * p.softmax_scale);
      const int64_t offset = row_offset(p.dq_stride, seq.tensor_batch, seq.q_begin + first_row + row, head);
      *reinterpret_cast<uint4*>(p.dq + offset + column) = bits;
    }
  }
};

}  // namespace hopattn::sm90
