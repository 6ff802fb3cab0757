// One backward CTA's work: a key block of one kv head of one sequence, the query blocks that see
// it (core/causal_mask.hpp's geometry, read from the key side) and the mask of the scores inside
// a boundary block. Every role computes the same KeyBlockWork from blockIdx alone, through the
// grid's tile order.
#pragma once

#include <cute/tensor.hpp>

#include "core/causal_mask.hpp"
#include "core/seqlen.hpp"
#include "sm90/kernel/tile_order.hpp"
#include "sm90/kernel/backward/workspace.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

// blockIdx.x indexes the tile order (tile_order.hpp) of (key block, kv head, sequence): without a
// mask the key block is the fastest index; with the causal mask the first key blocks, which the
// most query blocks see, of a section of pairs come first. Either way a pair's key blocks start in
// order, and the deterministic dQ accumulation, which waits on lower key blocks only, waits on
// CTAs that have started before.
template <int kBlockM, int kBlockN, bool kCausal>
struct KeyBlockWork {
  int n_block, head_kv, batch;
  Sequence seq;
  int64_t key_rows;    // keys whose dK and dV this kernel stores: seq.seqlen_k, then zeros up to here
  int m_begin, m_end;  // query blocks [m_begin, m_end) see some key of this block
  int unmasked_m_begin;  // query blocks from here on see every key of this block: no mask
  int group;           // query heads per kv head: each is a further pass over the query blocks

  __device__ KeyBlockWork(SeqlenLayout const& seqlens, TileOrder const& order, int heads_per_kv_head) {
    const PairBlock block = order.coord(int(blockIdx.x));
    n_block = block.block;
    head_kv = block.head;
    batch = block.batch;
    group = heads_per_kv_head;
    seq = backward_sequence_of(seqlens, batch);
    key_rows = backward_key_rows(seqlens, seq, batch);
    m_end = int(ceil_div(seq.seqlen_q, int64_t(kBlockM)));
    m_begin = 0;
    if constexpr (kCausal) {
      // Query i sees key j iff j <= i + seqlen_k - seqlen_q: the block's first key is seen from
      // row first_key - seqlen_k + seqlen_q on, and so is every later row.
      const int64_t first_row = int64_t(n_block) * kBlockN - seq.seqlen_k + seq.seqlen_q;
      m_begin = first_row <= 0 ? 0 : int(first_row >= seq.seqlen_q ? m_end : first_row / kBlockM);
    }
    const int64_t unmasked = first_unmasked_row_block(kCausal, int64_t(n_block) * kBlockN, kBlockM, kBlockN,
                                                      seq.seqlen_q, seq.seqlen_k);
    unmasked_m_begin = unmasked >= m_end ? m_end : int(unmasked);
  }

  // Some key of this block has gradients (lies below seqused_k).
  __device__ bool has_keys() const { return int64_t(n_block) * kBlockN < seq.seqlen_k; }
  // Some key of this block has rows to store (zeros past seqused_k).
  __device__ bool has_rows() const { return int64_t(n_block) * kBlockN < key_rows; }
  __device__ int query_blocks() const { return m_end > m_begin ? m_end - m_begin : 0; }
  // Steps over (query head of the group, query block), the query block fastest.
  __device__ int steps() const { return has_keys() ? group * query_blocks() : 0; }
  __device__ int head_of_step(int step) const { return head_kv * group + step / query_blocks(); }
  __device__ int m_block_of_step(int step) const { return m_begin + step % query_blocks(); }

  // Some score of (m_block, this key block) is hidden: visibility() tells which.
  __device__ bool needs_mask(int m_block) const { return m_block < unmasked_m_begin; }
  // Which scores of (m_block, this key block) are visible: past the sequence's keys and past the
  // causal limit they are not. Queries past the sequence need no mask: their LSE is +inf in the
  // workspace, so P = 0.
  __device__ TileVisibility visibility(int m_block) const {
    return tile_visibility(kCausal, int64_t(m_block) * kBlockM, int64_t(n_block) * kBlockN, kBlockM, kBlockN,
                           seq.seqlen_q, seq.seqlen_k);
  }

  // Sets to -inf the transposed scores (keys x queries) that `tile` does not show. `coords` is the
  // identity tensor of the (kBlockN, kBlockM) tile partitioned like `scores_t`.
  template <class TensorS, class TensorC>
  __device__ __forceinline__ static void apply_mask(TensorS& scores_t, TensorC const& coords,
                                                    TileVisibility const& tile) {
    Tensor s = make_tensor(scores_t.data(), accumulator_rows_cols(scores_t.layout()));
    Tensor c = make_tensor(coords.data(), accumulator_rows_cols(coords.layout()));
    CUTE_UNROLL
    for (int col = 0; col < size<1>(s); ++col) {
      const int key_end = tile.key_end(get<1>(c(0, col)));
      CUTE_UNROLL
      for (int r = 0; r < size<0>(s); ++r) {
        if (get<0>(c(r, col)) >= key_end) s(r, col) = -INFINITY;
      }
    }
  }
};

}  // namespace hopattn::sm90
