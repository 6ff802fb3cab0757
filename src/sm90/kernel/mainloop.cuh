// The forward mainloop collective, split by role. The producer warp brings each tile's Q and
// streams its K and V blocks into a kStages-deep shared-memory ring with TMA; the consumer
// warpgroups compute S = Q K^T, the online softmax and O += P V per key block. It owns its
// arguments (the problem), its kernel parameters (TMA descriptors, sequence layout, scale) and its
// shared storage (Q, K, V, their barriers, and O's own buffer where Config::kOwnOutputBuffer).
//
// Overlap, as in FlashAttention-3: inside a warpgroup, S of block n is issued together with P V of
// block n + 1, so the softmax of block n runs while the tensor cores do P V; across warpgroups
// (pingpong, 16-bit up to head_dim 128: Config::kPingpong), the warpgroups take turns to issue,
// so one's softmax runs under the other's GEMMs; across tiles, the next tile's K and Q load while
// this tile finishes (kQueryEmpty: with Q in registers, Config::kQInRegisters, as soon as the first
// block has read Q), and only its V waits for this tile's output store (output_drained), unless O
// is staged in a buffer of its own (Config::kOwnOutputBuffer), when nothing waits for that store.
//
// FP8 (Config::kFp8): three more producer warps transpose each V block as it lands into V^T,
// keys contiguous (FP8 WGMMA reads both operands K-major), and hand it to the consumers through a
// second pipeline; the output store waits for those warps instead, and V's own loads never wait.
// V given transposed (Config::kVTransposedInput) needs none of that: TMA loads it into V^T's
// buffer as the 16-bit path loads V.
// The consumers scale each score tile by its Q and K descales inside the softmax, round P to e4m3
// in registers (no lane exchange: see accumulator_to_fp8_operand_a) and apply V's scale to O once.
#pragma once

#include <algorithm>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "core/fast_divisor.hpp"
#include "core/problem.hpp"
#include "sm90/kernel/exact_rows.cuh"
#include "sm90/kernel/mask.cuh"
#include "sm90/kernel/matrix_stores.hpp"
#include "sm90/kernel/named_barriers.hpp"
#include "sm90/kernel/softmax.cuh"
#include "sm90/kernel/swizzled_offsets.hpp"
#include "sm90/kernel/tile_scheduler.cuh"
#include "sm90/kernel/timeline.hpp"
#include "sm90/kernel/tma.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

template <class Config_, bool kCausal>
struct ForwardMainloop {
  using Config = Config_;
  using Element = typename Config::Element;
  using Pipeline = typename Config::Pipeline;
  using PipelineState = typename Config::PipelineState;
  using TransposePipeline = typename Config::TransposePipeline;
  static constexpr bool kFp8 = Config::kFp8;
  // FP8 compares the columns as they come: with constant ones its causal masked steps kept their
  // instruction counts, and V in rows ran 3-9% slower at 2k-8k causal (performance log, 2026-12-07).
  using Mask = BlockMask<Config::kBlockM, Config::kBlockN, kCausal, /*kShiftedKeys=*/kFp8,
                         /*kConstantColumns=*/!kFp8>;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kNumMmaThreads = Config::kNumMmaThreads;
  static constexpr int kProducerThreads = 32;  // one warp issues every load
  static constexpr int kTransposeThreads = Config::kNumTransposeThreads;
  // FP8: K scale blocks are multiples of 128 rows, so chunks of gcd(kBlockN, 128) keys of a key
  // block each have one K scale.
  static constexpr int kKScaleChunks = kFp8 ? kBlockN / cute::gcd(kBlockN, 128) : 1;
  static constexpr int kKScaleChunkKeys = kBlockN / kKScaleChunks;

  // FP8: V^T (and O after the last P V) and the pipeline that hands V^T blocks to the consumers.
  struct TransposeStorage {
    alignas(1024) cute::array_aligned<Element, Config::kPvOperandElements, 1024> vt;
    typename TransposePipeline::SharedStorage pipeline;
  };
  struct NoStorage {};
  struct OutputStorage {
    alignas(1024) cute::array_aligned<typename Config::ElementOut, cosize_v<typename Config::SmemLayoutO>, 1024> o;
  };
  // P, where P V reads it from shared memory (Config::kPFromShared).
  struct PStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutP>, 1024> p;
  };
  static constexpr int kVElements =
      Config::kTransposeV ? cosize_v<typename Config::SmemLayoutKV> : Config::kPvOperandElements;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutQ>, 1024> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutKV>, 1024> k;
    // and O, for 16-bit inputs without kOwnOutputBuffer and FP8 with V given transposed
    alignas(1024) cute::array_aligned<Element, kVElements, 1024> v;
    conditional_t<Config::kTransposeV, TransposeStorage, NoStorage> transpose;
    conditional_t<Config::kOwnOutputBuffer, OutputStorage, NoStorage> output;
    conditional_t<Config::kPFromShared, PStorage, NoStorage> p;
    cutlass::arch::ClusterTransactionBarrier q_full;
    // Completes once per tile when the epilogue no longer reads O from the P V operand's buffer
    // (unused with Config::kOwnOutputBuffer).
    cutlass::arch::ClusterBarrier output_drained;
    typename Pipeline::SharedStorage k_pipeline;
    typename Pipeline::SharedStorage v_pipeline;
  };

  // The buffer P V reads its B operand from, where the epilogue stages O unless O has its own.
  __device__ static Element* pv_operand_buffer(SharedStorage& shared) {
    if constexpr (Config::kTransposeV) {
      return shared.transpose.vt.data();
    } else {
      return shared.v.data();
    }
  }
  __device__ static void* output_buffer(SharedStorage& shared) {
    if constexpr (Config::kOwnOutputBuffer) {
      return shared.output.o.data();
    } else {
      return pv_operand_buffer(shared);
    }
  }

  using TmaQ = TmaLoad<Element, typename Config::SmemLayoutQ, Shape<Int<kBlockM>, Int<kHeadDim>>>;
  using TmaKV = TmaLoad<Element, decltype(take<0, 2>(typename Config::SmemLayoutKV{})),
                        Shape<Int<kBlockN>, Int<kHeadDim>>>;
  // V given transposed: (head_dim, keys) tiles of a (head_dim, keys, heads, batch) view.
  using TmaVt = TmaLoad<Element, decltype(take<0, 2>(typename Config::SmemLayoutVt{})),
                        Shape<Int<kHeadDim>, Int<kBlockN>>>;
  using TmaV = conditional_t<Config::kVTransposedInput, TmaVt, TmaKV>;
  // Where TMA writes V: V^T's layout when V comes transposed.
  using SmemLayoutVLoad =
      conditional_t<Config::kVTransposedInput, typename Config::SmemLayoutVt, typename Config::SmemLayoutKV>;

  struct Fp8Descales {
    Fp8Scales q, k, v;
    // k's rows_per_scale(), for the block of each chunk of every key block (dividends: the chunks'
    // first packed keys, in [0, 2^31)).
    FastDivisor k_rows_per_scale;
    // A power of two: each sequence's key blocks start at the multiple of it at or before its
    // first packed key (key_shift).
    int key_alignment;
  };
  struct NoDescales {};

  struct Params {
    GmemShape shape_q, shape_kv, shape_v;
    typename TmaQ::Copy tma_load_q;
    typename TmaKV::Copy tma_load_k;
    typename TmaV::Copy tma_load_v;
    SeqlenLayout seqlens;
    int heads_per_kv_head;
    float softmax_scale;
    conditional_t<kFp8, Fp8Descales, NoDescales> descales;
    ExactRowsInputs<Element> exact_rows_inputs;  // for the rows the key loop's result does not hold
  };

  // `Problem`: ForwardProblem, or Fp8ForwardProblem for FP8 inputs.
  template <class Problem>
  static Params to_params(Problem const& p) {
    const int tensor_batch = p.seqlens.varlen() ? 1 : int(p.seqlens.batch);
    Params params;
    params.shape_q = GmemShape{int32_t(p.seqlens.total_q), int32_t(p.head_dim), int32_t(p.heads_q),
                               tensor_batch};
    params.shape_kv = GmemShape{int32_t(p.seqlens.total_k), int32_t(p.head_dim), int32_t(p.heads_kv),
                                tensor_batch};
    params.tma_load_q = TmaQ::make(static_cast<Element const*>(p.q), params.shape_q, p.q_stride);
    params.tma_load_k = TmaKV::make(static_cast<Element const*>(p.k), params.shape_kv, p.k_stride);
    if constexpr (Config::kVTransposedInput) {
      // (head_dim, positions, heads, batch) with the positions contiguous: a (head_dim, keys) tile
      // is V^T's block as P V reads it. The positions run to the pitch, not to total_k: the last
      // group's keys may lie past total_k, and its pad rows (finite, by the layout's rule) below.
      const VTransposedLayout vt = VTransposedLayout::of(p.seqlens.total_k, p.heads_kv, p.head_dim);
      params.shape_v = GmemShape{int32_t(p.head_dim), int32_t(vt.pitch), int32_t(p.heads_kv), tensor_batch};
      params.tma_load_v = TmaV::make(static_cast<Element const*>(p.v), params.shape_v,
                                     Strides{vt.batch_stride(), /*between head_dim rows=*/vt.pitch, vt.head_stride()});
    } else {
      params.shape_v = params.shape_kv;
      params.tma_load_v = TmaV::make(static_cast<Element const*>(p.v), params.shape_kv, p.v_stride);
    }
    params.seqlens = p.seqlens;
    params.heads_per_kv_head = int(p.heads_per_kv_head());
    params.softmax_scale = p.softmax_scale;
    ExactRowsInputs<Element>& exact = params.exact_rows_inputs;
    exact.q = static_cast<Element const*>(p.q), exact.k = static_cast<Element const*>(p.k);
    exact.v = static_cast<Element const*>(p.v);
    exact.q_stride = p.q_stride, exact.k_stride = p.k_stride, exact.v_stride = p.v_stride;
    if constexpr (kFp8) {
      exact.q_scales = p.q_scales, exact.k_scales = p.k_scales, exact.v_scales = p.v_scales;
      if constexpr (Config::kVTransposedInput) {
        exact.v_transposed = VTransposedLayout::of(p.seqlens.total_k, p.heads_kv, p.head_dim);
      }
    }
    if constexpr (kFp8) {
      // Rows are 32-bit on this backend (sm90_rules.cpp); a block of 2^31 rows or more holds them all.
      const int rows_per_scale = int(std::min<int64_t>(p.k_scales.rows_per_scale(), INT32_MAX));
      // Block K scales count packed rows, and a chunk must lie in one block: with variable
      // lengths a sequence may start anywhere, so its key blocks start on the chunk grid.
      const bool chunk_grid = p.seqlens.varlen() && p.k_scales.scaling == Fp8Scaling::kBlock;
      // V given transposed permutes its keys within aligned groups, which key blocks must not split.
      const int v_grid = Config::kVTransposedInput ? int(kVTransposedGroup) : 1;
      params.descales = {p.q_scales, p.k_scales, p.v_scales, FastDivisor(rows_per_scale),
                         std::max(chunk_grid ? kKScaleChunkKeys : 1, v_grid)};
    }
    return params;
  }

  // The keys before the sequence's first one that its key blocks start with (mask.cuh): FP8 with
  // variable lengths and K block scales or V given transposed; 0 otherwise.
  __device__ static int key_shift(Params const& params, Sequence const& seq) {
    if constexpr (kFp8) {
      return int(seq.k_begin) & (params.descales.key_alignment - 1);
    } else {
      return 0;
    }
  }

  static bool descriptors_encoded(Params const& params) {
    return encoded(params.tma_load_q.get_tma_descriptor()) && encoded(params.tma_load_k.get_tma_descriptor()) &&
           encoded(params.tma_load_v.get_tma_descriptor());
  }

  __device__ static void prefetch_descriptors(Params const& params) {
    prefetch_tma_descriptor(params.tma_load_q.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_load_k.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_load_v.get_tma_descriptor());
  }

  // Run by the whole producer warp (the named barrier counts it); `leader` issues the copies.
  __device__ static void load(Params const& params, SharedStorage& shared, Pipeline& k_pipeline,
                              Pipeline& v_pipeline, PipelineState& write_state, PairBlock const& tile,
                              Sequence const& seq, int key_block_end, int work_idx, bool leader,
                              TimelineRole& timeline) {
    Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(shared.v.data()), SmemLayoutVLoad{});
    const int head_kv = tile.head / params.heads_per_kv_head;
    const int tensor_batch = int(seq.tensor_batch);

    // A sequence's rows start at q_begin / k_begin of the packed tensor (0 for fixed lengths).
    // Rows past the sequence inside a tile belong to the next sequence or lie outside the tensor
    // (TMA fills those with zeros): the mask hides such keys, and the epilogue stores no such row.
    Tensor mQ = domain_offset(make_coord(int(seq.q_begin), _0{}),
                              params.tma_load_q.get_tma_tensor(params.shape_q)(_, _, tile.head, tensor_batch));
    const int key_base = int(seq.k_begin) - key_shift(params, seq);  // >= 0: k_begin rounded down
    Tensor mK = domain_offset(make_coord(key_base, _0{}),
                              params.tma_load_k.get_tma_tensor(params.shape_kv)(_, _, head_kv, tensor_batch));
    auto key_origin = [&] {
      if constexpr (Config::kVTransposedInput) {
        return make_coord(_0{}, key_base);
      } else {
        return make_coord(key_base, _0{});
      }
    }();
    Tensor mV = domain_offset(key_origin, params.tma_load_v.get_tma_tensor(params.shape_v)(_, _, head_kv, tensor_batch));
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(tile.block, _0{}));
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));
    Tensor gV = [&] {
      if constexpr (Config::kVTransposedInput) {
        return local_tile(mV, Shape<Int<kHeadDim>, Int<kBlockN>>{}, make_coord(_0{}, _));
      } else {
        return local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));
      }
    }();

    auto [tQgQ, tQsQ] = tma_partition(params.tma_load_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                      group_modes<0, 2>(gQ));
    // Named tensors rather than structured bindings: the lambdas below capture them (C++17).
    auto k_partition = tma_partition(params.tma_load_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                     group_modes<0, 2>(gK));
    auto v_partition = tma_partition(params.tma_load_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                     group_modes<0, 2>(gV));
    Tensor tKgK = get<0>(k_partition);
    Tensor tKsK = get<1>(k_partition);
    Tensor tVgV = get<0>(v_partition);
    Tensor tVsV = get<1>(v_partition);

    auto load_k = [&](int n_block, PipelineState const& state) {
      k_pipeline.producer_acquire(state);
      timeline.stamp(TimelineEvent::kLoadK, n_block);
      if (leader) {
        copy(params.tma_load_k.with(*k_pipeline.producer_get_barrier(state), 0), tKgK(_, n_block),
             tKsK(_, state.index()));
      }
    };
    auto load_v = [&](int n_block, PipelineState const& state) {
      v_pipeline.producer_acquire(state);
      timeline.stamp(TimelineEvent::kLoadV, n_block);
      if (leader) {
        copy(params.tma_load_v.with(*v_pipeline.producer_get_barrier(state), 0), tVgV(_, n_block),
             tVsV(_, state.index()));
      }
    };

    // Key blocks last to first, the order the consumers expect (the blocks that need the mask
    // come first). The first K goes out before Q waits for the consumers to free Q's buffer.
    int n_block = key_block_end - 1;
    load_k(n_block, write_state);
    barrier_sync(kNumMmaThreads + kProducerThreads, ForwardBarrier::kQueryEmpty);
    timeline.stamp(TimelineEvent::kLoadQ);
    if (leader) {
      shared.q_full.arrive_and_expect_tx(Config::kQTileBytes);
      copy(params.tma_load_q.with(reinterpret_cast<uint64_t&>(shared.q_full), 0), tQgQ, tQsQ);
    }
    // The buffer V is loaded into holds the previous tile's O until its store has read it (where
    // the kernel transposes V, V^T's buffer does, which the transposing warps wait for instead),
    // unless O has a buffer of its own.
    if constexpr (!Config::kTransposeV && !Config::kOwnOutputBuffer) shared.output_drained.wait((work_idx + 1) % 2);
    // V of a block is consumed one step after its K, so it is loaded one step later too.
    for (--n_block; n_block >= 0; --n_block) {
      const PipelineState v_state = write_state;
      ++write_state;
      load_k(n_block, write_state);
      load_v(n_block + 1, v_state);
    }
    load_v(0, write_state);
    ++write_state;
  }

  // FP8: run by the producer warpgroup's warps 1-3 (`thread` counts from 0 over them) for each tile
  // with keys: every V block of the tile, in the order it was loaded, from V's ring into V^T's.
  __device__ static void transpose_v(SharedStorage& shared, Pipeline& v_pipeline, PipelineState& v_state,
                                     TransposePipeline& vt_pipeline, PipelineState& vt_state, int key_block_end,
                                     int work_idx, int thread) {
    // V^T's buffer holds the previous tile's O until its store has read it (unless O has its own).
    if constexpr (!Config::kOwnOutputBuffer) shared.output_drained.wait((work_idx + 1) % 2);
    for (int n_block = 0; n_block < key_block_end; ++n_block) {
      v_pipeline.consumer_wait(v_state);
      vt_pipeline.producer_acquire(vt_state);
      transpose_block(shared, v_state.index(), vt_state.index(), thread);
      cutlass::arch::fence_view_async_shared();  // WGMMA reads V^T through the async proxy
      vt_pipeline.producer_commit(vt_state);
      v_pipeline.consumer_release(v_state);
      ++v_state;
      ++vt_state;
    }
  }

  // One V block (keys x head_dim) to V^T (head_dim x keys) with the keys of each 16 in the order
  // of P's FP8 operand (accumulator_to_fp8_operand_a): V^T[d][16h + 4c + m] = V[16h + 8(m / 2) +
  // 2c + m % 2][d]. Units of 16 keys x 32 head_dim bytes, one per warp instruction triple (the
  // warps take every third 16 keys of each 32 head_dim bytes):
  //  - ldmatrix.trans (b16) of four 8 x 16-byte matrices: keys 0-7 and 8-15 at head_dim bytes
  //    0-15, then at 16-31. Lane t (c = t % 4, u = t / 4) gets, of each, keys 2c and 2c + 1 at
  //    head_dim bytes 2u and 2u + 1: bytes V[2c][2u], V[2c][2u+1], V[2c+1][2u], V[2c+1][2u+1].
  //  - two byte permutes per register pair then give V[2c][d], V[2c+1][d], V[2c+8][d], V[2c+9][d]
  //    for d = 2u and for 2u + 1: bytes 4c..4c+3 of V^T rows 2u and 2u + 1, exactly the four
  //    bytes stmatrix takes from lane t for row u of a matrix.
  //  - stmatrix of four matrices whose rows are V^T rows 2r (+1) for r < 4 and 2r + 1 (-1) above:
  //    rows of distinct residue mod 8, so each matrix's eight 16-byte rows sit in distinct banks
  //    under the 128- or 64-byte swizzle (lanes u >= 4 swap their pair to match).
  // The loads are conflict-free likewise (eight consecutive keys).
  // Addresses are 32-bit shared-memory offsets through the layouts' swizzle (the buffers are
  // aligned to its period), not CuTe's generic pointers, whose 64-bit arithmetic tripled the loop.
  // Nor is each unit's address swizzled anew: it is the lane's address at the block's origin,
  // XORed with the unit's offset below the swizzle period, plus the rest (SwizzledOffsets), one
  // LOP3 per unit at most, the rest folded into the instructions' immediates.
  __device__ static void transpose_block(SharedStorage& shared, int v_stage, int vt_stage, int thread) {
    using LoadOffsets = SwizzledOffsets<typename Config::SmemLayoutKV>;
    using StoreOffsets = SwizzledOffsets<typename Config::SmemLayoutVt>;
    static_assert(LoadOffsets::decomposes(kLoadLaneRows, kLoadLaneColumns, kBlockN, 16, kHeadDim, 32),
                  "V's swizzle does not split into a lane part and unit offsets");
    static_assert(StoreOffsets::decomposes(kStoreLaneRows, 1, kHeadDim, 32, kBlockN, 16),
                  "V^T's swizzle does not split into a lane part and unit offsets");
    constexpr uint32_t kWarps = kTransposeThreads / 32;
    const uint32_t warp = uint32_t(thread) / 32, lane = uint32_t(thread) % 32;
    const uint32_t matrix = lane / 8, matrix_row = lane % 8;  // the row address this lane gives
    const uint32_t load_key = matrix_row + 8 * (matrix % 2), load_dim = 16 * (matrix / 2);
    const uint32_t store_dim = 16 * (matrix / 2) + 2 * matrix_row + ((matrix % 2) ^ (matrix_row >= 4 ? 1 : 0));
    const bool swap = lane / 4 >= 4;
    const uint32_t first = swap ? 0x7531 : 0x6420, second = swap ? 0x6420 : 0x7531;
    const uint32_t load_lane =
        cast_smem_ptr_to_uint(shared.v.data()) + LoadOffsets::swizzled(load_key, load_dim, uint32_t(v_stage));
    const uint32_t store_lane = cast_smem_ptr_to_uint(shared.transpose.vt.data()) +
                                StoreOffsets::swizzled(store_dim, 0, uint32_t(vt_stage));
    // Not unrolled: the producer warpgroup's registers are too few to hold every unit's addresses.
#pragma unroll 1
    for (uint32_t key0 = 16 * warp; key0 < kBlockN; key0 += 16 * kWarps) {
      const uint32_t load_keys = LoadOffsets::offset(load_lane, key0, 0);
      const uint32_t store_keys = StoreOffsets::offset(store_lane, 0, key0);
      CUTE_UNROLL
      for (uint32_t dim0 = 0; dim0 < kHeadDim; dim0 += 32) {
        const uint32_t load = LoadOffsets::offset(load_keys, 0, dim0);
        const uint32_t store = StoreOffsets::offset(store_keys, dim0, 0);
        uint32_t r0, r1, r2, r3;
        asm volatile("ldmatrix.sync.aligned.x4.trans.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(load));
        store_matrix_x4(store, __byte_perm(r0, r1, first), __byte_perm(r0, r1, second), __byte_perm(r2, r3, first),
                        __byte_perm(r2, r3, second));
      }
    }
  }
  // The coordinates a lane gives ldmatrix (keys x head_dim bytes of V) and stmatrix (head_dim
  // rows of V^T): what SwizzledOffsets::decomposes checks over.
  static constexpr int kLoadLaneRows = 16, kLoadLaneColumns = 32, kStoreLaneRows = 32;

  // Run by every consumer thread; `thread_idx` counts from 0 over the consumer warpgroups. Returns
  // with the normalised output in `output` and the per-row log-sum-exp in `lse`, and whether the
  // result holds for the thread's rows (OnlineSoftmax::rows_in_range); where a warp's does not,
  // recompute_exact_rows must follow.
  // `v_pipeline` hands over the B operand of P V: V blocks (the TMA pipeline) for 16-bit inputs,
  // V^T blocks (the transpose pipeline) for FP8.
  // Inlined with its step lambdas: at FP8 head_dim 256's 128 x 128 tile ptxas otherwise keeps a
  // lambda a real call, with a stack frame of some 900 bytes in the key loop.
  template <class PvPipeline, class TensorO, class RowStats>
  __device__ __forceinline__ static bool mma(Params const& params, SharedStorage& shared, Pipeline& k_pipeline,
                                             PvPipeline& v_pipeline, PipelineState& read_state,
                                             PairBlock const& tile, Sequence const& seq, Mask const& mask,
                                             int key_block_end, int work_idx, int thread_idx, TensorO& output,
                                             RowStats& lse, TimelineRole& timeline) {
    Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutKV{});
    Tensor sVt = make_tensor(make_smem_ptr(pv_operand_buffer(shared)), typename Config::SmemLayoutVt{});

    typename Config::TiledMmaQK mma_qk;
    typename Config::TiledMmaPV mma_pv;
    // Shared-memory operands sliced per thread, not per warpgroup (warpgroup_operand_slice): with
    // the slices' descriptors in uniform registers BF16 head_dim 256 ran 4-9% slower (FP8 even;
    // performance log, 2026-12-05, second session). But per warpgroup where P comes from shared
    // memory: the three operands' descriptors built per thread spilled its key loops (12-16 LDL a
    // step; performance log, 2026-12-07 thirty-first).
    static_assert(!(Config::kPFromShared && Config::kQInRegisters), "Q's register fragment is the thread's own");
    auto operand_slice = [&](auto const& tiled_mma) {
      if constexpr (Config::kPFromShared) {
        return warpgroup_operand_slice(tiled_mma, thread_idx);
      } else {
        return tiled_mma.get_thread_slice(thread_idx);
      }
    };
    auto operand_qk = operand_slice(mma_qk);
    auto operand_pv = operand_slice(mma_pv);
    Tensor tSrQ = operand_qk.partition_fragment_A(sQ);
    Tensor tSrK = operand_qk.partition_fragment_B(sK);
    Tensor tOrVt = operand_pv.partition_fragment_B(sVt);
    Tensor tScS =
        mma_qk.get_thread_slice(thread_idx).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    // With P from shared memory: P V's A operand (descriptors of P's buffer), and the offset of
    // this lane's stores into it (stage_p).
    auto tOsP = [&] {
      if constexpr (Config::kPFromShared) {
        Tensor sP = make_tensor(make_smem_ptr(shared.p.p.data()), typename Config::SmemLayoutP{});
        return operand_pv.partition_fragment_A(sP)(_, _, _, 0);
      } else {
        return cute::false_type{};  // P stays in registers
      }
    }();
    const uint32_t p_lane = p_lane_offset(thread_idx);

    constexpr int kRows = decltype(size<0>(accumulator_rows_cols(output.layout())))::value;
    using Softmax = OnlineSoftmax<kRows, kFp8, kKScaleChunks, Config::kRowOffsets>;
    Softmax softmax(params.softmax_scale);
    clear(output);

    // FP8: the Q scale of each of the thread's rows (rows past the sequence read its last row's),
    // and per step the K scale of each chunk of the key block (keys past it read its last key's).
    // The Q and V scales are loaded here and checked (usable_scale) only where first used, so that
    // their loads' latency (L2 or DRAM: a new tile's rows) does not hold the Q wait (checked here,
    // it did: FP8 head_dim 128's Q wait was 1,272 cycles a tile in the timeline, 16-bit's 100).
    RowVector<kRows> q_descale;
    float v_descale = 1.f;
    const int head_kv = kFp8 ? tile.head / params.heads_per_kv_head : 0;
    float const* k_scales_of_head = nullptr;
    if constexpr (kFp8) {
      k_scales_of_head = params.descales.k.data + params.descales.k.head_first(seq.tensor_batch, head_kv);
      Tensor rows = make_tensor(tScS.data(), accumulator_rows_cols(tScS.layout()));
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int row = min(tile.block * kBlockM + int(get<0>(rows(r, 0))), int(seq.seqlen_q) - 1);
        Fp8Scales const& q_scales = params.descales.q;
        q_descale(r) = __ldg(q_scales.data + q_scales.index(seq.tensor_batch, tile.head, seq.q_begin + row));
      }
      Fp8Scales const& v_scales = params.descales.v;
      v_descale = __ldg(v_scales.data + v_scales.index(seq.tensor_batch, head_kv, 0));
    }
    // FP8: the K scales of a key block's chunks as loaded; softmax_step checks them.
    using ChunkScales = typename Softmax::ChunkScales;
    auto k_descales_of = [&](int n_block) CUTLASS_LAMBDA_FUNC_INLINE {
      ChunkScales loaded{};
      if constexpr (kFp8) {
        CUTE_UNROLL
        for (int j = 0; j < kKScaleChunks; ++j) {
          // The chunk's first key, of the sequence (negative: before it, in the rows before the
          // sequence that the mask hides); a chunk past the sequence reads its last key's.
          const int key =
              min(n_block * kBlockN + j * kKScaleChunkKeys - mask.shift(), int(seq.seqlen_k) - 1);
          const int block = params.descales.k_rows_per_scale.div(int(seq.k_begin) + key);
          loaded[j] = __ldg(k_scales_of_head + block);
        }
      }
      return loaded;
    };
    auto softmax_step = [&](auto& scores, ChunkScales k_descale) CUTLASS_LAMBDA_FUNC_INLINE {
      auto maxima_done = [&] { timeline.stamp(TimelineEvent::kMaximaDone); };
      if constexpr (kFp8) {
        CUTE_UNROLL
        for (int j = 0; j < kKScaleChunks; ++j) k_descale[j] = usable_scale(k_descale[j]);
        return softmax.step(scores, q_descale, k_descale, maxima_done);
      } else {
        return softmax.step(scores, maxima_done);
      }
    };

    const Pingpong pingpong;
    const int unmasked_begin = mask.unmasked_key_block_begin();
    const int unmasked_end = mask.unmasked_key_block_end(tile.block);
    PipelineState& k_state = read_state;
    PipelineState v_state = read_state;  // V trails K by one block: P of the previous block waits for it
    int n_block = key_block_end - 1;
    // Loaded with the Q scales: inside the step they would follow the first S's wait, a second
    // latency in series with the Q scales' (the later steps' loads ptxas hoists above their S's
    // wait). ptxas issues all of them just before the first Q K^T and checks them before its last
    // WGMMA, so one load latency remains, partly under the first three.
    const ChunkScales first_k_descales = k_descales_of(n_block);
    shared.q_full.wait(work_idx % 2);
    timeline.stamp(TimelineEvent::kQueryReady);

    // The first block has nothing to overlap with; it may cross the sequence end or the diagonal.
    // Its Q K^T reads Q from shared memory; with kQInRegisters, Q is loaded into registers under it
    // for the later blocks, and Q's buffer is then free for the next tile's Q.
    Tensor scores = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
    k_pipeline.consumer_wait(k_state);
    if constexpr (Config::kQInRegisters) {
      typename Config::TiledMmaQKShared mma_qk_shared;
      auto thread_qk_shared = mma_qk_shared.get_thread_slice(thread_idx);
      warpgroup_gemm</*kZeroInit=*/true, /*kWait=*/false>(mma_qk_shared, thread_qk_shared.partition_fragment_A(sQ),
                                                          tSrK(_, _, _, k_state.index()), scores);
      auto q_copy = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma_qk);
      auto thread_q_copy = q_copy.get_thread_slice(thread_idx);
      copy(q_copy, thread_q_copy.partition_S(sQ), thread_q_copy.retile_D(tSrQ));
      warpgroup_wait<0>();
      warpgroup_fence_operand(scores);
      barrier_arrive(kNumMmaThreads + kProducerThreads, ForwardBarrier::kQueryEmpty);
    } else {
      warpgroup_gemm</*kZeroInit=*/true, /*kWait=*/true>(mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), scores);
    }
    timeline.stamp(TimelineEvent::kScoresDone);
    k_pipeline.consumer_release(k_state);
    ++k_state;
    if (n_block >= unmasked_end || n_block < unmasked_begin) mask.apply(scores, tScS, tile.block, n_block);
    if constexpr (kFp8) {
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) q_descale(r) = usable_scale(q_descale(r));
    }
    softmax_step(scores, first_k_descales);  // the output is still zero: nothing to rescale
    timeline.stamp(TimelineEvent::kSoftmaxDone);
    Tensor p = convert_p(scores);
    if constexpr (Config::kPFromShared) stage_p(shared, p, p_lane);
    // The rescale a step's new maxima ask of the output, applied in the next step while its Q K^T
    // runs on the tensor cores, just before the P V it must precede (FlashAttention-3's order),
    // rather than between the GEMMs of two steps.
    RowVector<kRows> pending_rescale;
    fill(pending_rescale, 1.f);

    auto overlapped_step = [&](int n_block, auto needs_mask) CUTLASS_LAMBDA_FUNC_INLINE {
      Tensor next_scores = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
      timeline.stamp(TimelineEvent::kStepBegin, n_block);
      k_pipeline.consumer_wait(k_state);
      v_pipeline.consumer_wait(v_state);
      timeline.stamp(TimelineEvent::kInputsReady);
      pingpong.wait_turn();
      timeline.stamp(TimelineEvent::kTurn);
      warpgroup_gemm<true, false>(mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), next_scores);
      Softmax::rescale_output(output, pending_rescale);
      warpgroup_gemm<false, false>(mma_pv, p_operand(p, tOsP), tOrVt(_, _, _, v_state.index()), output);
      pingpong.pass_turn();
      timeline.stamp(TimelineEvent::kIssued);
      warpgroup_wait<1>();  // S retired; P V may still run
      warpgroup_fence_operand(next_scores);
      timeline.stamp(TimelineEvent::kScoresDone);
      k_pipeline.consumer_release(k_state);
      ++k_state;
      if constexpr (decltype(needs_mask)::value) mask.apply(next_scores, tScS, tile.block, n_block);
      pending_rescale = softmax_step(next_scores, k_descales_of(n_block));
      timeline.stamp(TimelineEvent::kSoftmaxDone);
      warpgroup_wait<0>();
      warpgroup_fence_operand(output);
      timeline.stamp(TimelineEvent::kOutputDone);
      v_pipeline.consumer_release(v_state);
      ++v_state;
      p = convert_p(next_scores);
      if constexpr (Config::kPFromShared) stage_p(shared, p, p_lane);  // the last P V has read P's buffer
    };
    for (--n_block; n_block >= unmasked_end; --n_block) overlapped_step(n_block, cute::true_type{});
    for (; n_block >= unmasked_begin; --n_block) overlapped_step(n_block, cute::false_type{});
    if constexpr (kFp8) {
      if (n_block == 0) overlapped_step(0, cute::true_type{});  // starts before the sequence
    }

    // Every Q K^T of this tile has retired: the producer may bring the next tile's Q.
    if constexpr (!Config::kQInRegisters) barrier_arrive(kNumMmaThreads + kProducerThreads, ForwardBarrier::kQueryEmpty);
    v_pipeline.consumer_wait(v_state);
    Softmax::rescale_output(output, pending_rescale);
    warpgroup_gemm<false, true>(mma_pv, p_operand(p, tOsP), tOrVt(_, _, _, v_state.index()), output);
    v_pipeline.consumer_release(v_state);

    lse = softmax.finalize(output, params.softmax_scale, kFp8 ? usable_scale(v_descale) : v_descale);
    return softmax.rows_in_range();
  }

  // The tile's rows of this thread's warp again, exactly (exact_rows.cuh): output and lse as mma's.
  template <class TensorO, class RowStats>
  __device__ static void recompute_exact_rows(Params const& params, PairBlock const& tile, Sequence const& seq,
                                              int thread_idx, TensorO& output, RowStats& lse) {
    typename Config::TiledMmaPV mma_pv;
    Tensor coords =
        mma_pv.get_thread_slice(thread_idx).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using OutputLayout = decltype(output.layout());
    constexpr int kRows = decltype(size<0>(accumulator_rows_cols(OutputLayout{})))::value;
    float values[cosize_v<OutputLayout>], lse_values[kRows];
    exact_rows<Element, OutputLayout>(params.exact_rows_inputs, seq, tile.head, tile.head / params.heads_per_kv_head,
                                      tile.block * kBlockM, kCausal, params.softmax_scale, coords, values, lse_values);
    CUTE_UNROLL
    for (int i = 0; i < size(output); ++i) output(i) = values[OutputLayout{}(i)];
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) lse(r) = lse_values[r];
  }

  // P in the element type of P V, laid out (16-bit) as the accumulator or (FP8) as the operand.
  template <class TensorS>
  __device__ static auto convert_p(TensorS const& scores) {
    if constexpr (kFp8) {
      return accumulator_to_fp8_operand_a<Element>(scores);
    } else {
      return convert_fragment<Element>(scores);
    }
  }
  // The A operand view of convert_p's result.
  template <class TensorP>
  __device__ static auto p_as_operand(TensorP& p) {
    if constexpr (kFp8) {
      return make_tensor(p.data(), p.layout());
    } else {
      return make_tensor(p.data(), accumulator_as_operand_a(p.layout()));
    }
  }
  // P V's A operand: P's registers, or with Config::kPFromShared its buffer's descriptors `tOsP`.
  template <class TensorP, class SharedP>
  __device__ static auto p_operand(TensorP& p, SharedP const& tOsP) {
    if constexpr (Config::kPFromShared) {
      return tOsP;
    } else {
      return p_as_operand(p);
    }
  }

  // P from shared memory (Config::kPFromShared). stmatrix x4 stores 16 rows x 16 keys of a warp's
  // P as four 8 x 8 matrices: rows 0-7 of keys 0-7, rows 8-15 of keys 0-7, then the same of keys
  // 8-15; lane t gives the address of row t % 8 of matrix t / 8, and holds of each matrix row t / 4,
  // keys 2 (t % 4) and 2 (t % 4) + 1, just as the accumulator holds P (accumulator_rows_cols). A
  // lane's address for keys 16h is its offset at keys 0 (p_lane_offset, taken once per tile) with
  // 16h's offset XORed in (SwizzledOffsets), plus the buffer's address.
  using POffsets = SwizzledOffsets<typename Config::SmemLayoutP, int(sizeof(Element))>;
  // The coordinates a lane gives stmatrix (rows, keys) within its warp's 16 rows, which start
  // whole swizzle periods apart: what SwizzledOffsets::decomposes checks over.
  static constexpr int kPLaneRows = 16, kPLaneKeys = 16;

  CUTE_HOST_DEVICE static uint32_t p_lane_offset(int thread_idx) {
    if constexpr (Config::kPFromShared) {
      const uint32_t lane = uint32_t(thread_idx) % 32, matrix = lane / 8;
      const uint32_t row = 16 * (uint32_t(thread_idx) / 32) + lane % 8 + 8 * (matrix % 2);
      return POffsets::swizzled(row, 8 * (matrix / 2), 0);
    } else {
      return 0;
    }
  }

  // Stores the warp's P (convert_p's result) for P V to read: per 16 keys h, the thread's words of
  // rows r and r + 8 for key groups 2h and 2h + 1, which are its A operand's k-step h
  // (accumulator_as_operand_a). Each warpgroup's WGMMA reads its own 64 rows, and each warp's
  // accumulator rows only its own 16: after the fence for the async proxy a warp sync suffices.
  template <class TensorP>
  __device__ static void stage_p(SharedStorage& shared, TensorP const& p, uint32_t lane_offset) {
    static_assert(POffsets::decomposes(kPLaneRows, kPLaneKeys, kBlockM, kPLaneRows, kBlockN, 16),
                  "P's swizzle does not split into a lane part and 16-key offsets");
    Tensor words = recast<uint32_t>(p);
    static_assert(decltype(size(words))::value == kBlockN / 4, "a thread holds 2 rows x 2 keys per 8 keys");
    const uint32_t base = cast_smem_ptr_to_uint(shared.p.p.data());
    CUTE_UNROLL
    for (int h = 0; h < kBlockN / 16; ++h) {
      store_matrix_x4(base + POffsets::offset(lane_offset, 0, 16 * h), words(4 * h), words(4 * h + 1),
                      words(4 * h + 2), words(4 * h + 3));
    }
    cutlass::arch::fence_view_async_shared();
    __syncwarp();
  }

  // Before the first tile: Q's buffer is free, and the first warpgroup has the first turn.
  __device__ static void consumer_init() {
    barrier_arrive(kNumMmaThreads + kProducerThreads, ForwardBarrier::kQueryEmpty);
    Pingpong::init();
  }

  // The named-barrier turns of the pingpong schedule; no-ops when Config::kPingpong is off. The
  // warpgroup's two barrier offsets are taken once per tile: canonical_warp_group_idx() is a
  // shuffle, and in the key loop it cost a SHFL and the modulo's arithmetic per turn.
  struct Pingpong {
    static constexpr int kWarpgroups = Config::kNumConsumerWarpgroups;
    static constexpr uint32_t kThreads = 2 * 128;  // the warpgroup waiting plus the one passing
    int own_turn = consumer_warpgroup();
    int next_turn = (own_turn + 1) % kWarpgroups;

    __device__ static int consumer_warpgroup() { return cutlass::canonical_warp_group_idx() - 1; }

    __device__ static void init() {
      if constexpr (Config::kPingpong) {
        if (consumer_warpgroup() == 0) barrier_arrive(kThreads, ForwardBarrier::kWarpgroupTurn, 0);
      }
    }
    __device__ void wait_turn() const {
      if constexpr (Config::kPingpong) barrier_sync(kThreads, ForwardBarrier::kWarpgroupTurn, own_turn);
    }
    __device__ void pass_turn() const {
      if constexpr (Config::kPingpong) barrier_arrive(kThreads, ForwardBarrier::kWarpgroupTurn, next_turn);
    }
  };
};

}  // namespace hopattn::sm90
