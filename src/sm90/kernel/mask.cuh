// Masking at two levels, both from core/causal_mask.hpp's geometry: which key blocks a query block
// visits at all (fully masked blocks are skipped, fully visible ones run unmasked), and which scores
// inside a boundary block are set to -inf.
#pragma once

#include <cute/tensor.hpp>

#include "core/causal_mask.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

template <int kBlockM, int kBlockN, bool kCausal>
struct BlockMask {
  int seqlen_q, seqlen_k;

  // Key blocks [0, end) hold every key some row of query block m_block sees.
  __device__ __forceinline__ int key_block_end(int m_block) const {
    const int last_row = min(seqlen_q, (m_block + 1) * kBlockM) - 1;
    const int key_end = int(visible_key_end(kCausal, last_row, seqlen_q, seqlen_k));
    return ceil_div(key_end, kBlockN);
  }

  // Key blocks [0, end) are visible to every row of query block m_block, so need no mask.
  __device__ __forceinline__ int unmasked_key_block_end(int m_block) const {
    const int key_end = int(visible_key_end(kCausal, m_block * kBlockM, seqlen_q, seqlen_k));
    return min(key_end, seqlen_k) / kBlockN;
  }

  // Sets the scores of keys a row does not see (beyond its causal limit or beyond seqlen_k) to -inf.
  // `coords` is the identity tensor of the (kBlockM, kBlockN) tile partitioned like `scores`.
  template <class TensorS, class TensorC>
  __device__ __forceinline__ void apply(TensorS& scores, TensorC const& coords, int m_block,
                                        int n_block) const {
    Tensor s = make_tensor(scores.data(), accumulator_rows_cols(scores.layout()));
    Tensor c = make_tensor(coords.data(), accumulator_rows_cols(coords.layout()));
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s); ++r) {
      const int row = m_block * kBlockM + get<0>(c(r, 0));
      const int key_end = int(visible_key_end(kCausal, row, seqlen_q, seqlen_k)) - n_block * kBlockN;
      CUTE_UNROLL
      for (int col = 0; col < size<1>(s); ++col) {
        if (get<1>(c(r, col)) >= key_end) s(r, col) = -INFINITY;
      }
    }
  }
};

}  // namespace hopattn::sm90
