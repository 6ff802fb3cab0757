// The order of a grid's tiles: the linear list of (block, head, batch) tiles, chosen for L2 and,
// where tiles differ in length, for the grid's tail. The forward's persistent schedulers
// (tile_scheduler.cuh) deal out (query block, head, batch) tiles in this order; the backward's grid
// (one CTA per key block) takes (key block, kv head, batch) CTAs in it, blockIdx.x being the
// index. Host and device code: the launch builds it, the kernel reads it, and the CPU tests check
// it.
//
// Equal tiles (no mask): the block is the fast index, so the CTAs resident at once cover the
// fewest (batch, head) pairs and stream what the pair's blocks share (the forward's K and V, the
// backward's Q, dO and dQ accumulator) in lockstep, from DRAM once (FlashAttention-3's grid order;
// sections of several heads had twice the DRAM reads and 4-7% less speed, performance log v11).
//
// Tiles of unequal length (causal): pairs are grouped into sections whose shared streams fit in
// the caller's share of L2 together (the forward: half, since one pair more, 32 MiB of the H200's
// 30, read 3-4% slower at head_dim 256, 4k and 16k tokens, net of the run's same-code rows:
// performance log, "sections within half of L2"; the backward: two thirds, FlashAttention-3's
// 40 MB), and inside a section the block is the slow index and the head the fast one, the
// longest blocks first (longest-processing-time first): the forward's last query blocks, which
// see the most keys, the backward's first key blocks, which the most queries see. The sections
// hold equal numbers of pairs, give or take one: a short last section would hold too little work
// to hide its own longest tiles, which it draws last of all (head_dim 256, 8k tokens, once made
// sections of 3, 3, 3, 3, 3 and 1 pairs: a tail of 15% of the kernel's time in
// bench/tile_tail_model.py, 8% measured; performance log, "the causal gap is the grid's tail"; now
// 3, 3, 3, 3, 2 and 2).
#pragma once

#include <cstdint>

#include "core/fast_divisor.hpp"
#include "core/host_device.hpp"

namespace hopattn::sm90 {

// Which block of a (batch, head) pair takes longest.
enum class LongestBlock {
  kNone,   // equal tiles
  kLast,   // the forward's causal query blocks
  kFirst,  // the backward's causal key blocks
};

// One block of one (batch, head) pair: a query block in the forward, a key block in the backward.
struct PairBlock {
  int block, head, batch;
};

// The callers' shares of L2 for a causal section's shared streams (the reasons above).
constexpr int64_t forward_section_bytes(int64_t l2_bytes) { return l2_bytes / 2; }
constexpr int64_t backward_section_bytes(int64_t l2_bytes) { return l2_bytes * 2 / 3; }

struct TileOrder {
  int num_blocks, heads, batch;
  // The first `wide_sections` sections hold section_pairs + 1 (batch, head) pairs, the others
  // section_pairs; equal tiles have sections of one pair.
  int section_pairs, wide_sections;
  int total_tiles;
  LongestBlock longest;
  // The tiles of all wide sections, which come first.
  int wide_tiles;
  // coord's divisions, by the tiles and the pairs of a wide and of another section, and by the
  // heads: fixed at the launch (FastDivisor; as runtime divisions they cost a tile's start some
  // hundreds of cycles, performance log 2026-12-05 sixth).
  FastDivisor wide_section_tiles, section_tiles, wide_section_pairs, section_pairs_divisor, heads_divisor;

  // `pair_bytes`: what the blocks of one (batch, head) pair stream and share; `section_bytes`: how
  // much of it a section's pairs may hold together (the caller's share of L2).
  static TileOrder make(int num_blocks, int heads, int batch, int64_t pair_bytes, int64_t section_bytes,
                        LongestBlock longest) {
    const int64_t pairs = int64_t(heads) * batch;
    int64_t per_section = 1;
    if (longest != LongestBlock::kNone) {
      // The most pairs that fit (3.75 pairs' worth makes 3).
      per_section = pair_bytes > 0 ? section_bytes / pair_bytes : pairs;
      per_section = per_section < 1 ? 1 : (per_section > pairs ? pairs : per_section);
    }
    const int64_t sections = (pairs + per_section - 1) / per_section;
    const int pairs_per_section = int(pairs / sections), wide = int(pairs % sections);
    // A wide section's tiles are at most the grid's, so their count fits an int where one exists;
    // without wide sections it is never divided by (and one section of every pair could overflow it).
    const int wide_section_tile_count = wide > 0 ? (pairs_per_section + 1) * num_blocks : 1;
    return {num_blocks, heads, batch, pairs_per_section, wide, num_blocks * heads * batch, longest,
            wide * wide_section_tile_count, FastDivisor(wide_section_tile_count),
            FastDivisor(pairs_per_section * num_blocks), FastDivisor(pairs_per_section + 1),
            FastDivisor(pairs_per_section), FastDivisor(heads)};
  }

  HOPATTN_HOST_DEVICE PairBlock coord(int tile) const {
    // The wide sections first, then the others: find the tile's section, its first pair and size.
    const bool wide = tile < wide_tiles;
    const int pairs = wide ? section_pairs + 1 : section_pairs;
    const int from = wide ? tile : tile - wide_tiles;
    int section, in_section, rank, pair_in_section, batch_index, head;
    (wide ? wide_section_tiles : section_tiles).divmod(from, section, in_section);
    (wide ? wide_section_pairs : section_pairs_divisor).divmod(in_section, rank, pair_in_section);
    const int first_pair = wide ? section * pairs : wide_sections * (section_pairs + 1) + section * pairs;
    heads_divisor.divmod(first_pair + pair_in_section, batch_index, head);
    return {longest == LongestBlock::kLast ? num_blocks - 1 - rank : rank, head, batch_index};
  }
};

}  // namespace hopattn::sm90
