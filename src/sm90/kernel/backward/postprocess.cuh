// The backward's last kernel: dQ from the float32 accumulator the mainloop adds into.
#pragma once

#include <cute/tensor.hpp>

#include "core/seqlen.hpp"
#include "sm90/kernel/backward/workspace.hpp"

namespace hopattn::sm90 {

using namespace cute;

// One CTA per (query block, head, sequence): dQ = scale * the float32 accumulator, converted to
// the element type and stored with dq's strides, rows of the sequence only. The accumulator block
// lies in the order of the main kernel's dQ registers (Config::dq_accum_offset): thread t reads
// back what thread t of TiledMmadQ added, places it by TiledMmadQ's coordinates in a shared tile, and
// the tile leaves in 16-byte chunks of rows.
template <class Config>
struct BackwardPostprocess {
  using Element = typename Config::Element;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kThreads = Config::kNumMmaThreads;
  static constexpr int kChunk = 16 / sizeof(Element);
  static constexpr int kChunksPerRow = kHeadDim / kChunk;
  static constexpr int kRowPitch = kHeadDim + kChunk;  // elements; keeps rows 16-byte aligned

  struct Params {
    Element* dq;
    Strides dq_stride;
    SeqlenLayout seqlens;
    int heads_q, num_m_blocks;
    float softmax_scale;
    BackwardWorkspace workspace;
  };

  __device__ static void run(Params const& p) {
    __shared__ alignas(16) Element tile[kBlockM * kRowPitch];
    const int linear = int(blockIdx.x);
    const int m_block = linear % p.num_m_blocks;
    const int head = linear / p.num_m_blocks % p.heads_q;
    const int batch = linear / p.num_m_blocks / p.heads_q;
    const Sequence seq = backward_sequence_of(p.seqlens, batch);
    const int first_row = m_block * kBlockM;
    if (first_row >= seq.seqlen_q) return;
    const int rows = min(kBlockM, int(seq.seqlen_q) - first_row);
    float const* accum = p.workspace.dq_accum + p.workspace.row_index(seq, batch, head, first_row) * kHeadDim;

    const int thread = int(threadIdx.x);
    typename Config::TiledMmadQ mma_dq;
    Tensor coords =
        mma_dq.get_thread_slice(thread).partition_C(make_identity_tensor(typename Config::dQBlockShape{}));
    static_assert(decltype(size(coords))::value == Config::kdQAccumPerThread);
    CUTE_UNROLL
    for (int i = 0; i < Config::kdQAccumPerThread; i += 4) {
      const float4 v = *reinterpret_cast<float4 const*>(accum + Config::dq_accum_offset(thread, i));
      const float values[4] = {v.x, v.y, v.z, v.w};
      CUTE_UNROLL
      for (int j = 0; j < 4; ++j) {
        const auto [row, column] = Config::dq_row_column(coords(i + j));
        tile[row * kRowPitch + column] = Element(values[j] * p.softmax_scale);
      }
    }
    __syncthreads();
    for (int chunk = thread; chunk < rows * kChunksPerRow; chunk += kThreads) {
      const int row = chunk / kChunksPerRow, column = chunk % kChunksPerRow * kChunk;
      const uint4 bits = *reinterpret_cast<uint4 const*>(tile + row * kRowPitch + column);
      const int64_t offset = row_offset(p.dq_stride, seq.tensor_batch, seq.q_begin + first_row + row, head);
      *reinterpret_cast<uint4*>(p.dq + offset + column) = bits;
    }
  }
};

}  // namespace hopattn::sm90
