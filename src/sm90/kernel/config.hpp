// Compile-time configuration of the forward kernel: tile shapes, shared-memory layouts, the two
// WGMMA tilings and the pipeline. Everything the mainloop, softmax and epilogue agree on.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

namespace hopattn::sm90 {

using namespace cute;

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_>
struct ForwardConfig {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per CTA
  static constexpr int kBlockN = kBlockN_;  // keys per mainloop step
  static constexpr int kStages = kStages_;  // K/V shared-memory buffers in flight

  // A WGMMA instruction covers 64 rows, so each consumer warpgroup owns 64 query rows; one more
  // warpgroup produces (TMA) and gives most of its registers to the consumers.
  static constexpr int kNumConsumerWarpgroups = kBlockM / 64;
  static constexpr int kNumMmaThreads = kNumConsumerWarpgroups * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  static constexpr int kProducerRegisters = kNumConsumerWarpgroups == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kNumConsumerWarpgroups == 2 ? 240 : 160;

  static_assert(kBlockM % 64 == 0 && kNumConsumerWarpgroups <= 3);
  static_assert(kBlockN % 16 == 0, "P.V consumes keys in steps of 16");
  static_assert(kHeadDim % 32 == 0, "shared-memory rows are built of 64- or 128-byte swizzle atoms");

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O += P V
  using WarpgroupLayout = Layout<Shape<Int<kNumConsumerWarpgroups>, _1, _1>>;

  // Q and K from shared memory; P from registers (it never leaves them), V^T from shared memory,
  // read MN-major because V is stored keys-by-head_dim exactly as TMA brought it in.
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      WarpgroupLayout{}));
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      WarpgroupLayout{}));

  // The widest swizzle whose atom row (64 or 32 elements) divides head_dim: bank-conflict-free for
  // both TMA writes and WGMMA reads.
  using SmemAtom = conditional_t<kHeadDim % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
                                 GMMA::Layout_K_SW64_Atom<Element>>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutO = SmemLayoutQ;
  using SmemLayoutKV = decltype(tile_to_shape(
      SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // The same bytes as V, viewed (head_dim, keys, stage) as the B operand of P.V.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{},
                                          Step<_2, _1, _3>{})));
  // The epilogue stages O in V's buffer, not Q's: the next tile's Q and K then load while this
  // tile's O is stored, and only the next tile's V waits for the store. The buffer holds either.
  static constexpr int kVBufferElements = cute::max(cosize_v<SmemLayoutKV>, cosize_v<SmemLayoutO>);

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;

  static constexpr uint32_t kQTileBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKVTileBytes = kBlockN * kHeadDim * sizeof(Element);

  // Pingpong: the consumer warpgroups take turns to issue their GEMMs (named barriers), so that one
  // warpgroup's softmax runs under the other's GEMMs. Past head_dim 128 the GEMMs are long enough
  // to hide the softmax without it (FlashAttention-3 makes the same choice).
  static constexpr bool kPingpong = kNumConsumerWarpgroups >= 2 && kHeadDim <= 128;
};

}  // namespace hopattn::sm90
