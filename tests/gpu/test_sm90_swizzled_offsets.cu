// SwizzledOffsets (sm90/kernel/swizzled_offsets.hpp) on the host, no GPU needed: for the V and V^T
// layouts of every FP8 tile the kernels are built with, the per-axis proof the transpose's static
// assertion relies on agrees with a brute force over every lane coordinate, unit, stage and order,
// and the proof rejects a walk whose units overlap the lane's own bits. For the 16-bit P buffer
// (P from shared memory), its offsets are the byte offsets CuTe itself addresses the buffer with,
// and stage_p's stmatrix stores, simulated lane by lane, put each score where P V reads it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sm90/kernel/config.hpp"
#include "sm90/kernel/mainloop.cuh"
#include "sm90/kernel/swizzled_offsets.hpp"
#include "sm90/kernel/tile_size.hpp"

namespace hopattn::sm90 {
namespace {

// Every (lane, unit, stage) of a walk, the units applied row first and column first.
template <class Offsets>
bool brute_force(int lane_rows, int lane_cols, int rows, int row_step, int cols, int col_step) {
  for (int stage = 0; stage < Offsets::kStages; ++stage) {
    for (int lane_row = 0; lane_row < lane_rows; ++lane_row) {
      for (int lane_col = 0; lane_col < lane_cols; lane_col += 16) {
        const uint32_t at_origin = Offsets::swizzled(lane_row, lane_col, stage);
        for (int row0 = 0; row0 < rows; row0 += row_step) {
          for (int col0 = 0; col0 < cols; col0 += col_step) {
            const uint32_t want = Offsets::swizzled(lane_row + row0, lane_col + col0, stage);
            if (Offsets::offset(Offsets::offset(at_origin, row0, 0), 0, col0) != want) return false;
            if (Offsets::offset(Offsets::offset(at_origin, 0, col0), row0, 0) != want) return false;
          }
        }
      }
    }
  }
  return true;
}

template <int kHeadDim>
void check_tile() {
  using Tile = TileSize<kHeadDim, 1, /*kTransposesV=*/true>;  // the walks of the kernels that transpose V
  using Config = ForwardConfig<cutlass::float_e4m3_t, cutlass::bfloat16_t, kHeadDim, Tile::kBlockM, Tile::kBlockN,
                               Tile::kStages>;
  using Mainloop = ForwardMainloop<Config, false>;
  using Load = SwizzledOffsets<typename Config::SmemLayoutKV>;
  using Store = SwizzledOffsets<typename Config::SmemLayoutVt>;
  constexpr int kKeys = Tile::kBlockN;
  SCOPED_TRACE("head_dim " + std::to_string(kHeadDim) + ", " + std::to_string(kKeys) + " keys");
  // The transpose's walks: V by 16-key x 32-byte units, V^T by 32-row x 16-key units.
  EXPECT_TRUE(Load::decomposes(Mainloop::kLoadLaneRows, Mainloop::kLoadLaneColumns, kKeys, 16, kHeadDim, 32));
  EXPECT_TRUE(brute_force<Load>(Mainloop::kLoadLaneRows, Mainloop::kLoadLaneColumns, kKeys, 16, kHeadDim, 32));
  EXPECT_TRUE(Store::decomposes(Mainloop::kStoreLaneRows, 1, kHeadDim, 32, kKeys, 16));
  EXPECT_TRUE(brute_force<Store>(Mainloop::kStoreLaneRows, 1, kHeadDim, 32, kKeys, 16));
  // 16-byte column units collide with the lanes' own 16-byte column: no decomposition, and the
  // proof must say so.
  EXPECT_FALSE(brute_force<Load>(Mainloop::kLoadLaneRows, Mainloop::kLoadLaneColumns, kKeys, 16, kHeadDim, 16));
  EXPECT_FALSE(Load::decomposes(Mainloop::kLoadLaneRows, Mainloop::kLoadLaneColumns, kKeys, 16, kHeadDim, 16));
}

TEST(Sm90SwizzledOffsets, TheTransposeWalksDecomposeAtEveryFp8Tile) {
  check_tile<64>();
  check_tile<128>();
  check_tile<256>();
}

// 16-bit tiles whose P V reads P from shared memory (head_dim 128's and 96's 192 x 128 under
// trial, performance log, 2026-12-08 thirty-second): every element's offset against the address
// CuTe's swizzled tensor gives it in a buffer aligned as the kernel's, and the decomposition
// stage_p's walk relies on (check_p_stores follows that walk lane by lane). Swizzling element
// offsets instead of byte offsets puts most elements elsewhere.
template <class Element, int kHeadDim, int kRows, int kKeys>
void check_p_buffer() {
  using Config = ForwardConfig<Element, Element, kHeadDim, kRows, kKeys, /*kStages=*/2>;
  static_assert(Config::kPFromShared);
  using Mainloop = ForwardMainloop<Config, false>;
  using Offsets = typename Mainloop::POffsets;
  using Layout = typename Config::SmemLayoutP;
  SCOPED_TRACE("head_dim " + std::to_string(kHeadDim) + ", " + std::to_string(kRows) + " x " + std::to_string(kKeys));
  alignas(1024) static Element buffer[cute::cosize_v<Layout>];
  auto tensor = cute::make_tensor(cute::make_smem_ptr(buffer), Layout{});
  auto cute_offset = [&](int row, int key) {
    return uint32_t(reinterpret_cast<char const*>(&tensor(row, key, 0)) - reinterpret_cast<char const*>(buffer));
  };
  int misplaced = 0, element_unit_misplaced = 0;
  for (int row = 0; row < kRows; ++row) {
    for (int key = 0; key < kKeys; ++key) {
      const uint32_t want = cute_offset(row, key);
      misplaced += Offsets::swizzled(row, key, 0) != want;
      element_unit_misplaced += SwizzledOffsets<Layout>::swizzled(row, key, 0) * sizeof(Element) != want;
    }
  }
  EXPECT_EQ(misplaced, 0);
  EXPECT_GT(element_unit_misplaced, kRows * kKeys / 2);
  EXPECT_TRUE(Offsets::decomposes(Mainloop::kPLaneRows, Mainloop::kPLaneKeys, kRows, Mainloop::kPLaneRows, kKeys, 16));
}

// stage_p's stores simulated for every consumer thread: stmatrix x4 writes register j of lane t to
// row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1 of matrix j, at the row address lane 8j + t / 4 of
// the warp gives (p_lane_offset, moved by each 16 keys). Every score must land where CuTe's P
// buffer holds its (row, key), as the accumulator's coordinates give them, and each warpgroup's
// slice of P V's A operand must read its own 64 rows there.
template <class Element, int kHeadDim, int kRows, int kKeys>
void check_p_stores() {
  using Config = ForwardConfig<Element, Element, kHeadDim, kRows, kKeys, /*kStages=*/2>;
  using Mainloop = ForwardMainloop<Config, false>;
  using Offsets = typename Mainloop::POffsets;
  SCOPED_TRACE("head_dim " + std::to_string(kHeadDim) + ", " + std::to_string(kRows) + " x " + std::to_string(kKeys));
  alignas(1024) static Element buffer[cute::cosize_v<typename Config::SmemLayoutP>];
  auto sP = cute::make_tensor(cute::make_smem_ptr(buffer), typename Config::SmemLayoutP{});
  auto offset_of = [&](auto const& element) {
    return uint32_t(reinterpret_cast<char const*>(&element) - reinterpret_cast<char const*>(buffer));
  };
  typename Config::TiledMmaQK mma_qk;
  const auto fragment = cute::partition_fragment_C(mma_qk, cute::Shape<cute::Int<kRows>, cute::Int<kKeys>>{}).layout();
  std::vector<int> value_at(cute::cosize(fragment));  // a fragment's register slot -> its value index
  for (int i = 0; i < cute::size(fragment); ++i) value_at[fragment(i)] = i;
  int misplaced = 0;
  for (int thread = 0; thread < Config::kNumMmaThreads; ++thread) {
    const auto coords = mma_qk.get_thread_slice(thread).partition_C(
        cute::make_identity_tensor(cute::Shape<cute::Int<kRows>, cute::Int<kKeys>>{}));
    const int lane = thread % 32, warp_first = thread - lane;
    for (int h = 0; h < kKeys / 16; ++h) {
      for (int j = 0; j < 4; ++j) {
        const uint32_t row_address = Offsets::offset(Mainloop::p_lane_offset(warp_first + 8 * j + lane / 4), 0, 16 * h);
        for (int half = 0; half < 2; ++half) {
          const auto coord = coords(value_at[2 * (4 * h + j) + half]);
          const uint32_t stored = row_address + sizeof(Element) * (2 * (lane % 4) + half);
          misplaced += stored != offset_of(sP(cute::get<0>(coord), cute::get<1>(coord), 0));
        }
      }
    }
  }
  EXPECT_EQ(misplaced, 0);
  typename Config::TiledMmaPV mma_pv;
  int misread = 0;
  for (int warpgroup = 0; warpgroup < Config::kNumConsumerWarpgroups; ++warpgroup) {
    const auto operand = mma_pv.get_thread_slice(128 * warpgroup).partition_A(sP);  // (MMA, 1, K steps, 1)
    for (int k = 0; k < cute::size<2>(operand); ++k) {
      for (int m = 0; m < 64; ++m) {
        for (int key = 0; key < 16; ++key) {
          misread += offset_of(operand(cute::make_coord(m, key), 0, k, 0)) !=
                     offset_of(sP(64 * warpgroup + m, 16 * k + key, 0));
        }
      }
    }
  }
  EXPECT_EQ(misread, 0);
}

TEST(Sm90SwizzledOffsets, SixteenBitOffsetsAreCuteAddresses) {
  check_p_buffer<cutlass::bfloat16_t, 128, 192, 128>();
  check_p_buffer<cutlass::half_t, 128, 192, 128>();
  check_p_buffer<cutlass::bfloat16_t, 96, 192, 128>();
}

TEST(Sm90SwizzledOffsets, StagedPLandsWherePVReadsIt) {
  check_p_stores<cutlass::bfloat16_t, 128, 192, 128>();
  check_p_stores<cutlass::half_t, 128, 192, 128>();
  check_p_stores<cutlass::bfloat16_t, 96, 192, 128>();
}

}  // namespace
}  // namespace hopattn::sm90
