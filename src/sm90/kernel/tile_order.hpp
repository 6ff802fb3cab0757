// The order of a persistent grid's tiles: the linear list of (query block, head, batch) tiles that
// the schedulers (tile_scheduler.cuh) deal out, chosen for L2 and, where tiles differ in length,
// for the grid's tail. Host and device code: the launch builds it, the kernel reads it, and the CPU
// tests check it.
//
// Equal tiles (no mask): the query block is the fast index, so the CTAs resident at once cover the
// fewest (batch, head) pairs and stream each pair's K and V in lockstep, from DRAM once
// (FlashAttention-3's grid order; sections of several heads had twice the DRAM reads and 4-7% less
// speed, performance log v11).
//
// Tiles of unequal length (causal): pairs are grouped into sections whose K and V fill at most half
// of L2 together (one pair more, 32 MiB of the H200's 30, read 3-4% slower at head_dim 256, 4k and
// 16k tokens, net of the run's same-code rows: performance log, "sections within half of L2"), and
// inside a section the query block is the slow index and the head the fast one, so that later
// query blocks, which see more keys, come first (longest-processing-time first). The sections hold
// equal numbers of pairs, give or take one: a short last section would hold too little work to
// hide its own longest tiles, which it draws last of all (head_dim 256, 8k tokens, once made
// sections of 3, 3, 3, 3, 3 and 1 pairs: a tail of 15% of the kernel's time in
// bench/tile_tail_model.py, 8% measured; performance log, "the causal gap is the grid's tail"; now
// 3, 3, 3, 3, 2 and 2).
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace hopattn::sm90 {

struct TileCoord {
  int m_block, head, batch;
};

struct TileOrder {
  int num_m_blocks, heads, batch;
  // The first `wide_sections` sections hold section_pairs + 1 (batch, head) pairs, the others
  // section_pairs; equal tiles have sections of one pair.
  int section_pairs, wide_sections;
  int total_tiles;
  bool longest_first;

  // `kv_bytes_per_head`: the K and V bytes one (batch, head) streams; `l2_bytes`: the device's L2,
  // half of which the sections' K and V may take (the rest is for Q, O and other streams);
  // `longest_first`: tiles of unequal length, the later query blocks the longer.
  static TileOrder make(int num_m_blocks, int heads, int batch, int64_t kv_bytes_per_head,
                        int64_t l2_bytes, bool longest_first) {
    const int64_t pairs = int64_t(heads) * batch;
    int64_t per_section = 1;
    if (longest_first) {
      // The most pairs whose K and V fit in half of L2 (3.75 pairs' worth makes 3).
      per_section = kv_bytes_per_head > 0 ? l2_bytes / (2 * kv_bytes_per_head) : pairs;
      per_section = per_section < 1 ? 1 : (per_section > pairs ? pairs : per_section);
    }
    const int64_t sections = (pairs + per_section - 1) / per_section;
    return {num_m_blocks, heads, batch, int(pairs / sections), int(pairs % sections),
            num_m_blocks * heads * batch, longest_first};
  }

  HOPATTN_HOST_DEVICE TileCoord coord(int tile) const {
    // The wide sections first, then the others: find the tile's section, its first pair and size.
    const int wide_tiles = wide_sections * (section_pairs + 1) * num_m_blocks;
    const bool wide = tile < wide_tiles;
    const int pairs = wide ? section_pairs + 1 : section_pairs;
    const int from = wide ? tile : tile - wide_tiles;
    const int section = from / (pairs * num_m_blocks);
    const int first_pair = wide ? section * pairs : wide_sections * (section_pairs + 1) + section * pairs;
    const int in_section = from - section * pairs * num_m_blocks;
    const int m_rank = in_section / pairs;
    const int pair = first_pair + in_section % pairs;
    return {longest_first ? num_m_blocks - 1 - m_rank : m_rank, pair % heads, pair / heads};
  }
};

}  // namespace hopattn::sm90
