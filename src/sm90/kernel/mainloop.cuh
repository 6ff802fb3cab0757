// The mainloop, split by role. The producer (one thread) brings Q once and streams K and V blocks
// into a kStages-deep shared-memory ring with TMA. The consumer warpgroups compute S = Q K^T, the
// online softmax and O += P V for each key block, releasing each buffer as soon as its GEMM retires;
// the softmax of one block overlaps the P V GEMM of the block before.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/kernel/mask.cuh"
#include "sm90/kernel/params.hpp"
#include "sm90/kernel/scheduler.hpp"
#include "sm90/kernel/softmax.cuh"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

template <class Config, bool kCausal>
struct Mainloop {
  using Element = typename Config::Element;
  using Params = ForwardParams<Config>;
  using SharedStorage = typename Config::SharedStorage;
  using Pipeline = typename Config::Pipeline;
  using PipelineState = typename Config::PipelineState;
  using Mask = BlockMask<Config::kBlockM, Config::kBlockN, kCausal>;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kHeadDim = Config::kHeadDim;

  // Issued by a single producer thread. Key blocks are visited last to first, the order the
  // consumers expect (boundary blocks that need masking come first).
  __device__ static void load(Params const& params, SharedStorage& shared, Pipeline& k_pipeline,
                              Pipeline& v_pipeline, PipelineState& write_state,
                              TileCoord const& tile, int key_block_end) {
    Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(shared.v.data()), typename Config::SmemLayoutKV{});
    const int head_kv = tile.head / params.heads_per_kv_head;

    Tensor mQ = params.tma_load_q.get_tma_tensor(params.shape_q);
    Tensor mK = params.tma_load_k.get_tma_tensor(params.shape_kv);
    Tensor mV = params.tma_load_v.get_tma_tensor(params.shape_kv);
    Tensor gQ = local_tile(mQ(_, _, tile.head, tile.batch), Shape<Int<kBlockM>, Int<kHeadDim>>{},
                           make_coord(tile.m_block, _0{}));
    Tensor gK = local_tile(mK(_, _, head_kv, tile.batch), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                           make_coord(_, _0{}));  // (kBlockN, kHeadDim, n_block)
    Tensor gV = local_tile(mV(_, _, head_kv, tile.batch), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                           make_coord(_, _0{}));

    auto [tQgQ, tQsQ] = tma_partition(params.tma_load_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                      group_modes<0, 2>(gQ));
    auto [tKgK, tKsK] = tma_partition(params.tma_load_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                      group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(params.tma_load_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                      group_modes<0, 2>(gV));

    shared.q_full.arrive_and_expect_tx(Config::kQTileBytes);
    copy(params.tma_load_q.with(reinterpret_cast<uint64_t&>(shared.q_full), 0), tQgQ, tQsQ);

    for (int n_block = key_block_end - 1; n_block >= 0; --n_block) {
      k_pipeline.producer_acquire(write_state);
      copy(params.tma_load_k.with(*k_pipeline.producer_get_barrier(write_state), 0),
           tKgK(_, n_block), tKsK(_, write_state.index()));
      v_pipeline.producer_acquire(write_state);
      copy(params.tma_load_v.with(*v_pipeline.producer_get_barrier(write_state), 0),
           tVgV(_, n_block), tVsV(_, write_state.index()));
      ++write_state;
    }
  }

  // Run by every consumer thread; `thread_idx` counts from 0 over the consumer warpgroups.
  // Returns with the normalised output in `output` and the per-row log-sum-exp in `lse`.
  template <class TensorO, class RowStats>
  __device__ static void compute(Params const& params, SharedStorage& shared, Pipeline& k_pipeline,
                                 Pipeline& v_pipeline, PipelineState& read_state,
                                 TileCoord const& tile, Mask const& mask, int key_block_end,
                                 int thread_idx, TensorO& output, RowStats& lse) {
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
    shared.q_full.wait(0);

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

    // Two stages in flight per warpgroup: S = Q K^T of this block is issued together with O += P V
    // of the previous one, so the softmax of this block runs while the tensor cores do P V.
    auto overlapped_step = [&](int n_block, auto needs_mask) {
      Tensor next_scores = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
      k_pipeline.consumer_wait(k_state);
      warpgroup_gemm<true, false>(mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), next_scores);
      v_pipeline.consumer_wait(v_state);
      Tensor tOrP = make_tensor(p.data(), accumulator_as_operand_a(p.layout()));
      warpgroup_gemm<false, false>(mma_pv, tOrP, tOrVt(_, _, _, v_state.index()), output);
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

    v_pipeline.consumer_wait(v_state);
    Tensor tOrP = make_tensor(p.data(), accumulator_as_operand_a(p.layout()));
    warpgroup_gemm<false, true>(mma_pv, tOrP, tOrVt(_, _, _, v_state.index()), output);
    v_pipeline.consumer_release(v_state);

    lse = softmax.finalize(output, params.softmax_scale);
  }
};

}  // namespace hopattn::sm90
