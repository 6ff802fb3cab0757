// Compile-time configuration of the forward kernel: tile shapes, shared-memory layouts, the two
// WGMMA tilings and the pipeline. Everything the mainloop, softmax and epilogue agree on.
//
// Two input formats share it. 16-bit inputs (Element = ElementOut = bf16 or fp16) read V for
// P V exactly as TMA brought it in. FP8 inputs (Element = e4m3, ElementOut = bf16 or fp16) need
// V transposed first, since FP8 WGMMA reads both operands K-major: the producer warpgroup's
// other warps transpose each V block into a second buffer (Vt) while the consumers compute.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/kernel/kernel_form.hpp"
#include "sm90/kernel/register_split.hpp"

namespace hopattn::sm90 {

using namespace cute;

// The widest K-major swizzle atom whose row (32, 64 or 128 bytes) divides a row of `kRowElements`:
// conflict-free for TMA writes, WGMMA reads and the ldmatrix/stmatrix of the V transpose.
template <class Element, int kRowElements>
using KMajorAtom = conditional_t<(kRowElements * sizeof(Element)) % 128 == 0, GMMA::Layout_K_SW128_Atom<Element>,
                                 conditional_t<(kRowElements * sizeof(Element)) % 64 == 0,
                                               GMMA::Layout_K_SW64_Atom<Element>, GMMA::Layout_K_SW32_Atom<Element>>>;

// kVTransposedInput_ (FP8 only): V arrives in HOPATTN_FP8_LAYOUT_V_TRANSPOSED (core/fp8_layout.hpp)
// rather than in rows.
template <class Element_, class ElementOut_, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_,
          bool kVTransposedInput_ = false>
struct ForwardConfig {
  using Element = Element_;        // Q, K, V
  using ElementOut = ElementOut_;  // O
  static constexpr bool kFp8 = sizeof(Element) == 1;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per CTA
  static constexpr int kBlockN = kBlockN_;  // keys per mainloop step
  static constexpr int kStages = kStages_;  // K/V shared-memory buffers in flight

  // A WGMMA instruction covers 64 rows, so each consumer warpgroup owns 64 query rows; one more
  // warpgroup produces and gives most of its registers to the consumers: its first warp issues
  // every TMA load, and for FP8 V in rows its other three transpose V. The split stays within the
  // launch allocation (register_split.hpp): 24 + 2 x 240 or 32 + 3 x 160. FP8's transposing warps
  // run best with 40, beside 2 x 232 or 3 x 152 (at 24 they spill their per-block state: 1-8%
  // slower), unless the consumers' fragments (O, S and P: kFragmentRegisters) reach 200 registers,
  // as head_dim 256's 128 x 128 tile does (208), whose key loop then needs 240.
  static constexpr int kNumConsumerWarpgroups = kBlockM / 64;
  static constexpr int kNumMmaThreads = kNumConsumerWarpgroups * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  // FP8 V in rows is transposed in shared memory by the producer warpgroup's other warps; V given
  // transposed (in the key order of P's operand) is loaded by TMA straight into V^T's buffer, so
  // those warps, their registers and their pipeline are not needed (1-14% faster from 4k keys:
  // performance log).
  static constexpr bool kVTransposedInput = kVTransposedInput_;
  static_assert(kFp8 || !kVTransposedInput, "16-bit P V reads V as it is (MN-major)");
  static constexpr bool kTransposeV = kernel_transposes_v(int(sizeof(Element)), kVTransposedInput);
  static constexpr int kNumTransposeThreads = kTransposeV ? 96 : 0;
  // Per consumer thread: O (64 x head_dim / 128 floats), S (64 x kBlockN / 128) and P (S in pairs
  // of 16-bit values, or quads of FP8).
  static constexpr int kFragmentRegisters = (kHeadDim + kBlockN) / 2 + kBlockN / (kFp8 ? 8 : 4);
  static constexpr bool kWideConsumers = !kTransposeV || kFragmentRegisters >= 200;  // 240 each
  static constexpr int kProducerRegisters =
      kNumConsumerWarpgroups == 2 ? (kWideConsumers ? 24 : 40) : (kTransposeV ? 40 : 32);
  static constexpr int kConsumerRegisters =
      kNumConsumerWarpgroups == 2 ? (kWideConsumers ? 240 : 232) : (kTransposeV ? 152 : 160);
  static_assert(register_split_fits(kProducerRegisters, kConsumerRegisters, kNumConsumerWarpgroups));

  static_assert(kBlockM % 64 == 0 && kNumConsumerWarpgroups <= 3);
  static_assert(kBlockN % (kFp8 ? 32 : 16) == 0, "P.V consumes keys in WGMMA k-steps of 32 bytes");
  static_assert(kHeadDim % 32 == 0, "shared-memory rows are built of 32-byte swizzle atoms");

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O += P V
  using WarpgroupLayout = Layout<Shape<Int<kNumConsumerWarpgroups>, _1, _1>>;

  // Q from registers (kQInRegisters) or shared memory, K from shared memory; P from registers
  // (where it never leaves them) or shared memory (kPFromShared, below), V^T from shared memory:
  // 16-bit reads it MN-major from V's buffer as TMA filled it, FP8 K-major from the transposed copy.
  //
  // Q in registers, an idea FlashAttention-3 does not use on Hopper: an ss WGMMA m64nNk16 reads
  // 4096/N + 64 bytes of shared memory per tensor-core cycle (A 2 KB, B 32N bytes, in N/2 cycles)
  // of the SM's 128, so at N = 128 Q K^T asks 96 of them and, beside P V's 64 and the K/V loads,
  // keeps shared memory near its limit; with Q in registers Q K^T asks 64. Each consumer thread
  // holds its warpgroup's 64 query rows of Q (64 x head_dim x bytes / 512 registers: 32 at 16-bit
  // head_dim 128, 16 at FP8), loaded once per tile while the tile's first Q K^T reads Q from shared
  // memory (TiledMmaQKShared). Measured +1-6% at head_dim 128 (performance log, "Q in registers").
  // Two consumer warpgroups up to head_dim 128 only: at three (160 registers each) and past 128 it
  // spills. FP8 on 128-key blocks too (head_dim 128 with V in rows +1-7%, its short tile with V
  // given transposed +0-4%; performance log, twenty-seventh session), but not on 192-key blocks (V
  // given transposed from 2k keys: 6-8% slower), whose fragments already take 184 of the
  // consumers' registers.
  static constexpr bool kQInRegisters = kNumConsumerWarpgroups == 2 && kHeadDim <= 128 && kBlockN <= 128;
  using QKShape = Shape<_64, Int<kBlockN>, Int<kHeadDim>>;
  using TiledMmaQKShared =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, QKShape>(), WarpgroupLayout{}));
  using TiledMmaQK = conditional_t<
      kQInRegisters,
      decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, QKShape>(), WarpgroupLayout{})),
      TiledMmaQKShared>;
  // P from shared memory (kPFromShared), an option of FlashAttention-3's tile table: three 16-bit
  // consumer warpgroups whose O, S and P would take more than 128 of a thread's 160 registers, too
  // many beside the key loop's other state. Each warpgroup then stores its P (64 x kBlockN) to a
  // buffer of its own rows and P V reads it there, so only O and S stay in registers (head_dim
  // 128's 192 x 128: 64 + 64 of 160), and each warpgroup's softmax hides under four GEMMs of the
  // other two rather than two. Measured +3-9% non-causal at head_dim 128 from 2k keys over
  // 128 x 128, though both GEMMs then read A from shared memory (performance log, 2026-12-07
  // thirty-first). No tile takes it yet: head_dim 128's 192 x 128 waits for its GPU tests
  // (2026-12-08, thirty-second).
  static constexpr bool kPFromShared = !kFp8 && kNumConsumerWarpgroups == 3 && kFragmentRegisters > 128;
  using PVShape = Shape<_64, Int<kHeadDim>, Int<kBlockN>>;
  static constexpr GMMA::Major kVtMajor = kFp8 ? GMMA::Major::K : GMMA::Major::MN;
  using TiledMmaPV = decltype(make_tiled_mma(
      conditional_t<kPFromShared,
                    decltype(GMMA::ss_op_selector<Element, Element, float, PVShape, GMMA::Major::K, kVtMajor>()),
                    decltype(GMMA::rs_op_selector<Element, Element, float, PVShape, GMMA::Major::K, kVtMajor>())>{},
      WarpgroupLayout{}));
  // P, (query rows, keys, 1 stage), keys contiguous: the A operand of P V where kPFromShared.
  using SmemLayoutP = decltype(tile_to_shape(KMajorAtom<Element, kBlockN>{}, Shape<Int<kBlockM>, Int<kBlockN>, _1>{}));

  using SmemAtom = KMajorAtom<Element, kHeadDim>;
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(
      SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V^T, (head_dim, keys, stage), the B operand of P.V. 16-bit: the same bytes as V, viewed
  // transposed. FP8: keys contiguous, in a buffer of its own that the transpose fills, or (V given
  // transposed) the buffer TMA loads V into.
  using SmemLayoutVt = conditional_t<
      kFp8,
      decltype(tile_to_shape(KMajorAtom<Element, kBlockN>{}, Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{})),
      decltype(composition(SmemLayoutKV{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{},
                                                               Step<_2, _1, _3>{})))>;
  // Pingpong: the consumer warpgroups take turns to issue their GEMMs (named barriers), so that one
  // warpgroup's softmax runs under the other's GEMMs. Past head_dim 128 the GEMMs are long enough
  // to hide the softmax without it (FlashAttention-3 makes the same choice). Nor for FP8, unlike
  // FlashAttention-3: its warpgroups wait for their turns (Nsight Compute at head_dim 128: 3% of
  // the key loop's stall samples on the turn's barrier, 10% once the loop was cut by 8%, which then
  // ran slower), and without the turns it ran 1.00-1.04x at head_dim 128, 1.00-1.02x at 64
  // (performance log, "No pingpong for FP8").
  static constexpr bool kPingpong = kNumConsumerWarpgroups >= 2 && kHeadDim <= 128 && !kFp8;

  // The softmax's exponent scheme (kernel_form.hpp): row offsets or the per-step vote.
  static constexpr bool kRowOffsets = kernel_uses_row_offsets(int(sizeof(Element)), kHeadDim, kBlockN, kTransposeV);

  // Without kOwnOutputBuffer (below) the epilogue stages O in the buffer P.V reads (V's, or V^T's
  // where the kernel transposes V), not Q's: the next tile's Q and K (and V in rows, for the
  // transpose) then load while this tile's O is stored, and only what writes that buffer next
  // waits for the store. Sized in Elements for either content.
  static constexpr int kOutputBytes = kBlockM * kHeadDim * int(sizeof(ElementOut));
  static constexpr int kPvOperandInputElements = cosize_v<conditional_t<kFp8, SmemLayoutVt, SmemLayoutKV>>;
  // O in a buffer of its own, for the two pingpong warpgroups of 16-bit inputs (head_dim 64's short
  // tile, 96, 128): each warp then stages and stores its rows alone (kStoreRows), so the warpgroup
  // that finishes its tile first, half a step ahead under the turns, starts the next tile while the
  // other stores, and the tensor cores get its first S where both used to wait for each other
  // (head_dim 128 on an H100, with the tile divisors: +4.5-8.4% at 512 and 1k, +2-8% at 2k, +1-6% at
  // 8k; performance log, 2026-12-05 seventh and eighth). Not with three warpgroups (head_dim 64's
  // 192-row tile: +3.5% at 512, up to 3% lost at 8k; per-warp stores in V's buffer lost 3-4.5%) nor
  // for FP8, whose warpgroups do not take turns (O's own buffer lost 6-9% at head_dim 128 1k-2k,
  // per-warp stores in V^T's buffer 5-8%). Each warp waits for its own store before staging its
  // next rows, a tile later. The sum counts Q, K, V (and V^T's own buffer where the kernel
  // transposes V) and O, and 3 KB for the barriers and the 1 KB alignment (2-3 KB in every
  // configuration); the kernel's static_assert holds the exact sum.
  static constexpr int kInputBytes = int(kBlockM * kHeadDim * sizeof(Element)) +
                                     (kTransposeV ? 2 : 1) * int(kStages * kBlockN * kHeadDim * sizeof(Element)) +
                                     kPvOperandInputElements * int(sizeof(Element));
  static constexpr bool kOwnOutputBuffer =
      kPingpong && kNumConsumerWarpgroups == 2 && kInputBytes + kOutputBytes + 3 * 1024 <= 227 * 1024;
  static constexpr int kPvOperandElements =
      kOwnOutputBuffer ? kPvOperandInputElements
                       : cute::max(kPvOperandInputElements, kOutputBytes / int(sizeof(Element)));

  // The rows of O staged and stored together (epilogue.cuh). In its own buffer, a warp's
  // accumulator rows (16 of its warpgroup's 64): no barrier across warps. In V's buffer, which every
  // warp's last P V must have read first, the whole tile, as one TMA store. Each slab of rows is
  // whole swizzle atoms (8 rows each, one swizzle period), so it starts on a period and swizzles as
  // a tensor of its own.
  static constexpr int kWarpRows = 16;
  static_assert(decltype(size<0>(typename TiledMmaPV::AtomShape_MNK{}))::value == 4 * kWarpRows,
                "a WGMMA accumulator gives each of its warpgroup's four warps kWarpRows rows");
  static constexpr int kStoreRows = kOwnOutputBuffer ? kWarpRows : kBlockM;
  using OutputAtom = KMajorAtom<ElementOut, kHeadDim>;
  static_assert(kStoreRows % decltype(size<0>(OutputAtom{}))::value == 0, "a slab is whole swizzle atoms");
  using SmemLayoutOSlab = decltype(tile_to_shape(OutputAtom{}, Shape<Int<kStoreRows>, Int<kHeadDim>>{}));
  using SmemLayoutO = decltype(tile_to_shape(SmemLayoutOSlab{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;
  // FP8: transposed V blocks, from the transposing warps to the consumers.
  using TransposePipeline = cutlass::PipelineAsync<kStages>;

  static constexpr uint32_t kQTileBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKVTileBytes = kBlockN * kHeadDim * sizeof(Element);
};

}  // namespace hopattn::sm90
