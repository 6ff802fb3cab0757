// Compile-time configuration of the backward kernel: tile shapes, shared-memory layouts, the four
// WGMMA tilings and the pipelines. Everything the backward mainloop, epilogue and kernel agree on.
//
// One CTA owns kBlockN keys (one key block) of one kv head and streams the query blocks that see
// them, kBlockM rows at a time. Each of the two consumer warpgroups owns 64 of the keys and works
// with transposed scores, so that its rows are its keys:
//
//   S^T  = K Q^T        (keys x queries)   ss: K, Q from shared memory
//   dP^T = V dO^T       (keys x queries)   ss: V, dO from shared memory
//   dV  += P^T dO       (keys x head_dim)  rs: P^T is the S^T accumulator, never leaves registers
//   dK  += dS^T Q       (keys x head_dim)  rs: dS^T likewise
//   dQ   = dS K         (queries x head_dim, split by head_dim halves across the warpgroups)
//                                          ss: dS^T through shared memory, read MN-major
//
// dQ needs every key of the block, so it is the one product whose operand crosses warpgroups.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

namespace hopattn::sm90 {

using namespace cute;

// The widest K-major swizzle atom whose row (64, 32 or 16 16-bit elements) divides `kWidth`. A
// buffer read MN-major in slices of kWidth columns needs slices that start on an atom.
template <class Element, int kWidth>
using SmemAtomFor = conditional_t<
    kWidth % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
    conditional_t<kWidth % 32 == 0, GMMA::Layout_K_SW64_Atom<Element>, GMMA::Layout_K_SW32_Atom<Element>>>;

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_>
struct BackwardConfig {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per mainloop step
  static constexpr int kBlockN = kBlockN_;  // keys per CTA
  static constexpr int kStages = kStages_;  // Q/dO shared-memory buffers in flight

  static constexpr int kNumConsumerWarpgroups = kBlockN / 64;
  static constexpr int kNumMmaThreads = kNumConsumerWarpgroups * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  // dK and dV accumulate in registers across the whole key block's life: the consumers take all
  // but the producer's 24 (24 + 2 x 240 <= 512 per thread of a warpgroup triple).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;

  static_assert(kNumConsumerWarpgroups == 2, "dQ's head_dim is split in halves across two warpgroups");
  static_assert(kBlockM % 16 == 0 && kBlockM <= 256);
  static_assert(kHeadDim % 32 == 0);

  using KeysWarpgroups = Layout<Shape<Int<kNumConsumerWarpgroups>, _1, _1>>;
  using HeadDimWarpgroups = Layout<Shape<_1, Int<kNumConsumerWarpgroups>, _1>>;
  static constexpr int kdQColumnsPerWarpgroup = kHeadDim / kNumConsumerWarpgroups;

  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kHeadDim>>>(),
      KeysWarpgroups{}));
  using TiledMmadKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockM>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      KeysWarpgroups{}));
  using TiledMmadQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kdQColumnsPerWarpgroup>, Int<kBlockN>>,
                           GMMA::Major::MN, GMMA::Major::MN>(),
      HeadDimWarpgroups{}));

  // Q and dO: (rows, head_dim, stage), the B operand of S^T / dP^T (K-major) and, viewed
  // (head_dim, rows, stage), of dK / dV (MN-major), whole in both.
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomFor<Element, kHeadDim>{},
                                             Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  // K: the A operand of S^T and, viewed (head_dim, keys), the B operand of dQ, which each
  // warpgroup reads in its own head_dim half: the swizzle atom must divide the half.
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomFor<Element, kdQColumnsPerWarpgroup>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutKt = decltype(composition(
      SmemLayoutK{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Step<_2, _1>{})));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtomFor<Element, kHeadDim>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // dS^T as the consumers write it (keys, queries, buffer), and the same bytes as dQ's A operand
  // (queries, keys, buffer), MN-major. Two buffers: one barrier per step orders writes and reads.
  static constexpr int kdSBuffers = 2;
  using SmemLayoutdSt = decltype(tile_to_shape(SmemAtomFor<Element, kBlockM>{},
                                               Shape<Int<kBlockN>, Int<kBlockM>, Int<kdSBuffers>>{}));
  using SmemLayoutdS = decltype(composition(
      SmemLayoutdSt{}, make_ordered_layout(Shape<Int<kBlockM>, Int<kBlockN>, Int<kdSBuffers>>{}, Step<_2, _1, _3>{})));

  // The float32 dQ accumulator of one query block (kBlockM x kHeadDim floats, in the workspace and
  // in the shared-memory buffer the main kernel reduces from alike) lies in the order of TiledMmadQ's
  // accumulator registers: value i of consumer thread t at dq_accum_offset(t, i). A warpgroup's
  // values fill one contiguous half (one bulk reduce-add each), and a warp storing 4 consecutive
  // values per thread writes 512 contiguous bytes (no bank conflicts). The postprocess reads it back
  // through the same thread slices of TiledMmadQ.
  static constexpr int kdQAccumPerThread = kBlockM * kHeadDim / kNumMmaThreads;
  static constexpr int kdQAccumPerWarpgroup = kBlockM * kHeadDim / kNumConsumerWarpgroups;
  static constexpr uint32_t kdQAccumWarpgroupBytes = kdQAccumPerWarpgroup * sizeof(float);
  static_assert(kdQAccumPerThread % 4 == 0, "dQ values go to shared memory 16 bytes at a time");
  static_assert(kdQAccumWarpgroupBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
  CUTE_HOST_DEVICE static constexpr int dq_accum_offset(int thread, int i) {
    return thread / 128 * kdQAccumPerWarpgroup + ((i / 4) * 128 + thread % 128) * 4 + i % 4;
  }

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;

  static constexpr uint32_t kQTileBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKVTileBytes = kBlockN * kHeadDim * sizeof(Element);
  // One float per query row (the LSE with Q, D = rowsum(dO * O) with dO), by a bulk copy.
  static constexpr uint32_t kRowVectorBytes = kBlockM * sizeof(float);
  static_assert(kRowVectorBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
};

}  // namespace hopattn::sm90
