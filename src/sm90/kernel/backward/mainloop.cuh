// The backward mainloop collective, split by role. The producer warp brings the CTA's K and V
// once, then streams Q with its LSE and dO with its D = rowsum(dO * O), one query block per step,
// through two kStages-deep TMA pipelines. The consumer warpgroups recompute P from S and the LSE,
// form dS = P * (dP - D), accumulate dV and dK in registers (the products of config.hpp, from
// registers or, with kSplitHeadDim, from shared memory) and hand dQ, through shared memory, to
// one thread of the producer warpgroup that adds it into the float32 accumulator of the workspace.
// It owns its parameters (TMA descriptors, sequence layout, scale, workspace) and its shared storage.
//
// Steps run over (query head of the kv head's group, query block): a kv head's dK and dV are the
// sums over its query heads, so they keep accumulating in registers across the group.
//
// dQ = dS K is summed over key blocks, i.e. over CTAs. Each step, each warpgroup of TiledMmadQ
// stores its part of the block's dQ in shared memory (Config::dq_accum_offset order, the
// workspace's order too) and the dQ thread adds each part with one bulk reduce-add
// (cp.reduce.async.bulk .add.f32): no per-element atomics in the consumers. The parts are the
// warpgroups' halves of the block, by query rows or by head_dim columns (config.hpp). One shared
// buffer, handed over with two mbarriers per part: dq_full (its 128 threads stored their values
// and fenced them for the async proxy) and dq_empty (the bulk reduce finished reading them; the
// next step may overwrite). With `deterministic` the CTAs of a query block add in key-block
// order: a semaphore per (head, query block) counts the key blocks whose adds are complete, and
// key block n's dQ thread waits for it to reach n; the consumers never wait on it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "core/problem.hpp"
#include "core/softmax_math.hpp"
#include "sm90/kernel/backward/barriers.hpp"
#include "sm90/kernel/backward/key_block.cuh"
#include "sm90/kernel/backward/workspace.hpp"
#include "sm90/kernel/matrix_stores.hpp"
#include "sm90/kernel/tma.hpp"
#include "sm90/kernel/wgmma.hpp"

namespace hopattn::sm90 {

using namespace cute;

// `bytes` (a multiple of 16) of floats in shared memory added element-wise to global memory by the
// TMA engine, in the calling thread's current bulk group (both addresses 16-byte aligned). The
// accumulator's lines are kept in L2 in preference to the streamed Q and dO: every key block of
// the head adds to them.
__device__ __forceinline__ void bulk_reduce_add(float* global, float const* shared, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 [%0], [%1], %2, %3;" ::"l"(
                   global),
               "r"(cute::cast_smem_ptr_to_uint(shared)), "r"(bytes),
               "l"(uint64_t(cute::TMA::CacheHintSm90::EVICT_LAST))
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// The bulk operations of this thread's committed groups have read their shared-memory sources.
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// The bulk operations of this thread's committed groups are complete: their writes are performed.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Orders this thread's generic-proxy global accesses with its async-proxy (bulk) ones, both ways.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
// Four floats to shared memory in one 16-byte store, ordered with the volatile asm around it.
__device__ __forceinline__ void store_shared_float4(float* address, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(cute::cast_smem_ptr_to_uint(address)), "f"(a),
               "f"(b), "f"(c), "f"(d)
               : "memory");
}

__device__ __forceinline__ int load_acquire(int const* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

template <class Config_, bool kCausal>
struct BackwardMainloop {
  using Config = Config_;
  using Element = typename Config::Element;
  using Pipeline = typename Config::Pipeline;
  using PipelineState = typename Config::PipelineState;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kStages = Config::kStages;
  static constexpr int kNumMmaThreads = Config::kNumMmaThreads;
  static constexpr int kNumConsumerWarpgroups = Config::kNumConsumerWarpgroups;
  static constexpr bool kSplitHeadDim = Config::kSplitHeadDim;
  using Work = KeyBlockWork<kBlockM, kBlockN, kCausal>;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutK>, 1024> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutV>, 1024> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutQ>, 1024> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutQ>, 1024> d_o;
    alignas(1024) cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutdSt>, 1024> ds;
    // P^T, where the warpgroups split dV by head_dim (Config::kSplitHeadDim); else nothing.
    conditional_t<kSplitHeadDim,
                  cute::array_aligned<Element, cosize_v<typename Config::SmemLayoutdSt>, 1024>,
                  cute::array<Element, 0>>
        p;
    alignas(16) cute::array_aligned<float, kBlockM * kStages, 16> lse_log2;
    alignas(16) cute::array_aligned<float, kBlockM * kStages, 16> dpsum;
    // One query block's dQ, part w in the w-th kdQAccumPerWarpgroup floats (Config::dq_accum_offset).
    alignas(128) cute::array_aligned<float, kBlockM * kHeadDim, 128> dq;
    cutlass::arch::ClusterTransactionBarrier kv_full;
    cutlass::arch::ClusterBarrier dq_full[kNumConsumerWarpgroups];   // 128 arrivals: stored and fenced
    cutlass::arch::ClusterBarrier dq_empty[kNumConsumerWarpgroups];  // 1 arrival: read by the reduce
    typename Pipeline::SharedStorage q_pipeline;
    typename Pipeline::SharedStorage do_pipeline;
  };

  using TmaQ = TmaLoad<Element, decltype(take<0, 2>(typename Config::SmemLayoutQ{})), Shape<Int<kBlockM>, Int<kHeadDim>>>;
  using TmaK = TmaLoad<Element, typename Config::SmemLayoutK, Shape<Int<kBlockN>, Int<kHeadDim>>>;
  using TmaV = TmaLoad<Element, typename Config::SmemLayoutV, Shape<Int<kBlockN>, Int<kHeadDim>>>;

  struct Params {
    GmemShape shape_q, shape_kv;
    typename TmaQ::Copy tma_load_q, tma_load_do;
    typename TmaK::Copy tma_load_k;
    typename TmaV::Copy tma_load_v;
    SeqlenLayout seqlens;
    int heads_per_kv_head;
    TileOrder order;  // of the (key block, kv head, sequence) CTAs
    float scale_log2;
    BackwardWorkspace workspace;
  };

  static Params to_params(BackwardProblem const& p, BackwardWorkspace const& workspace, TileOrder const& order) {
    const int tensor_batch = p.seqlens.varlen() ? 1 : int(p.seqlens.batch);
    Params params;
    params.shape_q = GmemShape{int32_t(p.seqlens.total_q), int32_t(p.head_dim), int32_t(p.heads_q), tensor_batch};
    params.shape_kv = GmemShape{int32_t(p.seqlens.total_k), int32_t(p.head_dim), int32_t(p.heads_kv), tensor_batch};
    params.tma_load_q = TmaQ::make(static_cast<Element const*>(p.q), params.shape_q, p.q_stride);
    params.tma_load_do = TmaQ::make(static_cast<Element const*>(p.d_o), params.shape_q, p.d_o_stride);
    params.tma_load_k = TmaK::make(static_cast<Element const*>(p.k), params.shape_kv, p.k_stride);
    params.tma_load_v = TmaV::make(static_cast<Element const*>(p.v), params.shape_kv, p.v_stride);
    params.seqlens = p.seqlens;
    params.heads_per_kv_head = int(p.heads_per_kv_head());
    params.order = order;
    params.scale_log2 = finite_scale_log2(p.softmax_scale);
    params.workspace = workspace;
    return params;
  }

  __device__ static Work work_of(Params const& params) {
    return Work(params.seqlens, params.order, params.heads_per_kv_head);
  }

  // One thread, before the kernel's __syncthreads.
  __device__ static void init_barriers(SharedStorage& shared) {
    shared.kv_full.init(1);
    CUTE_UNROLL
    for (int w = 0; w < kNumConsumerWarpgroups; ++w) {
      shared.dq_full[w].init(128);
      shared.dq_empty[w].init(1);
    }
    cutlass::arch::fence_barrier_init();
  }

  static bool descriptors_encoded(Params const& params) {
    return encoded(params.tma_load_q.get_tma_descriptor()) && encoded(params.tma_load_do.get_tma_descriptor()) &&
           encoded(params.tma_load_k.get_tma_descriptor()) && encoded(params.tma_load_v.get_tma_descriptor());
  }

  __device__ static void prefetch_descriptors(Params const& params) {
    prefetch_tma_descriptor(params.tma_load_q.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_load_do.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_load_k.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_load_v.get_tma_descriptor());
  }

  // Run by the whole producer warp; `leader` issues the copies. Rows of a tile past the sequence
  // belong to the next sequence or lie outside the tensor (TMA fills those with zeros): the mask
  // hides such keys and the workspace's LSE of +inf such queries.
  __device__ static void load(Params const& params, SharedStorage& shared, Pipeline& q_pipeline,
                              Pipeline& do_pipeline, Work const& work, bool leader) {
    Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(shared.v.data()), typename Config::SmemLayoutV{});
    Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(shared.d_o.data()), typename Config::SmemLayoutQ{});
    const int tensor_batch = int(work.seq.tensor_batch);

    Tensor mK = domain_offset(make_coord(int(work.seq.k_begin), _0{}),
                              params.tma_load_k.get_tma_tensor(params.shape_kv)(_, _, work.head_kv, tensor_batch));
    Tensor mV = domain_offset(make_coord(int(work.seq.k_begin), _0{}),
                              params.tma_load_v.get_tma_tensor(params.shape_kv)(_, _, work.head_kv, tensor_batch));
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(work.n_block, _0{}));
    Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(work.n_block, _0{}));
    auto [tKgK, tKsK] = tma_partition(params.tma_load_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(params.tma_load_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    if (leader) {
      shared.kv_full.arrive_and_expect_tx(2 * Config::kKVTileBytes);
      copy(params.tma_load_k.with(reinterpret_cast<uint64_t&>(shared.kv_full), 0), tKgK, tKsK);
      copy(params.tma_load_v.with(reinterpret_cast<uint64_t&>(shared.kv_full), 0), tVgV, tVsV);
    }

    BackwardWorkspace const& ws = params.workspace;
    auto state = cutlass::make_producer_start_state<Pipeline>();
    const int steps = work.steps();
#pragma unroll 1  // kept rolled: the producer warpgroup has 24 registers
    for (int step = 0; step < steps; ++step) {
      const int head = work.head_of_step(step), m_block = work.m_block_of_step(step);
      Tensor mQ = domain_offset(make_coord(int(work.seq.q_begin), _0{}),
                                params.tma_load_q.get_tma_tensor(params.shape_q)(_, _, head, tensor_batch));
      Tensor mdO = domain_offset(make_coord(int(work.seq.q_begin), _0{}),
                                 params.tma_load_do.get_tma_tensor(params.shape_q)(_, _, head, tensor_batch));
      Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, _0{}));
      Tensor gdO = local_tile(mdO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, _0{}));
      auto [tQgQ, tQsQ] = tma_partition(params.tma_load_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
      auto [tdOgdO, tdOsdO] = tma_partition(params.tma_load_do, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO),
                                            group_modes<0, 2>(gdO));
      const int64_t row = ws.row_index(work.seq, work.batch, head, int64_t(m_block) * kBlockM);
      const int stage = int(state.index());

      q_pipeline.producer_acquire(state);
      if (leader) {
        uint64_t* barrier = q_pipeline.producer_get_barrier(state);
        copy(params.tma_load_q.with(*barrier, 0), tQgQ, tQsQ(_, stage));
        SM90_BULK_COPY_G2S::copy(ws.lse_log2 + row, barrier, shared.lse_log2.data() + stage * kBlockM,
                                 Config::kRowVectorBytes);
      }
      do_pipeline.producer_acquire(state);
      if (leader) {
        uint64_t* barrier = do_pipeline.producer_get_barrier(state);
        copy(params.tma_load_do.with(*barrier, 0), tdOgdO, tdOsdO(_, stage));
        SM90_BULK_COPY_G2S::copy(ws.dpsum + row, barrier, shared.dpsum.data() + stage * kBlockM,
                                 Config::kRowVectorBytes);
      }
      ++state;
    }
  }

  // Run by every consumer thread (`thread_idx` counts from 0 over the consumer warpgroups), for a
  // key block with at least one step. dk and dv accumulate; dk is not yet scaled.
  template <class FragdK, class FragdV>
  __device__ static void mma(Params const& params, SharedStorage& shared, Pipeline& q_pipeline,
                             Pipeline& do_pipeline, Work const& work, int thread_idx, FragdK& dk,
                             FragdV& dv) {
    Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutK{});
    Tensor sKt = make_tensor(make_smem_ptr(shared.k.data()), typename Config::SmemLayoutKt{});
    Tensor sV = make_tensor(make_smem_ptr(shared.v.data()), typename Config::SmemLayoutV{});
    Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQ{});
    Tensor sQt = make_tensor(make_smem_ptr(shared.q.data()), typename Config::SmemLayoutQt{});
    Tensor sdO = make_tensor(make_smem_ptr(shared.d_o.data()), typename Config::SmemLayoutQ{});
    Tensor sdOt = make_tensor(make_smem_ptr(shared.d_o.data()), typename Config::SmemLayoutQt{});
    Tensor sdSt = make_tensor(make_smem_ptr(shared.ds.data()), typename Config::SmemLayoutdSt{});
    Tensor sdS = make_tensor(make_smem_ptr(shared.ds.data()), typename Config::SmemLayoutdS{});
    Tensor sPt = make_tensor(make_smem_ptr(shared.p.data()), typename Config::SmemLayoutdSt{});

    typename Config::TiledMmaSdP mma_sdp;
    typename Config::TiledMmadKV mma_dkv;
    typename Config::TiledMmadQ mma_dq;
    auto operands_sdp = warpgroup_operand_slice(mma_sdp, thread_idx);
    auto operands_dkv = warpgroup_operand_slice(mma_dkv, thread_idx);
    auto operands_dq = warpgroup_operand_slice(mma_dq, thread_idx);
    Tensor tSrK = operands_sdp.partition_fragment_A(sK);
    Tensor tSrQ = operands_sdp.partition_fragment_B(sQ);
    Tensor tdPrV = operands_sdp.partition_fragment_A(sV);
    Tensor tdPrdO = operands_sdp.partition_fragment_B(sdO);
    Tensor tdVrdOt = operands_dkv.partition_fragment_B(sdOt);
    Tensor tdKrQt = operands_dkv.partition_fragment_B(sQt);
    // dS (queries, keys, buffer): dQ's A operand, or its B where it computes dQ^T.
    auto tdQrdS = [&]() {
      if constexpr (Config::kdQTransposed) {
        return operands_dq.partition_fragment_B(sdS);
      } else {
        return operands_dq.partition_fragment_A(sdS);
      }
    }();
    Tensor tScS = mma_sdp.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
    auto ds_copy = make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, Element>{}, mma_sdp);
    auto thread_ds_copy = ds_copy.get_thread_slice(thread_idx);
    const auto ds_stores = make_buffered_matrix_stores(thread_ds_copy.partition_D(sdSt));
    // P^T's stores and dV's operand, with kSplitHeadDim only:
    const auto p_stores = make_buffered_matrix_stores(thread_ds_copy.partition_D(sPt));
    Tensor tdVrPt = operands_dkv.partition_fragment_A(sPt);
    Tensor tdKrdSt = operands_dkv.partition_fragment_A(sdSt);

    const float scale_log2 = params.scale_log2;
    // The part of dQ this thread stores. Kept per thread: through uniform_warpgroup_of, the
    // mbarrier addresses it selects cost head_dim 64 a spilled register (a local load per step).
    const int dq_part = thread_idx / 128;
    float* dq_shared = shared.dq.data();
    PipelineState state;
    shared.kv_full.wait(0);
    const int steps = work.steps();
    int m_block = work.m_begin;  // work.m_block_of_step(step), without its division
    // At least one step (kernel.cuh), so no path skips the loop: see the kernel's zero path.
    int step = 0;
    do {
      const int stage = int(state.index());

      // S^T = K Q^T and dP^T = V dO^T, back to back; P's exponentials run under dP's product.
      Tensor scores = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
      Tensor dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
      q_pipeline.consumer_wait(state);
      warpgroup_gemm</*kZeroInit=*/true, /*kWait=*/false>(mma_sdp, tSrK, tSrQ(_, _, _, stage), scores);
      do_pipeline.consumer_wait(state);
      warpgroup_gemm<true, false>(mma_sdp, tdPrV, tdPrdO(_, _, _, stage), dp);
      warpgroup_wait<1>();
      warpgroup_fence_operand(scores);
      if (work.needs_mask(m_block)) Work::apply_mask(scores, tScS, work.visibility(m_block));

      // P = exp(scale * S - LSE) = exp2(S * scale_log2 - LSE_log2); the columns are the queries.
      Tensor s = make_tensor(scores.data(), accumulator_rows_cols(scores.layout()));
      Tensor c = make_tensor(tScS.data(), accumulator_rows_cols(tScS.layout()));
      float const* lse_log2 = shared.lse_log2.data() + stage * kBlockM;
      CUTE_UNROLL
      for (int col = 0; col < size<1>(s); ++col) {
        const float row_lse = lse_log2[get<1>(c(0, col))];
        CUTE_UNROLL
        for (int r = 0; r < size<0>(s); ++r) s(r, col) = exp2f(s(r, col) * scale_log2 - row_lse);
      }

      // dV += P^T dO goes in only after dS's stores ("late dV", below). Issued before dP's wait, it
      // kept every exponential above the wait, in one stream on the MIO queue, and ran slower: 1-5%
      // at head_dim 128 causal and up to 9% at head_dim 96 (64 queries a step, H100), 3-8% at
      // head_dim 64 (H200); at head_dim 128's 80 queries P in 16 bits beside S, dP, dK and dV would
      // spill (performance log, 2026-12-05 second and ninth sessions). With kSplitHeadDim it reads
      // P^T from shared memory, stored here and published by dS's barrier; there the late order
      // measured as the early one did (tenth session), and is kept so that the loop has one order.
      const int buffer = step % Config::kdSBuffers;
      if constexpr (kSplitHeadDim) {
        Tensor p = convert_fragment<Element>(scores);
        p_stores.store(thread_ds_copy.retile_S(p), buffer);
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(dp);

      // dS = P * (dP - D), from P before its rounding to the element type.
      Tensor d = make_tensor(dp.data(), accumulator_rows_cols(dp.layout()));
      float const* dpsum = shared.dpsum.data() + stage * kBlockM;
      CUTE_UNROLL
      for (int col = 0; col < size<1>(d); ++col) {
        const float row_dpsum = dpsum[get<1>(c(0, col))];
        CUTE_UNROLL
        for (int r = 0; r < size<0>(d); ++r) d(r, col) = s(r, col) * (d(r, col) - row_dpsum);
      }
      Tensor ds = convert_fragment<Element>(dp);

      ds_stores.store(thread_ds_copy.retile_S(ds), buffer);
      // The stores are volatile and stay before this product, so dS's arithmetic is done by then
      // (as ptxas schedules it): dP is dead, and S (P in float32) dies as P is rounded.
      if constexpr (!kSplitHeadDim) {  // TiledMmadKV is rs
        Tensor p = convert_fragment<Element>(scores);
        warpgroup_gemm<false, false>(mma_dkv, make_tensor(p.data(), accumulator_as_operand_a(p.layout())),
                                     tdVrdOt(_, _, _, stage), dv);
      }
      cutlass::arch::fence_view_async_shared();  // generic-proxy stores, read by WGMMA
      barrier_sync(kNumMmaThreads, BackwardBarrier::kdSReady);
      if constexpr (kSplitHeadDim) {
        warpgroup_gemm<false, false>(mma_dkv, tdVrPt(_, _, _, buffer), tdVrdOt(_, _, _, stage), dv);
      }

      // Q is free once dK retired. With one Q/dO stage (head_dim 256) the next step's load waits
      // for it, so it goes before dQ's second pass rather than after it (there, +40% backward time).
      auto release_q = [&]() CUTLASS_LAMBDA_FUNC_INLINE {
        warpgroup_wait<0>();
        warpgroup_fence_operand(dk);
        q_pipeline.consumer_release(state);
      };
      // This warpgroup's half of dQ = dS K (by query rows or head_dim columns, config.hpp), over
      // every key of the block, in kdQPasses column tiles one after the other. Pass n's values are
      // n-th in the order of the whole tile's fragment, which Config::dq_accum_offset and the
      // postprocess read. dK += dS^T Q goes in behind the first pass, so that the tensor cores have
      // it while the threads store that pass's dQ.
      CUTE_UNROLL
      for (int pass = 0; pass < Config::kdQPasses; ++pass) {
        constexpr int kPassColumns = Config::kdQPassColumns;
        Tensor dq = partition_fragment_C(mma_dq, typename Config::dQPassShape{});
        Tensor kt_pass = local_tile(sKt, Shape<Int<kPassColumns>, Int<kBlockN>>{}, make_coord(pass, _0{}));
        if (pass == 1) release_q();  // before the second pass, not after it: see release_q
        if constexpr (Config::kdQTransposed) {  // dQ^T = K^T dS^T
          warpgroup_gemm<true, false>(mma_dq, operands_dq.partition_fragment_A(kt_pass), tdQrdS(_, _, _, buffer), dq);
        } else {
          warpgroup_gemm<true, false>(mma_dq, tdQrdS(_, _, _, buffer), operands_dq.partition_fragment_B(kt_pass), dq);
        }
        if (pass == 0) {
          if constexpr (kSplitHeadDim) {
            warpgroup_gemm<false, false>(mma_dkv, tdKrdSt(_, _, _, buffer), tdKrQt(_, _, _, stage), dk);
          } else {
            warpgroup_gemm<false, false>(mma_dkv, make_tensor(ds.data(), accumulator_as_operand_a(ds.layout())),
                                         tdKrQt(_, _, _, stage), dk);
          }
          warpgroup_wait<1>();  // dV and this pass retired; dK may still read Q
          do_pipeline.consumer_release(state);
          // The buffer takes dQ once the bulk reduce of the step before has read it.
          if (step > 0) shared.dq_empty[dq_part].wait((step - 1) & 1);
        } else {
          warpgroup_wait<0>();
        }
        warpgroup_fence_operand(dq);
        constexpr int kPassValues = decltype(size(dq))::value;
        static_assert(kPassValues * Config::kdQPasses == Config::kdQAccumPerThread);
        CUTE_UNROLL
        for (int i = 0; i < kPassValues; i += 4) {
          store_shared_float4(dq_shared + Config::dq_accum_offset(thread_idx, pass * kPassValues + i), dq(i),
                              dq(i + 1), dq(i + 2), dq(i + 3));
        }
      }
      if constexpr (Config::kdQPasses == 1) release_q();
      ++state;
      if (++m_block == work.m_end) m_block = work.m_begin;
      // Each thread fences its own stores for the async proxy before arriving.
      cutlass::arch::fence_view_async_shared();
      shared.dq_full[dq_part].arrive();
    } while (++step < steps);
  }

  // Run by one thread of the producer warpgroup for a key block with at least one step: per step,
  // each part of dQ added to the workspace with one bulk reduce-add. Its bulk groups
  // are all complete when it returns, so the CTA's shared memory outlives their reads. The loops
  // walk the steps in KeyBlockWork's order (query head of the group, then query block) without its
  // divisions: this thread has the producer warpgroup's few registers.
  __device__ static void store_dq(Params const& params, SharedStorage& shared, Work const& work) {
    BackwardWorkspace const& ws = params.workspace;
    const int query_blocks = work.query_blocks();
    const int steps = work.steps();
    // The blocks of a head are kBlockM rows apart, the heads padded_rows apart, all in units of
    // kBlockM rows (workspace.hpp), so a block's semaphore is its first row / kBlockM.
    const int64_t first_row = ws.row_index(work.seq, work.batch, work.head_of_step(0), int64_t(work.m_begin) * kBlockM);
    int step = 0;
#pragma unroll 1
    for (int g = 0; g < work.group; ++g) {
#pragma unroll 1
      for (int m = 0; m < query_blocks; ++m, ++step) {
        const int64_t row = first_row + g * ws.padded_rows + int64_t(m) * kBlockM;
        float* accum = ws.dq_accum + row * kHeadDim;
        int* semaphore = ws.semaphores == nullptr ? nullptr : ws.semaphores + row / kBlockM;
        if (semaphore != nullptr) {
          // Key blocks 0 .. n_block - 1 all see this query block (their query ranges reach at
          // least as far up), so n_block adds come first. ">=" rather than "==" keeps metadata that
          // overlaps two sequences from hanging the kernel. Their adds were complete before their
          // increments; the proxy fence orders the acquire before this thread's bulk adds.
          while (load_acquire(semaphore) < work.n_block) __nanosleep(64);
          fence_proxy_async_global();
        }
        CUTE_UNROLL
        for (int w = 0; w < kNumConsumerWarpgroups; ++w) {
          shared.dq_full[w].wait(step & 1);
          bulk_reduce_add(accum + w * Config::kdQAccumPerWarpgroup,
                          shared.dq.data() + w * Config::kdQAccumPerWarpgroup, Config::kdQAccumWarpgroupBytes);
        }
        bulk_commit_group();
        bulk_wait_read_all();
        // The buffer is free; after the last step no consumer waits for it.
        if (step + 1 < steps) {
          CUTE_UNROLL
          for (int w = 0; w < kNumConsumerWarpgroups; ++w) shared.dq_empty[w].arrive();
        }
        if (semaphore != nullptr) {
          bulk_wait_all();  // the adds are performed in global memory before the next key block's
          fence_proxy_async_global();
          __threadfence();
          atomicAdd(semaphore, 1);
        }
      }
    }
    bulk_wait_all();
  }
};

}  // namespace hopattn::sm90
