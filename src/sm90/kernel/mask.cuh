// Masking at two levels, both from core/causal_mask.hpp's geometry: which key blocks a query block
// visits at all (fully masked blocks are skipped, fully visible ones run unmasked), and which scores
// inside a boundary block are set to -inf.
#pragma once

#include <cute/tensor.hpp>

#include "core/causal_mask.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

// kConstantColumns: apply() compares constant columns (thread_coords, wgmma.hpp).
template <int kBlockM, int kBlockN, bool kCausal, bool kShiftedKeys = false, bool kConstantColumns = true>
struct BlockMask {
  int seqlen_q, seqlen_k;
  // kShiftedKeys: the key blocks start key_shift keys before the sequence's first key (FP8 K block
  // scales with variable-length batches, mainloop.cuh), and those keys are masked too. Block n
  // then holds the sequence's keys [n * kBlockN - key_shift, (n + 1) * kBlockN - key_shift).
  int key_shift;

  __device__ __forceinline__ int shift() const { return kShiftedKeys ? key_shift : 0; }

  // Key blocks [0, end) hold every key some row of query block m_block sees; 0 when it sees none.
  __device__ __forceinline__ int key_block_end(int m_block) const {
    const int last_row = min(seqlen_q, (m_block + 1) * kBlockM) - 1;
    const int key_end = int(visible_key_end(kCausal, last_row, seqlen_q, seqlen_k));
    return key_end == 0 ? 0 : ceil_div(key_end + shift(), kBlockN);
  }

  // Key blocks [unmasked_key_block_begin(), unmasked_key_block_end(m_block)) are visible to every
  // row of query block m_block, so need no mask.
  __device__ __forceinline__ int unmasked_key_block_begin() const { return shift() > 0 ? 1 : 0; }
  __device__ __forceinline__ int unmasked_key_block_end(int m_block) const {
    const int key_end = int(visible_key_end(kCausal, m_block * kBlockM, seqlen_q, seqlen_k));
    return (min(key_end, seqlen_k) + shift()) / kBlockN;
  }

  // Sets the scores of keys a row does not see (beyond its causal limit or beyond seqlen_k, and
  // before the sequence) to -inf. `coords` is the identity tensor of the (kBlockM, kBlockN) tile
  // partitioned like `scores`. With kConstantColumns each row's limits are taken less the thread's
  // first column, so that each score compares a constant column (compared as they came, the columns
  // made head_dim 64 causal's masked step 903 instructions against 445 unmasked).
  template <class TensorS, class TensorC>
  __device__ __forceinline__ void apply(TensorS& scores, TensorC const& coords, int m_block,
                                        int n_block) const {
    Tensor s = make_tensor(scores.data(), accumulator_rows_cols(scores.layout()));
    const auto c = thread_coords<kConstantColumns>(make_tensor(coords.data(), accumulator_rows_cols(coords.layout())));
    // The sequence's key under column c.first_col (the thread's first with kConstantColumns, else
    // the block's first): key_end and the sequence's start are counted from it.
    const int thread_first_key = n_block * kBlockN - shift() + c.first_col;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s); ++r) {
      const int row = m_block * kBlockM + c.first_row + get<0>(c.coords(r, 0));
      const int key_end = int(visible_key_end(kCausal, row, seqlen_q, seqlen_k)) - thread_first_key;
      CUTE_UNROLL
      for (int col = 0; col < size<1>(s); ++col) {
        const int column = get<1>(c.coords(r, col));
        if (column >= key_end || (kShiftedKeys && column < -thread_first_key)) s(r, col) = -INFINITY;
      }
    }
  }
};

}  // namespace hopattn::sm90
