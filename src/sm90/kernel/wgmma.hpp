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
