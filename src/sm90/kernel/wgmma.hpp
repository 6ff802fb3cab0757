// Register-fragment helpers around WGMMA: issuing a warpgroup GEMM, viewing an accumulator by
// rows and columns, and reusing an accumulator as the register A operand of the next GEMM.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

namespace hopattn::sm90 {

using namespace cute;

// C (+)= A B over every k-block of the operands, as one batch of WGMMAs. kZeroInit starts from
// C = 0 without clearing registers first; kWait waits for the batch to retire.
template <bool kZeroInit, bool kWait, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void warpgroup_gemm(TiledMma& tiled_mma, TA const& a, TB const& b, TC& c) {
  constexpr bool kAInRegisters = !is_same_v<typename TA::iterator, GMMA::DescriptorIterator>;
  if constexpr (kAInRegisters) warpgroup_fence_operand(const_cast<TA&>(a));
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(tiled_mma, a(_, _, k), b(_, _, k), c);
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait) warpgroup_wait<0>();
  warpgroup_fence_operand(c);
  if constexpr (kAInRegisters) warpgroup_fence_operand(const_cast<TA&>(a));
}

// thread_idx / 128, taken through a shuffle: ptxas then knows it to be warp-uniform, so values and
// branches derived from it stay in uniform registers (from thread_idx / 128 itself they do not).
__device__ __forceinline__ int uniform_warpgroup_of(int thread_idx) {
  return __shfl_sync(0xffffffff, thread_idx / 128, 0);
}

// The slice of `tiled_mma` that partitions a warpgroup's shared-memory operands. Their descriptors
// depend on the warpgroup only: sliced at its first thread (uniform_warpgroup_of) they stay in
// uniform registers; sliced at the thread's own index they were built per thread and moved over
// with two R2UR before each WGMMA.
template <class TiledMma>
__device__ __forceinline__ auto warpgroup_operand_slice(TiledMma const& tiled_mma, int thread_idx) {
  return tiled_mma.get_thread_slice(uniform_warpgroup_of(thread_idx) * 128);
}

// An SM90 accumulator fragment is ((2 columns, 2 rows, N/8 column groups), MMA_M, MMA_N): each thread
// holds two adjacent columns in rows r and r + 8 of every 8-column group. This view indexes the same
// registers as (rows, columns) so that row reductions read naturally.
template <class Layout>
__device__ __forceinline__ auto accumulator_rows_cols(Layout const& acc) {
  static_assert(decltype(rank<0>(acc))::value == 3, "expects an SM90 accumulator layout");
  auto rows = make_layout(get<0, 1>(acc), get<1>(acc));
  auto cols = make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc));
  return make_layout(rows, cols);
}

// The (row, column) coordinates of a thread's accumulator elements (an identity tensor partitioned
// like the accumulator, in accumulator_rows_cols's view) as `coords` plus an offset the same for
// every element. Split (kSplit): `coords` are thread 0's, constants of an unrolled loop, and the
// offset is this thread's, so a limit takes the offset once and each element's comparison has an
// immediate (as the coordinates come, ptxas builds each one from the thread's lane bits: about four
// instructions an element; mask.cuh). Unsplit: the thread's own coordinates, offset 0.
template <class TensorC>
struct ThreadCoords {
  TensorC coords;
  int first_row, first_col;
};

template <bool kSplit, class TensorC>
__device__ __forceinline__ auto thread_coords(TensorC const& coords) {
  if constexpr (kSplit) {
    Tensor thread0 = make_coord_tensor(coords.layout());
    return ThreadCoords<decltype(thread0)>{thread0, int(get<0>(coords(0, 0))) - int(get<0>(thread0(0, 0))),
                                           int(get<1>(coords(0, 0))) - int(get<1>(thread0(0, 0)))};
  } else {
    return ThreadCoords<TensorC>{coords, 0, 0};
  }
}

// The register A operand of a 16-bit WGMMA (m64 n k16) holds, per k-step, the same
// (2 columns, 2 rows) pairs for two consecutive 8-column groups. So an accumulator becomes an A
// operand by pairing its column groups: ((2, 2, (2, N/16)), M, N) -> ((2, 2, 2), M, N/16 * MMA_N).
template <class Layout>
__device__ __forceinline__ auto accumulator_as_operand_a(Layout const& acc) {
  auto split = logical_divide(get<0>(acc), Shape<Underscore, Underscore, _2>{});
  auto value = make_layout(get<0>(split), get<1>(split), get<2, 0>(split));
  auto k_steps = coalesce(make_layout(get<2, 1>(split), get<2>(acc)));
  return make_layout(value, get<1>(acc), k_steps);
}

template <class To, class Engine, class Layout>
__device__ __forceinline__ auto convert_fragment(Tensor<Engine, Layout> const& from);

// The register A operand of an FP8 WGMMA (m64 n k32) holds, per k-step and thread, four bytes of
// k-consecutive columns for rows r and r + 8, then the same 16 columns further: ((4, 2, 2), M, K/32)
// in CuTe's order. An accumulator holds column pairs instead, (2c, 2c + 1) of each 8-column group
// for quad lane c, so its own columns fill the operand in this order: value (i0, row, half) of
// k-step s is the accumulator's column pair i0 % 2 of 8-column group 4s + 2 half + i0 / 2. That
// assigns P's keys to the k index of P V in a permuted order, within each 16 keys (key
// 16h + 8 (m / 2) + 2c + m % 2 at k index 16h + 4c + m); the V transpose writes V^T in the same
// order (mainloop.cuh), so the product is unchanged and no register crosses lanes.
template <class Element, class TensorAcc>
__device__ __forceinline__ auto accumulator_to_fp8_operand_a(TensorAcc const& acc) {
  Tensor acc_rc = make_tensor(acc.data(), accumulator_rows_cols(acc.layout()));
  constexpr int kMmaM = decltype(size<1>(acc))::value;
  constexpr int kColumns = decltype(size<1>(acc_rc))::value;  // per thread: 2 per 8-column group
  static_assert(kColumns % 8 == 0, "a k-step of 32 columns holds 8 of each thread's");
  Tensor operand = make_tensor<float>(Shape<Shape<_4, _2, _2>, Int<kMmaM>, Int<kColumns / 8>>{});
  CUTE_UNROLL
  for (int s = 0; s < kColumns / 8; ++s) {
    CUTE_UNROLL
    for (int m = 0; m < kMmaM; ++m) {
      CUTE_UNROLL
      for (int i0 = 0; i0 < 4; ++i0) {
        CUTE_UNROLL
        for (int row = 0; row < 2; ++row) {
          CUTE_UNROLL
          for (int half = 0; half < 2; ++half) {
            const int column = i0 % 2 + 2 * (4 * s + 2 * half + i0 / 2);
            operand(make_coord(i0, row, half), m, s) = acc_rc(make_coord(row, m), column);
          }
        }
      }
    }
  }
  return convert_fragment<Element>(operand);
}

template <class To, class Engine, class Layout>
__device__ __forceinline__ auto convert_fragment(Tensor<Engine, Layout> const& from) {
  using From = typename Engine::value_type;
  constexpr int kSize = decltype(size(from))::value;
  cutlass::NumericArrayConverter<To, From, kSize> convert;
  auto converted = convert(*reinterpret_cast<cutlass::Array<From, kSize> const*>(from.data()));
  Tensor to = make_tensor<To>(from.layout());
  *reinterpret_cast<cutlass::Array<To, kSize>*>(to.data()) = converted;
  return to;
}

}  // namespace hopattn::sm90
