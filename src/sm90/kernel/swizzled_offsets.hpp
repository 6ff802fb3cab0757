// Byte offsets into a swizzled shared-memory layout of kElementBytes-byte elements, (row, column,
// stage) in elements -> offset in bytes, for a loop that walks units of a tile: each lane swizzles
// its own coordinates once, and a unit's address is then that lane offset XORed with the unit's
// offset below the swizzle period, plus the rest. This is exact when the unit's low part touches
// neither the bits the swizzle reads nor the lane's own low bits; decomposes() proves it at compile
// time for a walk's lanes and units.
//
// The swizzle acts on bytes: a CuTe GMMA atom's layout counts elements, but its swizzle (kept as it
// is when the atom is upcast from bits) is applied to the byte address (swizzle_ptr). For 1-byte
// elements the two are the same; for 16-bit ones swizzling element offsets misplaces them.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

namespace hopattn::sm90 {

template <class SwizzledLayout, int kElementBytes = 1>
struct SwizzledOffsets {
  // Functions rather than static members: a static member object is not usable in device code.
  CUTE_HOST_DEVICE static constexpr auto linear() { return cute::get_nonswizzle_portion(SwizzledLayout{}); }
  using Swizzle = decltype(cute::get_swizzle_portion(SwizzledLayout{}));
  // Offsets that differ by a multiple of the period swizzle alike.
  static constexpr uint32_t kPeriod = 1u << (Swizzle::num_bits + Swizzle::num_base + Swizzle::num_shft);
  // The buffers are aligned to 1024 bytes, so their addresses can take the place of offset 0.
  static_assert(kPeriod <= 1024);
  static constexpr int kStages = decltype(cute::size<2>(SwizzledLayout{}))::value;

  // The offset of (row, col, stage) in bytes before the swizzle, in the layout's own integer type:
  // cast to uint32_t before the swizzle, it changed the FP8 transposes' address arithmetic.
  CUTE_HOST_DEVICE static constexpr auto unswizzled(uint32_t row, uint32_t col, uint32_t stage) {
    return kElementBytes * linear()(row, col, stage);
  }
  // The swizzled offset of (row, col, stage): a lane's address at the tile's origin.
  CUTE_HOST_DEVICE static constexpr uint32_t swizzled(uint32_t row, uint32_t col, uint32_t stage) {
    return uint32_t(Swizzle{}(unswizzled(row, col, stage)));
  }
  // `base` moved by the unit at (row0, col0).
  CUTE_HOST_DEVICE static constexpr uint32_t offset(uint32_t base, uint32_t row0, uint32_t col0) {
    const uint32_t unit = uint32_t(unswizzled(row0, col0, 0));
    return (base ^ (unit % kPeriod)) + (unit - unit % kPeriod);
  }

  // Whether offset() gives the swizzled address for lanes at rows [0, lane_rows) and 16-byte
  // columns [0, lane_cols) (counted in elements), units at multiples of row_step below rows and
  // col_step below cols, applied in either order. Checked per axis, which keeps it within the
  // compiler's constexpr budget: each row unit is a whole number of periods, added to the lane's
  // rows without carry into another mode (the layout's modes add), so it moves every address by the
  // same amount; each column unit is checked against every lane; a stage is a whole number of
  // periods.
  static constexpr bool decomposes(int lane_rows, int lane_cols, int rows, int row_step, int cols, int col_step) {
    auto bytes = [](int row, int col, int stage) { return uint32_t(unswizzled(row, col, stage)); };
    if (kStages > 1 && bytes(0, 0, 1) % kPeriod != 0) return false;
    for (int row0 = 0; row0 < rows; row0 += row_step) {
      const uint32_t unit = bytes(row0, 0, 0);
      if (unit % kPeriod != 0) return false;
      for (int lane_row = 0; lane_row < lane_rows; ++lane_row) {
        if (bytes(lane_row + row0, 0, 0) != bytes(lane_row, 0, 0) + unit) return false;
      }
    }
    for (int lane_row = 0; lane_row < lane_rows; ++lane_row) {
      for (int lane_col = 0; lane_col < lane_cols; lane_col += 16 / kElementBytes) {
        for (int col0 = 0; col0 < cols; col0 += col_step) {
          if (offset(swizzled(lane_row, lane_col, 0), 0, col0) != swizzled(lane_row, lane_col + col0, 0)) return false;
        }
      }
    }
    return true;
  }
};

}  // namespace hopattn::sm90
