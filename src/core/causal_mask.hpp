// Geometry of the causal mask, aligned to the bottom-right corner of the score matrix
// as FlashAttention 2 and 3 define it: query row i sees key j iff j <= i + seqlen_k - seqlen_q.
// With seqlen_q > seqlen_k the first seqlen_q - seqlen_k rows see no key at all.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace hopattn {

// One past the last key that query `row` may see (0 when it sees none):
// clamp(row + 1 + seqlen_k - seqlen_q, 0, seqlen_k), evaluated so that no intermediate overflows
// for any row, seqlen_q, seqlen_k >= 0 (a broadcast k of INT64_MAX rows, a padded row past
// seqlen_q). Rows from seqlen_q - 1 on see every key; before it, row + 1 - seqlen_q < 0, so the
// end lies below seqlen_k and only the clamp at 0 remains. The same values as the formula
// wherever the formula does not overflow.
HOPATTN_HOST_DEVICE int64_t causal_key_end(int64_t row, int64_t seqlen_q, int64_t seqlen_k) {
  if (row >= seqlen_q - 1) return seqlen_k;
  const int64_t end = seqlen_k - (seqlen_q - 1 - row);
  return end < 0 ? 0 : end;
}

// Keys [0, key_end) visible to query `row`, with or without the causal mask.
HOPATTN_HOST_DEVICE int64_t visible_key_end(bool causal, int64_t row, int64_t seqlen_q,
                                            int64_t seqlen_k) {
  return causal ? causal_key_end(row, seqlen_q, seqlen_k) : seqlen_k;
}

}  // namespace hopattn
