// The forward mainloop collective, split by role. The producer warp brings each tile's Q and
// streams its K and V blocks into a kStages-deep shared-memory ring with TMA; the consumer
// warpgroups compute S = Q K^T, the online softmax and O += P V per key block. It owns its
// arguments (the problem), its kernel parameters (TMA descriptors, sequence layout, scale) and its
// shared storage (Q, K, V and their barriers).
//
// Overlap, as in FlashAttention-3: inside a warpgroup, S of block n is issued together with P V of
// block n + 1, so the softmax of block n runs while the tensor cores do P V; across warpgroups
// (pingpong), the warpgroups take turns to issue, so one's softmax runs under the other's GEMMs;
// across tiles, the next tile's K and Q load while this tile finishes (kQueryEmpty), and only its
// V waits for this tile's output store (output_drained).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "core/problem.hpp"
#include "sm90/kernel/mask.cuh"
#include "sm90/kernel/named_barriers.hpp"
#include "sm90/kernel/softmax.cuh"
#include "sm90/kernel/tile_scheduler.cuh"
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
  using Mask = BlockMask<Config::kBlockM, Config::kBlockN, kCausal>;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kNumMmaThreads = Config::kNumMmaThreads;
  static constexpr int kProducerThreads = 32;  // one warp issues every load

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutQ>, 1024> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutKV>, 1024> k;
    alignas(1024) cute::array_aligned<Element, Config::kVBufferElements, 1024> v;  // and O
    cutlass::arch::ClusterTransactionBarrier q_full;
    // Completes once per tile when the epilogue no longer reads O from V's buffer.
    cutlass::arch::ClusterBarrier output_drained;
    typename Pipeline::SharedStorage k_pipeline;
    typename Pipeline::SharedStorage v_pipeline;
  };

  using TmaQ = TmaLoad<Element, typename Config::SmemLayoutQ, Shape<Int<kBlockM>, Int<kHeadDim>>>;
  using TmaKV = TmaLoad<Element, decltype(take<0, 2>(typename Config::SmemLayoutKV{})),
                        Shape<Int<kBlockN>, Int<kHeadDim>>>;

  struct Params {
    GmemShape shape_q, shape_kv;
    typename TmaQ::Copy tma_load_q;
    typename TmaKV::Copy tma_load_k, tma_load_v;
    SeqlenLayout seqlens;
    int heads_per_kv_head;
    float softmax_scale;
  };

  static Params to_params(ForwardProblem const& p) {
    const int tensor_batch = p.seqlens.varlen() ? 1 : int(p.seqlens.batch);
    Params params;
    params.shape_q = GmemShape{int32_t(p.seqlens.total_q), int32_t(p.head_dim), int32_t(p.heads_q),
                               tensor_batch};
    params.shape_kv = GmemShape{int32_t(p.seqlens.total_k), int32_t(p.head_dim), int32_t(p.heads_kv),
                                tensor_batch};
    params.tma_load_q = TmaQ::make(static_cast<Element const*>(p.q), params.shape_q, p.q_stride);
    params.tma_load_k = TmaKV::make(static_cast<Element const*>(p.k), params.shape_kv, p.k_stride);
    params.tma_load_v = TmaKV::make(static_cast<Element const*>(p.v), params.shape_kv, p.v_stride);
    params.seqlens = p.seqlens;
    params.heads_per_kv_head = int(p.heads_per_kv_head());
    params.softmax_scale = p.softmax_scale;
    return params;
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
                              Pipeline& v_pipeline, PipelineState& write_state, TileCoord const& tile,
                              Sequence const& seq, int key_block_end, int work_idx, bool leader) {
    Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(shared.v.data()), typename Config::SmemLayoutKV{});
    const int head_kv = tile.head / params.heads_per_kv_head;
    const int tensor_batch = int(seq.tensor_batch);

    // A sequence's rows start at q_begin / k_begin of the packed tensor (0 for fixed lengths).
    // Rows past the sequence inside a tile belong to the next sequence or lie outside the tensor
    // (TMA fills those with zeros): the mask hides such keys, and the epilogue stores no such row.
    Tensor mQ = domain_offset(make_coord(int(seq.q_begin), _0{}),
                              params.tma_load_q.get_tma_tensor(params.shape_q)(_, _, tile.head, tensor_batch));
    Tensor mK = domain_offset(make_coord(int(seq.k_begin), _0{}),
                              params.tma_load_k.get_tma_tensor(params.shape_kv)(_, _, head_kv, tensor_batch));
    Tensor mV = domain_offset(make_coord(int(seq.k_begin), _0{}),
                              params.tma_load_v.get_tma_tensor(params.shape_kv)(_, _, head_kv, tensor_batch));
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(tile.m_block, _0{}));
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));
    Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));

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
      if (leader) {
        copy(params.tma_load_k.with(*k_pipeline.producer_get_barrier(state), 0), tKgK(_, n_block),
             tKsK(_, state.index()));
      }
    };
    auto load_v = [&](int n_block, PipelineState const& state) {
      v_pipeline.producer_acquire(state);
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
    if (leader) {
      shared.q_full.arrive_and_expect_tx(Config::kQTileBytes);
      copy(params.tma_load_q.with(reinterpret_cast<uint64_t&>(shared.q_full), 0), tQgQ, tQsQ);
    }
    // V's buffer holds the previous tile's O until its store has read it.
    shared.output_drained.wait((work_idx + 1) % 2);
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

  // Run by every consumer thread; `thread_idx` counts from 0 over the consumer warpgroups. Returns
  // with the normalised output in `output` and the per-row log-sum-exp in `lse`.
  template <class TensorO, class RowStats>
  __device__ static void mma(Params const& params, SharedStorage& shared, Pipeline& k_pipeline,
                             Pipeline& v_pipeline, PipelineState& read_state, TileCoord const& tile,
                             Mask const& mask, int key_block_end, int work_idx, int thread_idx,
                             TensorO& output, RowStats& lse) {
    Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutKV{});
    Tensor sVt = make_tensor(make_smem_ptr(shared.v.data()), typename Config::SmemLayoutVt{});

    typename Config::TiledMmaQK mma_qk;
    typename Config::TiledMmaPV mma_pv;
    auto thread_qk = mma_qk.get_thread_slice(thread_idx);
    auto thread_pv = mma_pv.get_thread_slice(thread_idx);
    Tensor tSrQ = thread_qk.partition_fragment_A(sQ);
    Tensor tSrK = thread_qk.partition_fragment_B(sK);
    Tensor tOrVt = thread_pv.partition_fragment_B(sVt);
    Tensor tScS = thread_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));

    constexpr int kRows = decltype(size<0>(accumulator_rows_cols(output.layout())))::value;
    OnlineSoftmax<kRows> softmax(params.softmax_scale);
    clear(output);

    const int unmasked_end = mask.unmasked_key_block_end(tile.m_block);
    PipelineState& k_state = read_state;
    PipelineState v_state = read_state;  // V trails K by one block: P of the previous block waits for it
    shared.q_full.wait(work_idx % 2);

    // The first block has nothing to overlap with; it may cross the sequence end or the diagonal.
    int n_block = key_block_end - 1;
    Tensor scores = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
    k_pipeline.consumer_wait(k_state);
    warpgroup_gemm</*kZeroInit=*/true, /*kWait=*/true>(mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), scores);
    k_pipeline.consumer_release(k_state);
    ++k_state;
    if (n_block >= unmasked_end) mask.apply(scores, tScS, tile.m_block, n_block);
    softmax.step(scores);  // the output is still zero: nothing to rescale
    Tensor p = convert_fragment<Element>(scores);

    auto overlapped_step = [&](int n_block, auto needs_mask) {
      Tensor next_scores = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
      k_pipeline.consumer_wait(k_state);
      v_pipeline.consumer_wait(v_state);
      Pingpong::wait_turn();
      warpgroup_gemm<true, false>(mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), next_scores);
      Tensor tOrP = make_tensor(p.data(), accumulator_as_operand_a(p.layout()));
      warpgroup_gemm<false, false>(mma_pv, tOrP, tOrVt(_, _, _, v_state.index()), output);
      Pingpong::pass_turn();
      warpgroup_wait<1>();  // S retired; P V may still run
      warpgroup_fence_operand(next_scores);
      k_pipeline.consumer_release(k_state);
      ++k_state;
      if constexpr (decltype(needs_mask)::value) mask.apply(next_scores, tScS, tile.m_block, n_block);
      const auto rescale = softmax.step(next_scores);
      warpgroup_wait<0>();
      warpgroup_fence_operand(output);
      v_pipeline.consumer_release(v_state);
      ++v_state;
      OnlineSoftmax<kRows>::rescale_output(output, rescale);
      p = convert_fragment<Element>(next_scores);
    };
    for (--n_block; n_block >= unmasked_end; --n_block) overlapped_step(n_block, cute::true_type{});
    for (; n_block >= 0; --n_block) overlapped_step(n_block, cute::false_type{});

    // Every Q K^T of this tile has retired: the producer may bring the next tile's Q.
    barrier_arrive(kNumMmaThreads + kProducerThreads, ForwardBarrier::kQueryEmpty);
    v_pipeline.consumer_wait(v_state);
    Tensor tOrP = make_tensor(p.data(), accumulator_as_operand_a(p.layout()));
    warpgroup_gemm<false, true>(mma_pv, tOrP, tOrVt(_, _, _, v_state.index()), output);
    v_pipeline.consumer_release(v_state);

    lse = softmax.finalize(output, params.softmax_scale);
  }

  // Before the first tile: Q's buffer is free, and the first warpgroup has the first turn.
  __device__ static void consumer_init() {
    barrier_arrive(kNumMmaThreads + kProducerThreads, ForwardBarrier::kQueryEmpty);
    Pingpong::init();
  }

  // The named-barrier turns of the pingpong schedule; no-ops when Config::kPingpong is off.
  struct Pingpong {
    static constexpr int kWarpgroups = Config::kNumConsumerWarpgroups;
    static constexpr uint32_t kThreads = 2 * 128;  // the warpgroup waiting plus the one passing

    __device__ static int consumer_warpgroup() { return cutlass::canonical_warp_group_idx() - 1; }

    __device__ static void init() {
      if constexpr (Config::kPingpong) {
        if (consumer_warpgroup() == 0) barrier_arrive(kThreads, ForwardBarrier::kWarpgroupTurn, 0);
      }
    }
    __device__ static void wait_turn() {
      if constexpr (Config::kPingpong) {
        barrier_sync(kThreads, ForwardBarrier::kWarpgroupTurn, consumer_warpgroup());
      }
    }
    __device__ static void pass_turn() {
      if constexpr (Config::kPingpong) {
        const int next = (consumer_warpgroup() + 1) % kWarpgroups;
        barrier_arrive(kThreads, ForwardBarrier::kWarpgroupTurn, next);
      }
    }
  };
};

}  // namespace hopattn::sm90
