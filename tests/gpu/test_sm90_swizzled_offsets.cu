// SwizzledOffsets (sm90/kernel/swizzled_offsets.hpp) on the host, no GPU needed: for the V and V^T
// layouts of every FP8 tile the kernels are built with, the per-axis proof the transpose's static
// assertion relies on agrees with a brute force over every lane coordinate, unit, stage and order,
// and the proof rejects a walk whose units overlap the lane's own bits. For the 16-bit P buffer
// (P from shared memory), its offsets are the byte offsets CuTe itself addresses the buffer with.
#include <gtest/gtest.h>

#include <cstdint>

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
// trial, performance log, 2026-12-08 thirty-second): every element's offset, and every lane's
// stmatrix address moved by each 16 keys (stage_p's walk), against the address CuTe's swizzled
// tensor gives it in a buffer aligned as the kernel's. Swizzling element offsets instead of byte
// offsets puts most elements elsewhere.
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
  for (int row = 0; row < kRows; ++row) {
    for (int lane_key = 0; lane_key < Mainloop::kPLaneKeys; lane_key += 8) {
      for (int key0 = 0; key0 < kKeys; key0 += 16) {
        EXPECT_EQ(Offsets::offset(Offsets::swizzled(row, lane_key, 0), 0, key0), cute_offset(row, lane_key + key0))
            << "row " << row << ", keys " << lane_key + key0;
      }
    }
  }
}

TEST(Sm90SwizzledOffsets, SixteenBitOffsetsAreCuteAddresses) {
  check_p_buffer<cutlass::bfloat16_t, 128, 192, 128>();
  check_p_buffer<cutlass::half_t, 128, 192, 128>();
  check_p_buffer<cutlass::bfloat16_t, 96, 192, 128>();
}

}  // namespace
}  // namespace hopattn::sm90
