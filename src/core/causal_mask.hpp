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

// The same rule inside one tile of block_rows queries from first_row and block_keys keys from
// first_key, in the tile's own coordinates: key r (0 <= r < block_keys) is visible to query d
// (0 <= d < block_rows) iff r < key_end(d) = min(key_limit, diagonal + d). Both limits are clamped
// to what a tile can compare, so that they and the per-score test are 32-bit (a kernel that held a
// 64-bit key end per query column paid for it in registers), and evaluated without overflow for
// any lengths and positions >= 0.
struct TileVisibility {
  int key_limit, diagonal, block_keys;
  // Query d sees the tile's keys [0, key_end(d)).
  HOPATTN_HOST_DEVICE int key_end(int d) const {
    return key_limit < diagonal + d ? key_limit : diagonal + d;
  }
  HOPATTN_HOST_DEVICE bool visible(int r, int d) const { return r < key_end(d); }
  // Every score of the tile is visible: no mask needed.
  HOPATTN_HOST_DEVICE bool all_visible() const { return key_limit == block_keys && diagonal >= block_keys; }
};

HOPATTN_HOST_DEVICE TileVisibility tile_visibility(bool causal, int64_t first_row, int64_t first_key, int block_rows,
                                                   int block_keys, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t keys_left = seqlen_k - first_key;  // both >= 0: no overflow
  TileVisibility t;
  t.block_keys = block_keys;
  t.key_limit = int(keys_left < 0 ? 0 : keys_left > block_keys ? block_keys : keys_left);
  // Rows from seqlen_q - 1 on see every key; before it, row d's causal end is
  // keys_left - (rows_to_last - d) keys into the tile, both terms >= 0.
  const int64_t rows_to_last = seqlen_q - 1 - first_row;
  t.diagonal = block_keys;
  if (causal && rows_to_last > 0) {
    const int64_t diagonal = (keys_left < 0 ? 0 : keys_left) - rows_to_last;
    t.diagonal = int(diagonal < -block_rows ? -block_rows : diagonal > block_keys ? block_keys : diagonal);
  }
  return t;
}

// The first tile of block_rows queries (tile m from row m * block_rows) from which on every tile
// against the block_keys keys from first_key is all visible (TileVisibility::all_visible), or
// INT64_MAX when none is: the keys run past seqlen_k. Without the mask that is tile 0; with it,
// the first tile whose first row sees the block's last key, m * block_rows >= seqlen_q - 1 -
// (keys_left - block_keys), rounded up. No overflow for any lengths and first_key >= 0.
HOPATTN_HOST_DEVICE int64_t first_unmasked_row_block(bool causal, int64_t first_key, int block_rows, int block_keys,
                                                     int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t keys_left = seqlen_k - first_key;
  if (keys_left < block_keys) return INT64_MAX;
  if (!causal) return 0;
  const int64_t rows = seqlen_q - 1 - (keys_left - block_keys);  // both terms >= 0
  return rows <= 0 ? 0 : rows / block_rows + (rows % block_rows != 0);
}

// Score cells a forward computes over (seqlen_q, seqlen_k) with tiles of block_rows queries and
// block_keys keys: every query block computes whole tiles, of each key block that some row of it
// sees (the kernels' key_block_end), its rows past seqlen_q included. Against the seqlen_q x
// seqlen_k (or, causal, the visible) cells, the waste of a tile shape: the last query block's
// padding and the masked part of the causal diagonal's blocks.
inline int64_t computed_score_cells(bool causal, int64_t seqlen_q, int64_t seqlen_k, int block_rows,
                                    int block_keys) {
  const int64_t query_blocks = (seqlen_q + block_rows - 1) / block_rows;
  const int64_t tile_cells = int64_t(block_rows) * block_keys;
  if (!causal) return query_blocks * ((seqlen_k + block_keys - 1) / block_keys) * tile_cells;
  int64_t cells = 0;
  for (int64_t m = 0; m < query_blocks; ++m) {
    const int64_t last_row = (m + 1) * block_rows < seqlen_q ? (m + 1) * block_rows - 1 : seqlen_q - 1;
    cells += (causal_key_end(last_row, seqlen_q, seqlen_k) + block_keys - 1) / block_keys * tile_cells;
  }
  return cells;
}

}  // namespace hopattn
