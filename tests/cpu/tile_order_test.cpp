// The grids' tile order (sm90/kernel/tile_order.hpp), on the CPU: every tile listed once, causal
// sections of equal size within one pair and within the caller's share of L2, longest first inside
// them (the forward's last query blocks, the backward's first key blocks), and equal tiles with the
// block fastest.
#include "sm90/kernel/tile_order.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

namespace hopattn::sm90 {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kH200L2 = 60 * kMiB;
constexpr int64_t kForwardSectionBytes = forward_section_bytes(kH200L2);    // 30 MiB
constexpr int64_t kBackwardSectionBytes = backward_section_bytes(kH200L2);  // 40 MiB

// The (batch, head) pair index of each tile, in list order.
std::vector<int> pairs_in_order(TileOrder const& order) {
  std::vector<int> pairs;
  for (int tile = 0; tile < order.total_tiles; ++tile) {
    const PairBlock c = order.coord(tile);
    pairs.push_back(c.batch * order.heads + c.head);
  }
  return pairs;
}

// Checks the list against its expected (block, pair) entries.
void expect_order(TileOrder const& order, std::vector<std::tuple<int, int>> const& expected) {
  ASSERT_EQ(order.total_tiles, int(expected.size()));
  const std::vector<int> pairs = pairs_in_order(order);
  for (int tile = 0; tile < order.total_tiles; ++tile) {
    EXPECT_EQ(order.coord(tile).block, std::get<0>(expected[tile])) << tile;
    EXPECT_EQ(pairs[tile], std::get<1>(expected[tile])) << tile;
  }
}

// The sizes (in pairs) of the forward's causal sections, read off the list: inside a section the
// query block never rises, so a new section starts where it does.
std::vector<int> section_sizes(TileOrder const& order) {
  std::vector<int> sizes;
  std::set<int> section;
  int last_m = order.num_blocks;
  for (int tile = 0; tile < order.total_tiles; ++tile) {
    const PairBlock c = order.coord(tile);
    const int pair = c.batch * order.heads + c.head;
    if (c.block > last_m) {  // back at the last query block: a new section
      sizes.push_back(int(section.size()));
      section.clear();
    }
    section.insert(pair);
    last_m = c.block;
  }
  sizes.push_back(int(section.size()));
  return sizes;
}

TEST(TileOrder, ListsEveryTileOnce) {
  for (LongestBlock longest : {LongestBlock::kNone, LongestBlock::kLast, LongestBlock::kFirst}) {
    for (int m_blocks : {1, 2, 7, 64}) {
      for (int heads : {1, 3, 16}) {
        for (int batch : {1, 2, 5}) {
          for (int64_t kv : {int64_t{0}, kMiB, 8 * kMiB, 100 * kMiB}) {
            const TileOrder order = TileOrder::make(m_blocks, heads, batch, kv, kForwardSectionBytes, longest);
            ASSERT_EQ(order.total_tiles, m_blocks * heads * batch);
            std::set<std::tuple<int, int, int>> seen;
            for (int tile = 0; tile < order.total_tiles; ++tile) {
              const PairBlock c = order.coord(tile);
              ASSERT_TRUE(c.block >= 0 && c.block < m_blocks && c.head >= 0 && c.head < heads &&
                          c.batch >= 0 && c.batch < batch)
                  << "tile " << tile;
              ASSERT_TRUE(seen.insert({c.block, c.head, c.batch}).second) << "tile " << tile << " twice";
            }
          }
        }
      }
    }
  }
}

TEST(TileOrder, EqualTilesRunOnePairAtATimeBlockFastest) {
  const TileOrder order = TileOrder::make(4, 3, 2, 8 * kMiB, kForwardSectionBytes, LongestBlock::kNone);
  for (int tile = 0; tile < order.total_tiles; ++tile) {
    const PairBlock c = order.coord(tile);
    EXPECT_EQ(c.block, tile % 4) << tile;
    EXPECT_EQ(c.batch * 3 + c.head, tile / 4) << tile;
  }
}

TEST(TileOrder, CausalSectionsAreEqualAndWithinHalfOfL2) {
  struct Case {
    int heads, batch;
    int64_t kv;
    std::vector<int> sizes;
  };
  // Half of 60 MiB is 30 MiB: 8 MiB of K and V per pair (head_dim 256, 8k tokens, bf16) allows 3
  // pairs a section, 4 MiB 7, 16 MiB 1, 7.5 MiB exactly 4; 19 pairs at 3 a section make 7
  // sections of 3 or 2, never 3 + 3 + 3 + 3 + 3 + 3 + 1.
  const int64_t quarter_of_half = 30 * kMiB / 4;
  const std::vector<Case> cases = {
      {8, 2, 8 * kMiB, {3, 3, 3, 3, 2, 2}},
      {16, 2, 4 * kMiB, {7, 7, 6, 6, 6}},
      {8, 1, 16 * kMiB, {1, 1, 1, 1, 1, 1, 1, 1}},
      {8, 1, quarter_of_half, {4, 4}},
      {8, 1, quarter_of_half + 1, {3, 3, 2}},
      {19, 1, 8 * kMiB, {3, 3, 3, 3, 3, 2, 2}},
      {5, 1, 1 * kMiB, {5}},          // every pair fits: one section
      {3, 1, 100 * kMiB, {1, 1, 1}},  // one pair overflows half of L2 alone
  };
  for (const Case& c : cases) {
    const TileOrder order = TileOrder::make(6, c.heads, c.batch, c.kv, kForwardSectionBytes, LongestBlock::kLast);
    EXPECT_EQ(section_sizes(order), c.sizes) << c.heads << " x " << c.batch << " pairs, " << c.kv / kMiB << " MiB";
  }
}

TEST(TileOrder, CausalSectionsRunLongestFirstHeadFastest) {
  // 8 MiB of K and V a pair: 3 pairs within 30 MiB, so sections of 3 and 2. (m_block, pair):
  expect_order(TileOrder::make(3, 5, 1, 8 * kMiB, kForwardSectionBytes, LongestBlock::kLast),
               {{2, 0}, {2, 1}, {2, 2}, {1, 0}, {1, 1}, {1, 2}, {0, 0}, {0, 1}, {0, 2},
                {2, 3}, {2, 4}, {1, 3}, {1, 4}, {0, 3}, {0, 4}});
}

// The backward's causal grid: the first key blocks are the longest, and every pair's key blocks
// come in ascending order (its deterministic dQ accumulation waits on lower ones).
TEST(TileOrder, BackwardCausalSectionsRunFirstBlocksFirstHeadFastest) {
  // 12 MiB of Q, dO and dQ a pair: 3 pairs within 40 MiB, so sections of 3 and 2. (key block, pair):
  expect_order(TileOrder::make(3, 5, 1, 12 * kMiB, kBackwardSectionBytes, LongestBlock::kFirst),
               {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {2, 0}, {2, 1}, {2, 2},
                {0, 3}, {0, 4}, {1, 3}, {1, 4}, {2, 3}, {2, 4}});
}

}  // namespace
}  // namespace hopattn::sm90
