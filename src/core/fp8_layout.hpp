// The memory layouts of an e4m3 tensor (hopattn_fp8_layout): rows, as every other tensor, or V
// transposed, as the SM90 FP8 kernel's P V reads its B operand (keys contiguous, in the order of
// P's operand within each 16). The one definition of a transposed element's address, read by both
// backends' quantisation, the CPU forward, the SM90 launch and the tests.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace hopattn {

enum class Fp8Layout : int32_t { kRows = 0, kVTransposed = 1 };

// Rows per group whose order is permuted, and the multiple the pitch is rounded to (also TMA's
// 16-byte stride alignment for one-byte codes).
constexpr int64_t kVTransposedGroup = 16;

// The distance between two head_dim columns: `rows` rounded up to a whole group.
HOPATTN_HOST_DEVICE int64_t v_transposed_pitch(int64_t rows) {
  return (rows + kVTransposedGroup - 1) / kVTransposedGroup * kVTransposedGroup;
}

// Where row r = 8 i + 2 c + j of a group (i, j in {0, 1}, c in 0..3) lies in it: 4 c + 2 i + j,
// the key order in which the SM90 kernel's P fills its FP8 A operand without crossing lanes
// (accumulator_to_fp8_operand_a in sm90/kernel/wgmma.hpp): lane c's four bytes of a k-step.
HOPATTN_HOST_DEVICE int64_t v_transposed_position(int64_t row) {
  const int64_t r = row % kVTransposedGroup;
  const int64_t i = r / 8, c = (r % 8) / 2, j = r % 2;
  return row - r + 4 * c + 2 * i + j;
}

// A transposed tensor of (batch, rows, heads, head_dim): contiguous, (batch, heads, head_dim,
// pitch) with the rows of each column at v_transposed_position.
struct VTransposedLayout {
  int64_t heads = 0, head_dim = 0, pitch = 0;

  HOPATTN_HOST_DEVICE static VTransposedLayout of(int64_t rows, int64_t heads, int64_t head_dim) {
    return {heads, head_dim, v_transposed_pitch(rows)};
  }
  HOPATTN_HOST_DEVICE int64_t head_stride() const { return head_dim * pitch; }
  HOPATTN_HOST_DEVICE int64_t batch_stride() const { return heads * head_stride(); }
  HOPATTN_HOST_DEVICE int64_t elements(int64_t batch) const { return batch * batch_stride(); }
  // The first position of a head_dim column.
  HOPATTN_HOST_DEVICE int64_t column_offset(int64_t b, int64_t head, int64_t d) const {
    return b * batch_stride() + head * head_stride() + d * pitch;
  }
  HOPATTN_HOST_DEVICE int64_t offset(int64_t b, int64_t row, int64_t head, int64_t d) const {
    return column_offset(b, head, d) + v_transposed_position(row);
  }
};

}  // namespace hopattn
