// SwizzledOffsets (sm90/kernel/swizzled_offsets.hpp) on the host, no GPU needed: for the V and V^T
// layouts of every FP8 tile the kernels are built with, the per-axis proof the transpose's static
// assertion relies on agrees with a brute force over every lane coordinate, unit, stage and order,
// and the proof rejects a walk whose units overlap the lane's own bits.
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

}  // namespace
}  // namespace hopattn::sm90
