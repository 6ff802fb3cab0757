// Compile-time configuration of the backward kernel: tile shapes, shared-memory layouts, the four
// WGMMA tilings and the pipelines. Everything the backward mainloop, epilogue and kernel agree on.
//
// One CTA owns kBlockN keys (one key block) of one kv head and streams the query blocks that see
// them, kBlockM rows at a time. The two consumer warpgroups work with transposed scores, so that
// the rows of S^T are keys:
//
//   S^T  = K Q^T        (keys x queries)   ss: K, Q from shared memory
//   dP^T = V dO^T       (keys x queries)   ss: V, dO from shared memory
//   dV  += P^T dO       (keys x head_dim)
//   dK  += dS^T Q       (keys x head_dim)
//   dQ   = dS K         (queries x head_dim, split across the warpgroups by query rows where the
//                       block has 64 per warpgroup (kdQSplitRows), else by head_dim halves; or
//                       dQ^T = K^T dS^T where the block's rows are no multiple of 64)
//                                          ss: dS through shared memory, keys contiguous (K-major)
//
// Up to head_dim 128 each warpgroup owns 64 of the block's 128 keys: its S^T and dP^T rows are its
// keys, and dV and dK take P^T and dS^T straight from its registers (rs). Past 128, dK and dV of
// 64 keys would not fit one warpgroup's registers (kSplitHeadDim): the warpgroups share a block of
// 64 keys, split S^T and dP^T by queries and dK and dV by head_dim halves, and P^T goes through
// shared memory beside dS^T (ss), since each warpgroup's dK and dV need every query's.
//
// dQ needs every key of the block, so its operand always crosses warpgroups.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/kernel/register_split.hpp"

namespace hopattn::sm90 {

using namespace cute;

// The widest K-major swizzle atom whose row (64, 32 or 16 16-bit elements) divides `kWidth`. A
// buffer read MN-major in slices of kWidth columns needs slices that start on an atom.
template <class Element, int kWidth>
using SmemAtomFor = conditional_t<
    kWidth % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
    conditional_t<kWidth % 32 == 0, GMMA::Layout_K_SW64_Atom<Element>, GMMA::Layout_K_SW32_Atom<Element>>>;

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, int kdQPasses_>
struct BackwardConfig {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per mainloop step
  static constexpr int kBlockN = kBlockN_;  // keys per CTA
  static constexpr int kStages = kStages_;  // Q/dO shared-memory buffers in flight
  static constexpr int kdQPasses = kdQPasses_;  // dQ's column tiles, one product after the other

  static constexpr bool kSplitHeadDim = kHeadDim > 128;
  static constexpr int kNumConsumerWarpgroups = 2;
  static constexpr int kNumMmaThreads = kNumConsumerWarpgroups * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  // dK and dV accumulate in registers across the whole key block's life: the consumers take all
  // but the producer's 24 (register_split.hpp).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static_assert(register_split_fits(kProducerRegisters, kConsumerRegisters, kNumConsumerWarpgroups));

  static_assert(kBlockN == (kSplitHeadDim ? 64 : 64 * kNumConsumerWarpgroups),
                "a warpgroup's 64 keys, or one block of 64 the warpgroups share");
  static_assert(kBlockM % 16 == 0 && kBlockM <= 64 * kNumConsumerWarpgroups);
  static_assert(kHeadDim % 32 == 0);

  // A product split across the warpgroups by its rows (M) or by its columns (N).
  using RowWarpgroups = Layout<Shape<Int<kNumConsumerWarpgroups>, _1, _1>>;
  using ColumnWarpgroups = Layout<Shape<_1, Int<kNumConsumerWarpgroups>, _1>>;
  // dQ by query rows, each warpgroup all of head_dim for 64 of them, where the block has 64 per
  // warpgroup; else by head_dim halves, since WGMMA's M is 64. A block of rows that is no multiple
  // of 64 (80 at head_dim 128, FA3's non-causal tile) cannot be WGMMA's M: there the warpgroups
  // compute dQ^T = K^T dS^T, whose M is their head_dim half (kdQTransposed).
  static constexpr bool kdQSplitRows = kBlockM == 64 * kNumConsumerWarpgroups;
  static constexpr bool kdQTransposed = kBlockM % 64 != 0;
  static constexpr int kdQColumnsPerWarpgroup = kdQSplitRows ? kHeadDim : kHeadDim / kNumConsumerWarpgroups;
  static constexpr int kdKVColumnsPerWarpgroup = kSplitHeadDim ? kHeadDim / kNumConsumerWarpgroups : kHeadDim;
  static constexpr int kdQPassColumns = kHeadDim / kdQPasses;  // of the whole block
  static_assert(kdQColumnsPerWarpgroup % (kdQPasses * 16) == 0);

  // S^T and dP^T: split by keys (rows), or by queries (columns) where the warpgroups share the keys.
  using SdPShape = Shape<_64, Int<kSplitHeadDim ? kBlockM / kNumConsumerWarpgroups : kBlockM>, Int<kHeadDim>>;
  using TiledMmaSdP = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, SdPShape>(),
                                              conditional_t<kSplitHeadDim, ColumnWarpgroups, RowWarpgroups>{}));
  // dV and dK: from the S^T accumulator's registers, or from P^T and dS^T in shared memory by
  // head_dim halves.
  using TiledMmadKV = conditional_t<
      kSplitHeadDim,
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float,
                                                   Shape<_64, Int<kdKVColumnsPerWarpgroup>, Int<kBlockM>>,
                                                   GMMA::Major::MN, GMMA::Major::MN>(),
                              ColumnWarpgroups{})),
      decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockM>>,
                                                   GMMA::Major::K, GMMA::Major::MN>(),
                              RowWarpgroups{}))>;
  // dQ's tile as TiledMmadQ computes it, (queries, head_dim columns) or transposed: one pass's, and
  // the whole block's (the postprocess reads that).
  template <int kColumns>
  using dQShape = conditional_t<kdQTransposed, Shape<Int<kColumns>, Int<kBlockM>>, Shape<Int<kBlockM>, Int<kColumns>>>;
  using dQPassShape = dQShape<kdQPassColumns>;
  using dQBlockShape = dQShape<kHeadDim>;
  using TiledMmadQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float,
                           Shape<_64, Int<kdQTransposed ? kBlockM : kdQColumnsPerWarpgroup / kdQPasses>, Int<kBlockN>>,
                           kdQTransposed ? GMMA::Major::MN : GMMA::Major::K,   // K^T, or dS
                           kdQTransposed ? GMMA::Major::K : GMMA::Major::MN>(),  // dS^T, or K^T
      conditional_t<kdQSplitRows || kdQTransposed, RowWarpgroups, ColumnWarpgroups>{}));
  static_assert(!kdQTransposed || (kdQPasses == 1 && kHeadDim == 64 * kNumConsumerWarpgroups && !kSplitHeadDim),
                "dQ^T's M is one warpgroup's 64 head_dim columns");
  // (query row, head_dim column) of a coordinate in dQShape.
  template <class Coord>
  CUTE_HOST_DEVICE static auto dq_row_column(Coord const& c) {
    if constexpr (kdQTransposed) {
      return make_tuple(get<1>(c), get<0>(c));
    } else {
      return make_tuple(get<0>(c), get<1>(c));
    }
  }

  // Q and dO: (rows, head_dim, stage), the B operand of S^T / dP^T (K-major) and, viewed
  // (head_dim, rows, stage), of dK / dV (MN-major), whole or by each warpgroup's head_dim columns:
  // the swizzle atom must divide them.
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomFor<Element, kdKVColumnsPerWarpgroup>{},
                                             Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  // K: the A operand of S^T and, viewed (head_dim, keys), the B operand of dQ, which each
  // warpgroup reads in each pass's columns (its own half of them where dQ splits by head_dim):
  // the swizzle atom must divide them.
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomFor<Element, kdQColumnsPerWarpgroup / kdQPasses>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutKt = decltype(composition(
      SmemLayoutK{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Step<_2, _1>{})));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtomFor<Element, kHeadDim>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // dS (queries, keys, buffer), the keys contiguous in 64-key swizzle atoms: K-major as dQ reads it
  // (dS K's A, or dQ^T = K^T dS^T's B), and viewed (keys, queries, buffer) MN-major as dK reads it
  // from shared memory (kSplitHeadDim, with P^T in buffers of the same layout for dV). The consumers
  // hold dS^T and store it with transposing stmatrix: a warp's stores, 16 queries apart, lie whole
  // swizzle periods apart and take one address (matrix_stores.hpp). Two buffers: one barrier per
  // step orders writes and reads.
  static constexpr int kdSBuffers = 2;
  using SmemLayoutdS = decltype(tile_to_shape(SmemAtomFor<Element, 64>{},
                                              Shape<Int<kBlockM>, Int<kBlockN>, Int<kdSBuffers>>{}));
  using SmemLayoutdSt = decltype(composition(
      SmemLayoutdS{}, make_ordered_layout(Shape<Int<kBlockN>, Int<kBlockM>, Int<kdSBuffers>>{}, Step<_2, _1, _3>{})));

  // The float32 dQ accumulator of one query block (kBlockM x kHeadDim floats, in the workspace and
  // in the shared-memory buffer the main kernel reduces from alike) lies in the order of TiledMmadQ's
  // accumulator registers: value i of its thread t (0 <= t < kNumMmaThreads) at dq_accum_offset(t, i).
  // A warpgroup's values fill one contiguous part (one bulk reduce-add each), and a warp storing 4
  // consecutive values per thread writes 512 contiguous bytes (no bank conflicts). The postprocess
  // reads it back through the same thread slices of TiledMmadQ.
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
